//! `mcore_backend_*` exports: register a vtable by pointer, load a plugin, unregister.

use super::{mcore_backend_v1, Vtable};
use crate::backend::registry::{self, Origin};
use crate::backend::{load_plugin, Backend, BackendError};
use crate::ffi::args::str_arg;
use crate::ffi::{ffi_guard, mcore_status, FfiError};
use std::ffi::c_char;
use std::path::Path;


/// Register a backend by pointer from Rust (a built-in backend fills an `mcore_backend_v1` with
/// `extern "C"` functions): the same checks and copy as `mcore_backend_register`, with the
/// backend or a typed error back.
///
/// # Safety
/// `vtable` is NULL or points to `struct_size` readable bytes laid out as `mcore_backend_v1`
/// whose name is NUL-terminated and whose slots follow the vtable contract.
pub unsafe fn register_vtable(vtable: *const mcore_backend_v1) -> Result<Backend, BackendError> {
    // SAFETY: caller contract.
    let vt = unsafe { Vtable::from_ptr(vtable, "mcore_backend_register") }?;
    registry::insert(vt, Origin::Pointer)
}

/// Register a backend by pointer. The vtable is copied (`min(struct_size, sizeof)` bytes) and its
/// name too, so the caller's struct may go away; `user_data` stays the caller's until `finalize`.
/// Errors: NULL → INVALID_ARGUMENT; other `abi_version` or too small `struct_size` →
/// UNSUPPORTED; NULL name, no creation strategy, no `destroy_comm` → INVALID_ARGUMENT;
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
/// file again is a no-op. The backend's name is copied NUL-terminated into `name_buf` when it
/// is not NULL; `out_name_len` (optional) receives its length including the NUL. If `name_buf`
/// is too small the plugin is still loaded and BUFFER_TOO_SMALL is returned; call again.
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
            return Err(FfiError::invalid_arg(format!(
                "name_buf is NULL but name_buf_len is {name_buf_len}"
            )));
        }
        let backend = load_plugin(Path::new(path))?;
        let name = backend.name().as_bytes();
        let needed = name.len() + 1;
        if !out_name_len.is_null() {
            // SAFETY: writable (caller contract).
            unsafe { *out_name_len = needed };
        }
        if name_buf.is_null() {
            return Ok(());
        }
        if name_buf_len < needed {
            return Err(FfiError::new(
                mcore_status::BufferTooSmall,
                format!(
                    "backend name '{}' needs {needed} bytes, name_buf has {name_buf_len}",
                    backend.name()
                ),
            ));
        }
        // SAFETY: `name_buf` has at least `needed` writable bytes (checked).
        unsafe {
            std::ptr::copy_nonoverlapping(name.as_ptr(), name_buf.cast::<u8>(), name.len());
            *name_buf.add(name.len()) = 0;
        }
        Ok(())
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
        registry::unregister(name).map_err(|e: BackendError| e.into())
    })
}
