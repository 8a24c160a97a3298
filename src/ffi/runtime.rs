//! `mcore_initialize` / `mcore_destroy`, the per-kind group and communicator queries of the
//! initialized process, and Megatron-Core-style getters (`mcore_get_tensor_model_parallel_rank`).

use super::args::{fill_ranks, opt_str_arg, out_ptr, slice_out};
use super::grid_args::{mcore_grid_spec, read_grids};
use super::rng::{mcore_rng_tracker, tracker_handle};
use super::topology::config::{config_from_c, mcore_topology_config, read_config, UserData};
use super::topology::{kind_from_c, mcore_group_info};
use super::{ffi_guard, mcore_status, FfiError};
use crate::abi::read_sized;
use crate::rng::RankRng;
use crate::rng::SeedPolicy;
use crate::runtime::{self, CommConfig, CommStrategy, Grid, InitArgs, InitOutcome, LiveGroup, Runtime};
use crate::topology::{MindSpeedKind, MindSpeedOptions};
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `timeout_ms` meaning no limit (any value of `MCORE_TIMEOUT_MAX_MS` or more means the same).
pub const MCORE_TIMEOUT_NONE: u64 = u64::MAX;

/// The longest timeout in ms (2^31 s, about 68 years); longer timeouts are clamped to it: no limit.
pub const MCORE_TIMEOUT_MAX_MS: u64 = 2_147_483_648_000;
const _: () = assert!(MCORE_TIMEOUT_MAX_MS == crate::timeout::NO_LIMIT_MS, "the C constant is the runtime's limit");

/// What `mcore_initialize` brings up. Fill with `mcore_init_args_init`, then set what differs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mcore_init_args {
    /// `sizeof(mcore_init_args)` as compiled by the caller (set by the init function).
    pub struct_size: u32,
    /// The parallel layout (a config filled by `mcore_topology_config_init`), read during the
    /// call; NULL = every size 1. A pointer, not a nested struct, so that fields appended to the
    /// layout config never move a field of this struct. The world size comes from the
    /// environment (RANK, WORLD_SIZE, ...).
    pub topology: *const mcore_topology_config,
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
    /// `split_share`, any other `ncclConfig_t` field by its snake_case name (`traffic_class`,
    /// `comm_name`, ...) and `strict` (docs/backends.md, NCCL config fields). NULL = none.
    pub comm_config_path: *const c_char,
    /// The same format as text, e.g. "tp: {max_ctas: 8}\ndp: {net_name: Socket}"; its entries
    /// replace the file's. NULL = none.
    pub comm_config: *const c_char,
    /// Children of a split share the parent's resources (NCCL `splitShare`) unless a kind's
    /// options say otherwise. Default false: aborting one communicator leaves the others intact.
    pub split_share: bool,
    /// The device of this rank's communicators: the CUDA device for NCCL, the NPU for HCCL (a
    /// plugin that sets `MCORE_BACKEND_FLAG_TAKES_DEVICE`; refused for other backends); -1
    /// (default) = the backend's choice (`LOCAL_RANK`, 0 when unset). Differs between ranks by
    /// design, so it is not part of the cross-rank check.
    pub device: i32,
    /// Megatron-Core's `create_all_gather_groups`: also create the all-gather twins of the dp-cp
    /// and (ep > 1) expert-dp groups as separate communicators with the same members (for
    /// overlapping all-gathers); see `mcore_runtime_all_gather_group_ranks`. Default false.
    pub create_all_gather_groups: bool,
    /// Spare ranks (default 0): the last `spares` ranks of the world are outside the layout.
    /// `mcore_initialize` checks them in and returns OK with `mcore_is_spare()` true; they stand
    /// by in `mcore_reinitialize` until a recovery gives them a failed rank's place, or the job
    /// ends (docs/recovery.md).
    pub spares: u32,
    /// The name of the job's first grid, the default one that every `mcore_runtime_*` and
    /// Megatron-style getter answers (NULL = "default"). Appended in 0.2.
    pub grid_name: *const c_char,
    /// The job's further grids (`grids_len` pointers to `mcore_grid_spec`, read during the call;
    /// NULL with 0 = none): other layouts over the same world, colocated or on windows of it,
    /// each with its own groups (`mcore_grid_*` queries). With `topology` NULL, `grids[0]` is the
    /// first grid (its name and seed). Every rank must be in at least one grid. Appended in 0.2.
    pub grids: *const *const mcore_grid_spec,
    pub grids_len: usize,
    /// Megatron-Core 0.20's rule for several grids: any two grids cover the same ranks or none
    /// in common, and together the world; other grids are `MCORE_STATUS_INVALID_ARGUMENT`
    /// naming the offending pair (default false). Appended in 0.2.
    pub grids_disjoint_or_identical: bool,
    /// MindSpeed's options as `KEY=VALUE,...` with its argument names (e.g.
    /// "context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=2,use_cp_send_recv_overlap"; a
    /// key alone means true, "default" MindSpeed's defaults): also create MindSpeed's groups on
    /// the layout, after Megatron's (docs/topology.md); see `mcore_runtime_mindspeed_group_ranks`.
    /// NULL (default) = none. Appended in 0.2.
    pub mindspeed: *const c_char,
}

