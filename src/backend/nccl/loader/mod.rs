//! Run-time loading of NCCL and the CUDA driver: `dlopen`/`dlsym` with errors instead of panics.
//!
//! This module and its children are the only place of the NCCL backend with `unsafe`: they hold the
//! function pointers (typed after cudarc's `sys` signatures, except that every `ncclResult_t` /
//! `CUresult` coming back from C is read as a plain `c_int` and converted, never trusted as a Rust
//! enum) and wrap each call in a safe method. Raw communicators, device buffers and streams are
//! owned newtypes that only this module creates, so the safe methods cannot be handed a dangling
//! pointer.
//!
//! Libraries are never unloaded: NCCL starts threads that outlive any one communicator.
#![allow(unsafe_code)]

pub mod cuda;
pub mod nccl;

use std::ffi::{c_void, CStr, CString};

/// An opened shared library (never closed once symbols were taken from it).
pub(crate) struct DynLib {
    handle: *mut c_void,
    /// What was passed to `dlopen` (a path or a bare file name).
    pub(crate) path: String,
}

// SAFETY: a dlopen handle is process-global and may be used from any thread.
unsafe impl Send for DynLib {}
unsafe impl Sync for DynLib {}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call on
    // this thread; it is copied at once.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown dlopen error".to_string()
    } else {
        // SAFETY: see above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl DynLib {
    /// `dlopen(name, RTLD_NOW | RTLD_LOCAL)`; the error is dlerror's text.
    pub(crate) fn open(name: &str) -> Result<DynLib, String> {
        let c = CString::new(name).map_err(|_| format!("path {name:?} contains a NUL byte"))?;
        // SAFETY: `c` is a valid C string; dlopen has no other preconditions. Loading runs the
        // library's constructors, which is the point.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            Err(dl_error())
        } else {
            Ok(DynLib { handle, path: name.to_string() })
        }
    }

    /// The address of `symbol`, or dlerror's text.
    pub(crate) fn address(&self, symbol: &str) -> Result<*mut c_void, String> {
        let c = CString::new(symbol).map_err(|_| format!("symbol {symbol:?} contains a NUL byte"))?;
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

/// The C string returned by a library call, copied (empty for NULL).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string alive for the duration of the call.
pub(crate) unsafe fn c_text(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
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
