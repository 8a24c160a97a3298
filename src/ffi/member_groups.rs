//! `mcore_group_*`: groups made after init by their members only (docs/groups-after-init.md).
//! Only the members call `mcore_group_create`, in any order relative to their other creations;
//! it returns a handle at once and the creation goes on in the background (see
//! `runtime::member_groups`); `mcore_group_wait` (or a first collective) waits for it.
#![allow(non_camel_case_types)]

use super::args::{fill_ranks, opt_str_arg, out_ptr, slice_arg, slice_out, str_arg};
use super::handle::{borrow, destroy, into_raw};
use super::{ffi_guard, mcore_status, FfiError};
use crate::abi::read_sized;
use crate::backend::options::OptionValue;
use crate::backend::CommOptions;
use crate::runtime::{self, GroupOptions, MemberGroup};
use std::ffi::{c_char, c_void};

/// Options of a group made after init. Fill with `mcore_group_options_init`, then set what
/// differs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mcore_group_options {
    /// `sizeof(mcore_group_options)` as compiled by the caller (set by the init function).
    pub struct_size: u32,
    /// Bound of the rendezvous and creation in ms; 0 (default) = the init timeout;
    /// `MCORE_TIMEOUT_NONE` (and any value of `MCORE_TIMEOUT_MAX_MS` or more) = no limit.
    pub timeout_ms: u64,
    /// NCCL communicator options; -1 (default) = the backend's default. Backends without
    /// communicator options refuse any that is set.
    pub cga_cluster_size: i32,
    pub min_ctas: i32,
    pub max_ctas: i32,
    /// NCCL's network plugin ("IB", "Socket"); NULL (default) = the backend's choice.
    pub net_name: *const c_char,
    /// NCCL's `launchOrderImplicit` (per communicator, NCCL 2.31+; set 1 for a side group such as
    /// a weight-sync group, docs/id-groups.md): -1 (default) = NCCL's default, 0 = off, 1 = on
    /// (on an older NCCL: a warning naming the version). Other backends refuse 0 and 1.
    pub launch_order_implicit: i32,
}

impl Default for mcore_group_options {
    fn default() -> Self {
        mcore_group_options {
            struct_size: std::mem::size_of::<Self>() as u32,
            timeout_ms: 0,
            cga_cluster_size: -1,
            min_ctas: -1,
            max_ctas: -1,
            net_name: std::ptr::null(),
            launch_order_implicit: -1,
        }
    }
}

/// The `struct_size` of every released layout of `mcore_group_options`: up to `net_name`, then
/// with `launch_order_implicit`.
const OPTIONS_RELEASES: &[u32] = &[
    std::mem::offset_of!(mcore_group_options, launch_order_implicit) as u32,
    std::mem::size_of::<mcore_group_options>() as u32,
];

/// A group made after init (opaque). Free with `mcore_group_destroy`.
pub struct mcore_group {
    inner: MemberGroup,
}

/// Fill `options` with defaults (the init timeout, the backend's communicator defaults).
///
/// # Safety
/// `options` is NULL or writable for `sizeof(mcore_group_options)` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_options_init(options: *mut mcore_group_options) -> mcore_status {
    ffi_guard(|| {
        *out_ptr(options, "options")? = mcore_group_options::default();
        Ok(())
    })
}

/// -1 = unset; other negative values are refused by name.
fn opt_i32(v: i32, what: &str) -> Result<Option<i32>, FfiError> {
    match v {
        -1 => Ok(None),
        v if v >= 0 => Ok(Some(v)),
        v => Err(FfiError::invalid_arg(format!("options->{what} is {v}: -1 (the default) or a value >= 0"))),
    }
}

/// # Safety
/// `p` is NULL or readable for its `struct_size` bytes.
unsafe fn options_from_c(p: *const mcore_group_options) -> Result<GroupOptions, FfiError> {
    if p.is_null() {
        return Ok(GroupOptions::default());
    }
    // SAFETY: non-NULL, readable per the contract.
    let c = unsafe { read_sized(p, "mcore_group_options", OPTIONS_RELEASES, mcore_group_options::default()) }?;
    // SAFETY: NULL or NUL-terminated, per the struct's contract.
    let net_name = unsafe { opt_str_arg(c.net_name, "options->net_name") }?.map(str::to_string);
    let mut more = std::collections::BTreeMap::new();
    match c.launch_order_implicit {
        -1 => {}
        v @ (0 | 1) => {
            more.insert("launch_order_implicit".to_string(), OptionValue::Int(v));
        }
        v => return Err(FfiError::invalid_arg(format!("options->launch_order_implicit is {v}: -1, 0 or 1"))),
    }
    Ok(GroupOptions {
        comm: CommOptions {
            cga_cluster_size: opt_i32(c.cga_cluster_size, "cga_cluster_size")?,
            min_ctas: opt_i32(c.min_ctas, "min_ctas")?,
            max_ctas: opt_i32(c.max_ctas, "max_ctas")?,
            net_name,
            more,
            ..Default::default()
        },
        timeout: match c.timeout_ms {
            0 => None,
            ms => Some(crate::timeout::from_millis(ms)),
        },
    })
}

