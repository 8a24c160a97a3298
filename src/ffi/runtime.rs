//! `mcore_initialize` / `mcore_destroy`, the per-kind group and communicator queries of the
//! initialized process, and Megatron-Core-style getters (`mcore_get_tensor_model_parallel_rank`).

use super::args::{fill_ranks, opt_str_arg, out_ptr, slice_out};
use super::rng::{mcore_rng_tracker, tracker_handle};
use super::topology::{config_from_c, kind_from_c, mcore_group_info, mcore_topology_config, read_config, UserData};
use super::{ffi_guard, mcore_status, FfiError};
use crate::rng::SeedPolicy;
use crate::runtime::{self, CommConfig, CommStrategy, InitArgs, InitOutcome, LiveGroup, Runtime};
use crate::topology::GroupKind;
use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::time::Duration;

/// `timeout_ms` meaning no limit (any value of `MCORE_TIMEOUT_MAX_MS` or more means the same).
pub const MCORE_TIMEOUT_NONE: u64 = u64::MAX;

/// The longest timeout in ms (2^31 s, about 68 years); longer timeouts are clamped to it: no limit.
pub const MCORE_TIMEOUT_MAX_MS: u64 = 2_147_483_648_000;

/// What `mcore_initialize` brings up. Fill with `mcore_init_args_init`, then set what differs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mcore_init_args {
    /// `sizeof(mcore_init_args)` as compiled by the caller (set by the init function).
    pub struct_size: usize,
    /// The parallel layout; the world size comes from the environment (RANK, WORLD_SIZE, ...).
    pub topology: mcore_topology_config,
    /// Backend: "gloo" (default when NULL), "nccl", a registered name, or a plugin `.so` path.
    pub backend: *const c_char,
    /// Bound of every wait during initialization, in ms; 0 = `$MCORE_INIT_TIMEOUT` seconds, else
    /// 300 s. `MCORE_TIMEOUT_NONE` (and any value of `MCORE_TIMEOUT_MAX_MS` or more) = no limit.
    pub timeout_ms: u64,
    /// Verify every communicator with an all-reduce the layout predicts (default true).
    pub verify: bool,
    /// Seed this rank's RNG streams at init (default false); see `mcore_runtime_rng_tracker`.
    pub seed_rng: bool,
    /// The base seed (Megatron's training seed; must be > 0 for the megatron policy).
    pub seed: i64,
    /// "megatron" (default when NULL), "roll", or `sharded:<group kind>,<group kind>...`.
    pub seed_policy: *const c_char,
    /// Megatron's `data_parallel_random_init`: add 10 x data-parallel rank (megatron policy).
    pub data_parallel_random_init: bool,
    /// How communicators are created: "auto" (default when NULL: split when the backend can,
    /// else per group), "split" (a world communicator, then one split per group kind), or
    /// "per-group" (each group from its own rendezvous through the store).
    pub comm_strategy: *const c_char,
    /// A file of per-group communicator options in Megatron-Core's NCCL communicator config
    /// format (`--nccl-communicator-config-path`): YAML mapping Megatron's group names (`tp`,
    /// `dp_cp`, ...) or group kinds to `cga_cluster_size`, `min_ctas`, `max_ctas`, `net_name`,
    /// `split_share`. NULL = none.
    pub comm_config_path: *const c_char,
    /// The same format as text, e.g. "tp: {max_ctas: 8}\ndp: {net_name: Socket}"; its entries
    /// replace the file's. NULL = none.
    pub comm_config: *const c_char,
    /// Children of a split share the parent's resources (NCCL `splitShare`) unless a kind's
    /// options say otherwise. Default false: aborting one communicator leaves the others intact.
    pub split_share: bool,
    /// The CUDA device of this rank's NCCL communicators; -1 (default) = `LOCAL_RANK` (0 when
    /// unset). Differs between ranks by design, so it is not part of the cross-rank check.
    pub device: i32,
    // Appended for Megatron-Core 0.19 (a caller whose struct_size ends before it gets false).
    /// Megatron-Core's `create_all_gather_groups`: also create the all-gather twins of the dp-cp
    /// and (ep > 1) expert-dp groups as separate communicators with the same members (for
    /// overlapping all-gathers); see `mcore_runtime_all_gather_group_ranks`. Default false.
    pub create_all_gather_groups: bool,
}

