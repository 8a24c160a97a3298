//! What an initialization is asked for ([`InitArgs`]): its defaults, the settings fingerprint
//! compared across ranks and calls, the timeout from the environment, and backend resolution.

use super::settings::Settings;
use crate::backend::{CommError, CommFactory};
use crate::rng::SeedPolicy;
use crate::runtime::creation::comm_config::{CommConfig, CommStrategy};
use crate::runtime::error::RuntimeError;
use crate::topology::{MindSpeedOptions, TopologyConfig};
use std::sync::Arc;
use std::time::Duration;

/// Turns the init args' backend (`gloo`, `nccl`, a plugin path; and the device) into a
/// communicator factory.
pub type BackendResolver = dyn Fn(&InitArgs) -> Result<Arc<dyn CommFactory>, RuntimeError>;

/// The name of the job's first grid unless the caller names it.
pub const DEFAULT_GRID: &str = "default";

/// Default bound of every wait during initialization (`MCORE_INIT_TIMEOUT` overrides, seconds).
pub const DEFAULT_INIT_TIMEOUT: Duration = Duration::from_secs(300);

/// A further grid of the job: another layout over the same world (the same ranks, colocated, or
/// a window of them with `rank_offset` and `local_world_size`), e.g. an RL job's rollout engine
/// beside its trainer. Its groups are created at init with the first grid's, after them.
#[derive(Clone, Debug)]
pub struct GridSpec {
    /// Its name: letters, digits, `_`, `-`, `.`; unique in the job.
    pub name: String,
    /// Its layout (the world size is the job's).
    pub topology: TopologyConfig,
    /// Seed this grid's RNG streams from its own coordinates (`None`: none for this grid); the
    /// policy is the job's (`InitArgs::seed_policy`).
    pub seed: Option<i64>,
}

/// Longest grid name.
pub const MAX_GRID_NAME: usize = 64;

/// `name` is a valid grid name (see [`GridSpec::name`]).
pub fn check_grid_name(name: &str) -> Result<(), RuntimeError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_GRID_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::InvalidArgument(format!(
            "grid name {} must be 1 to {MAX_GRID_NAME} letters, digits, '_', '-' or '.'",
            crate::quote::quoted(name)
        )))
    }
}

/// What to bring up.
#[derive(Clone, Debug)]
pub struct InitArgs {
    /// The parallel layout of the job's first grid, the default that the getters answer (world
    /// size comes from the environment).
    pub topology: TopologyConfig,
    /// The first grid's name (`default`).
    pub grid_name: String,
    /// The job's further grids (none by default), in creation order after the first.
    pub grids: Vec<GridSpec>,
    /// Backend: a registered name (`gloo` resolves `libmcore_init_gloo.so`), or a plugin path.
    pub backend: String,
    /// Bound of every wait (rendezvous, each group's creation).
    pub timeout: Duration,
    /// Verify every communicator with an all-reduce the layout predicts, before returning.
    pub verify: bool,
    /// Seed this rank's RNG streams at init (`None`: no RNG state is created).
    pub seed: Option<i64>,
    /// The seed policy (`megatron` by default).
    pub seed_policy: SeedPolicy,
    /// Megatron's `data_parallel_random_init` (megatron policy only).
    pub data_parallel_random_init: bool,
    /// How communicators are created (default: split when the backend can, else per group).
    pub comm_strategy: CommStrategy,
    /// Communicator options per group kind (Megatron's NCCL communicator config), and a default.
    pub comm_config: CommConfig,
    /// The CUDA device of this rank's NCCL communicators (`None`: `LOCAL_RANK`, 0 when unset).
    pub device: Option<u32>,
    /// Megatron-Core's `create_all_gather_groups`: also create the all-gather twins of the
    /// dp-cp and (ep > 1) expert-dp groups, separate communicators with the same members (for
    /// overlapping all-gathers); see
    /// [`Runtime::all_gather_group`](crate::runtime::Runtime::all_gather_group). Needs per-group creation.
    pub create_all_gather_groups: bool,
    /// Spare ranks: the last `spares` ranks of the world are outside the layout (which covers the
    /// others); they check in, stand by in `recovery::reinitialize`, and take a failed rank's
    /// place when a recovery needs them (docs/recovery.md).
    pub spares: u32,
    /// Megatron-Core 0.20's rule for several grids: any two grids cover the same ranks or none
    /// in common (and all of them the world); init refuses other grids, naming the pair.
    pub grids_disjoint_or_identical: bool,
    /// MindSpeed's options: also create MindSpeed's groups on the (only) grid's layout, after
    /// its kinds (docs/topology.md, "MindSpeed's groups"); `None`: none.
    pub mindspeed: Option<MindSpeedOptions>,
}

impl Default for InitArgs {
    fn default() -> Self {
        InitArgs {
            topology: TopologyConfig::default(),
            grid_name: DEFAULT_GRID.into(),
            grids: Vec::new(),
            backend: "gloo".into(),
            timeout: DEFAULT_INIT_TIMEOUT,
            verify: true,
            seed: None,
            seed_policy: SeedPolicy::Megatron,
            data_parallel_random_init: false,
            comm_strategy: CommStrategy::Auto,
            comm_config: CommConfig::default(),
            device: None,
            create_all_gather_groups: false,
            spares: 0,
            grids_disjoint_or_identical: false,
            mindspeed: None,
        }
    }
}

