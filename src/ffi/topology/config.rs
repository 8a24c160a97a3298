//! The C layout configuration: `mcore_topology_config`, its defaults and the one way it is read
//! (`crate::abi::read_sized`), the embedding-ranks callbacks and the caller's `user_data`.

#![allow(non_camel_case_types)]

use super::super::args::{opt_str_arg, out_ptr, slice_arg};
use super::super::{ffi_guard, mcore_status, FfiError};
use crate::abi::read_sized;
use crate::topology::{EmbeddingRanksFn, TopologyConfig};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// Chooses the embedding (or position-embedding) ranks of one pipeline group: given its ranks
/// (ascending, `pipeline_len` of them), write a non-empty subset into `out_ranks` (capacity
/// `out_capacity` = `pipeline_len`), set `*out_len`, and return 0; any other return value is an
/// error. Called lazily, whenever a query needs that pipeline's group, possibly from several threads.
pub type mcore_embedding_ranks_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        pipeline_ranks: *const u32,
        pipeline_len: usize,
        out_ranks: *mut u32,
        out_capacity: usize,
        out_len: *mut usize,
    ) -> i32,
>;

/// Finalizer for `user_data`, called once when the last topology using it is destroyed.
pub type mcore_user_data_free_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// Layout configuration. Fill with `mcore_topology_config_init` first, then set what differs.
/// Sizes are signed so that a negative value is reported, not wrapped.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mcore_topology_config {
    /// `sizeof(mcore_topology_config)` as compiled by the caller (set by the init function).
    pub struct_size: u32,
    /// Tensor-model-parallel size (default 1).
    pub tp: i32,
    /// Pipeline-model-parallel size (default 1).
    pub pp: i32,
    /// Virtual pipeline size; 0 = no interleaved schedule (default 0).
    pub vpp: i32,
    /// Context-parallel size (default 1).
    pub cp: i32,
    /// Hierarchical context-parallel sizes (product = cp), `hcp_len` of them; NULL/0 = none.
    pub hcp: *const i32,
    pub hcp_len: usize,
    /// Expert-model-parallel size (default 1).
    pub ep: i32,
    /// Expert tensor-parallel size; 0 = same as tp (default 0).
    pub etp: i32,
    /// Number of distributed-optimizer instances (default 1).
    pub dist_opt_instances: i32,
    /// Order string, NUL-terminated; NULL = "tp-cp-ep-dp-pp". Copied by create.
    pub order: *const c_char,
    /// Global rank of the layout's rank 0 (default 0).
    pub rank_offset: u32,
    /// Custom embedding ranks; NULL = first and last pipeline stage.
    pub embedding_ranks: mcore_embedding_ranks_fn,
    /// Custom position-embedding ranks; NULL = first pipeline stage.
    pub position_embedding_ranks: mcore_embedding_ranks_fn,
    /// Passed first to both callbacks. On success the topology owns it (see `user_data_free`);
    /// on a failed create the caller keeps it.
    pub user_data: *mut c_void,
    /// Called with `user_data` when the topology is destroyed; may be NULL.
    pub user_data_free: mcore_user_data_free_fn,
    /// Megatron-Core 0.19's `gtp_remat_size` (default 1 = off).
    pub gtp: i32,
    /// Megatron-Core 0.19's `expert_gtp_remat_size` (default 1 = off).
    pub egtp: i32,
    /// Megatron-Core 0.19's `local_world_size`: when > 0, the `world_size` given to create is the
    /// whole world and the grid covers `rank_offset .. rank_offset + local_world_size` of it
    /// (other ranks are in no group: NOT_MEMBER, see `mcore_topology_rank_in_grid`). 0 = the grid
    /// is the given world size (default).
    pub local_world_size: i32,
}

impl Default for mcore_topology_config {
    fn default() -> Self {
        mcore_topology_config {
            struct_size: std::mem::size_of::<Self>() as u32,
            tp: 1,
            pp: 1,
            vpp: 0,
            cp: 1,
            hcp: std::ptr::null(),
            hcp_len: 0,
            ep: 1,
            etp: 0,
            dist_opt_instances: 1,
            order: std::ptr::null(),
            rank_offset: 0,
            embedding_ranks: None,
            position_embedding_ranks: None,
            user_data: std::ptr::null_mut(),
            user_data_free: None,
            gtp: 1,
            egtp: 1,
            local_world_size: 0,
        }
    }
}

/// The caller's `user_data` and its finalizer, shared by the callbacks of one topology.
pub(crate) struct UserData {
    ptr: *mut c_void,
    pub(crate) free: mcore_user_data_free_fn,
}

// SAFETY: the C API documents that callbacks and user_data must be usable from any thread that
// queries the topology; the library itself never dereferences the pointer.
unsafe impl Send for UserData {}
unsafe impl Sync for UserData {}