impl Default for mcore_init_args {
    fn default() -> Self {
        mcore_init_args {
            struct_size: std::mem::size_of::<Self>(),
            topology: mcore_topology_config::default(),
            backend: std::ptr::null(),
            timeout_ms: 0,
            verify: true,
            seed_rng: false,
            seed: 1234,
            seed_policy: std::ptr::null(),
            data_parallel_random_init: false,
            comm_strategy: std::ptr::null(),
            comm_config_path: std::ptr::null(),
            comm_config: std::ptr::null(),
            split_share: false,
            device: -1,
            create_all_gather_groups: false,
        }
    }
}

/// Fill `args` with defaults (layout all ones, Gloo, default timeout, verification on).
///
/// # Safety
/// `args` is NULL or writable for `sizeof(mcore_init_args)` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcore_init_args_init(args: *mut mcore_init_args) -> mcore_status {
    ffi_guard(|| {
        *out_ptr(args, "args")? = mcore_init_args::default();
        Ok(())
    })
}

/// Copy the caller's struct (of its `struct_size`) over our defaults.
unsafe fn read_args(args: *const mcore_init_args) -> Result<mcore_init_args, FfiError> {
    if args.is_null() {
        return Err(FfiError::invalid_arg("args is NULL"));
    }
    // SAFETY: struct_size is the first field of a struct the caller declares readable.
    let given = unsafe { std::ptr::read_unaligned(args.cast::<usize>()) };
    let ours = std::mem::size_of::<mcore_init_args>();
    let min = std::mem::offset_of!(mcore_init_args, backend);
    if given < min {
        return Err(FfiError::invalid_arg(format!(
            "args struct_size {given} is too small (at least {min}): fill the struct with mcore_init_args_init"
        )));
    }
    let mut out = mcore_init_args::default();
    // SAFETY: copy min(given, ours) bytes from a struct the caller declares to be that large.
    unsafe { std::ptr::copy_nonoverlapping(args.cast::<u8>(), (&mut out as *mut mcore_init_args).cast::<u8>(), given.min(ours)) };
    out.struct_size = ours;
    // A caller compiled before fields were appended to the nested layout struct has a shorter
    // `topology`, so its later fields sit earlier: read them from where the caller put them.
    let topo_given = out.topology.struct_size;
    let topo_ours = std::mem::size_of::<mcore_topology_config>();
    if topo_given >= std::mem::size_of::<usize>() && topo_given < topo_ours {
        let align = std::mem::align_of::<mcore_init_args>();
        let tail_ours = std::mem::offset_of!(mcore_init_args, backend);
        let tail_given = std::mem::offset_of!(mcore_init_args, topology) + topo_given.div_ceil(align) * align;
        let len = given.saturating_sub(tail_given).min(ours - tail_ours);
        let defaults = mcore_init_args::default();
        // SAFETY: both ranges lie inside `out`/`defaults` (tail_ours + len <= ours) and inside the
        // caller's struct (tail_given + len <= given); the structs are plain data.
        unsafe {
            let dst = (&mut out as *mut mcore_init_args).cast::<u8>();
            std::ptr::copy_nonoverlapping(
                (&defaults as *const mcore_init_args).cast::<u8>().add(tail_ours),
                dst.add(tail_ours),
                ours - tail_ours,
            );
            std::ptr::copy_nonoverlapping(args.cast::<u8>().add(tail_given), dst.add(tail_ours), len);
        }
    }
    // The nested layout struct carries its own struct_size: read it the same careful way.
    // SAFETY: `out.topology` is a whole struct of ours now.
    out.topology = unsafe { read_config(&out.topology) }?;
    Ok(out)
}

