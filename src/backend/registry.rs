//! The process-wide registry of backends by name.

use super::plugin::loader::open_plugin;
use super::plugin::Vtable;
use super::{Backend, BackendError};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// Where a registered backend came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// `mcore_backend_register` (or built in).
    Pointer,
    /// A plugin file: the vtable address its entry returned identifies the loaded library
    /// (the same file reached by another path or by its bare name gives the same address).
    Plugin { vtable_addr: usize },
}

struct Entry {
    backend: Backend,
    origin: Origin,
}

static REGISTRY: Mutex<BTreeMap<String, Entry>> = Mutex::new(BTreeMap::new());

fn registry() -> MutexGuard<'static, BTreeMap<String, Entry>> {
    // A panic while holding the lock leaves the map consistent (single inserts/removes).
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Register a validated vtable under its name. A plugin file loaded again under the same name
/// returns the backend already registered (re-initialization is idempotent); any other
/// duplicate is [`BackendError::AlreadyExists`]. The rejected copy is not finalized (its
/// `user_data` may be the registered one's).
pub(crate) fn insert(vt: Vtable, origin: Origin) -> Result<Backend, BackendError> {
    let mut map = registry();
    if let Some(existing) = map.get(vt.name()) {
        let same_plugin = match (&origin, &existing.origin) {
            (Origin::Plugin { vtable_addr: a }, Origin::Plugin { vtable_addr: b }) => a == b,
            _ => false,
        };
        let result = if same_plugin {
            Ok(existing.backend.clone())
        } else {
            Err(BackendError::AlreadyExists(vt.name().to_string()))
        };
        vt.disarm();
        return result;
    }
    let name = vt.name().to_string();
    let backend = Backend::new(Arc::new(vt));
    map.insert(name, Entry { backend: backend.clone(), origin });
    Ok(backend)
}

/// The backend registered under `name`.
pub fn get(name: &str) -> Result<Backend, BackendError> {
    let map = registry();
    map.get(name)
        .map(|e| e.backend.clone())
        .ok_or_else(|| BackendError::NotFound { name: name.to_string(), known: map.keys().cloned().collect() })
}

/// Names of all registered backends, sorted.
pub fn names() -> Vec<String> {
    registry().keys().cloned().collect()
}

/// Remove `name` from the registry; the plugin is finalized once its last communicator is gone.
/// A plugin file stays mapped (it is never unloaded).
pub fn unregister(name: &str) -> Result<(), BackendError> {
    let removed = registry().remove(name);
    removed.map(drop).ok_or_else(|| BackendError::NotFound { name: name.to_string(), known: names() })
}

/// The backend a user named: a registered name, else a plugin path (contains `/` or ends in
/// `.so`), else `libmcore_init_<name>.so` found through the dynamic loader's search path.
pub fn resolve(spec: &str) -> Result<Backend, BackendError> {
    if let Ok(b) = get(spec) {
        return Ok(b);
    }
    if spec.contains('/') || spec.ends_with(".so") || spec.contains(".so.") {
        return load_plugin(Path::new(spec));
    }
    let not_found = get(spec).unwrap_err();
    let guess = format!("libmcore_init_{spec}.so");
    match load_plugin(Path::new(&guess)) {
        Ok(b) if b.name() == spec => Ok(b),
        Ok(b) => Err(BackendError::InvalidVtable(format!(
            "{} registers backend {}, not {}",
            crate::quote::clip(&guess),
            crate::quote::quoted(b.name()),
            crate::quote::quoted(spec)
        ))),
        Err(BackendError::Load { .. }) => Err(not_found),
        Err(e) => Err(e),
    }
}

/// Environment variable naming plugin files to load (`:`-separated).
pub const PLUGIN_ENV: &str = "MCORE_BACKEND_PLUGIN";

/// Register the vtable at `vtable` (by pointer: `mcore_backend_register`, or a Rust caller that
/// fills an `mcore_backend_v1` with `extern "C"` functions) and return the backend.
///
/// # Safety
/// `vtable` is NULL or points to `struct_size` readable bytes laid out as `mcore_backend_v1`
/// whose name is NUL-terminated and whose slots follow the vtable contract.
#[allow(unsafe_code)]
pub unsafe fn register_vtable(vtable: *const crate::abi::backend::mcore_backend_v1) -> Result<Backend, BackendError> {
    // SAFETY: caller contract.
    let vt = unsafe { Vtable::from_ptr(vtable, "mcore_backend_register") }?;
    insert(vt, Origin::Pointer)
}

/// Load the plugin at `path`, register its backend and return it. Loading the same file again
/// returns the backend it registered.
pub fn load_plugin(path: &Path) -> Result<Backend, BackendError> {
    let (vt, vtable_addr) = open_plugin(path)?;
    insert(vt, Origin::Plugin { vtable_addr })
}

/// Load every plugin listed in `MCORE_BACKEND_PLUGIN` (`:`-separated paths); the backends loaded
/// (empty when the variable is unset or empty).
pub fn load_plugins_from_env() -> Result<Vec<Backend>, BackendError> {
    let Some(value) = std::env::var_os(PLUGIN_ENV) else {
        return Ok(Vec::new());
    };
    let value = value.to_string_lossy().into_owned();
    value.split(':').filter(|p| !p.is_empty()).map(|p| load_plugin(Path::new(p))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A megabyte backend name or plugin path gives an error of bounded size that still says
    /// what it is about (the message used to echo the input, twice for a name).
    #[test]
    fn megabyte_backend_names_and_paths_give_short_errors() {
        let name = "b".repeat(1 << 20);
        let Err(e) = resolve(&name) else { panic!("a backend of that name") };
        let e = e.to_string();
        assert!(e.len() < 1024 && e.starts_with("no backend named 'bbb") && e.contains("(1048576 bytes)"), "{e}");
        for path in [format!("/nonexistent/{name}.so"), format!("{name}.so")] {
            let Err(e) = resolve(&path) else { panic!("a plugin at that path") };
            let e = e.to_string();
            assert!(e.len() < 1024 && e.starts_with("cannot load backend plugin '") && e.contains(" bytes)"), "{e}");
        }
    }
}
