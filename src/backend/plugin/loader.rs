//! Opening backend plugins: `dlopen` a `.so`, find its entry symbol `mcore_backend_plugin_v1`
//! and validate the vtable it returns (registering it is `crate::backend::registry`'s job).
//! Plugins are never unloaded (communicators and `user_data` may outlive a registry entry).

use super::Vtable;
use crate::abi::backend::{mcore_backend_plugin_v1_fn, PLUGIN_ENTRY_SYMBOL};
use crate::backend::dynlib::{as_fn, DynLib};
use crate::backend::BackendError;
use std::ffi::CString;
use std::path::Path;

/// Open the plugin at `path` and return its validated vtable and the address its entry returned
/// (which identifies the loaded file however it was named). A path without `/` is looked up by
/// the dynamic loader (`LD_LIBRARY_PATH`, rpath, system directories).
pub fn open_plugin(path: &Path) -> Result<(Vtable, usize), BackendError> {
    let shown = path.display().to_string();
    let load_err = |reason: String| BackendError::Load { path: shown.clone(), reason };
    let has_dir = path.components().count() > 1 || path.is_absolute();
    if has_dir && !path.exists() {
        return Err(load_err("no such file".into()));
    }
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        BackendError::InvalidArgument(format!("plugin path {} contains a NUL byte", crate::quote::debug(&shown)))
    })?;
    let lib = DynLib::open_c(&c_path, shown.clone()).map_err(load_err)?;
    let sym = match lib.address(PLUGIN_ENTRY_SYMBOL) {
        Ok(sym) => sym,
        Err(detail) => {
            lib.close();
            return Err(load_err(format!(
                "no entry symbol {PLUGIN_ENTRY_SYMBOL} (a backend plugin exports \
                 `const mcore_backend_v1 *{PLUGIN_ENTRY_SYMBOL}(void)`): {detail}"
            )));
        }
    };
    // Plugins are never unloaded: dropping a DynLib leaves its library open.
    drop(lib);
    // SAFETY: the plugin contract gives the entry symbol this type.
    let entry: mcore_backend_plugin_v1_fn = unsafe { as_fn(sym) };
    // SAFETY: calling the plugin's entry point (no arguments).
    let ptr = unsafe { entry() };
    let origin = format!("plugin {}", crate::quote::quoted(&shown));
    if ptr.is_null() {
        return Err(load_err(format!("{PLUGIN_ENTRY_SYMBOL}() returned NULL (the plugin failed to initialize)")));
    }
    // SAFETY: a non-NULL vtable from the entry point, laid out as mcore_backend_v1.
    let vt = unsafe { Vtable::from_ptr(ptr, &origin) }?;
    Ok((vt, ptr as usize))
}
