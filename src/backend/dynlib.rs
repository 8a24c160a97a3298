//! The one `dlopen` helper of the crate (NCCL, the CUDA driver and backend plugins): open a
//! shared library, look symbols up, with `dlerror`'s text as the error. Every `dl*` call and the
//! `dlerror` that explains it run under one lock, so the text read is this call's, whichever
//! thread loads what.
#![allow(unsafe_code)]

use crate::lock::Unpoisoned;
use std::ffi::{c_void, CStr, CString};
use std::sync::{Mutex, MutexGuard};

/// Serializes each `dl*` call with the `dlerror` that reads its outcome.
static DL_LOCK: Mutex<()> = Mutex::new(());

fn dl_lock() -> MutexGuard<'static, ()> {
    DL_LOCK.locked()
}

/// dlerror's text (call with [`DL_LOCK`] held, right after the failing call).
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call on
    // this thread; it is copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "no detail from dlerror".to_string()
    } else {
        // SAFETY: see above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// An opened shared library (never closed once symbols were taken from it: dropping it leaves
/// the library loaded; only [`DynLib::close`] closes).
pub(crate) struct DynLib {
    handle: *mut c_void,
    /// What was passed to `dlopen` (a path or a bare file name).
    pub(crate) path: String,
    /// Opened `RTLD_GLOBAL`, symbols looked up in the process's global scope
    /// ([`DynLib::open_global`]).
    global: bool,
}

// SAFETY: a dlopen handle is process-global and may be used from any thread.
unsafe impl Send for DynLib {}
unsafe impl Sync for DynLib {}

impl DynLib {
    /// `dlopen(name, RTLD_NOW | RTLD_LOCAL)`; the error is dlerror's text. Loading runs the
    /// library's initializers.
    pub(crate) fn open(name: &str) -> Result<DynLib, String> {
        let c = CString::new(name).map_err(|_| format!("path {} contains a NUL byte", crate::quote::debug(name)))?;
        Self::open_c(&c, name.to_string())
    }

    /// [`DynLib::open`] for a path already a C string (any bytes but NUL); `shown` is its text
    /// for messages.
    pub(crate) fn open_c(c: &CStr, shown: String) -> Result<DynLib, String> {
        Self::open_flags(c, shown, false)
    }

    /// `dlopen(name, RTLD_NOW | RTLD_GLOBAL)`, and [`DynLib::address`] then resolves through the
    /// process's global scope (`dlsym(RTLD_DEFAULT)`): a library `LD_PRELOAD`ed before this one
    /// that defines the same symbol (an interposing shim such as NVIDIA's `nccl_checkpoint`) is
    /// the one called. A symbol nothing earlier defines resolves to this library's own.
    pub(crate) fn open_global(name: &str) -> Result<DynLib, String> {
        let c = CString::new(name).map_err(|_| format!("path {} contains a NUL byte", crate::quote::debug(name)))?;
        Self::open_flags(&c, name.to_string(), true)
    }

    /// The library `name` if the process has it loaded already (`dlopen` with `RTLD_NOLOAD`: a
    /// bare name matches a loaded object's soname, a path its file), without loading anything;
    /// `None` when it is not loaded. `global` as in [`DynLib::open_global`].
    pub(crate) fn open_loaded(name: &str, global: bool) -> Option<DynLib> {
        let c = CString::new(name).ok()?;
        Self::open_with(&c, name.to_string(), global, libc::RTLD_NOLOAD).ok()
    }

    fn open_flags(c: &CStr, shown: String, global: bool) -> Result<DynLib, String> {
        Self::open_with(c, shown, global, 0)
    }

    fn open_with(c: &CStr, shown: String, global: bool, extra: libc::c_int) -> Result<DynLib, String> {
        let scope = if global { libc::RTLD_GLOBAL } else { libc::RTLD_LOCAL };
        let _guard = dl_lock();
        // SAFETY: `c` is a valid C string; dlopen has no other preconditions.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | scope | extra) };
        if handle.is_null() {
            Err(dl_error())
        } else {
            Ok(DynLib { handle, path: shown, global })
        }
    }

    /// Whether symbols resolve through the global scope ([`DynLib::open_global`]).
    pub(crate) fn is_global(&self) -> bool {
        self.global
    }

    /// The address of `symbol` (in this library, or for [`DynLib::open_global`] the process's
    /// first definition), or dlerror's text.
    pub(crate) fn address(&self, symbol: &str) -> Result<*mut c_void, String> {
        self.lookup(symbol, self.global)
    }

    fn lookup(&self, symbol: &str, global: bool) -> Result<*mut c_void, String> {
        let c = CString::new(symbol).map_err(|_| format!("symbol {symbol:?} contains a NUL byte"))?;
        let scope = if global { libc::RTLD_DEFAULT } else { self.handle };
        let _guard = dl_lock();
        // SAFETY: clear any stale error, then look the symbol up in a live handle (or the
        // global scope).
        unsafe { libc::dlerror() };
        let p = unsafe { libc::dlsym(scope, c.as_ptr()) };
        if p.is_null() {
            Err(dl_error())
        } else {
            Ok(p)
        }
    }

    /// The file this library was loaded from (`dladdr` of its own definition of `symbol`), e.g.
    /// the path the loader found for a bare name; `None` when it cannot say.
    pub(crate) fn file_of(&self, symbol: &str) -> Option<std::path::PathBuf> {
        let p = self.lookup(symbol, false).ok()?;
        // SAFETY: an all-zero Dl_info is valid (null pointers); dladdr fills it for an address
        // inside a loaded object.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let _guard = dl_lock();
        // SAFETY: `p` is a symbol address of a live library; `info` is writable.
        if unsafe { libc::dladdr(p, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dli_fname is a NUL-terminated string owned by the loader, copied at once.
        let name = unsafe { CStr::from_ptr(info.dli_fname) };
        use std::os::unix::ffi::OsStrExt;
        Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
    }

    /// Whether the file this library was loaded from contains `needle` (read in chunks;
    /// `None` when the file cannot be found or read).
    pub(crate) fn file_contains(&self, symbol: &str, needle: &[u8]) -> Option<bool> {
        use std::io::Read;
        let mut f = std::fs::File::open(self.file_of(symbol)?).ok()?;
        let keep = needle.len().saturating_sub(1);
        let mut buf = vec![0u8; 8 << 20];
        let mut have = 0;
        loop {
            let n = f.read(&mut buf[have..]).ok()?;
            if n == 0 {
                return Some(false);
            }
            have += n;
            if contains(&buf[..have], needle) {
                return Some(true);
            }
            // Keep the tail that could start a match across the chunk boundary.
            let tail = have.min(keep);
            buf.copy_within(have - tail..have, 0);
            have = tail;
        }
    }

    /// Close a library from which no symbol is in use (a failed load).
    pub(crate) fn close(self) {
        let _guard = dl_lock();
        // SAFETY: nothing taken from this handle survives (the caller drops every pointer).
        unsafe { libc::dlclose(self.handle) };
    }
}

/// Whether `haystack` contains `needle` (glibc's `memmem`).
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    if needle.is_empty() {
        return true;
    }
    // SAFETY: both slices are valid for their lengths; memmem only reads them.
    let p = unsafe { libc::memmem(haystack.as_ptr().cast(), haystack.len(), needle.as_ptr().cast(), needle.len()) };
    !p.is_null()
}

/// Reinterpret a symbol address as the function pointer type `F`.
///
/// # Safety
/// `F` must be an `unsafe extern "C" fn` type matching the symbol's C signature.
pub(crate) unsafe fn as_fn<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: sizes checked; the caller guarantees the signature.
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_reports_dlerror_for_a_missing_file() {
        let e = DynLib::open("/nonexistent/libnope.so.9").err().unwrap();
        assert!(e.contains("libnope.so.9"), "{e}");
    }

    #[test]
    fn address_reports_a_missing_symbol() {
        let lib = DynLib::open("libm.so.6").unwrap();
        assert!(lib.address("cos").is_ok());
        let e = lib.address("ncclGetVersion").unwrap_err();
        assert!(e.contains("ncclGetVersion"), "{e}");
    }

    #[test]
    fn file_of_finds_the_loaded_file_and_its_bytes() {
        let lib = DynLib::open("libm.so.6").unwrap();
        let file = lib.file_of("cos").expect("dladdr names libm's file");
        assert!(file.to_string_lossy().contains("libm"), "{file:?}");
        assert_eq!(lib.file_contains("cos", b"libm.so.6"), Some(true), "its soname is in the file");
        assert_eq!(lib.file_contains("cos", b"no such text in libm \x01\x02"), Some(false));
        assert!(contains(b"abcdef", b"cde") && !contains(b"abcdef", b"ced"));
    }

    #[test]
    fn only_a_library_already_loaded_is_bound_without_loading() {
        // libc is in every process; a library nobody loaded is not loaded by the probe.
        assert!(DynLib::open_loaded("libc.so.6", false).is_some());
        assert!(DynLib::open_loaded("libmcore-never-loaded.so.7", false).is_none());
    }

    #[test]
    fn a_global_library_resolves_through_the_global_scope() {
        let lib = DynLib::open_global("libm.so.6").unwrap();
        assert!(lib.is_global());
        // The process's first definition of `cos` is libm's own here (nothing interposes it).
        assert_eq!(lib.address("cos").unwrap(), lib.lookup("cos", false).unwrap());
    }
}
