//! What an initialization is asked for ([`InitArgs`]): its defaults, the settings fingerprint
//! compared across ranks and calls, the timeout from the environment, and backend resolution.

use super::comm_config::{CommConfig, CommStrategy};
use super::error::RuntimeError;
use super::settings::Settings;
use crate::backend::{CommError, CommFactory};
use crate::rng::SeedPolicy;
use crate::topology::TopologyConfig;
use std::sync::Arc;
use std::time::Duration;

/// Turns the init args' backend (`gloo`, `nccl`, a plugin path; and the device) into a
/// communicator factory.
pub type BackendResolver = dyn Fn(&InitArgs) -> Result<Arc<dyn CommFactory>, RuntimeError>;

/// Default bound of every wait during initialization (`MCORE_INIT_TIMEOUT` overrides, seconds).
pub const DEFAULT_INIT_TIMEOUT: Duration = Duration::from_secs(300);

/// What to bring up.
#[derive(Clone, Debug)]
pub struct InitArgs {
    /// The parallel layout (world size comes from the environment).
    pub topology: TopologyConfig,
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
    /// [`Runtime::all_gather_group`](super::Runtime::all_gather_group). Needs per-group creation.
    pub create_all_gather_groups: bool,
    /// Spare ranks: the last `spares` ranks of the world are outside the layout (which covers the
    /// others); they check in, stand by in `recovery::reinitialize`, and take a failed rank's
    /// place when a recovery needs them (docs/recovery.md).
    pub spares: u32,
}

impl Default for InitArgs {
    fn default() -> Self {
        InitArgs {
            topology: TopologyConfig::default(),
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
        }
    }
}

impl InitArgs {
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

/// The settings that define an initialization: compared across ranks and across calls.
pub fn settings_of(args: &InitArgs, world_size: u32) -> Settings {
    let t = &args.topology;
    let hcp = if t.hierarchical_cp.is_empty() {
        "-".to_string()
    } else {
        t.hierarchical_cp.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    };
    Settings::new()
        .with("world_size", world_size)
        .with("tp", t.tp)
        .with("pp", t.pp)
        .with("vpp", opt(&t.vpp))
        .with("cp", t.cp)
        .with("hcp", hcp)
        .with("ep", t.ep)
        .with("etp", opt(&t.etp))
        .with("dist_opt_instances", t.dist_opt_instances)
        .with("order", &t.order)
        .with("rank_offset", t.rank_offset)
        .with("gtp", t.gtp)
        .with("egtp", t.egtp)
        .with("local_world_size", opt(&t.local_world_size))
        .with("embedding", if t.embedding_ranks.is_some() { "custom" } else { "default" })
        .with("position_embedding", if t.position_embedding_ranks.is_some() { "custom" } else { "default" })
        .with("backend", &args.backend)
        .with("seed", opt(&args.seed))
        .with("seed_policy", &args.seed_policy)
        .with("data_parallel_random_init", args.data_parallel_random_init)
        .with("comm_strategy", args.comm_strategy)
        .with("comm_config", args.comm_config.fingerprint())
        .with("create_all_gather_groups", args.create_all_gather_groups)
        .with("spares", args.spares)
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