impl Default for mcore_init_args {
    fn default() -> Self {
        mcore_init_args {
            struct_size: std::mem::size_of::<Self>() as u32,
            topology: std::ptr::null(),
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
            spares: 0,
            grid_name: std::ptr::null(),
            grids: std::ptr::null(),
            grids_len: 0,
            grids_disjoint_or_identical: false,
            mindspeed: std::ptr::null(),
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

/// The `struct_size` of every released layout of `mcore_init_args` (see `crate::abi::sized`;
/// ABI 2 restarted the list).
const ARGS_RELEASES: &[u32] = &[
    std::mem::offset_of!(mcore_init_args, grid_name) as u32,
    std::mem::offset_of!(mcore_init_args, grids_disjoint_or_identical) as u32,
    std::mem::offset_of!(mcore_init_args, mindspeed) as u32,
    std::mem::size_of::<mcore_init_args>() as u32,
];

/// The caller's args and their layout config, each read under the one `struct_size` rule.
///
/// # Safety
/// `args` is NULL or readable for its `struct_size` bytes; its `topology` is NULL or likewise.
unsafe fn read_args(args: *const mcore_init_args) -> Result<(mcore_init_args, mcore_topology_config), FfiError> {
    if args.is_null() {
        return Err(FfiError::invalid_arg("args is NULL"));
    }
    // SAFETY: non-NULL, readable per the contract.
    let out = unsafe { read_sized(args, "mcore_init_args", ARGS_RELEASES, mcore_init_args::default()) }?;
    let topology = if out.topology.is_null() {
        mcore_topology_config::default()
    } else {
        // SAFETY: non-NULL, readable per the contract.
        unsafe { read_config(out.topology, "args->topology") }?
    };
    Ok((out, topology))
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

pub(super) fn init_timeout(ms: u64) -> Result<Duration, FfiError> {
    if ms > 0 {
        return Ok(crate::timeout::from_millis(ms));
    }
    runtime::timeout_from_env().map_err(Into::into)
}

/// Bring this process up from the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK,
/// MASTER_ADDR, MASTER_PORT as torchrun sets them): validate the layout, rendezvous, check that
/// every rank has the same settings (a mismatch is `MCORE_STATUS_CONFIG_MISMATCH` naming the
/// ranks), create one communicator per group this rank is in, verify them. A world of more than
/// 131,072 ranks is `MCORE_STATUS_INVALID_ARGUMENT` naming the value (docs/multihost.md).
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
        let (c, layout) = unsafe { read_args(args) }?;
        let (topology, user): (_, Option<Arc<UserData>>) = config_from_c(&layout)?;
        let mut users: Vec<Arc<UserData>> = user.into_iter().collect();
        // SAFETY: the grid fields are as their docs say, per the struct's contract.
        let grids = unsafe { read_grids(c.grid_name, c.grids, c.grids_len, !c.topology.is_null(), &mut users) }?;
        let mut seed = c.seed_rng.then_some(c.seed);
        let topology = match grids.first {
            None => topology,
            Some((name, _, Some(_))) if seed.is_some() => {
                return Err(FfiError::invalid_arg(format!(
                    "the first grid '{name}' (grids[0], topology NULL) has seed_rng set, and so do the args: set one"
                )))
            }
            Some((_, first, first_seed)) => {
                seed = seed.or(first_seed);
                first
            }
        };
        // SAFETY (each opt_str_arg): the string fields are NULL or NUL-terminated, per the struct's contract.
        let backend = unsafe { opt_str_arg(c.backend, "backend") }?.unwrap_or("gloo").to_string();
        let seed_policy = match unsafe { opt_str_arg(c.seed_policy, "seed_policy") }? {
            None => SeedPolicy::Megatron,
            Some(p) => p.parse::<SeedPolicy>()?,
        };
        let args = InitArgs {
            topology,
            grid_name: grids.grid_name,
            grids: grids.more,
            backend,
            timeout: init_timeout(c.timeout_ms)?,
            verify: c.verify,
            seed,
            seed_policy,
            data_parallel_random_init: c.data_parallel_random_init,
            comm_strategy: match unsafe { opt_str_arg(c.comm_strategy, "comm_strategy") }? {
                None => CommStrategy::Auto,
                Some(s) => s.parse().map_err(FfiError::invalid_arg)?,
            },
            comm_config: unsafe { comm_config_from_c(&c) }?,
            device: match c.device {
                -1 => None,
                d => Some(
                    u32::try_from(d)
                        .map_err(|_| FfiError::invalid_arg(format!("device {d} is not -1 or a device ordinal")))?,
                ),
            },
            create_all_gather_groups: c.create_all_gather_groups,
            spares: c.spares,
            grids_disjoint_or_identical: c.grids_disjoint_or_identical,
            mindspeed: match unsafe { opt_str_arg(c.mindspeed, "mindspeed") }? {
                None => None,
                Some(text) => {
                    Some(MindSpeedOptions::parse(text).map_err(|e| FfiError::invalid_arg(format!("mindspeed: {e}")))?)
                }
            },
        };
        let outcome = runtime::initialize(args)?;
        drop(users); // callbacks hold their own reference for as long as the runtime lives
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

/// Whether `mcore_initialize` has brought a runtime up (not a spare's) and `mcore_destroy` not
/// been called since.
#[no_mangle]
pub extern "C" fn mcore_is_initialized() -> bool {
    runtime::is_initialized()
}

/// Whether this rank is a spare standing by (`mcore_init_args.spares`): `mcore_initialize`
/// returned OK without bringing a runtime up; call `mcore_reinitialize` to stand by.
#[no_mangle]
pub extern "C" fn mcore_is_spare() -> bool {
    runtime::is_spare()
}

pub(crate) fn with_rt<R>(f: impl FnOnce(&Runtime) -> Result<R, FfiError>) -> Result<R, FfiError> {
    runtime::with_runtime(f)?
}

/// The grid `name` names (NULL: the default grid, the job's first).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
pub(super) unsafe fn grid_of(rt: &Runtime, name: *const c_char) -> Result<&Grid, FfiError> {
    // SAFETY: per the contract.
    Ok(rt.grid_named(unsafe { opt_str_arg(name, "grid") }?)?)
}

/// This rank's group of `kind` in `grid`, or NOT_MEMBER naming the grid when it has several.
pub(super) fn group_in<'r>(rt: &'r Runtime, grid: &Grid, kind: i32) -> Result<&'r LiveGroup, FfiError> {
    let kind = kind_from_c(kind)?;
    rt.grid_group(grid, kind).ok_or_else(|| {
        let which = if rt.grids.len() > 1 { format!("grid '{}'", grid.name) } else { "this layout".into() };
        FfiError::new(
            mcore_status::NotMember,
            format!("rank {} is not a member of any {} group in {which}", rt.env.rank, kind.key()),
        )
    })
}

pub(super) fn live_group(rt: &Runtime, kind: i32) -> Result<&LiveGroup, FfiError> {
    group_in(rt, &rt.grids[0], kind)
}

/// A new RNG tracker handle on `rng`, the streams of `what`.
pub(super) fn rng_handle(rng: Option<&Arc<Mutex<RankRng>>>, what: &str) -> Result<*mut mcore_rng_tracker, FfiError> {
    let rng = rng.cloned().ok_or_else(|| {
        FfiError::new(mcore_status::NotInitialized, format!("{what} was initialized without seed_rng: no RNG streams"))
    })?;
    Ok(tracker_handle(rng))
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
        *out = with_rt(|rt| rng_handle(rt.rng(), "the runtime"))?;
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
pub unsafe extern "C" fn mcore_runtime_group_ranks(
    kind: i32,
    buf: *mut u32,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
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
/// separate from the group's own). Owned by the library; valid while `mcore_comm_generation`
/// reads as it did when the handle was fetched.
///
/// # Safety
/// `out_comm` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_all_gather_communicator(kind: i32, out_comm: *mut *mut c_void) -> mcore_status {
    ffi_guard(|| write_handle(out_comm, |rt| all_gather_group(rt, kind)))
}

/// This rank's MindSpeed group of `kind` (MindSpeed's name: "cp2", "cp_ring", "nd1_dim1",
/// "tp-y-cp", "exp", ...) and `copy` (0; the hot-expert groups "exp" have several): NOT_MEMBER
/// when the runtime has none.
unsafe fn mindspeed_group(rt: &Runtime, kind: *const c_char, copy: u32) -> Result<&LiveGroup, FfiError> {
    // SAFETY: NULL or NUL-terminated, per the callers' contract.
    let name = unsafe { opt_str_arg(kind, "kind") }?.ok_or_else(|| FfiError::invalid_arg("kind is NULL"))?;
    let kind = MindSpeedKind::from_name(name)?;
    rt.mindspeed_group(kind, copy).ok_or_else(|| {
        FfiError::new(
            mcore_status::NotMember,
            format!(
                "rank {} has no MindSpeed group {kind} (copy {copy}): initialize with mindspeed options that create it",
                rt.env.rank
            ),
        )
    })
}

/// The global ranks (ascending: communicator order) of this rank's MindSpeed group of `kind`
/// and `copy`, as `mcore_runtime_group_ranks` does for Megatron's kinds.
///
/// # Safety
/// `kind` is NULL or NUL-terminated; `buf` is NULL (with `len` 0) or writable for `len`
/// entries; `out_len` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_mindspeed_group_ranks(
    kind: *const c_char,
    copy: u32,
    buf: *mut u32,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    // SAFETY: per the contract.
    ffi_guard(|| {
        with_rt(|rt| {
            fill_ranks(unsafe { mindspeed_group(rt, kind, copy) }?.plan.members.iter().copied(), buf, len, out_len)
        })
    })
}

/// The backend's communicator handle of this rank's MindSpeed group of `kind` and `copy` (a
/// communicator of its own, never shared with another group). Owned by the library until
/// `mcore_destroy`.
///
/// # Safety
/// `kind` is NULL or NUL-terminated; `out_comm` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_mindspeed_communicator(
    kind: *const c_char,
    copy: u32,
    out_comm: *mut *mut c_void,
) -> mcore_status {
    // SAFETY: per the contract.
    ffi_guard(|| write_handle(out_comm, |rt| unsafe { mindspeed_group(rt, kind, copy) }))
}

/// The backend's own communicator handle of this rank's group of `kind` (an `ncclComm_t` for
/// NCCL, the plugin's handle otherwise). Owned by the library; valid while
/// `mcore_comm_generation` reads as it did when the handle was fetched.
///
/// # Safety
/// `out_comm` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_runtime_communicator(kind: i32, out_comm: *mut *mut c_void) -> mcore_status {
    ffi_guard(|| write_handle(out_comm, |rt| live_group(rt, kind)))
}