/// The communicator options of `c`: the file's entries, then the text's, `split_share` as default.
unsafe fn comm_config_from_c(c: &mcore_init_args) -> Result<CommConfig, FfiError> {
    let mut config = CommConfig::default();
    if c.split_share {
        config.default.split_share = Some(true);
    }
    // SAFETY: the fields are NULL or NUL-terminated strings.
    if let Some(path) = unsafe { opt_str_arg(c.comm_config_path, "comm_config_path") }? {
        config.add_yaml_file(std::path::Path::new(path)).map_err(FfiError::invalid_arg)?;
    }
    // SAFETY: as above.
    if let Some(text) = unsafe { opt_str_arg(c.comm_config, "comm_config") }? {
        config.add_yaml(text, "comm_config").map_err(FfiError::invalid_arg)?;
    }
    Ok(config)
}

fn init_timeout(ms: u64) -> Result<Duration, FfiError> {
    if ms > 0 {
        return Ok(crate::timeout::from_millis(ms));
    }
    runtime::timeout_from_env().map_err(Into::into)
}

/// Bring this process up from the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK,
/// MASTER_ADDR, MASTER_PORT as torchrun sets them): validate the layout, rendezvous, check that
/// every rank has the same settings (a mismatch is `MCORE_STATUS_CONFIG_MISMATCH` naming the
/// ranks), create one communicator per group this rank is in, verify them.
/// Called again with the same settings: nothing happens and `*out_already` (may be NULL) is
/// true. With other settings: `MCORE_STATUS_ALREADY_INITIALIZED` naming the differences.
///
/// # Safety
/// `args` points to an `mcore_init_args` filled by `mcore_init_args_init`; `out_already` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_initialize(args: *const mcore_init_args, out_already: *mut bool) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let c = unsafe { read_args(args) }?;
        let (topology, user): (_, Option<Arc<UserData>>) = config_from_c(&c.topology)?;
        // SAFETY (each opt_str_arg): the string fields are NULL or NUL-terminated, per the struct's contract.
        let backend = unsafe { opt_str_arg(c.backend, "backend") }?.unwrap_or("gloo").to_string();
        let seed_policy = match unsafe { opt_str_arg(c.seed_policy, "seed_policy") }? {
            None => SeedPolicy::Megatron,
            Some(p) => p.parse::<SeedPolicy>()?,
        };
        let args = InitArgs {
            topology,
            backend,
            timeout: init_timeout(c.timeout_ms)?,
            verify: c.verify,
            seed: c.seed_rng.then_some(c.seed),
            seed_policy,
            data_parallel_random_init: c.data_parallel_random_init,
            comm_strategy: match unsafe { opt_str_arg(c.comm_strategy, "comm_strategy") }? {
                None => CommStrategy::Auto,
                Some(s) => s.parse().map_err(FfiError::invalid_arg)?,
            },
            comm_config: unsafe { comm_config_from_c(&c) }?,
            device: match c.device {
                -1 => None,
                d => Some(u32::try_from(d).map_err(|_| FfiError::invalid_arg(format!("device {d} is not -1 or a CUDA device ordinal")))?),
            },
            create_all_gather_groups: c.create_all_gather_groups,
        };
        let outcome = runtime::initialize(args)?;
        drop(user); // callbacks hold their own reference for as long as the runtime lives
        if let Some(out) = unsafe { out_already.as_mut() } {
            *out = outcome == InitOutcome::AlreadyUp;
        }
        Ok(())
    })
}

/// Tear down communicators, the store client and (on rank 0) the store server. Succeeds when
/// nothing is initialized. Afterwards `mcore_initialize` works again.
#[no_mangle]
pub extern "C" fn mcore_destroy() -> mcore_status {
    ffi_guard(|| runtime::destroy().map(|_| ()).map_err(Into::into))
}

/// Whether `mcore_initialize` has succeeded and `mcore_destroy` not been called since.
#[no_mangle]
pub extern "C" fn mcore_is_initialized() -> bool {
    runtime::is_initialized()
}

fn with_rt<R>(f: impl FnOnce(&Runtime) -> Result<R, FfiError>) -> Result<R, FfiError> {
    runtime::with_runtime(f)?
}

fn live_group(rt: &Runtime, kind: i32) -> Result<&LiveGroup, FfiError> {
    let kind = kind_from_c(kind)?;
    rt.group(kind).ok_or_else(|| {
        FfiError::new(
            mcore_status::NotMember,
            format!("rank {} is not a member of any {} group in this layout", rt.env.rank, kind.key()),
        )
    })
}

