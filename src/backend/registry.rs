//! The process-wide registry of backends by name.

use super::plugin::loader::open_plugin;
use super::plugin::Vtable;
use super::{Backend, BackendError};
use crate::lock::Unpoisoned;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
    REGISTRY.locked()
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
    map.get(name).map(|e| e.backend.clone()).ok_or_else(|| BackendError::NotFound {
        name: name.to_string(),
        known: map.keys().cloned().collect(),
        hint: LOAD_FIRST.into(),
    })
}

/// What a [`BackendError::NotFound`] of a name that was only looked up says to do.
const LOAD_FIRST: &str = "load its plugin (MCORE_BACKEND_PLUGIN) first";

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
        hint: LOAD_FIRST.into(),
    })
}

/// The backends this project ships (built in or as plugins), for near-miss suggestions.
const SHIPPED: [&str; 3] = ["nccl", "gloo", "hccl"];

/// The backend a user named: a registered name, else a plugin path (contains `/` or ends in
/// `.so`), else the plugin file `libmcore_init_<name>.so` from [`plugin_dirs`] (the directory of
/// this library first), else through the dynamic loader's search path (`LD_LIBRARY_PATH`,
/// the library's and program's `RUNPATH`, `ld.so.cache`, `/lib`, `/usr/lib`). Not found: the
/// error says where it looked and suggests a near-miss name.
pub fn resolve(spec: &str) -> Result<Backend, BackendError> {
    if let Ok(b) = get(spec) {
        return Ok(b);
    }
    if spec.contains('/') || spec.ends_with(".so") || spec.contains(".so.") {
        return load_plugin(Path::new(spec));
    }
    let file = format!("libmcore_init_{spec}.so");
    let dirs = plugin_dirs();
    let beside = dirs.iter().map(|d| d.join(&file)).find(|p| p.is_file());
    let from_loader = beside.is_none();
    let path = beside.unwrap_or_else(|| PathBuf::from(&file));
    match load_plugin(&path) {
        Ok(b) if b.name() == spec => Ok(b),
        Ok(b) => Err(BackendError::InvalidVtable(format!(
            "{} registers backend {}, not {}",
            crate::quote::clip(&path.display().to_string()),
            crate::quote::quoted(b.name()),
            crate::quote::quoted(spec)
        ))),
        Err(BackendError::Load { .. }) if from_loader => Err(not_found(spec, &file, &dirs)),
        Err(e) => Err(e),
    }
}

/// The error for a backend name that is neither registered nor a plugin file found by
/// [`resolve`]: where it looked, and a near-miss name when there is one.
fn not_found(spec: &str, file: &str, dirs: &[PathBuf]) -> BackendError {
    let known = names();
    let installed: Vec<String> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            Some(n.strip_prefix("libmcore_init_")?.strip_suffix(".so")?.to_string())
        })
        .collect();
    let candidates = known.iter().chain(&installed).map(String::as_str).chain(SHIPPED);
    let suggestion = crate::quote::near_miss(spec, candidates)
        .map(|n| format!("did you mean {}? ", crate::quote::quoted(n)))
        .unwrap_or_default();
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    let hint = format!(
        "{suggestion}no plugin {} in {}the dynamic loader's search path; name the plugin file, or list it in \
         {PLUGIN_ENV}",
        crate::quote::quoted(file),
        if looked.is_empty() { String::new() } else { format!("{} or ", looked.join(", ")) }
    );
    BackendError::NotFound { name: spec.to_string(), known, hint }
}

/// Where [`resolve`] looks for a plugin file before the dynamic loader's search path: the
/// directory of the file this code runs from (`libmcore_init.so`, found with `dladdr`; or a
/// program that links the library statically, such as `mcore-selftest`), then that directory's
/// `../lib` (a program in `<prefix>/bin` finds the plugins of `<prefix>/lib`). An installed
/// prefix or wheel thus finds the plugins installed beside the library with no variable set.
pub fn plugin_dirs() -> Vec<PathBuf> {
    let Some(dir) = own_file().and_then(|f| f.parent().map(Path::to_path_buf)) else { return Vec::new() };
    let mut dirs = vec![dir.clone()];
    if let Ok(lib) = dir.join("../lib").canonicalize() {
        if lib != dir {
            dirs.push(lib);
        }
    }
    dirs
}

/// The file (shared library or program) holding this code, resolved to a canonical path.
#[allow(unsafe_code)]
fn own_file() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: Dl_info is plain data (pointers and integers); all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let addr = own_file as fn() -> Option<PathBuf> as *const libc::c_void;
    // SAFETY: dladdr reads no memory at `addr` and fills `info`; dli_fname, when set, is a
    // NUL-terminated string owned by the loader for as long as the object stays loaded.
    let named = unsafe { libc::dladdr(addr, &mut info) } != 0 && !info.dli_fname.is_null();
    let from_dladdr = named
        .then(|| {
            // SAFETY: checked non-NULL above; see the dladdr comment.
            let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
            PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()))
        })
        .and_then(|p| p.canonicalize().ok())
        .filter(|p| p.is_file());
    // The main program may be named by argv[0] only: the kernel knows its file.
    from_dladdr.or_else(|| std::env::current_exe().ok())
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
        assert!(e.len() < 2048 && e.starts_with("no backend named 'bbb") && e.contains("(1048576 bytes)"), "{e}");
        for path in [format!("/nonexistent/{name}.so"), format!("{name}.so")] {
            let Err(e) = resolve(&path) else { panic!("a plugin at that path") };
            let e = e.to_string();
            assert!(e.len() < 1024 && e.starts_with("cannot load backend plugin '") && e.contains(" bytes)"), "{e}");
        }
    }

    /// A mistyped name gets a near-miss suggestion and says where plugins were looked for:
    /// the directory of the code running (here the test program's), then the loader's path.
    #[test]
    fn a_mistyped_backend_name_is_answered_with_a_near_miss_and_where_it_looked() {
        let dirs = plugin_dirs();
        assert!(!dirs.is_empty(), "dladdr found no file for this code");
        let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
        assert_eq!(dirs[0], exe.parent().unwrap(), "the first directory is the one of the running code");
        let Err(e) = resolve("glo") else { panic!("a backend named glo") };
        let e = e.to_string();
        assert!(e.contains("did you mean 'gloo'?") && e.contains("'libmcore_init_glo.so'"), "{e}");
        assert!(e.contains(&dirs[0].display().to_string()) && e.contains("dynamic loader's search path"), "{e}");
        let Err(e) = resolve("mpi") else { panic!("a backend named mpi") };
        assert!(!e.to_string().contains("did you mean"), "{e}");
    }
}
