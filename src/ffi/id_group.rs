//! `mcore_unique_id_*`, `mcore_id_group_*`, `mcore_nccl_library_info`: groups joined from
//! unique-id bytes (docs/id-groups.md). No rendezvous store and no `mcore_initialize` is needed,
//! here or on the other ranks: a trainer joins a rollout engine's weight-sync group with these
//! alone.
#![allow(non_camel_case_types)]

use super::args::{fill_items, fill_str, opt_str_arg, out_ptr, slice_arg, slice_out, str_arg};
use super::handle::{borrow, destroy, into_raw};
use super::{ffi_guard, mcore_status, FfiError};
use crate::abi::read_sized;
use crate::backend::id_group::{self, IdGroup, ID_BACKEND};
use crate::backend::nccl::factory::device_or_local_rank;
use crate::backend::nccl::unique_id::{base64_decode, base64_encode};
use crate::backend::nccl::{JoinSpec, LaunchOrder, NcclLibrary, NcclUniqueId};
use crate::backend::CommError;
use std::ffi::{c_char, c_void};

/// The longest group name (bytes).
const MAX_NAME_LEN: usize = 200;
/// The name of a group joined without one.
const DEFAULT_NAME: &str = "id_group";

/// Mint a new unique id of `backend` (NULL = "nccl", the only backend with ids) into `buf`
/// (`len` bytes); `*out_len` = its size (NCCL: 128), also on BUFFER_TOO_SMALL. NCCL's
/// `ncclGetUniqueId` needs no GPU; it starts the group's bootstrap root in this process, which
/// must therefore live until every rank has joined. Errors: UNSUPPORTED (another backend),
/// LIBRARY_LOAD (no NCCL; the message lists where it looked), BACKEND (NCCL's own error, e.g. no
/// usable network interface: set NCCL_SOCKET_IFNAME). Returns at once (no wait).
///
/// # Safety
/// `backend` is NULL or a NUL-terminated string; `buf` is NULL (with `len` 0) or writable for
/// `len` bytes; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_unique_id_create(
    backend: *const c_char,
    buf: *mut u8,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let backend = unsafe { opt_str_arg(backend, "backend") }?.unwrap_or(ID_BACKEND);
        out_ptr(out_len, "out_len")?;
        let id = id_group::mint_unique_id(backend)?;
        fill_items(id.into_iter(), buf, len, out_len, |len, need| {
            format!("a unique id of backend {backend} is {need} bytes, the buffer holds {len}")
        })
    })
}

/// The standard base64 (RFC 4648, `+` and `/`, padded; what vLLM's `nccl_unique_id_b64` carries)
/// of the `id_len` bytes at `id`, NUL-terminated, into `buf` (`len` bytes); `*out_len` = bytes
/// needed including the NUL (173 for an NCCL id), also on BUFFER_TOO_SMALL.
///
/// # Safety
/// `id` is readable for `id_len` bytes; `buf` is NULL (with `len` 0) or writable for `len` bytes;
/// `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_unique_id_to_base64(
    id: *const u8,
    id_len: usize,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let id = unsafe { slice_arg(id, id_len, "id") }?;
        fill_str(&base64_encode(id), buf, len, out_len, "the base64 text")
    })
}

/// The bytes of standard base64 `text` into `buf` (`len` bytes); `*out_len` = their number, also
/// on BUFFER_TOO_SMALL. INVALID_ARGUMENT names the first bad character and its position
/// (URL-safe `-` and `_` are named as such) or a length that is no multiple of 4.
///
/// # Safety
/// `text` is a NUL-terminated string; `buf` is NULL (with `len` 0) or writable for `len` bytes;
/// `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_unique_id_from_base64(
    text: *const c_char,
    buf: *mut u8,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let text = unsafe { str_arg(text, "text") }?;
        let bytes = base64_decode(text).map_err(|e| FfiError::invalid_arg(format!("text: {e}")))?;
        fill_items(bytes.into_iter(), buf, len, out_len, |len, need| {
            format!("the text holds {need} bytes, the buffer {len}")
        })
    })
}

