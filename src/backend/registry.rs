//! The process-wide registry of backends by name.

use super::{plugin_loader, Backend, BackendError};
use crate::ffi::backend::Vtable;
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
    map.insert(
        name,
        Entry {
            backend: backend.clone(),
            origin,
        },
    );
    Ok(backend)
}

/// The backend registered under `name`.
pub fn get(name: &str) -> Result<Backend, BackendError> {
    let map = registry();
    map.get(name)
        .map(|e| e.backend.clone())
        .ok_or_else(|| BackendError::NotFound {
            name: name.to_string(),
            known: map.keys().cloned().collect(),
        })
}

/// Names of all registered backends, sorted.
pub fn names() -> Vec<String> {
    registry().keys().cloned().collect()
}

/// Remove `name` from the registry; the plugin is finalized once its last communicator is gone.
/// A plugin file stays mapped (it is never unloaded).
pub fn unregister(name: &str) -> Result<(), BackendError> {
    let removed = registry().remove(name);
    removed.map(drop).ok_or_else(|| BackendError::NotFound {
        name: name.to_string(),
        known: names(),
    })
}

/// The backend a user named: a registered name, else a plugin path (contains `/` or ends in
/// `.so`), else `libmcore_init_<name>.so` found through the dynamic loader's search path.
pub fn resolve(spec: &str) -> Result<Backend, BackendError> {
    if let Ok(b) = get(spec) {
        return Ok(b);
    }
    if spec.contains('/') || spec.ends_with(".so") || spec.contains(".so.") {
        return plugin_loader::load_plugin(Path::new(spec));
    }
    let not_found = get(spec).unwrap_err();
    let guess = format!("libmcore_init_{spec}.so");
    match plugin_loader::load_plugin(Path::new(&guess)) {
        Ok(b) if b.name() == spec => Ok(b),
        Ok(b) => Err(BackendError::InvalidVtable(format!(
            "{guess} registers backend '{}', not '{spec}'",
            b.name()
        ))),
        Err(BackendError::Load { .. }) => Err(not_found),
        Err(e) => Err(e),
    }
}