/// A new handle on this rank's RNG streams, seeded at init (`seed_rng`): use every
/// `mcore_rng_tracker_*` call on it (fork the `model-parallel-rng` stream, save, restore) and
/// release it with `mcore_rng_tracker_destroy`; it stays valid after `mcore_destroy`.
/// `MCORE_STATUS_NOT_INITIALIZED` when the runtime was initialized without `seed_rng`.
///
/// # Safety
/// `out_tracker` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_rng_tracker(out_tracker: *mut *mut mcore_rng_tracker) -> mcore_status {
    ffi_guard(|| {
        let out = out_ptr(out_tracker, "out_tracker")?;
        let rng = with_rt(|rt| {
            rt.rng.clone().ok_or_else(|| {
                FfiError::new(mcore_status::NotInitialized, "the runtime was initialized without seed_rng: no RNG streams")
            })
        })?;
        *out = tracker_handle(rng);
        Ok(())
    })
}

/// This process's global rank and the world size.
///
/// # Safety
/// The out-pointers are writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_world(out_rank: *mut u32, out_world_size: *mut u32) -> mcore_status {
    ffi_guard(|| {
        let (r, w) = with_rt(|rt| Ok((rt.env.rank, rt.env.world_size)))?;
        let (or, ow) = (out_ptr(out_rank, "out_rank")?, out_ptr(out_world_size, "out_world_size")?);
        *or = r;
        *ow = w;
        Ok(())
    })
}

/// This rank's group of `kind` (an `mcore_group_kind` value): index, group rank, size.
/// `MCORE_STATUS_NOT_MEMBER` when the rank is in no group of that kind (e.g. embedding).
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_group(kind: i32, out: *mut mcore_group_info) -> mcore_status {
    ffi_guard(|| {
        let info = with_rt(|rt| {
            let g = live_group(rt, kind)?;
            Ok(mcore_group_info { index: g.plan.index as u64, rank: g.group_rank, size: g.plan.members.len() as u32 })
        })?;
        *out_ptr(out, "out")? = info;
        Ok(())
    })
}

/// The global ranks of this rank's group of `kind`, ascending, into `buf` (`len` entries);
/// `*out_len` = the group size (also when the buffer is too small: BUFFER_TOO_SMALL).
///
/// # Safety
/// `buf` is NULL (with `len` 0) or writable for `len` entries; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_group_ranks(kind: i32, buf: *mut u32, len: usize, out_len: *mut usize) -> mcore_status {
    ffi_guard(|| with_rt(|rt| fill_ranks(live_group(rt, kind)?.plan.members.iter().copied(), buf, len, out_len)))
}

/// This rank's all-gather twin of `kind` (`DATA_PARALLEL_WITH_CP`, or `EXPERT_DATA_PARALLEL` with
/// ep > 1), when initialized with `create_all_gather_groups`: NOT_MEMBER otherwise.
fn all_gather_group(rt: &Runtime, kind: i32) -> Result<&LiveGroup, FfiError> {
    let kind = kind_from_c(kind)?;
    rt.all_gather_group(kind).ok_or_else(|| {
        FfiError::new(
            mcore_status::NotMember,
            format!(
                "rank {} has no all-gather twin of {}: twins exist for data_parallel_with_cp (and expert_data_parallel \
                 when ep > 1) after initializing with create_all_gather_groups",
                rt.env.rank,
                kind.key()
            ),
        )
    })
}

/// The global ranks of this rank's all-gather twin of `kind` (the members of its group of `kind`),
/// as `mcore_runtime_group_ranks` does for the group itself.
///
/// # Safety
/// `buf` is NULL (with `len` 0) or writable for `len` entries; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_all_gather_group_ranks(
    kind: i32,
    buf: *mut u32,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| with_rt(|rt| fill_ranks(all_gather_group(rt, kind)?.plan.members.iter().copied(), buf, len, out_len)))
}

/// The backend's communicator handle of this rank's all-gather twin of `kind` (a communicator
/// separate from the group's own). Owned by the library until `mcore_destroy`.
///
/// # Safety
/// `out_comm` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_all_gather_communicator(kind: i32, out_comm: *mut *mut c_void) -> mcore_status {
    ffi_guard(|| write_handle(out_comm, |rt| all_gather_group(rt, kind)))
}

