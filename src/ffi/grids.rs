//! The grids of an initialized job: how many and their names, and per grid (named by its name,
//! NULL for the default grid) this rank's groups, communicators, RNG streams, layout and the
//! `ProcessGroupCollection`-shaped view (`mcore_grid_*`).

use super::args::{fill_items, fill_ranks, fill_str, out_ptr, slice_out};
use super::rng::mcore_rng_tracker;
use super::runtime::{allreduce, grid_of, group_in, rng_handle, with_rt, write_handle};
use super::topology::kind::kind_to_c;
use super::topology::{mcore_group_info, mcore_topology, topology_handle};
use super::{ffi_guard, mcore_status, FfiError};
use crate::runtime::PlanKind;
use std::ffi::{c_char, c_void};

/// The number of grids of the initialized job (1 unless it was initialized with `grids`).
///
/// # Safety
/// `out_count` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_grid_count(out_count: *mut u32) -> mcore_status {
    ffi_guard(|| {
        let n = with_rt(|rt| Ok(rt.grids.len() as u32))?;
        *out_ptr(out_count, "out_count")? = n;
        Ok(())
    })
}

/// The name of grid `index` (0 is the default grid) into `buf` (`len` bytes, NUL included);
/// `*out_len` = the bytes needed (also on BUFFER_TOO_SMALL).
///
/// # Safety
/// `buf` is NULL (with `len` 0) or writable for `len` bytes; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_grid_name(
    index: u32,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        let name = with_rt(|rt| {
            rt.grids.get(index as usize).map(|g| g.name.clone()).ok_or_else(|| {
                FfiError::invalid_arg(format!("grid index {index} is out of range (the job has {})", rt.grids.len()))
            })
        })?;
        fill_str(&name, buf, len, out_len, "the grid name")
    })
}

/// This rank's group of `kind` in `grid` (NULL: the default grid): index, group rank, size.
/// `MCORE_STATUS_NOT_MEMBER` when the rank has no group of that kind there (outside the grid's
/// window, or e.g. off the embedding stages); INVALID_ARGUMENT for a grid the job does not have.
///
/// # Safety
/// `grid` is NULL or a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_grid_group(grid: *const c_char, kind: i32, out: *mut mcore_group_info) -> mcore_status {
    ffi_guard(|| {
        let info = with_rt(|rt| {
            // SAFETY: per the contract.
            let g = group_in(rt, unsafe { grid_of(rt, grid) }?, kind)?;
            Ok(mcore_group_info { index: g.plan.index as u64, rank: g.group_rank, size: g.plan.members.len() as u32 })
        })?;
        *out_ptr(out, "out")? = info;
        Ok(())
    })
}

/// The global ranks of this rank's group of `kind` in `grid`, ascending, as
/// `mcore_runtime_group_ranks` gives them for the default grid.
///
/// # Safety
/// `grid` is NULL or a NUL-terminated string; `buf` is NULL (with `len` 0) or writable for `len`
/// entries; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_grid_group_ranks(
    grid: *const c_char,
    kind: i32,
    buf: *mut u32,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        with_rt(|rt| {
            // SAFETY: per the contract.
            let g = group_in(rt, unsafe { grid_of(rt, grid) }?, kind)?;
            fill_ranks(g.plan.members.iter().copied(), buf, len, out_len)
        })
    })
}

/// The backend's communicator handle of this rank's group of `kind` in `grid` (an `ncclComm_t`
/// for NCCL). Groups with the same members and options share one communicator, across grids
/// too. Owned by the library; valid while `mcore_comm_generation` reads as when it was fetched.
///
/// # Safety
/// `grid` is NULL or a NUL-terminated string; `out_comm` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_grid_communicator(
    grid: *const c_char,
    kind: i32,
    out_comm: *mut *mut c_void,
) -> mcore_status {
    // SAFETY: per the contract.
    ffi_guard(|| write_handle(out_comm, |rt| group_in(rt, unsafe { grid_of(rt, grid) }?, kind)))
}

/// Sum `count` int64 values element-wise over this rank's group of `kind` in `grid`, in place.
///
/// # Safety
/// `grid` is NULL or a NUL-terminated string; `values` is writable for `count` entries.
#[no_mangle]
pub unsafe extern "C" fn mcore_grid_allreduce_sum_i64(
    grid: *const c_char,
    kind: i32,
    values: *mut i64,
    count: usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract.
        let values = unsafe { slice_out(values, count, "values") }?;
        // SAFETY: per the contract.
        with_rt(|rt| allreduce(rt, group_in(rt, unsafe { grid_of(rt, grid) }?, kind)?, values))
    })
}

/// A new handle on this rank's RNG streams of `grid`, seeded at init from the rank's coordinates
/// in that grid (the grid's `seed_rng`); release with `mcore_rng_tracker_destroy`.
/// NOT_INITIALIZED when the grid was not seeded or the rank is outside it.
///
/// # Safety
/// `grid` is NULL or a NUL-terminated string; `out_tracker` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_grid_rng_tracker(
    grid: *const c_char,
    out_tracker: *mut *mut mcore_rng_tracker,
) -> mcore_status {
    ffi_guard(|| {
        let out = out_ptr(out_tracker, "out_tracker")?;
        *out = with_rt(|rt| {
            // SAFETY: per the contract.
            let g = unsafe { grid_of(rt, grid) }?;
            rng_handle(g.rng.as_ref(), &format!("grid '{}' on rank {}", g.name, rt.env.rank))
        })?;
        Ok(())
    })
}

