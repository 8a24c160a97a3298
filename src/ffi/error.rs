//! The error carried to the C boundary and the thread-local last-error message.

use crate::abi::mcore_status;
use std::cell::RefCell;
use std::ffi::{c_char, CString};

/// An error on its way out through the C ABI: a status and the specifics for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FfiError {
    pub status: mcore_status,
    pub message: String,
}

impl FfiError {
    pub fn new(status: mcore_status, message: impl Into<String>) -> Self {
        FfiError { status, message: message.into() }
    }

    /// A NULL or otherwise unusable argument, named.
    pub fn invalid_arg(message: impl Into<String>) -> Self {
        Self::new(mcore_status::InvalidArgument, message)
    }
}

impl std::fmt::Display for FfiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.status.as_str(), self.message)
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<(mcore_status, CString)>> = const { RefCell::new(None) };
}

/// Record `err` as this thread's last error.
pub(crate) fn set_last_error(err: &FfiError) {
    // Interior NULs would truncate the C string; replace them so the message survives.
    let text = err.message.replace('\0', "\\0");
    let c = CString::new(text).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = Some((err.status, c)));
}

/// Forget this thread's last error (called on success).
pub(crate) fn clear_last_error() {
    LAST_ERROR.with(|slot| *slot.borrow_mut() = None);
}

/// The message of the last failed `mcore_*` call on this thread: the bad value, the group, the
/// missing ranks. Empty string (never NULL) when the last call succeeded. The pointer stays valid
/// until the next `mcore_*` call on the same thread.
#[no_mangle]
pub extern "C" fn mcore_last_error_message() -> *const c_char {
    LAST_ERROR.with(|slot| match slot.borrow().as_ref() {
        Some((_, c)) => c.as_ptr(),
        None => c"".as_ptr(),
    })
}

/// The status of the last failed `mcore_*` call on this thread (`MCORE_STATUS_OK` when the last
/// call succeeded): how a caller of a function that returns a plain value (the Megatron-style
/// getters return -1 on error) tells "not initialized" from "not a member" without reading the
/// message.
#[no_mangle]
pub extern "C" fn mcore_last_error_status() -> mcore_status {
    LAST_ERROR.with(|slot| slot.borrow().as_ref().map_or(mcore_status::Ok, |(status, _)| *status))
}

/// Static text for a status code (any `int32_t`, unknown codes included). Never NULL.
#[no_mangle]
pub extern "C" fn mcore_status_str(code: i32) -> *const c_char {
    match mcore_status::from_code(code) {
        Some(s) => s.c_text().as_ptr(),
        None => c"unknown status code".as_ptr(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text_for_every_code() {
        for code in -1..=100 {
            // SAFETY: never NULL, static storage.
            let text = unsafe { std::ffi::CStr::from_ptr(mcore_status_str(code)) }.to_str().unwrap();
            match mcore_status::from_code(code) {
                Some(s) => assert_eq!(text, s.as_str(), "code {code}"),
                None => assert_eq!(text, "unknown status code"),
            }
        }
    }

    #[test]
    fn last_error_status_follows_the_last_call() {
        set_last_error(&FfiError::new(mcore_status::NotMember, "rank 3 is not a member"));
        assert_eq!(mcore_last_error_status(), mcore_status::NotMember);
        clear_last_error();
        assert_eq!(mcore_last_error_status(), mcore_status::Ok);
    }
}