/// The backend's own communicator handle of this rank's group of `kind` (an `ncclComm_t` for
/// NCCL, the plugin's handle otherwise). Owned by the library until `mcore_destroy`.
///
/// # Safety
/// `out_comm` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_communicator(kind: i32, out_comm: *mut *mut c_void) -> mcore_status {
    ffi_guard(|| write_handle(out_comm, |rt| live_group(rt, kind)))
}

/// Write the backend handle of the group `find` picks into `*out_comm`.
fn write_handle(
    out_comm: *mut *mut c_void,
    find: impl FnOnce(&Runtime) -> Result<&LiveGroup, FfiError>,
) -> Result<(), FfiError> {
    let handle = with_rt(|rt| {
        let comm = find(rt)?.comm.lock().map_err(|_| FfiError::new(mcore_status::Backend, "communicator lock poisoned"))?;
        Ok(comm.raw_handle())
    })?;
    *out_ptr(out_comm, "out_comm")? = handle;
    Ok(())
}

/// Sum `count` int64 values element-wise over this rank's group of `kind`, in place.
///
/// # Safety
/// `values` is writable for `count` entries.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_allreduce_sum_i64(kind: i32, values: *mut i64, count: usize) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: per the contract above.
        let values = unsafe { slice_out(values, count, "values") }?;
        with_rt(|rt| {
            let g = live_group(rt, kind)?;
            let mut comm = g.comm.lock().map_err(|_| FfiError::new(mcore_status::Backend, "communicator lock poisoned"))?;
            comm.allreduce_sum_i64(values)
                .map_err(|e| FfiError::new(mcore_status::Backend, format!("all-reduce over {}: {e}", g.comm_name)))
        })
    })
}

/// Wait until every member of this rank's group of `kind` arrives.
#[no_mangle]
pub extern "C" fn mcore_runtime_barrier(kind: i32) -> mcore_status {
    ffi_guard(|| {
        with_rt(|rt| {
            let g = live_group(rt, kind)?;
            let mut comm = g.comm.lock().map_err(|_| FfiError::new(mcore_status::Backend, "communicator lock poisoned"))?;
            comm.barrier().map_err(|e| FfiError::new(mcore_status::Backend, format!("barrier over {}: {e}", g.comm_name)))
        })
    })
}

/// Run a getter: its value, or -1 with the last error set (not initialized, not a member).
fn getter(f: impl FnOnce(&Runtime) -> Result<i64, FfiError>) -> i32 {
    let mut value = -1i32;
    let status = ffi_guard(|| {
        value = with_rt(f)? as i32;
        Ok(())
    });
    if status == mcore_status::Ok {
        value
    } else {
        -1
    }
}

fn member(rt: &Runtime, kind: GroupKind) -> Result<&LiveGroup, FfiError> {
    rt.group(kind).ok_or_else(|| {
        FfiError::new(mcore_status::NotMember, format!("rank {} is not a member of any {} group", rt.env.rank, kind.key()))
    })
}

/// Which number of a rank's group a getter returns.
enum GroupField {
    Rank,
    Size,
    First,
}

/// One Megatron-style getter: the field of this rank's group of `kind`, or -1 (last error set).
fn group_getter(kind: GroupKind, field: GroupField) -> i32 {
    getter(|rt| {
        let g = member(rt, kind)?;
        Ok(match field {
            GroupField::Rank => g.group_rank as i64,
            GroupField::Size => g.plan.members.len() as i64,
            GroupField::First => g.plan.members[0] as i64,
        })
    })
}

// Written out one by one (not by a macro) so that cbindgen puts every getter in the header.
/// This rank's index in its `tensor_model_parallel` group (Megatron's `get_tensor_model_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_tensor_model_parallel_rank() -> i32 {
    group_getter(GroupKind::TensorModelParallel, GroupField::Rank)
}