/// Start making the group `name` of the global ranks `ranks` (`nranks` of them, any order, this
/// rank among them) after init; only its members call this. Returns at once with `*out_group`;
/// the members meet in the background. Errors at once: a bad name (empty, '/', spaces), ranks
/// (none, a duplicate, not in the world, this rank not among them), a name this rank has live
/// already, options the backend refuses (INVALID_ARGUMENT naming the value), NOT_INITIALIZED.
/// `options` NULL = defaults.
///
/// # Safety
/// `name` is a NUL-terminated string; `ranks` is readable for `nranks` entries; `options` is NULL
/// or filled by `mcore_group_options_init`; `out_group` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_create(
    name: *const c_char,
    ranks: *const u32,
    nranks: usize,
    options: *const mcore_group_options,
    out_group: *mut *mut mcore_group,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY (each): per the contract above.
        let name = unsafe { str_arg(name, "name") }?;
        let ranks = unsafe { slice_arg(ranks, nranks, "ranks") }?;
        let options = unsafe { options_from_c(options) }?;
        let out = out_ptr(out_group, "out_group")?;
        let inner = runtime::start_group(name, ranks, &options)?;
        *out = into_raw(mcore_group { inner });
        Ok(())
    })
}

/// Wait until the group's communicator is ready (bounded by the group's timeout + 2 s). TIMEOUT
/// names the members that never called `mcore_group_create`; a member that asked for other
/// members or options is named with the field.
///
/// # Safety
/// `group` is a handle from `mcore_group_create`.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_wait(group: *const mcore_group) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let g = unsafe { borrow(group, "group") }?;
        g.inner.wait().map_err(Into::into)
    })
}

/// Wait for `count` groups in the order of their names (one order every rank shares: needed
/// where the backend creates in the caller's thread, see docs/groups-after-init.md). Every
/// group is waited for; the first failure (in that order) is returned.
///
/// # Safety
/// `groups` is readable for `count` handles from `mcore_group_create`.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_wait_all(groups: *const *const mcore_group, count: usize) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let handles = unsafe { slice_arg(groups, count, "groups") }?;
        let mut all = Vec::with_capacity(count);
        for (i, &h) in handles.iter().enumerate() {
            // SAFETY: per the contract above.
            all.push(unsafe { borrow(h, &format!("groups[{i}]")) }?);
        }
        all.sort_by(|a, b| a.inner.name().cmp(b.inner.name()));
        let mut first = None;
        for g in all {
            if let Err(e) = g.inner.wait() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), |e| Err(e.into()))
    })
}

/// Whether the creation has ended (ready or failed); never waits.
///
/// # Safety
/// `group` is a handle from `mcore_group_create`; `out_done` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_is_done(group: *const mcore_group, out_done: *mut bool) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let g = unsafe { borrow(group, "group") }?;
        *out_ptr(out_done, "out_done")? = g.inner.is_done();
        Ok(())
    })
}

/// The group's global ranks, ascending, into `buf` (`len` entries); `*out_len` = the group size
/// (also when the buffer is too small: BUFFER_TOO_SMALL). Never waits.
///
/// # Safety
/// `group` is a handle from `mcore_group_create`; `buf` is NULL (with `len` 0) or writable for
/// `len` entries; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_ranks(
    group: *const mcore_group,
    buf: *mut u32,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let g = unsafe { borrow(group, "group") }?;
        fill_ranks(g.inner.ranks().iter().copied(), buf, len, out_len)
    })
}

/// This rank's index in the group's ranks. Never waits.
///
/// # Safety
/// `group` is a handle from `mcore_group_create`; `out_group_rank` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_rank(group: *const mcore_group, out_group_rank: *mut u32) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let g = unsafe { borrow(group, "group") }?;
        *out_ptr(out_group_rank, "out_group_rank")? = g.inner.group_rank();
        Ok(())
    })
}

/// The backend's own communicator handle (an `ncclComm_t` for NCCL, the plugin's handle
/// otherwise), waiting for the creation first. Owned by the library until the group is destroyed
/// (and while `mcore_comm_generation` reads as when it was fetched: a recovery drops the group).
///
/// # Safety
/// `group` is a handle from `mcore_group_create`; `out_comm` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_communicator(
    group: *const mcore_group,
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

/// Sum `count` int64 values element-wise over the group, in place (waiting for the creation
/// first). Every member calls it; collectives on several groups go in one order on every member.
///
/// # Safety
/// `group` is a handle from `mcore_group_create`; `values` is writable for `count` entries.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_allreduce_sum_i64(
    group: *const mcore_group,
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

