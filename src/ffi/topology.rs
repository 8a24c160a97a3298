//! C API of the topology engine: a config struct, create/destroy, per-rank group queries for any
//! rank and kind, group enumeration, pipeline queries and custom embedding ranks.

#![allow(non_camel_case_types)]

use super::args::{fill_ranks, fill_str, opt_str_arg, out_ptr};
use super::error::FfiError;
use super::ffi_guard;
use super::status::mcore_status;
use crate::topology::{EmbeddingRanksFn, GroupKind, Topology, TopologyConfig, TopologyError, TopologyErrorKind};
use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

/// A layout (opaque). Immutable after creation: queries may run from several threads at once
/// (the embedding callbacks must then be thread-safe too).
pub struct mcore_topology {
    _private: [u8; 0],
}

/// The kinds of process group. Functions take a kind as `int32_t` holding one of these values;
/// hierarchical context-parallel level `i` is `MCORE_GROUP_KIND_HIERARCHICAL_CONTEXT_PARALLEL + i`.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum mcore_group_kind {
    TensorModelParallel = 0,
    PipelineModelParallel = 1,
    DataParallel = 2,
    DataParallelWithCp = 3,
    ContextParallel = 4,
    ModelParallel = 5,
    TensorAndDataParallel = 6,
    TensorAndDataParallelWithCp = 7,
    TensorAndContextParallel = 8,
    IntraPartialDataParallelWithCp = 9,
    IntraDistributedOptimizerInstance = 10,
    Embedding = 11,
    PositionEmbedding = 12,
    ExpertModelParallel = 13,
    ExpertTensorParallel = 14,
    ExpertTensorAndModelParallel = 15,
    ExpertTensorModelPipelineParallel = 16,
    ExpertDataParallel = 17,
    IntraPartialExpertDataParallel = 18,
    InterPartialExpertDataParallel = 19,
    /// Megatron-Core 0.19 (gtp_remat_size): ranks equal in every dense coordinate but gtp.
    GtpWeightRemat = 20,
    /// Megatron-Core 0.19: data-parallel with its gtp peers (the data-parallel groups at gtp = 1).
    DataParallelWithGtpRemat = 21,
    /// Megatron-Core 0.19: data-parallel with cp and gtp peers.
    DataParallelWithCpWithGtpRemat = 22,
    /// Megatron-Core 0.19 (expert_gtp_remat_size): ranks equal in every expert coordinate but egtp.
    ExpertGtpWeightRemat = 23,
    /// Megatron-Core 0.19: an etp x ep x pp group merged with its egtp peers.
    ExpertTensorModelPipelineParallelWithEgtp = 24,
    /// Megatron-Core 0.19: expert data-parallel with its egtp peers.
    ExpertDataParallelWithGtpRemat = 25,
    /// Level 0 of hierarchical context parallelism; level i is this value + i.
    HierarchicalContextParallel = 1000,
}

const HCP_BASE: i32 = mcore_group_kind::HierarchicalContextParallel as i32;

pub(crate) fn kind_from_c(kind: i32) -> Result<GroupKind, FfiError> {
    if kind >= HCP_BASE {
        return Ok(GroupKind::HierarchicalContextParallel((kind - HCP_BASE) as u32));
    }
    usize::try_from(kind)
        .ok()
        .and_then(|i| GroupKind::FIXED.get(i).copied())
        .ok_or_else(|| FfiError::invalid_arg(format!("unknown group kind {kind} (see mcore_group_kind)")))
}

pub(crate) fn kind_to_c(kind: GroupKind) -> i32 {
    match kind {
        GroupKind::HierarchicalContextParallel(i) => HCP_BASE.saturating_add(i as i32),
        k => GroupKind::FIXED.iter().position(|f| *f == k).expect("fixed kind") as i32,
    }
}

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
    pub struct_size: usize,
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
    // Fields below were appended for Megatron-Core 0.19; a caller whose `struct_size` ends
    // before them gets their defaults.
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
            struct_size: std::mem::size_of::<Self>(),
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

impl From<TopologyError> for FfiError {
    fn from(e: TopologyError) -> Self {
        let status = match e.kind {
            TopologyErrorKind::InvalidConfig | TopologyErrorKind::Callback => mcore_status::InvalidConfig,
            TopologyErrorKind::OutOfRange => mcore_status::OutOfRange,
            TopologyErrorKind::UnknownKind => mcore_status::NotFound,
        };
        FfiError::new(status, e.message)
    }
}

