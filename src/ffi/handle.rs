//! The one handle discipline of the C API: an opaque handle (`mcore_topology *`, `mcore_store *`,
//! `mcore_rng_tracker *`) is a `Box` of its Rust struct. [`into_raw`] hands one out, [`borrow`]
//! reads one (NULL is INVALID_ARGUMENT naming the argument), [`destroy`] frees one (NULL is
//! fine). Nothing else casts a handle.

use super::args::null;
use super::error::FfiError;

/// Hand `value` out as a handle; the caller frees it with the matching `*_destroy`.
pub(crate) fn into_raw<T>(value: T) -> *mut T {
    Box::into_raw(Box::new(value))
}

/// The object behind handle `p`, named `what` in the error when NULL.
///
/// # Safety
/// `p` is NULL or a live handle from [`into_raw`] of the same type.
pub(crate) unsafe fn borrow<'a, T>(p: *const T, what: &str) -> Result<&'a T, FfiError> {
    // SAFETY: NULL or a live handle (the contract).
    unsafe { p.as_ref() }.ok_or_else(|| null(what))
}

/// Free handle `p` (NULL is a no-op).
///
/// # Safety
/// `p` is NULL or a handle from [`into_raw`] of the same type, not used afterwards.
pub(crate) unsafe fn destroy<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: created by Box::into_raw in into_raw (the contract).
        drop(unsafe { Box::from_raw(p) });
    }
}
