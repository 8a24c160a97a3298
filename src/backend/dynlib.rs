//! The one `dlopen` helper of the crate (NCCL, the CUDA driver and backend plugins): open a
//! shared library, look symbols up, with `dlerror`'s text as the error. Every `dl*` call and the
//! `dlerror` that explains it run under one lock, so the text read is this call's, whichever
//! thread loads what.
#![allow(unsafe_code)]

use std::ffi::{c_void, CStr, CString};
use std::sync::{Mutex, MutexGuard};

/// Serializes each `dl*` call with the `dlerror` that reads its outcome.
static DL_LOCK: Mutex<()> = Mutex::new(());

fn dl_lock() -> MutexGuard<'static, ()> {
    DL_LOCK.lock().unwrap_or_else(|p| p.into_inner())
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
        let _guard = dl_lock();
        // SAFETY: `c` is a valid C string; dlopen has no other preconditions.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            Err(dl_error())
        } else {
            Ok(DynLib { handle, path: shown })
        }
    }

    /// The address of `symbol`, or dlerror's text.
    pub(crate) fn address(&self, symbol: &str) -> Result<*mut c_void, String> {
        let c = CString::new(symbol).map_err(|_| format!("symbol {symbol:?} contains a NUL byte"))?;
        let _guard = dl_lock();
        // SAFETY: clear any stale error, then look the symbol up in a live handle.
        unsafe { libc::dlerror() };
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        if p.is_null() {
            Err(dl_error())
        } else {
            Ok(p)
        }
    }

    /// Close a library from which no symbol is in use (a failed load).
    pub(crate) fn close(self) {
        let _guard = dl_lock();
        // SAFETY: nothing taken from this handle survives (the caller drops every pointer).
        unsafe { libc::dlclose(self.handle) };
    }
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
}
