//! Checked views of C arguments, shared by every export: strings, slices, out-pointers and the
//! "fill a caller buffer or report the size needed" pattern. Each error names the argument.

use super::error::FfiError;
use crate::abi::mcore_status;
use std::ffi::{c_char, CStr};

pub(crate) fn null(what: &str) -> FfiError {
    FfiError::invalid_arg(format!("{what} is NULL"))
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, FfiError> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| FfiError::invalid_arg(format!("{what} is not valid UTF-8")))
}

/// An optional string argument: NULL is `None`, anything else as [`str_arg`].
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn opt_str_arg<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, FfiError> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: non-NULL, per the caller's contract.
        unsafe { str_arg(p, what) }.map(Some)
    }
}

/// An input array of `n` elements (NULL allowed when `n` is 0).
///
/// # Safety
/// `p` is NULL or valid for `n` reads of `T`.
pub(crate) unsafe fn slice_arg<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], FfiError> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(FfiError::invalid_arg(format!("{what} is NULL but its length is {n}")));
    }
    // SAFETY: non-NULL, valid for n elements per the contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// An output array of `n` elements (NULL allowed when `n` is 0).
///
/// # Safety
/// `p` is NULL or valid for `n` writes of `T`.
pub(crate) unsafe fn slice_out<'a, T>(p: *mut T, n: usize, what: &str) -> Result<&'a mut [T], FfiError> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(FfiError::invalid_arg(format!("{what} is NULL but its length is {n}")));
    }
    // SAFETY: non-NULL, valid for n elements per the contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// A required out-pointer.
pub(crate) fn out_ptr<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T, FfiError> {
    // SAFETY: a non-NULL out-pointer is writable per the API contract.
    unsafe { p.as_mut() }.ok_or_else(|| null(name))
}

/// Copy `items` into the caller's buffer of `len`; when it is too small, set `*out_len` to the
/// size needed and fail with `MCORE_STATUS_BUFFER_TOO_SMALL`, with `too_small(len, need)` as
/// the message. `buf` may be NULL only when nothing is needed.
pub(crate) fn fill_items<T>(
    items: impl ExactSizeIterator<Item = T>,
    buf: *mut T,
    len: usize,
    out_len: *mut usize,
    too_small: impl FnOnce(usize, usize) -> String,
) -> Result<(), FfiError> {
    let out_len = out_ptr(out_len, "out_len")?;
    let need = items.len();
    if len < need {
        *out_len = need;
        return Err(FfiError::new(mcore_status::BufferTooSmall, too_small(len, need)));
    }
    // SAFETY: the caller declares room for len >= need items (NULL only when need is 0).
    let dst = unsafe { slice_out(buf, need, "buffer") }?;
    for (d, item) in dst.iter_mut().zip(items) {
        *d = item;
    }
    *out_len = need;
    Ok(())
}

/// [`fill_items`] for a group's ranks.
pub(crate) fn fill_ranks(
    ranks: impl ExactSizeIterator<Item = u32>,
    buf: *mut u32,
    len: usize,
    out_len: *mut usize,
) -> Result<(), FfiError> {
    fill_items(ranks, buf, len, out_len, |len, need| format!("buffer holds {len} ranks, the group has {need}"))
}

/// [`fill_items`] for a string: `text` and a NUL into the caller's buffer of `len` bytes;
/// `*out_len` = bytes needed including the NUL (also on `MCORE_STATUS_BUFFER_TOO_SMALL`). `what`
/// names the text.
pub(crate) fn fill_str(
    text: &str,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
    what: &str,
) -> Result<(), FfiError> {
    let bytes: Vec<c_char> = text.bytes().chain([0]).map(|b| b as c_char).collect();
    fill_items(bytes.into_iter(), buf, len, out_len, |len, need| format!("{what} needs {need} bytes, buffer has {len}"))
}
