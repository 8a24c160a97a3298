//! C API of the topology engine: create/destroy a layout, per-rank group queries for any rank
//! and kind, group enumeration and pipeline queries. The config struct is [`config`], the kind
//! numbers [`kind`].

#![allow(non_camel_case_types)]

pub mod config;
pub mod kind;

use super::args::{fill_ranks, out_ptr};
use super::handle;
use super::{ffi_guard, mcore_status, FfiError};
use crate::topology::Topology;
use config::{config_from_c, read_config, UserData};
pub use config::{
    mcore_embedding_ranks_fn, mcore_topology_config, mcore_topology_config_init, mcore_user_data_free_fn,
};
pub(crate) use kind::{kind_from_c, kind_to_c};
pub use kind::{mcore_group_kind, mcore_group_kind_from_name, mcore_group_kind_name};
use std::sync::Arc;

/// A layout (opaque). Immutable after creation: queries may run from several threads at once
/// (the embedding callbacks must then be thread-safe too).
pub struct mcore_topology {
    topology: Topology,
    /// The caller's user data lives (and is finalized) with the handle even when no callback holds it.
    _user: Option<Arc<UserData>>,
}

/// A new handle for `topology` with the caller's `user` data (a layout derived from another
/// handle's, e.g. a recovery plan's, shares that handle's user data: its callbacks serve both).
pub(crate) fn topology_handle(topology: Topology, user: Option<Arc<UserData>>) -> *mut mcore_topology {
    handle::into_raw(mcore_topology { topology, _user: user })
}

/// The user data of handle `t`, for a layout derived from it.
pub(crate) fn user_data_of(t: *const mcore_topology) -> Result<Option<Arc<UserData>>, FfiError> {
    // SAFETY: NULL or a live handle from mcore_topology_create (the API contract).
    Ok(unsafe { handle::borrow(t, "topology") }?._user.clone())
}

/// The layout behind a handle (kept alive by the returned `Arc` while the caller uses it).
pub(crate) fn topo(t: *const mcore_topology) -> Result<Arc<mcore_topology>, FfiError> {
    // SAFETY: any pointer value (looked up, see `handle`).
    unsafe { handle::borrow(t, "topology") }
}

impl std::ops::Deref for mcore_topology {
    type Target = Topology;

    fn deref(&self) -> &Topology {
        &self.topology
    }
}

/// Where a rank sits in one group.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct mcore_group_info {
    /// Index of the group among the groups of its kind (creation order, same on every rank).
    pub index: u64,
    /// The rank's group rank (index in the ascending member list).
    pub rank: u32,
    /// Number of members.
    pub size: u32,
}

/// A rank's pipeline place; next/prev wrap around the ring.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct mcore_pipeline_info {
    pub stage: u32,
    pub num_stages: u32,
    pub first: u32,
    pub last: u32,
    pub next: u32,
    pub prev: u32,
}

/// The sizes of a layout, derived ones included.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct mcore_topology_sizes {
    pub world_size: u32,
    pub rank_offset: u32,
    pub tp: u32,
    pub pp: u32,
    /// 0 when no virtual pipeline.
    pub vpp: u32,
    pub cp: u32,
    /// Number of hierarchical context-parallel levels (0 = none).
    pub hcp_levels: u32,
    pub ep: u32,
    pub etp: u32,
    pub dp: u32,
    pub expert_dp: u32,
    pub dist_opt_instances: u32,
}

fn member_group(t: &Topology, rank: u32, kind: i32) -> Result<crate::topology::Membership, FfiError> {
    let kind = kind_from_c(kind)?;
    t.membership(kind, rank)?.ok_or_else(|| {
        if !t.in_grid(rank) {
            return FfiError::new(
                mcore_status::NotMember,
                format!(
                    "rank {rank} is outside the grid (ranks {}..{} of a world of {}): it belongs to no group",
                    t.rank_offset(),
                    u64::from(t.rank_offset()) + u64::from(t.world_size()) - 1,
                    t.total_world_size()
                ),
            );
        }
        let why = if t.has_kind(kind) { "" } else { " (this layout has no such groups)" };
        FfiError::new(mcore_status::NotMember, format!("rank {rank} is in no {kind} group{why}"))
    })
}

/// -1 = ignore virtual stages; other negative values are errors.
fn vp_stage_from_c(vp_stage: i32) -> Result<Option<u32>, FfiError> {
    match vp_stage {
        -1 => Ok(None),
        v if v < 0 => Err(FfiError::invalid_arg(format!("vp_stage {v}: use -1 to ignore virtual stages"))),
        v => Ok(Some(v as u32)),
    }
}