/// What a rank needs to join a group from a unique id. Fill with `mcore_id_group_args_init`,
/// then set `id`, `id_len`, `world_size` and `rank` (and what else differs).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mcore_id_group_args {
    /// `sizeof(mcore_id_group_args)` as compiled by the caller (set by the init function).
    pub struct_size: u32,
    /// The backend: NULL (default) = "nccl", the only one with unique ids.
    pub backend: *const c_char,
    /// The group's name in messages and NCCL's `commName`; NULL (default) = "id_group".
    pub name: *const c_char,
    /// The id's bytes (128 for NCCL; `mcore_unique_id_from_base64` turns vLLM's
    /// `nccl_unique_id_b64` into them), read during the call.
    pub id: *const u8,
    pub id_len: usize,
    /// Ranks of the group, this process's among them (vLLM's UID mode: the trainer is 0 and the
    /// workers `rank_offset` and up; nccl_m2n: trainers `[0, T)`, workers `[T, T+N)`).
    pub world_size: u32,
    pub rank: u32,
    /// Bound of the join (init and warm-up together) and of each later collective, in ms; 0 =
    /// `$MCORE_INIT_TIMEOUT` seconds, else 300 s; `MCORE_TIMEOUT_NONE` = no limit.
    pub timeout_ms: u64,
    /// CUDA device ordinal; -1 (default) = `$LOCAL_RANK`, else 0.
    pub device: i32,
    /// Run vLLM's warm-up inside the join: a one-element float32 all-reduce of 0.0 on every rank
    /// (vLLM's workers issue it right after joining; a peer that does not deadlocks them).
    /// Default false.
    pub warmup: bool,
    /// NCCL's `launchOrderImplicit` (per communicator, NCCL 2.31+): -1 (default) = on where the
    /// library has the field, 0 = off, 1 = on (on an older NCCL: a warning naming the version;
    /// `NCCL_LAUNCH_ORDER_IMPLICIT=1` is the process-wide switch from 2.26).
    pub launch_order_implicit: i32,
}

impl Default for mcore_id_group_args {
    fn default() -> Self {
        mcore_id_group_args {
            struct_size: std::mem::size_of::<Self>() as u32,
            backend: std::ptr::null(),
            name: std::ptr::null(),
            id: std::ptr::null(),
            id_len: 0,
            world_size: 0,
            rank: 0,
            timeout_ms: 0,
            device: -1,
            warmup: false,
            launch_order_implicit: -1,
        }
    }
}

/// The `struct_size` of every released layout of `mcore_id_group_args`.
const ARGS_RELEASES: &[u32] = &[std::mem::size_of::<mcore_id_group_args>() as u32];

/// A group joined from a unique id (opaque). Free with `mcore_id_group_destroy`.
pub struct mcore_id_group {
    inner: IdGroup,
}

/// Fill `args` with defaults (see the fields).
///
/// # Safety
/// `args` is NULL or writable for `sizeof(mcore_id_group_args)` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcore_id_group_args_init(args: *mut mcore_id_group_args) -> mcore_status {
    ffi_guard(|| {
        *out_ptr(args, "args")? = mcore_id_group_args::default();
        Ok(())
    })
}