/// A new topology handle of `grid`'s layout (over the job's world): every `mcore_topology_*`
/// query works on it (stage tests, any rank's groups, node placement); release it with
/// `mcore_topology_destroy`. It stays valid after `mcore_destroy`.
///
/// # Safety
/// `grid` is NULL or a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_grid_topology(grid: *const c_char, out: *mut *mut mcore_topology) -> mcore_status {
    ffi_guard(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: per the contract.
        let t = with_rt(|rt| Ok(unsafe { grid_of(rt, grid) }?.topology.clone()))?;
        *out = topology_handle(t, None);
        Ok(())
    })
}

/// One field of a grid's `ProcessGroupCollection` view (Megatron-Core 0.19.2's field names).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mcore_pg_entry {
    /// The field: "tp", "pp", "mp", "embd", "pos_embd", "cp", "tp_cp", "hcp" (once per level, in
    /// level order), "ep", "expt_tp", "tp_ep", "tp_ep_pp", "tp_ep_pp_with_egtp_remat", "tp_dp_cp",
    /// "dp", "dp_cp", "dp_cp_gtp_remat", "dp_cp_ag", "gtp_remat", "expt_gtp_remat", "expt_dp",
    /// "expt_dp_gtp_remat", "expt_dp_ag", "intra_dp_cp", "intra_expt_dp", "inter_dist_opt",
    /// "intra_dist_opt". A static string.
    pub field: *const c_char,
    /// The `mcore_group_kind` that fills it.
    pub kind: i32,
    /// Whether it is the kind's all-gather twin (`dp_cp_ag`, `expt_dp_ag`).
    pub all_gather: bool,
    /// The rank's group rank and the group size.
    pub rank: u32,
    pub size: u32,
    /// The backend's communicator handle (owned by the library; valid while
    /// `mcore_comm_generation` reads as when it was fetched).
    pub comm: *mut c_void,
}

/// `name` as a static C string (the field names are a fixed list).
fn c_field(name: &str) -> *const c_char {
    macro_rules! fields {
        ($($f:literal),*) => {
            match name { $($f => concat!($f, "\0").as_ptr().cast(),)* _ => std::ptr::null() }
        };
    }
    fields!(
        "tp",
        "pp",
        "mp",
        "embd",
        "pos_embd",
        "cp",
        "tp_cp",
        "hcp",
        "ep",
        "expt_tp",
        "tp_ep",
        "tp_ep_pp",
        "tp_ep_pp_with_egtp_remat",
        "tp_dp_cp",
        "dp",
        "dp_cp",
        "dp_cp_gtp_remat",
        "dp_cp_ag",
        "gtp_remat",
        "expt_gtp_remat",
        "expt_dp",
        "expt_dp_gtp_remat",
        "expt_dp_ag",
        "intra_dp_cp",
        "intra_expt_dp",
        "inter_dist_opt",
        "intra_dist_opt"
    )
}

/// `grid`'s `ProcessGroupCollection` view on this rank: one entry per field it has a group for,
/// in Megatron's field order, into `buf` (`len` entries); `*out_len` = the number of entries
/// (also on BUFFER_TOO_SMALL). Fields without a group here are absent (a twin not created, the
/// embedding group off its stages, every field on a rank outside the grid).
///
/// # Safety
/// `grid` is NULL or a NUL-terminated string; `buf` is NULL (with `len` 0) or writable for `len`
/// entries; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_grid_pg_collection(
    grid: *const c_char,
    buf: *mut mcore_pg_entry,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        with_rt(|rt| {
            // SAFETY: per the contract.
            let g = unsafe { grid_of(rt, grid) }?;
            let mut entries = Vec::new();
            for (field, live) in rt.pg_collection(g) {
                let comm = crate::runtime::groups::lock_comm(&live.comm)?;
                entries.push(mcore_pg_entry {
                    field: c_field(field),
                    kind: live.plan.kind.group_kind().map_or(-1, kind_to_c),
                    all_gather: matches!(live.plan.kind, PlanKind::AllGatherTwin(_)),
                    rank: live.group_rank,
                    size: live.plan.members.len() as u32,
                    comm: comm.raw_handle(),
                });
            }
            fill_items(entries.into_iter(), buf, len, out_len, |len, need| {
                format!("buffer holds {len} entries, the view has {need}")
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::PG_COLLECTION_FIELDS;

    #[test]
    fn every_field_has_its_static_name() {
        for (field, _) in PG_COLLECTION_FIELDS {
            let p = c_field(field);
            assert!(!p.is_null(), "{field}");
            // SAFETY: a static NUL-terminated literal.
            assert_eq!(unsafe { std::ffi::CStr::from_ptr(p) }.to_str().unwrap(), *field);
        }
    }
}
