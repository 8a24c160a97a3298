//! The panic boundary: every export runs its body through one of these guards, so a Rust panic
//! becomes `MCORE_STATUS_PANIC` (or NULL) with the panic text as the last error, and every
//! `Err` becomes its status with the message recorded.

use super::error::{clear_last_error, set_last_error, FfiError};
use crate::abi::mcore_status;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

fn run<T>(body: impl FnOnce() -> Result<T, FfiError>) -> Result<T, FfiError> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            Err(FfiError::new(mcore_status::Panic, format!("internal panic: {}", panic_text(payload.as_ref()))))
        }
    }
}

/// Run an export whose result is a status.
pub fn ffi_guard(body: impl FnOnce() -> Result<(), FfiError>) -> mcore_status {
    match run(body) {
        Ok(()) => {
            clear_last_error();
            mcore_status::Ok
        }
        Err(e) => {
            set_last_error(&e);
            e.status
        }
    }
}

/// Run an export that returns a pointer (a handle or static data); NULL on error.
pub fn ffi_guard_ptr<T>(body: impl FnOnce() -> Result<*mut T, FfiError>) -> *mut T {
    match run(body) {
        Ok(p) => {
            clear_last_error();
            p
        }
        Err(e) => {
            set_last_error(&e);
            std::ptr::null_mut()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::error::mcore_last_error_message;
    use std::ffi::CStr;

    fn last() -> String {
        unsafe { CStr::from_ptr(mcore_last_error_message()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn panic_becomes_status_and_message() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let s = ffi_guard(|| panic!("boom {}", 7));
        std::panic::set_hook(prev);
        assert_eq!(s, mcore_status::Panic);
        assert!(last().contains("boom 7"), "{}", last());
    }

    #[test]
    fn error_sets_and_success_clears() {
        let s = ffi_guard(|| Err(FfiError::invalid_arg("tp must be >= 1, got 0")));
        assert_eq!(s, mcore_status::InvalidArgument);
        assert_eq!(last(), "tp must be >= 1, got 0");
        assert_eq!(ffi_guard(|| Ok(())), mcore_status::Ok);
        assert_eq!(last(), "");
        let p: *mut u8 = ffi_guard_ptr(|| Err(FfiError::invalid_arg("x")));
        assert!(p.is_null());
    }
}
