//! `mcore_suspend` / `mcore_resume`: give a set of the runtime's communicators' device memory
//! back and take it again (docs/backends.md, "Suspend and resume"), and
//! `mcore_runtime_comm_memory`, what a kind's communicator holds.

use super::args::{opt_str_arg, out_ptr, slice_arg, str_arg};
use super::runtime::{live_group, with_rt};
use super::{ffi_guard, mcore_status, FfiError};
use crate::abi::read_sized;
use crate::runtime::{self, SuspendReport, SuspendRequest};
use std::ffi::c_char;

/// Which communicators `mcore_suspend` / `mcore_resume` are about. Fill with
/// `mcore_suspend_args_init`, then set what differs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mcore_suspend_args {
    /// `sizeof(mcore_suspend_args)` as compiled by the caller (set by the init function).
    pub struct_size: u32,
    /// Kind keys ("tensor_model_parallel", "data_parallel_with_cp_all_gather", ...), `n_kinds`
    /// of them; NULL with `n_kinds` 0 (the default) = every kind of this rank.
    pub kinds: *const *const c_char,
    pub n_kinds: usize,
    /// The grid the kinds belong to, by name; NULL (the default) = the default grid (the first).
    /// A communicator a colocated grid shares (equal members) stays up while that grid runs.
    pub grid: *const c_char,
    /// Bound of a resume that creates communicators again, in ms; 0 (the default) = the init
    /// timeout. `MCORE_TIMEOUT_NONE` = no limit.
    pub timeout_ms: u64,
}

impl Default for mcore_suspend_args {
    fn default() -> Self {
        mcore_suspend_args {
            struct_size: std::mem::size_of::<Self>() as u32,
            kinds: std::ptr::null(),
            n_kinds: 0,
            grid: std::ptr::null(),
            timeout_ms: 0,
        }
    }
}

/// The `struct_size` of every released layout of `mcore_suspend_args`.
const SUSPEND_ARGS_RELEASES: &[u32] = &[std::mem::size_of::<mcore_suspend_args>() as u32];

/// Fill `args` with defaults (every kind, the default grid, the init timeout).
///
/// # Safety
/// `args` is NULL or writable for `sizeof(mcore_suspend_args)` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcore_suspend_args_init(args: *mut mcore_suspend_args) -> mcore_status {
    ffi_guard(|| {
        *out_ptr(args, "args")? = mcore_suspend_args::default();
        Ok(())
    })
}

/// The request `args` describes (NULL: every kind).
///
/// # Safety
/// `args` is NULL or readable for its `struct_size` bytes, its strings NUL-terminated.
unsafe fn request(args: *const mcore_suspend_args) -> Result<SuspendRequest, FfiError> {
    if args.is_null() {
        return Ok(SuspendRequest::all());
    }
    // SAFETY: non-NULL, readable per the contract.
    let a = unsafe { read_sized(args, "mcore_suspend_args", SUSPEND_ARGS_RELEASES, mcore_suspend_args::default()) }?;
    // SAFETY: `kinds` holds `n_kinds` pointers per the contract.
    let ptrs = unsafe { slice_arg(a.kinds, a.n_kinds, "args->kinds") }?;
    let kinds = if ptrs.is_empty() {
        None
    } else {
        let names = ptrs
            .iter()
            .enumerate()
            // SAFETY: each entry is a NUL-terminated string per the contract.
            .map(|(i, &p)| unsafe { str_arg(p, &format!("args->kinds[{i}]")) }.map(str::to_string))
            .collect::<Result<Vec<_>, _>>()?;
        Some(names)
    };
    // SAFETY: NULL or NUL-terminated per the contract.
    let grid = unsafe { opt_str_arg(a.grid, "args->grid") }?.map(str::to_string);
    let timeout = (a.timeout_ms > 0).then(|| crate::timeout::from_millis(a.timeout_ms));
    Ok(SuspendRequest { kinds, grid, timeout })
}

fn write_count(report: &SuspendReport, out: *mut usize) {
    // SAFETY: NULL or writable per the contract.
    if let Some(o) = unsafe { out.as_mut() } {
        *o = report.communicators.len();
    }
}

/// Suspend the communicators of the kinds `args` names (NULL: every kind), collectively: every
/// rank calls it with the same kinds. A communicator whose backend suspends itself (NCCL 2.29.7+,
/// a plugin with the `suspend` slot) keeps its ranks and releases its device memory; any other
/// is released and created again by `mcore_resume`. A kind sharing a communicator with a named
/// one is suspended with it. While suspended, a kind's handle, all-reduce and barrier fail with
/// `MCORE_STATUS_SUSPENDED` naming the kind. `*out_communicators` (may be NULL): how many were
/// suspended now (already suspended ones are not counted).
///
/// Errors: an unknown grid, or a kind that is not one of the grid's layout → INVALID_ARGUMENT
/// naming it; a backend failure → its status.
///
/// # Safety
/// `args` is NULL or a `mcore_suspend_args` filled by `mcore_suspend_args_init`;
/// `out_communicators` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_suspend(args: *const mcore_suspend_args, out_communicators: *mut usize) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let req = unsafe { request(args) }?;
        let report = runtime::suspend(&req)?;
        write_count(&report, out_communicators);
        Ok(())
    })
}