/// Validate `cfg` for `world_size` ranks and create the layout. On failure the status and
/// `mcore_last_error_message()` name the offending values and `*out` is untouched.
///
/// # Safety
/// `cfg` points to a config filled by `mcore_topology_config_init`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_create(
    cfg: *const mcore_topology_config,
    world_size: u32,
    out: *mut *mut mcore_topology,
) -> mcore_status {
    ffi_guard(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: NULL or readable per the contract.
        let c = unsafe { read_config(cfg, "cfg") }?;
        let (config, user) = config_from_c(&c)?;
        match Topology::new(config, world_size) {
            Ok(topology) => {
                *out = topology_handle(topology, user);
                Ok(())
            }
            Err(e) => {
                // The caller keeps user_data on failure: do not run its finalizer.
                if let Some(mut inner) = user.and_then(|u| Arc::try_unwrap(u).ok()) {
                    inner.free = None;
                }
                Err(e.into())
            }
        }
    })
}

/// Destroy a layout (NULL is fine). Runs `user_data_free` if one was given.
///
/// # Safety
/// `t` comes from `mcore_topology_create` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_destroy(t: *mut mcore_topology) {
    // SAFETY: NULL or a handle from mcore_topology_create, not used afterwards (the contract).
    let _ = ffi_guard(|| {
        unsafe { handle::destroy(t) };
        Ok(())
    });
}

/// The sizes of the layout (world, offset, given and derived sizes).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_get_sizes(
    t: *const mcore_topology,
    out: *mut mcore_topology_sizes,
) -> mcore_status {
    ffi_guard(|| {
        let t = topo(t)?;
        let out = out_ptr(out, "out")?;
        let s = t.sizes();
        *out = mcore_topology_sizes {
            world_size: s.world_size,
            rank_offset: t.rank_offset(),
            tp: s.tp,
            pp: s.pp,
            vpp: s.vpp.unwrap_or(0),
            cp: s.cp,
            hcp_levels: t.hierarchical_cp_levels(),
            ep: s.ep,
            etp: s.etp,
            dp: s.dp,
            expert_dp: s.expert_dp,
            dist_opt_instances: s.dist_opt_instances,
        };
        Ok(())
    })
}

/// Number of group kinds this layout has (hierarchical levels included).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_kind_count(t: *const mcore_topology, out_count: *mut usize) -> mcore_status {
    ffi_guard(|| {
        let n = topo(t)?.kinds().len();
        *out_ptr(out_count, "out_count")? = n;
        Ok(())
    })
}

/// The `index`-th kind of this layout, in the layout's kind order (the order groups are created in).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_kind_at(
    t: *const mcore_topology,
    index: usize,
    out_kind: *mut i32,
) -> mcore_status {
    ffi_guard(|| {
        let kinds = topo(t)?.kinds();
        let out = out_ptr(out_kind, "out_kind")?;
        let k = kinds.get(index).ok_or_else(|| {
            FfiError::new(mcore_status::OutOfRange, format!("kind index {index} out of range: {} kinds", kinds.len()))
        })?;
        *out = kind_to_c(*k);
        Ok(())
    })
}

/// `rank`'s group of `kind`: its index, the rank's group rank and the size. NOT_MEMBER when the
/// rank is in no group of that kind (e.g. a middle pipeline stage and `EMBEDDING`).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_group(
    t: *const mcore_topology,
    rank: u32,
    kind: i32,
    out: *mut mcore_group_info,
) -> mcore_status {
    ffi_guard(|| {
        let m = member_group(&*topo(t)?, rank, kind)?;
        *out_ptr(out, "out")? = mcore_group_info { index: m.group_index(), rank: m.rank, size: m.size() };
        Ok(())
    })
}

/// The global ranks of `rank`'s group of `kind`, ascending (a rank's index is its group rank).
/// `buf` may be NULL when `len` is 0, to ask for the size: BUFFER_TOO_SMALL sets `*out_len`.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_group_ranks(
    t: *const mcore_topology,
    rank: u32,
    kind: i32,
    buf: *mut u32,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        let m = member_group(&*topo(t)?, rank, kind)?;
        fill_ranks(m.group.iter(), buf, len, out_len)
    })
}

