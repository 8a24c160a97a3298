//! `mcore_backend_*` exports: register a vtable by pointer, load a plugin, unregister.

use super::args::{fill_str, str_arg};
use super::{ffi_guard, mcore_status, FfiError};
use crate::abi::backend::mcore_backend_v1;
use crate::backend::registry::{self, load_plugin, register_vtable};
use std::ffi::c_char;
use std::path::Path;

/// Register a backend by pointer. The vtable is copied (up to its `struct_size`) and its name
/// too, so the caller's struct may go away; `user_data` stays the caller's until `finalize`.
/// Errors: other `abi_version` → UNSUPPORTED; NULL, a `struct_size` that is no released layout
/// (or larger with slots beyond ours set), NULL name, no creation strategy, no `destroy_comm` →
/// INVALID_ARGUMENT;
/// a backend of that name exists → ALREADY_EXISTS (the rejected copy is not finalized).
///
/// # Safety
/// `vtable` is NULL or points to `struct_size` readable bytes laid out as `mcore_backend_v1`.
#[no_mangle]
pub unsafe extern "C" fn mcore_backend_register(vtable: *const mcore_backend_v1) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: caller contract.
        unsafe { register_vtable(vtable) }?;
        Ok(())
    })
}

/// Load a backend plugin `.so` (a path, or a bare file name looked up by the dynamic loader),
/// call its `mcore_backend_plugin_v1()` and register the vtable it returns. Loading the same
/// file again is a no-op. The backend's name is written like every string out of the library
/// (`name_buf` of `name_buf_len` bytes, `*out_name_len` = bytes needed with the NUL, also on
/// BUFFER_TOO_SMALL; see docs/abi.md): pass NULL, 0, NULL to skip it. If `name_buf` is too small
/// the plugin is still loaded and BUFFER_TOO_SMALL is returned; call again.
/// Errors: missing file, no entry symbol, entry returned NULL → LIBRARY_LOAD; bad vtable as in
/// `mcore_backend_register`; another backend has the name → ALREADY_EXISTS.
///
/// # Safety
/// `path` is a NUL-terminated string; `name_buf` is NULL or has `name_buf_len` writable bytes;
/// `out_name_len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_backend_load_plugin(
    path: *const c_char,
    name_buf: *mut c_char,
    name_buf_len: usize,
    out_name_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: caller contract.
        let path = unsafe { str_arg(path, "plugin path") }?;
        if name_buf.is_null() && name_buf_len != 0 {
            return Err(FfiError::invalid_arg(format!("name_buf is NULL but name_buf_len is {name_buf_len}")));
        }
        // Checked before the plugin is loaded: a call that fails on its arguments does nothing.
        if !name_buf.is_null() && out_name_len.is_null() {
            return Err(FfiError::invalid_arg("out_name_len is NULL but name_buf is not"));
        }
        let backend = load_plugin(Path::new(path))?;
        if name_buf.is_null() && out_name_len.is_null() {
            return Ok(());
        }
        fill_str(backend.name(), name_buf, name_buf_len, out_name_len, "backend name")
    })
}

/// Remove a registered backend. Its `finalize` runs once its last communicator is destroyed.
/// Unknown name → NOT_FOUND.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mcore_backend_unregister(name: *const c_char) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: caller contract.
        let name = unsafe { str_arg(name, "backend name") }?;
        registry::unregister(name).map_err(Into::into)
    })
}