/// Resume the suspended communicators of the kinds `args` names (NULL: every kind),
/// collectively, then verify each (when initialized with `verify`) with the all-reduce the plan
/// predicts. A released one is created again with the same members through the store within the
/// timeout; a failure names the members that never came. `*out_communicators` (may be NULL): how
/// many were resumed.
///
/// # Safety
/// As `mcore_suspend`.
#[no_mangle]
pub unsafe extern "C" fn mcore_resume(args: *const mcore_suspend_args, out_communicators: *mut usize) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let req = unsafe { request(args) }?;
        let report = runtime::resume(&req)?;
        write_count(&report, out_communicators);
        Ok(())
    })
}

/// Device memory of a communicator (NCCL's `ncclCommMemStats`), in bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct mcore_comm_memory {
    /// Whether the backend reports the memory (false: the byte counts are 0).
    pub known: bool,
    /// Whether the communicator is suspended now.
    pub suspended: bool,
    /// Bytes a suspend releases (0 while released).
    pub suspendable_bytes: u64,
    /// Bytes kept while suspended.
    pub persistent_bytes: u64,
    /// Every byte the backend tracks for it.
    pub total_bytes: u64,
}

/// The memory of this rank's communicator of `kind` (a `mcore_group_kind`) into `*out`.
///
/// Errors: not initialized; NOT_MEMBER when this rank has no group of `kind`.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_comm_memory(kind: i32, out: *mut mcore_comm_memory) -> mcore_status {
    ffi_guard(|| {
        let got = with_rt(|rt| {
            let g = live_group(rt, kind)?;
            let mut comm = crate::runtime::groups::lock_comm(&g.comm)?;
            let suspended = comm.suspension().is_some();
            let memory = comm.memory().transpose().map_err(FfiError::from)?;
            Ok(match memory {
                Some(m) => mcore_comm_memory {
                    known: true,
                    suspended,
                    suspendable_bytes: m.suspendable,
                    persistent_bytes: m.persistent,
                    total_bytes: m.total,
                },
                None => mcore_comm_memory { suspended, ..Default::default() },
            })
        })?;
        *out_ptr(out, "out")? = got;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    /// The args are read under the struct_size rule; kinds and grid come through as named.
    #[test]
    fn args_are_read_by_size_and_their_strings_named() {
        // SAFETY: NULL means every kind.
        assert_eq!(unsafe { request(std::ptr::null()) }.unwrap(), SuspendRequest::all());
        let (tp, grid) = (CString::new("tensor_model_parallel").unwrap(), CString::new("default").unwrap());
        let kinds = [tp.as_ptr()];
        let mut a = mcore_suspend_args {
            kinds: kinds.as_ptr(),
            n_kinds: 1,
            grid: grid.as_ptr(),
            timeout_ms: 1500,
            ..Default::default()
        };
        // SAFETY: our own whole struct and strings.
        let r = unsafe { request(&a) }.unwrap();
        assert_eq!(r.kinds, Some(vec!["tensor_model_parallel".to_string()]));
        assert_eq!((r.grid.as_deref(), r.timeout), (Some("default"), Some(std::time::Duration::from_millis(1500))));
        let with_null = [std::ptr::null()];
        a.kinds = with_null.as_ptr();
        // SAFETY: as above (a NULL entry is refused, not read).
        let e = unsafe { request(&a) }.unwrap_err();
        assert!(e.message.contains("args->kinds[0] is NULL"), "{}", e.message);
        a.kinds = std::ptr::null();
        // SAFETY: as above (NULL with a length is refused).
        let e = unsafe { request(&a) }.unwrap_err();
        assert!(e.message.contains("args->kinds is NULL but its length is 1"), "{}", e.message);
        a.struct_size -= 8;
        // SAFETY: as above (a smaller declared size).
        let e = unsafe { request(&a) }.unwrap_err();
        assert_eq!(e.status, mcore_status::InvalidArgument);
        assert!(e.message.contains("mcore_suspend_args struct_size"), "{}", e.message);
    }

    #[test]
    fn without_a_runtime_suspend_and_resume_say_not_initialized() {
        // SAFETY: NULL args and out-pointer are allowed.
        assert_eq!(unsafe { mcore_suspend(std::ptr::null(), std::ptr::null_mut()) }, mcore_status::NotInitialized);
        // SAFETY: as above.
        assert_eq!(unsafe { mcore_resume(std::ptr::null(), std::ptr::null_mut()) }, mcore_status::NotInitialized);
    }
}