/// The caller's `user_data` and its finalizer, shared by the callbacks of one topology.
pub(crate) struct UserData {
    ptr: *mut c_void,
    free: mcore_user_data_free_fn,
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
        let rc = unsafe {
            f(
                user.ptr,
                pipeline.as_ptr(),
                pipeline.len(),
                out.as_mut_ptr(),
                out.len(),
                &mut n,
            )
        };
        if rc != 0 {
            return Err(format!("callback returned {rc}"));
        }
        if n > out.len() {
            return Err(format!(
                "callback reported {n} ranks, more than the capacity {}",
                out.len()
            ));
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

/// Copy the caller's struct (of the caller's `struct_size`) over our defaults.
///
/// SAFETY: `cfg` is non-NULL and readable for `struct_size` bytes (checked against ours).
pub(crate) unsafe fn read_config(cfg: *const mcore_topology_config) -> Result<mcore_topology_config, FfiError> {
    // SAFETY: struct_size is the first field; the caller's struct has at least that.
    let given = unsafe { std::ptr::read_unaligned(cfg.cast::<usize>()) };
    let ours = std::mem::size_of::<mcore_topology_config>();
    if given < std::mem::size_of::<usize>() {
        return Err(FfiError::invalid_arg(format!(
            "config struct_size {given} is too small: fill the struct with mcore_topology_config_init"
        )));
    }
    // A size that ends inside a pointer or length would copy part of it: a wild pointer.
    use std::mem::offset_of;
    type C = mcore_topology_config;
    let word_fields = [
        offset_of!(C, hcp),
        offset_of!(C, hcp_len),
        offset_of!(C, order),
        offset_of!(C, embedding_ranks),
        offset_of!(C, position_embedding_ranks),
        offset_of!(C, user_data),
        offset_of!(C, user_data_free),
    ];
    if word_fields.iter().any(|&at| given > at && given < at + std::mem::size_of::<usize>()) {
        return Err(FfiError::invalid_arg(format!(
            "config struct_size {given} ends inside a pointer field: fill the struct with mcore_topology_config_init"
        )));
    }
    let mut out = mcore_topology_config::default();
    // SAFETY: we copy min(given, ours) bytes from a struct the caller declares to be that large.
    unsafe {
        std::ptr::copy_nonoverlapping(
            cfg.cast::<u8>(),
            (&mut out as *mut mcore_topology_config).cast::<u8>(),
            given.min(ours),
        );
    }
    out.struct_size = ours;
    Ok(out)
}

/// Translate a C config into the Rust one; `user` receives the shared user data when callbacks
/// are given (dropped, without calling the finalizer, when translation fails).
pub(crate) fn config_from_c(c: &mcore_topology_config) -> Result<(TopologyConfig, Option<Arc<UserData>>), FfiError> {
    // SAFETY: a non-NULL order is a NUL-terminated string per the API contract.
    let order = unsafe { opt_str_arg(c.order, "order string") }?.unwrap_or(crate::topology::DEFAULT_ORDER).to_string();
    let hierarchical_cp = if c.hcp_len == 0 {
        Vec::new()
    } else if c.hcp.is_null() {
        return Err(FfiError::invalid_arg(format!(
            "hcp is NULL but hcp_len is {}",
            c.hcp_len
        )));
    } else {
        // SAFETY: non-NULL with the length the caller gives.
        let raw = unsafe { std::slice::from_raw_parts(c.hcp, c.hcp_len) };
        raw.iter()
            .enumerate()
            .map(|(i, &v)| size_field(&format!("hcp[{i}]"), v))
            .collect::<Result<_, _>>()?
    };
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
        Some(Arc::new(UserData {
            ptr: c.user_data,
            free: c.user_data_free,
        }))
    } else {
        None
    };
    if let Some(u) = &user {
        cfg.embedding_ranks = c_callback(c.embedding_ranks, u);
        cfg.position_embedding_ranks = c_callback(c.position_embedding_ranks, u);
    }
    Ok((cfg, user))
}

/// What an `mcore_topology` handle points to: the layout and the caller's user data, which
/// lives (and is finalized) with the handle even when no callback holds it.
struct Handle {
    topology: Topology,
    _user: Option<Arc<UserData>>,
}

pub(crate) fn topo<'a>(t: *const mcore_topology) -> Result<&'a Topology, FfiError> {
    if t.is_null() {
        return Err(FfiError::invalid_arg("topology is NULL"));
    }
    // SAFETY: non-NULL topology handles come from mcore_topology_create (a boxed Handle).
    Ok(&unsafe { &*t.cast::<Handle>() }.topology)
}

/// A new handle for `topology`, a layout derived from `t`'s (a recovery plan's): it shares `t`'s
/// user data, which the derived layout's callbacks use. `t` must be a valid handle.
pub(crate) fn derived_handle(t: *const mcore_topology, topology: Topology) -> *mut mcore_topology {
    // SAFETY: the caller checked `t` with `topo`.
    let user = unsafe { &*t.cast::<Handle>() }._user.clone();
    Box::into_raw(Box::new(Handle { topology, _user: user })).cast::<mcore_topology>()
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
        let why = if t.has_kind(kind) {
            ""
        } else {
            " (this layout has no such groups)"
        };
        FfiError::new(
            mcore_status::NotMember,
            format!("rank {rank} is in no {kind} group{why}"),
        )
    })
}

