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

use std::ffi::CStr;

pub(crate) use crate::backend::dynlib::{as_fn, DynLib};

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