/// The backend and what to join, checked.
///
/// # Safety
/// `p` is NULL or points to an `mcore_id_group_args` per `mcore_id_group_join`'s contract.
unsafe fn spec_from_c(p: *const mcore_id_group_args) -> Result<(String, JoinSpec), FfiError> {
    if p.is_null() {
        return Err(super::args::null("args"));
    }
    // SAFETY: non-NULL, readable for its struct_size.
    let c = unsafe { read_sized(p, "mcore_id_group_args", ARGS_RELEASES, mcore_id_group_args::default()) }?;
    // SAFETY (each): NULL or NUL-terminated / readable, per the struct's contract.
    let backend = unsafe { opt_str_arg(c.backend, "args->backend") }?.unwrap_or(ID_BACKEND).to_string();
    let name = unsafe { opt_str_arg(c.name, "args->name") }?.unwrap_or(DEFAULT_NAME).to_string();
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(FfiError::invalid_arg(format!(
            "args->name {} must be 1 to {MAX_NAME_LEN} bytes",
            crate::quote::quoted(&crate::quote::clip(&name))
        )));
    }
    let id = unsafe { slice_arg(c.id, c.id_len, "args->id") }?;
    let id = NcclUniqueId::from_bytes(id).map_err(|e| FfiError::invalid_arg(format!("args->id: {e}")))?;
    if c.world_size == 0 || c.rank >= c.world_size {
        return Err(FfiError::invalid_arg(format!(
            "args->rank {} is not a rank of args->world_size {} (0..{})",
            c.rank, c.world_size, c.world_size
        )));
    }
    let device = match c.device {
        -1 => None,
        d => Some(u32::try_from(d).map_err(|_| {
            FfiError::invalid_arg(format!("args->device is {d}: -1 ($LOCAL_RANK) or a device ordinal >= 0"))
        })?),
    };
    let launch_order = match c.launch_order_implicit {
        -1 => LaunchOrder::Default,
        0 => LaunchOrder::Off,
        1 => LaunchOrder::On,
        v => return Err(FfiError::invalid_arg(format!("args->launch_order_implicit is {v}: -1, 0 or 1"))),
    };
    let spec = JoinSpec {
        name,
        id,
        world_size: c.world_size,
        rank: c.rank,
        device: device_or_local_rank(device).map_err(CommError::from)?,
        timeout: super::runtime::init_timeout(c.timeout_ms)?,
        warmup: c.warmup,
        launch_order,
    };
    Ok((backend, spec))
}

/// Join the group of the id in `args` as `args->rank` of `args->world_size`: every rank must call
/// this (or NCCL's `ncclCommInitRank`) with the same id and size concurrently. Blocks until the
/// communicator is ready (and the warm-up, if asked, is done), at most `args->timeout_ms` (+2 s).
/// TIMEOUT names the group and its size when the ranks did not all come (NCCL does not say how
/// many did); the communicator is aborted, so a new id can be joined at once. INVALID_ARGUMENT
/// names a bad field (id length, rank, device); UNSUPPORTED another backend; LIBRARY_LOAD no
/// NCCL or no CUDA driver; BACKEND NCCL's own error. Needs no `mcore_initialize`; uses the same
/// loaded NCCL as the runtime (`mcore_nccl_library_info`). On success `*out_group` is a handle
/// the caller frees with `mcore_id_group_destroy`.
///
/// # Safety
/// `args` is filled by `mcore_id_group_args_init` (its `id` readable for `id_len` bytes, strings
/// NULL or NUL-terminated); `out_group` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_id_group_join(
    args: *const mcore_id_group_args,
    out_group: *mut *mut mcore_id_group,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let (backend, spec) = unsafe { spec_from_c(args) }?;
        let out = out_ptr(out_group, "out_group")?;
        let inner = id_group::join(&backend, &spec)?;
        *out = into_raw(mcore_id_group { inner });
        Ok(())
    })
}

/// This process's rank in the group and the group's size. Never waits.
///
/// # Safety
/// `group` is a handle from `mcore_id_group_join`; `out_rank` and `out_size` are writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_id_group_rank(
    group: *const mcore_id_group,
    out_rank: *mut u32,
    out_size: *mut u32,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let g = unsafe { borrow(group, "group") }?;
        let (rank, size) = (out_ptr(out_rank, "out_rank")?, out_ptr(out_size, "out_size")?);
        (*rank, *size) = (g.inner.rank(), g.inner.size());
        Ok(())
    })
}