/// Megatron-Core 0.19's sizes of a layout (kept out of `mcore_topology_sizes`, whose size is
/// fixed): gtp and egtp (1 = off), the whole world's size and the local world size (0 when none
/// was given; the grid is then `mcore_topology_sizes.world_size` ranks).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_get_gtp_sizes(
    t: *const mcore_topology,
    out_gtp: *mut u32,
    out_egtp: *mut u32,
    out_total_world_size: *mut u32,
    out_local_world_size: *mut u32,
) -> mcore_status {
    ffi_guard(|| {
        let t = topo(t)?;
        // Every out-pointer is checked before any is written: a failing call writes none.
        let (gtp, egtp) = (out_ptr(out_gtp, "out_gtp")?, out_ptr(out_egtp, "out_egtp")?);
        let total = out_ptr(out_total_world_size, "out_total_world_size")?;
        let local = out_ptr(out_local_world_size, "out_local_world_size")?;
        let s = t.sizes();
        (*gtp, *egtp) = (s.gtp, s.egtp);
        (*total, *local) = (t.total_world_size(), t.config().local_world_size.unwrap_or(0));
        Ok(())
    })
}

/// Whether `rank` is in the grid: false for a rank of the world outside `rank_offset ..
/// rank_offset + local_world_size` (it belongs to no group), OUT_OF_RANGE beyond the world.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_rank_in_grid(
    t: *const mcore_topology,
    rank: u32,
    out: *mut bool,
) -> mcore_status {
    ffi_guard(|| {
        let t = topo(t)?;
        if rank >= t.total_world_size().max(t.rank_offset().saturating_add(t.world_size())) {
            return Err(FfiError::new(
                mcore_status::OutOfRange,
                format!("rank {rank} is outside the world of {} ranks", t.total_world_size()),
            ));
        }
        *out_ptr(out, "out")? = t.in_grid(rank);
        Ok(())
    })
}

/// Number of groups of `kind` in the layout (0 for a kind it does not have).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_group_count(
    t: *const mcore_topology,
    kind: i32,
    out_count: *mut u64,
) -> mcore_status {
    ffi_guard(|| {
        let n = topo(t)?.group_count(kind_from_c(kind)?);
        *out_ptr(out_count, "out_count")? = n;
        Ok(())
    })
}

/// The global ranks of group `index` of `kind` (creation order, the same on every rank), ascending.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_group_at(
    t: *const mcore_topology,
    kind: i32,
    index: u64,
    buf: *mut u32,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        let g = topo(t)?.group(kind_from_c(kind)?, index)?;
        fill_ranks(g.iter(), buf, len, out_len)
    })
}

/// `rank`'s pipeline stage, stage count, first/last ranks and ring neighbours.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_pipeline(
    t: *const mcore_topology,
    rank: u32,
    out: *mut mcore_pipeline_info,
) -> mcore_status {
    ffi_guard(|| {
        let p = topo(t)?.pipeline(rank)?;
        *out_ptr(out, "out")? = mcore_pipeline_info {
            stage: p.rank,
            num_stages: p.size,
            first: p.first,
            last: p.last,
            next: p.next,
            prev: p.prev,
        };
        Ok(())
    })
}

/// Whether `rank` is on the first pipeline stage; `vp_stage` >= 0 also requires virtual stage 0,
/// -1 ignores virtual stages. OUT_OF_RANGE for a stage beyond the virtual pipeline size.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_is_pipeline_first_stage(
    t: *const mcore_topology,
    rank: u32,
    vp_stage: i32,
    out: *mut bool,
) -> mcore_status {
    ffi_guard(|| {
        let v = topo(t)?.is_pipeline_first_stage(rank, vp_stage_from_c(vp_stage)?)?;
        *out_ptr(out, "out")? = v;
        Ok(())
    })
}

/// Whether `rank` is on the last pipeline stage; `vp_stage` >= 0 also requires the last virtual
/// stage, -1 ignores virtual stages.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_is_pipeline_last_stage(
    t: *const mcore_topology,
    rank: u32,
    vp_stage: i32,
    out: *mut bool,
) -> mcore_status {
    ffi_guard(|| {
        let v = topo(t)?.is_pipeline_last_stage(rank, vp_stage_from_c(vp_stage)?)?;
        *out_ptr(out, "out")? = v;
        Ok(())
    })
}

/// Megatron's `is_rank_in_embedding_group`: membership; with `vp_stage` >= 0 the first member
/// counts only on virtual stage 0 and the last only on the last virtual stage.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_is_rank_in_embedding_group(
    t: *const mcore_topology,
    rank: u32,
    vp_stage: i32,
    out: *mut bool,
) -> mcore_status {
    ffi_guard(|| {
        let v = topo(t)?.is_rank_in_embedding_group(rank, vp_stage_from_c(vp_stage)?)?;
        *out_ptr(out, "out")? = v;
        Ok(())
    })
}