/// The communicator generation: a number that changes exactly when communicator handles the
/// library gave out may have been released. Read it when you fetch handles
/// (`mcore_runtime_communicator`, `mcore_runtime_all_gather_communicator`,
/// `mcore_grid_communicator`, `mcore_grid_pg_collection`, `mcore_group_communicator`); while it
/// reads the same, every one of them is valid. When it differs, fetch them again before use:
/// the old ones may point at freed memory. It changes when `mcore_suspend` releases a
/// communicator (recreate mode: a backend without native suspend, e.g. Gloo or HCCL; the resume
/// creates a new one), and when `mcore_destroy` or `mcore_reinitialize` takes the runtime down
/// (a recovery may keep some communicators, but every handle is to be fetched again). A native
/// suspend (NCCL 2.29.7+, a plugin's `suspend` slot) keeps the handles and the number. A suspend
/// never touches groups made after init: their handle is valid until `mcore_group_destroy` and
/// while the number reads the same. Works without a runtime.
///
/// # Safety
/// `out_generation` is writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_comm_generation(out_generation: *mut u64) -> mcore_status {
    ffi_guard(|| {
        *out_ptr(out_generation, "out_generation")? = runtime::comm_generation();
        Ok(())
    })
}

/// Write the backend handle of the group `find` picks into `*out_comm`.
pub(super) fn write_handle(
    out_comm: *mut *mut c_void,
    find: impl FnOnce(&Runtime) -> Result<&LiveGroup, FfiError>,
) -> Result<(), FfiError> {
    let handle = with_rt(|rt| {
        let g = find(rt)?;
        let comm = crate::runtime::groups::lock_comm(&g.comm)?;
        comm.check_usable().map_err(|e| FfiError::from(e.context(format!("communicator {}", g.comm_name))))?;
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
        with_rt(|rt| allreduce(rt, live_group(rt, kind)?, values))
    })
}