/// The group's `ncclComm_t`, owned by the library until `mcore_id_group_destroy` (never destroy
/// or abort it yourself). Hand it only to code that calls the same loaded libnccl
/// (`mcore_nccl_library_info`; docs/id-groups.md). INVALID_ARGUMENT once destroyed.
///
/// # Safety
/// `group` is a handle from `mcore_id_group_join`; `out_comm` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_id_group_communicator(
    group: *const mcore_id_group,
    out_comm: *mut *mut c_void,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let g = unsafe { borrow(group, "group") }?;
        let out = out_ptr(out_comm, "out_comm")?;
        *out = g.inner.raw_handle()?;
        Ok(())
    })
}

/// Sum `count` int64 values over the group, in place (through device memory), within the join's
/// timeout; TIMEOUT names the collective and the group. Every rank calls it.
///
/// # Safety
/// `group` is a handle from `mcore_id_group_join`; `values` is writable for `count` entries.
#[no_mangle]
pub unsafe extern "C" fn mcore_id_group_allreduce_sum_i64(
    group: *const mcore_id_group,
    values: *mut i64,
    count: usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let g = unsafe { borrow(group, "group") }?;
        let values = unsafe { slice_out(values, count, "values") }?;
        g.inner.allreduce_sum_i64(values).map_err(Into::into)
    })
}

/// Broadcast `bytes` bytes at `data` from group rank `root` to every rank, in place (host memory,
/// copied through the device; for checks and small payloads: large weights go through the
/// `ncclComm_t` on the caller's own stream). Within the join's timeout; INVALID_ARGUMENT names a
/// root outside the group.
///
/// # Safety
/// `group` is a handle from `mcore_id_group_join`; `data` is writable for `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcore_id_group_broadcast(
    group: *const mcore_id_group,
    data: *mut c_void,
    bytes: usize,
    root: u32,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let g = unsafe { borrow(group, "group") }?;
        let data = unsafe { slice_out(data.cast::<u8>(), bytes, "data") }?;
        g.inner.broadcast_bytes(data, root).map_err(Into::into)
    })
}

/// Release the group's communicator (flushed and destroyed within the join's timeout; aborted
/// instead when it failed or this process aborted any communicator) and free the handle. NULL is
/// accepted. A call on the group in another thread finishes first (collectives are bounded by the
/// timeout); a call made afterwards is INVALID_ARGUMENT (not a live handle).
///
/// # Safety
/// `group` is NULL or a handle from `mcore_id_group_join`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mcore_id_group_destroy(group: *mut mcore_id_group) {
    // SAFETY: any pointer value (looked up, see `handle`).
    if let Some(g) = unsafe { destroy(group) } {
        // Releasing the communicator runs NCCL code: no panic may leave through here.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.inner.destroy()));
    }
}

/// Which libnccl this process uses (loading it on first use, as the runtime and the joins do):
/// its file into `path` (`path_len` bytes, NUL-terminated; `*out_path_len` = bytes needed, also
/// on BUFFER_TOO_SMALL), `*out_version` = NCCL's version code (major*10000 + minor*100 + patch),
/// `*out_shared` = whether the process had it loaded before mcore_init bound it (torch, CuPy or a
/// ctypes load first: then a `ncclComm_t` may pass between them). `MCORE_NCCL_LIBRARY` wins over
/// a library already loaded. LIBRARY_LOAD when none can be loaded (the message lists where it
/// looked).
///
/// # Safety
/// `path` is NULL (with `path_len` 0) or writable for `path_len` bytes; the out-pointers are
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_nccl_library_info(
    path: *mut c_char,
    path_len: usize,
    out_path_len: *mut usize,
    out_version: *mut u32,
    out_shared: *mut bool,
) -> mcore_status {
    ffi_guard(|| {
        let (version, shared) = (out_ptr(out_version, "out_version")?, out_ptr(out_shared, "out_shared")?);
        let lib = NcclLibrary::global().map_err(CommError::from)?;
        fill_str(&lib.file(), path, path_len, out_path_len, "the library path")?;
        (*version, *shared) = (lib.version().code(), lib.shared());
        Ok(())
    })
}
