//! Opening backend plugins: `dlopen` a `.so`, find its entry symbol `mcore_backend_plugin_v1`
//! and validate the vtable it returns (registering it is `crate::backend::registry`'s job).
//! Plugins are never unloaded (communicators and `user_data` may outlive a registry entry).

use super::Vtable;
use crate::abi::backend::{mcore_backend_plugin_v1_fn, PLUGIN_ENTRY_SYMBOL};
use crate::backend::BackendError;
use std::ffi::{CStr, CString};
use std::path::Path;
use std::sync::Mutex;

/// Serializes `dlopen`/`dlerror` pairs so the error text belongs to our call.
static LOAD_LOCK: Mutex<()> = Mutex::new(());

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated thread-local string.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "no detail from dlerror".into()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

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
    let guard = LOAD_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: a valid C string; loading runs the library's initializers (trusted plugin).
    let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(load_err(dl_error()));
    }
    let sym_name = CString::new(PLUGIN_ENTRY_SYMBOL).expect("no NUL in symbol name");
    // SAFETY: valid handle and symbol name.
    let sym = unsafe { libc::dlsym(handle, sym_name.as_ptr()) };
    if sym.is_null() {
        let detail = dl_error();
        // SAFETY: nothing from this library is in use.
        unsafe { libc::dlclose(handle) };
        return Err(load_err(format!(
            "no entry symbol {PLUGIN_ENTRY_SYMBOL} (a backend plugin exports \
             `const mcore_backend_v1 *{PLUGIN_ENTRY_SYMBOL}(void)`): {detail}"
        )));
    }
    drop(guard);
    // SAFETY: the plugin contract gives the entry symbol this type.
    let entry: mcore_backend_plugin_v1_fn = unsafe { std::mem::transmute(sym) };
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