impl InitArgs {
    /// Every grid of the job, the first one first: (name, layout, seed).
    pub fn all_grids(&self) -> impl Iterator<Item = (&str, &TopologyConfig, Option<i64>)> {
        std::iter::once((self.grid_name.as_str(), &self.topology, self.seed))
            .chain(self.grids.iter().map(|g| (g.name.as_str(), &g.topology, g.seed)))
    }

    /// The layout's world size in a world of `world_size` processes (the spares left out).
    pub fn layout_world(&self, world_size: u32) -> Result<u32, RuntimeError> {
        world_size.checked_sub(self.spares).filter(|&w| w > 0).ok_or_else(|| {
            RuntimeError::InvalidArgument(format!(
                "spares {} leave no rank for the layout in a world of {world_size}",
                self.spares
            ))
        })
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

/// One layout's settings, each key prefixed by `prefix` (empty for the first grid).
fn layout_settings(s: Settings, prefix: &str, t: &TopologyConfig) -> Settings {
    let hcp = if t.hierarchical_cp.is_empty() {
        "-".to_string()
    } else {
        t.hierarchical_cp.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    };
    let key = |k: &str| format!("{prefix}{k}");
    s.with(&key("tp"), t.tp)
        .with(&key("pp"), t.pp)
        .with(&key("vpp"), opt(&t.vpp))
        .with(&key("cp"), t.cp)
        .with(&key("hcp"), hcp)
        .with(&key("ep"), t.ep)
        .with(&key("etp"), opt(&t.etp))
        .with(&key("dist_opt_instances"), t.dist_opt_instances)
        .with(&key("order"), &t.order)
        .with(&key("rank_offset"), t.rank_offset)
        .with(&key("gtp"), t.gtp)
        .with(&key("egtp"), t.egtp)
        .with(&key("local_world_size"), opt(&t.local_world_size))
        .with(&key("embedding"), if t.embedding_ranks.is_some() { "custom" } else { "default" })
        .with(&key("position_embedding"), if t.position_embedding_ranks.is_some() { "custom" } else { "default" })
}

/// The settings that define an initialization: compared across ranks and across calls. A job of
/// one grid named `default` has the keys it had before grids; further grids add `grids` (the
/// names) and each grid's layout and seed under `grid[<name>].<key>`.
pub fn settings_of(args: &InitArgs, world_size: u32) -> Settings {
    let mut s = layout_settings(Settings::new().with("world_size", world_size), "", &args.topology);
    if args.grid_name != DEFAULT_GRID || !args.grids.is_empty() {
        let names: Vec<&str> = args.all_grids().map(|g| g.0).collect();
        s = s.with("grids", names.join(","));
        for g in &args.grids {
            let prefix = format!("grid[{}].", g.name);
            s = layout_settings(s, &prefix, &g.topology).with(&format!("{prefix}seed"), opt(&g.seed));
        }
    }
    s.with("backend", &args.backend)
        .with("seed", opt(&args.seed))
        .with("seed_policy", &args.seed_policy)
        .with("data_parallel_random_init", args.data_parallel_random_init)
        .with("comm_strategy", args.comm_strategy)
        .with("comm_config", args.comm_config.fingerprint())
        .with("create_all_gather_groups", args.create_all_gather_groups)
        .with("spares", args.spares)
        .with("grids_disjoint_or_identical", args.grids_disjoint_or_identical)
        .with("mindspeed", args.mindspeed.as_ref().map_or("-".into(), |o| format!("{o:?}")))
        .with_local("device", opt(&args.device))
}

/// `MCORE_INIT_TIMEOUT` (seconds, may be fractional; `none` or `inf` for no limit, see
/// [`crate::timeout`]) or the default of 300 s.
pub fn timeout_from_env() -> Result<Duration, RuntimeError> {
    match std::env::var_os("MCORE_INIT_TIMEOUT") {
        None => Ok(DEFAULT_INIT_TIMEOUT),
        Some(v) => crate::timeout::parse_seconds("MCORE_INIT_TIMEOUT", &v.to_string_lossy())
            .map_err(RuntimeError::InvalidArgument),
    }
}

/// The backend `args` name: `nccl` is built in (libnccl.so.2 loaded at run time, on `args.device`
/// or `LOCAL_RANK`); anything else is a registered or plugin backend (plugins named by
/// `MCORE_BACKEND_PLUGIN` load first).
pub fn default_factory(args: &InitArgs) -> Result<Arc<dyn CommFactory>, RuntimeError> {
    crate::backend::load_plugins_from_env()?;
    if args.backend == "nccl" && crate::backend::get("nccl").is_err() {
        return Ok(Arc::new(crate::backend::nccl::NcclFactory::from_env(args.device).map_err(CommError::from)?));
    }
    let backend = crate::backend::resolve(&args.backend)?;
    if let Some(d) = args.device.filter(|_| !backend.takes_device()) {
        return Err(RuntimeError::InvalidArgument(format!(
            "device {d} was given, but backend '{}' does not take a device (nccl does, and plugins that set \
             MCORE_BACKEND_FLAG_TAKES_DEVICE, e.g. hccl)",
            args.backend
        )));
    }
    Ok(Arc::new(backend))
}