impl Drop for UserData {
    fn drop(&mut self) {
        if let Some(free) = self.free {
            // SAFETY: the caller handed us this finalizer for this pointer, to be called once.
            unsafe { free(self.ptr) };
        }
    }
}

fn c_callback(f: mcore_embedding_ranks_fn, user: &Arc<UserData>) -> Option<EmbeddingRanksFn> {
    let f = f?;
    let user = Arc::clone(user);
    Some(Arc::new(move |pipeline: &[u32]| {
        let mut out = vec![0u32; pipeline.len()];
        let mut n = 0usize;
        // SAFETY: both buffers are valid for their stated lengths for the duration of the call.
        let rc = unsafe { f(user.ptr, pipeline.as_ptr(), pipeline.len(), out.as_mut_ptr(), out.len(), &mut n) };
        if rc != 0 {
            return Err(format!("callback returned {rc}"));
        }
        if n > out.len() {
            return Err(format!("callback reported {n} ranks, more than the capacity {}", out.len()));
        }
        out.truncate(n);
        Ok(out)
    }))
}

fn size_field(name: &str, v: i32) -> Result<u32, FfiError> {
    u32::try_from(v).map_err(|_| FfiError::new(mcore_status::InvalidConfig, format!("{name} = {v} is negative")))
}

fn optional_field(name: &str, v: i32) -> Result<Option<u32>, FfiError> {
    Ok(Some(size_field(name, v)?).filter(|&v| v != 0))
}

/// The `struct_size` of every released layout of `mcore_topology_config` (see
/// `crate::abi::sized`; ABI 2 restarted the list).
const CONFIG_RELEASES: &[u32] = &[std::mem::size_of::<mcore_topology_config>() as u32];

/// The caller's config under the one `struct_size` rule; `what` names it (`cfg`, `args->topology`).
///
/// # Safety
/// `cfg` is NULL or readable for its `struct_size` bytes.
pub(crate) unsafe fn read_config(
    cfg: *const mcore_topology_config,
    what: &str,
) -> Result<mcore_topology_config, FfiError> {
    if cfg.is_null() {
        return Err(FfiError::invalid_arg(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL, readable per the contract.
    Ok(unsafe { read_sized(cfg, "mcore_topology_config", CONFIG_RELEASES, mcore_topology_config::default()) }?)
}

/// Translate a C config into the Rust one; `user` receives the shared user data when callbacks
/// are given (dropped, without calling the finalizer, when translation fails).
pub(crate) fn config_from_c(c: &mcore_topology_config) -> Result<(TopologyConfig, Option<Arc<UserData>>), FfiError> {
    // SAFETY: a non-NULL order is a NUL-terminated string per the API contract.
    let order = unsafe { opt_str_arg(c.order, "order string") }?.unwrap_or(crate::topology::DEFAULT_ORDER).to_string();
    // SAFETY: NULL or valid for hcp_len elements per the API contract.
    let hierarchical_cp = unsafe { slice_arg(c.hcp, c.hcp_len, "hcp") }?
        .iter()
        .enumerate()
        .map(|(i, &v)| size_field(&format!("hcp[{i}]"), v))
        .collect::<Result<_, _>>()?;
    let mut cfg = TopologyConfig {
        tp: size_field("tp", c.tp)?,
        pp: size_field("pp", c.pp)?,
        vpp: optional_field("vpp", c.vpp)?,
        cp: size_field("cp", c.cp)?,
        hierarchical_cp,
        ep: size_field("ep", c.ep)?,
        etp: optional_field("etp", c.etp)?,
        dist_opt_instances: size_field("dist_opt_instances", c.dist_opt_instances)?,
        order,
        rank_offset: c.rank_offset,
        embedding_ranks: None,
        position_embedding_ranks: None,
        gtp: size_field("gtp", c.gtp)?,
        egtp: size_field("egtp", c.egtp)?,
        local_world_size: optional_field("local_world_size", c.local_world_size)?,
    };
    let user = if c.embedding_ranks.is_some() || c.position_embedding_ranks.is_some() || c.user_data_free.is_some() {
        Some(Arc::new(UserData { ptr: c.user_data, free: c.user_data_free }))
    } else {
        None
    };
    if let Some(u) = &user {
        cfg.embedding_ranks = c_callback(c.embedding_ranks, u);
        cfg.position_embedding_ranks = c_callback(c.position_embedding_ranks, u);
    }
    Ok((cfg, user))
}

/// Fill `cfg` with the defaults (sizes 1, no virtual pipeline, default order, no callbacks) and
/// set its `struct_size`.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_config_init(cfg: *mut mcore_topology_config) -> mcore_status {
    ffi_guard(|| {
        *out_ptr(cfg, "cfg")? = mcore_topology_config::default();
        Ok(())
    })
}