/// Destroy the group on this rank (its communicator goes; the runtime and other groups stay) and
/// free the handle. NULL is accepted; so is a handle whose runtime was destroyed already. A call
/// on the group running in another thread meanwhile (`mcore_group_wait`, a collective) ends with
/// INVALID_ARGUMENT "the group was destroyed" (or its own result, when it was past the wait);
/// a call made after the destroy is INVALID_ARGUMENT (not a live handle).
///
/// # Safety
/// `group` is NULL or a handle from `mcore_group_create`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_destroy(group: *mut mcore_group) {
    // SAFETY: any pointer value (looked up, see `handle`). A call still running on the handle
    // in another thread keeps the object alive and ends with "the group was destroyed".
    if let Some(g) = unsafe { destroy(group) } {
        // Dropping the communicator runs backend code: no panic may leave through here.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| g.inner.destroy()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::error::mcore_last_error_message;
    use std::ffi::CStr;

    fn last_error() -> String {
        // SAFETY: never NULL, valid until the next call on this thread.
        unsafe { CStr::from_ptr(mcore_last_error_message()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn bad_arguments_are_named_before_anything_else() {
        let ranks = [0u32];
        let mut out: *mut mcore_group = std::ptr::null_mut();
        // SAFETY (each call): valid pointers or NULL where the test means NULL.
        let s = unsafe { mcore_group_create(std::ptr::null(), ranks.as_ptr(), 1, std::ptr::null(), &mut out) };
        assert_eq!((s, last_error().as_str()), (mcore_status::InvalidArgument, "name is NULL"));
        let s = unsafe { mcore_group_create(c"g".as_ptr(), std::ptr::null(), 2, std::ptr::null(), &mut out) };
        assert_eq!(s, mcore_status::InvalidArgument);
        assert_eq!(last_error(), "ranks is NULL but its length is 2");
        let bad = mcore_group_options { min_ctas: -5, ..Default::default() };
        let s = unsafe { mcore_group_create(c"g".as_ptr(), ranks.as_ptr(), 1, &bad, &mut out) };
        assert_eq!(s, mcore_status::InvalidArgument);
        assert!(last_error().contains("options->min_ctas is -5"), "{}", last_error());
        let wrong = mcore_group_options { struct_size: 3, ..Default::default() };
        let s = unsafe { mcore_group_create(c"g".as_ptr(), ranks.as_ptr(), 1, &wrong, &mut out) };
        assert_ne!(s, mcore_status::Ok);
        assert!(last_error().contains("mcore_group_options"), "{}", last_error());
        assert!(out.is_null(), "no handle on failure");
        // SAFETY: NULL is accepted.
        unsafe { mcore_group_destroy(std::ptr::null_mut()) };
        let s = unsafe { mcore_group_wait(std::ptr::null()) };
        assert_eq!((s, last_error().as_str()), (mcore_status::InvalidArgument, "group is NULL"));
    }

    #[test]
    fn options_default_to_the_init_timeout_and_the_backends_choices() {
        let mut o = mcore_group_options { struct_size: 0, timeout_ms: 9, ..Default::default() };
        // SAFETY: writable.
        assert_eq!(unsafe { mcore_group_options_init(&mut o) }, mcore_status::Ok);
        assert_eq!(o.struct_size as usize, std::mem::size_of::<mcore_group_options>());
        // SAFETY: ours and whole.
        let g = unsafe { options_from_c(&o) }.unwrap();
        assert_eq!(g, GroupOptions::default());
        let o = mcore_group_options { timeout_ms: 1500, max_ctas: 4, net_name: c"Socket".as_ptr(), ..o };
        // SAFETY: as above.
        let g = unsafe { options_from_c(&o) }.unwrap();
        assert_eq!(g.timeout, Some(std::time::Duration::from_millis(1500)));
        assert_eq!((g.comm.max_ctas, g.comm.net_name.as_deref(), g.comm.min_ctas), (Some(4), Some("Socket"), None));
        assert!(g.comm.more.is_empty(), "launch order left at NCCL's default");
        let on = mcore_group_options { launch_order_implicit: 1, ..o };
        // SAFETY: as above.
        let g = unsafe { options_from_c(&on) }.unwrap();
        assert_eq!(g.comm.more.get("launch_order_implicit"), Some(&OptionValue::Int(1)));
        let bad = mcore_group_options { launch_order_implicit: 2, ..o };
        // SAFETY: as above.
        let e = unsafe { options_from_c(&bad) }.unwrap_err();
        assert!(e.message.contains("launch_order_implicit is 2"), "{}", e.message);
        // The layout before the field (a caller built against it) is read with the default.
        let old = mcore_group_options { struct_size: OPTIONS_RELEASES[0], launch_order_implicit: 1, ..o };
        // SAFETY: as above (the whole struct is readable).
        assert!(unsafe { options_from_c(&old) }.unwrap().comm.more.is_empty());
    }
}