/// Sum `values` over `g`'s communicator, in place; a failure names the group and the ranks that
/// stopped answering.
pub(super) fn allreduce(rt: &Runtime, g: &LiveGroup, values: &mut [i64]) -> Result<(), FfiError> {
    let mut comm = crate::runtime::groups::lock_comm(&g.comm)?;
    comm.allreduce_sum_i64(values)
        .map_err(|e| rt.explain_collective(e).context(format!("all-reduce over {}", g.comm_name)).into())
}

/// Wait until every member of this rank's group of `kind` arrives.
#[no_mangle]
pub extern "C" fn mcore_runtime_barrier(kind: i32) -> mcore_status {
    ffi_guard(|| {
        with_rt(|rt| {
            let g = live_group(rt, kind)?;
            let mut comm = crate::runtime::groups::lock_comm(&g.comm)?;
            comm.barrier().map_err(|e| rt.explain_collective(e).context(format!("barrier over {}", g.comm_name)).into())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout config is behind a pointer: its size never moves a field of the args, and an
    /// args struct of another size is refused by name.
    #[test]
    fn args_and_their_layout_are_read_separately() {
        let layout = mcore_topology_config { tp: 2, ..Default::default() };
        let mut args = mcore_init_args { topology: &layout, timeout_ms: 1234, device: 3, ..Default::default() };
        // SAFETY: both structs are ours and whole.
        let (got, topo) = unsafe { read_args(&args) }.unwrap();
        assert_eq!((got.timeout_ms, got.device, topo.tp, topo.gtp), (1234, 3, 2, 1));
        args.topology = std::ptr::null();
        // SAFETY: as above.
        let (_, topo) = unsafe { read_args(&args) }.unwrap();
        assert_eq!(topo.tp, 1, "NULL layout = every size 1");
        // The previous release (before grids_disjoint_or_identical) is read, the flag off.
        args.struct_size = std::mem::offset_of!(mcore_init_args, grids_disjoint_or_identical) as u32;
        args.grids_disjoint_or_identical = true;
        // SAFETY: as above (a smaller declared size).
        assert!(!unsafe { read_args(&args) }.unwrap().0.grids_disjoint_or_identical);
        args.struct_size -= 4; // no released layout
                               // SAFETY: as above (a smaller declared size).
        let e = unsafe { read_args(&args) }.unwrap_err();
        assert_eq!(e.status, mcore_status::InvalidArgument);
        assert!(e.message.contains("mcore_init_args struct_size"), "{}", e.message);
    }

    /// A comm_config_path that would block on read (a FIFO nobody writes) is refused at once:
    /// init used to wait on it forever, the timeout never applied. Run in a thread with a bounded
    /// wait so that the test fails instead of hanging.
    #[test]
    fn a_fifo_comm_config_path_fails_fast_instead_of_hanging() {
        let dir = std::env::temp_dir().join(format!("mcore-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("nccl.yaml");
        let _ = std::fs::remove_file(&fifo);
        let c_fifo = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0, "mkfifo");
        let (tx, rx) = std::sync::mpsc::channel();
        let path = c_fifo.clone();
        std::thread::spawn(move || {
            let args = mcore_init_args { comm_config_path: path.as_ptr(), timeout_ms: 2000, ..Default::default() };
            // SAFETY: args is whole; its strings outlive the call.
            let st = unsafe { mcore_initialize(&args, std::ptr::null_mut()) };
            // SAFETY: the message of this thread's last call.
            let msg = unsafe { std::ffi::CStr::from_ptr(crate::ffi::error::mcore_last_error_message()) };
            let _ = tx.send((st, msg.to_string_lossy().into_owned()));
        });
        let got = rx.recv_timeout(Duration::from_secs(5));
        let _ = std::fs::remove_file(&fifo);
        let _ = std::fs::remove_dir(&dir);
        let (st, msg) = got.expect("mcore_initialize blocked on a FIFO comm_config_path");
        assert_eq!(st, mcore_status::InvalidArgument, "{msg}");
        assert!(msg.contains(fifo.to_str().unwrap()) && msg.contains("FIFO"), "{msg}");
    }
}