/// Size of this rank's `tensor_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_tensor_model_parallel_world_size() -> i32 {
    group_getter(GroupKind::TensorModelParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `tensor_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_tensor_model_parallel_src_rank() -> i32 {
    group_getter(GroupKind::TensorModelParallel, GroupField::First)
}

/// This rank's index in its `pipeline_model_parallel` group (Megatron's `get_pipeline_model_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_rank() -> i32 {
    group_getter(GroupKind::PipelineModelParallel, GroupField::Rank)
}

/// Size of this rank's `pipeline_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_world_size() -> i32 {
    group_getter(GroupKind::PipelineModelParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `pipeline_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_first_rank() -> i32 {
    group_getter(GroupKind::PipelineModelParallel, GroupField::First)
}

/// This rank's index in its `data_parallel` group (Megatron's `get_data_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_rank() -> i32 {
    group_getter(GroupKind::DataParallel, GroupField::Rank)
}

/// Size of this rank's `data_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_world_size() -> i32 {
    group_getter(GroupKind::DataParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `data_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_src_rank() -> i32 {
    group_getter(GroupKind::DataParallel, GroupField::First)
}

/// This rank's index in its `data_parallel_with_cp` group (Megatron's `get_data_parallel_rank_with_cp`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_rank_with_cp() -> i32 {
    group_getter(GroupKind::DataParallelWithCp, GroupField::Rank)
}

/// Size of this rank's `data_parallel_with_cp` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_world_size_with_cp() -> i32 {
    group_getter(GroupKind::DataParallelWithCp, GroupField::Size)
}

/// Global rank of the first member of this rank's `data_parallel_with_cp` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_src_rank_with_cp() -> i32 {
    group_getter(GroupKind::DataParallelWithCp, GroupField::First)
}

/// This rank's index in its `context_parallel` group (Megatron's `get_context_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_context_parallel_rank() -> i32 {
    group_getter(GroupKind::ContextParallel, GroupField::Rank)
}

/// Size of this rank's `context_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_context_parallel_world_size() -> i32 {
    group_getter(GroupKind::ContextParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `context_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_context_parallel_src_rank() -> i32 {
    group_getter(GroupKind::ContextParallel, GroupField::First)
}

/// This rank's index in its `model_parallel` group (Megatron's `get_model_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_model_parallel_rank() -> i32 {
    group_getter(GroupKind::ModelParallel, GroupField::Rank)
}

/// Size of this rank's `model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_model_parallel_world_size() -> i32 {
    group_getter(GroupKind::ModelParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_model_parallel_src_rank() -> i32 {
    group_getter(GroupKind::ModelParallel, GroupField::First)
}

/// This rank's index in its `expert_model_parallel` group (Megatron's `get_expert_model_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_expert_model_parallel_rank() -> i32 {
    group_getter(GroupKind::ExpertModelParallel, GroupField::Rank)
}

/// Size of this rank's `expert_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_model_parallel_world_size() -> i32 {
    group_getter(GroupKind::ExpertModelParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `expert_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_model_parallel_src_rank() -> i32 {
    group_getter(GroupKind::ExpertModelParallel, GroupField::First)
}

/// This rank's index in its `expert_tensor_parallel` group (Megatron's `get_expert_tensor_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_expert_tensor_parallel_rank() -> i32 {
    group_getter(GroupKind::ExpertTensorParallel, GroupField::Rank)
}

/// Size of this rank's `expert_tensor_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_tensor_parallel_world_size() -> i32 {
    group_getter(GroupKind::ExpertTensorParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `expert_tensor_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_tensor_parallel_src_rank() -> i32 {
    group_getter(GroupKind::ExpertTensorParallel, GroupField::First)
}

/// This rank's index in its `expert_data_parallel` group (Megatron's `get_expert_data_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_expert_data_parallel_rank() -> i32 {
    group_getter(GroupKind::ExpertDataParallel, GroupField::Rank)
}

/// Size of this rank's `expert_data_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_data_parallel_world_size() -> i32 {
    group_getter(GroupKind::ExpertDataParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `expert_data_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_data_parallel_src_rank() -> i32 {
    group_getter(GroupKind::ExpertDataParallel, GroupField::First)
}

/// Global rank of the last pipeline stage of this rank's pipeline; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_last_rank() -> i32 {
    getter(|rt| Ok(rt.view.pipeline.last as i64))
}

/// Global rank of the next pipeline stage (wraps around); -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_next_rank() -> i32 {
    getter(|rt| Ok(rt.view.pipeline.next as i64))
}

/// Global rank of the previous pipeline stage (wraps around); -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_prev_rank() -> i32 {
    getter(|rt| Ok(rt.view.pipeline.prev as i64))
}

/// Virtual pipeline size (0 without an interleaved schedule); -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_virtual_pipeline_model_parallel_world_size() -> i32 {
    getter(|rt| Ok(rt.topology.sizes().vpp.unwrap_or(0) as i64))
}

/// Stage tests of this rank: `vp_stage` -1 ignores virtual stages (Megatron's
/// `ignore_virtual=True`); otherwise the virtual stage to test. 1 = yes, 0 = no, -1 = error.
fn stage_test(f: impl FnOnce(&Runtime, Option<u32>) -> Result<bool, crate::topology::TopologyError>, vp_stage: i32) -> i32 {
    getter(|rt| {
        let vp = match vp_stage {
            -1 => None,
            v if v >= 0 => Some(v as u32),
            v => return Err(FfiError::invalid_arg(format!("vp_stage {v} must be -1 (ignore) or >= 0"))),
        };
        Ok(f(rt, vp)? as i64)
    })
}

/// Whether this rank is on the first pipeline stage (and on virtual stage 0 when `vp_stage` is
/// given): 1, 0, or -1 on error.
#[no_mangle]
pub extern "C" fn mcore_is_pipeline_first_stage(vp_stage: i32) -> i32 {
    stage_test(|rt, vp| rt.topology.is_pipeline_first_stage(rt.env.rank, vp), vp_stage)
}

/// Whether this rank is on the last pipeline stage (and on the last virtual stage when
/// `vp_stage` is given): 1, 0, or -1 on error.
#[no_mangle]
pub extern "C" fn mcore_is_pipeline_last_stage(vp_stage: i32) -> i32 {
    stage_test(|rt, vp| rt.topology.is_pipeline_last_stage(rt.env.rank, vp), vp_stage)
}

/// Whether this rank is in the embedding group (Megatron's `is_rank_in_embedding_group`): 1, 0, or -1.
#[no_mangle]
pub extern "C" fn mcore_is_rank_in_embedding_group(vp_stage: i32) -> i32 {
    stage_test(|rt, vp| rt.topology.is_rank_in_embedding_group(rt.env.rank, vp), vp_stage)
}

#[cfg(test)]
mod old_layout_tests {
    use super::*;

    /// A caller compiled before the 0.19 fields were appended to `mcore_topology_config` has its
    /// later `mcore_init_args` fields earlier; they are read from where it put them.
    #[test]
    fn args_from_a_caller_with_the_shorter_layout_struct() {
        let mut new = mcore_init_args::default();
        new.timeout_ms = 1234;
        new.verify = false;
        new.device = 3;
        new.topology.tp = 2;
        let ours = std::mem::size_of::<mcore_init_args>();
        let topo_off = std::mem::offset_of!(mcore_init_args, topology);
        let tail = std::mem::offset_of!(mcore_init_args, backend);
        let topo_old = std::mem::offset_of!(mcore_topology_config, gtp).div_ceil(8) * 8;
        let given = topo_off + topo_old + (ours - tail);
        let mut buf = vec![0u64; ours.div_ceil(8) + 2];
        // SAFETY: plain-data copies within both buffers.
        let got = unsafe {
            let src = (&new as *const mcore_init_args).cast::<u8>();
            let dst = buf.as_mut_ptr().cast::<u8>();
            std::ptr::copy_nonoverlapping(src, dst, topo_off + topo_old);
            std::ptr::copy_nonoverlapping(src.add(tail), dst.add(topo_off + topo_old), ours - tail);
            dst.cast::<usize>().write(given);
            dst.add(topo_off).cast::<usize>().write(topo_old);
            read_args(buf.as_ptr().cast::<mcore_init_args>()).unwrap()
        };
        assert_eq!((got.timeout_ms, got.verify, got.device, got.topology.tp), (1234, false, 3, 2));
        assert_eq!((got.topology.gtp, got.topology.egtp, got.topology.local_world_size), (1, 1, 0));
    }
}