/// -1 = ignore virtual stages; other negative values are errors.
fn vp_stage_from_c(vp_stage: i32) -> Result<Option<u32>, FfiError> {
    match vp_stage {
        -1 => Ok(None),
        v if v < 0 => Err(FfiError::invalid_arg(format!(
            "vp_stage {v}: use -1 to ignore virtual stages"
        ))),
        v => Ok(Some(v as u32)),
    }
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
        if cfg.is_null() {
            return Err(FfiError::invalid_arg("cfg is NULL"));
        }
        // SAFETY: non-NULL, readable per the contract.
        let c = unsafe { read_config(cfg) }?;
        let (config, user) = config_from_c(&c)?;
        match Topology::new(config, world_size) {
            Ok(topology) => {
                *out = Box::into_raw(Box::new(Handle { topology, _user: user })).cast::<mcore_topology>();
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
    let _ = ffi_guard(|| {
        if !t.is_null() {
            // SAFETY: created by Box::into_raw in mcore_topology_create.
            drop(unsafe { Box::from_raw(t.cast::<Handle>()) });
        }
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

/// The kind for a key such as "data_parallel_with_cp" or "hierarchical_context_parallel_1";
/// NOT_FOUND for an unknown key.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_kind_from_name(name: *const c_char, out_kind: *mut i32) -> mcore_status {
    ffi_guard(|| {
        let out = out_ptr(out_kind, "out_kind")?;
        if name.is_null() {
            return Err(FfiError::invalid_arg("name is NULL"));
        }
        // SAFETY: non-NULL NUL-terminated string per the contract.
        let text = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let kind: GroupKind = text.parse()?;
        if let GroupKind::HierarchicalContextParallel(i) = kind {
            if i64::from(HCP_BASE) + i64::from(i) > i64::from(i32::MAX) {
                return Err(FfiError::new(
                    mcore_status::NotFound,
                    format!("hierarchical level {i} is too large"),
                ));
            }
        }
        *out = kind_to_c(kind);
        Ok(())
    })
}

/// Write the key of `kind` (NUL-terminated) into `buf`; `*out_len` = bytes needed including the
/// NUL (also on BUFFER_TOO_SMALL).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_kind_name(
    kind: i32,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        fill_str(&kind_from_c(kind)?.key(), buf, len, out_len, "name")
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

/// The `index`-th kind of this layout (DESIGN.md table order).
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
            FfiError::new(
                mcore_status::OutOfRange,
                format!("kind index {index} out of range: {} kinds", kinds.len()),
            )
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
        let m = member_group(topo(t)?, rank, kind)?;
        *out_ptr(out, "out")? = mcore_group_info {
            index: m.group_index(),
            rank: m.rank,
            size: m.size(),
        };
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
        let m = member_group(topo(t)?, rank, kind)?;
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
        let s = t.sizes();
        *out_ptr(out_gtp, "out_gtp")? = s.gtp;
        *out_ptr(out_egtp, "out_egtp")? = s.egtp;
        *out_ptr(out_total_world_size, "out_total_world_size")? = t.total_world_size();
        *out_ptr(out_local_world_size, "out_local_world_size")? = t.config().local_world_size.unwrap_or(0);
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
