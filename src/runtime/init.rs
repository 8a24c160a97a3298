//! The idempotent initializer: environment → layout → store → check-in → communicators.
//!
//! Process-global state lives in one [`IdempotentSlot`]: `initialize` with the same settings is a
//! no-op, with other settings an error naming the differences; `destroy` tears everything down
//! (communicators, store client, store server) so that `initialize` works again.

use super::checkin::{check_in, CheckinError};
use super::comm_config::{CommConfig, CommStrategy};
use super::env::LaunchEnv;
use super::error::RuntimeError;
use super::groups::{
    create_groups_from, distinct_communicators, resolve_strategy, verify_groups, CreatedGroups, GroupPlan, LiveGroup,
    PlanKind, RankPlan, SharedComm,
};
use super::host::{self, HostInfo};
use super::liveness::{Liveness, SILENT_AFTER};
use super::settings::{IdempotentSlot, InitOutcome, Settings, SlotError};
use super::store_setup::{open_store, StoreHandles};
use crate::backend::{CommError, CommErrorKind, CommFactory, Communicator};
use crate::rng::layout::{coordinates, seed_request};
use crate::rng::{RankRng, SeedPolicy};
use crate::store::{PrefixStore, Store};
use crate::topology::{GroupKind, RankView, Topology, TopologyConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// overlapping all-gathers); see [`Runtime::all_gather_group`]. Needs per-group creation.
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

/// Durations of the phases of one initialization.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct InitTimings {
    pub store: Duration,
    pub checkin: Duration,
    /// Creating every communicator (the world's included, for the split strategy).
    pub groups: Duration,
    /// Of `groups`: creating the split strategy's world communicator.
    pub world: Duration,
    pub verify: Duration,
    pub total: Duration,
}

/// The live state of an initialized process.
pub struct Runtime {
    pub env: LaunchEnv,
    pub topology: Topology,
    pub view: RankView,
    pub groups: Vec<LiveGroup>,
    pub backend_name: String,
    /// The strategy used (`Auto` resolved).
    pub strategy: CommStrategy,
    pub timings: InitTimings,
    /// Distinct communicators created (aliased kinds share one).
    pub communicators: usize,
    /// This rank's host and the address it advertises to peers (see [`super::host`]).
    pub host: HostInfo,
    /// This rank's RNG streams, seeded by the policy (when `InitArgs::seed` was given).
    pub rng: Option<Arc<Mutex<RankRng>>>,
    /// The split strategy's world communicator, released after the groups.
    pub(super) world: Option<SharedComm>,
    /// This initialization's private view of the store.
    pub(super) base: Arc<dyn Store>,
    pub(super) timeout: Duration,
    pub(super) store: StoreHandles,
    /// What was asked for, and the store prefix of this attempt (recovery re-forms from them).
    pub(super) args: InitArgs,
    pub(super) attempt: String,
    /// This rank's heartbeat and the questions of who stopped answering (None: a world of one).
    pub(super) liveness: Option<Liveness>,
    /// Health checks run so far (each uses its own generation of store keys).
    pub(super) health_checks: AtomicU64,
}

impl Runtime {
    /// This rank's group of `kind`, if it is a member.
    /// `e`, a failed collective, with the ranks that stopped answering named first (see
    /// [`super::liveness`]) when it timed out or lost a peer. The whole world is asked, not only
    /// the group's `members`: a member may be alive but stuck on a rank of another group.
    pub fn explain_collective(&self, members: &[u32], e: CommError) -> CommError {
        let _ = members;
        let everyone: Vec<u32> = (0..self.env.world_size).collect();
        explain_with(self.liveness.as_ref(), self.env.rank, &everyone, e)
    }

    /// After a recovery: `before[r]` is rank r's number before it (see [`Liveness::number_as_before`]).
    pub(super) fn number_as_before(&self, before: Vec<u32>) {
        if let Some(l) = &self.liveness {
            l.number_as_before(before);
        }
    }

    pub fn group(&self, kind: GroupKind) -> Option<&LiveGroup> {
        self.groups.iter().find(|g| g.plan.kind == PlanKind::Group(kind))
    }

    /// This rank's all-gather twin of `kind` (`data_parallel_with_cp` or `expert_data_parallel`),
    /// when initialized with `create_all_gather_groups` and the layout has that twin.
    pub fn all_gather_group(&self, kind: GroupKind) -> Option<&LiveGroup> {
        self.groups.iter().find(|g| g.plan.kind == PlanKind::AllGatherTwin(kind))
    }

    /// This initialization's view of the rendezvous store (keys under its attempt's prefix).
    pub fn store(&self) -> Arc<dyn Store> {
        self.base.clone()
    }

    /// Store requests this process has sent so far (request/response exchanges).
    pub fn store_round_trips(&self) -> u64 {
        self.store.round_trips()
    }
}

static RUNTIME: IdempotentSlot<Runtime> = IdempotentSlot::new();

/// A function told of each phase of an initialization as it begins; see [`set_phase_hook`].
pub type PhaseHook = fn(InitPhase);

/// The phases of an initialization, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitPhase {
    /// Every rank has checked in; the communicators are about to be created.
    CheckedIn,
    /// The communicators exist; verification is about to run.
    Created,
}

static PHASE_HOOK: Mutex<Option<PhaseHook>> = Mutex::new(None);

/// Have `hook` called (on the initializing thread) as each [`InitPhase`] begins, e.g. to log
/// progress or, in fault-injection tests, to kill this process in the middle of init
/// (`mcore-selftest --fail-at during`). `None` removes it.
pub fn set_phase_hook(hook: Option<PhaseHook>) {
    *PHASE_HOOK.lock().unwrap_or_else(|p| p.into_inner()) = hook;
}

fn phase(p: InitPhase) {
    let hook = *PHASE_HOOK.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(hook) = hook {
        hook(p);
    }
}
/// Distinguishes successive initializations of one process in store keys (destroy + re-init).
static EPOCH: AtomicU64 = AtomicU64::new(0);

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

/// What `view`'s rank creates: its groups, every kind of the layout in order, the world.
pub fn plan_for(topology: &Topology, view: &RankView) -> RankPlan {
    let groups = view
        .groups
        .iter()
        .map(|m| GroupPlan { kind: PlanKind::Group(m.kind()), index: m.group_index() as u32, members: m.members() })
        .collect();
    let first = topology.rank_offset();
    RankPlan {
        rank: view.rank,
        world: (first..first + topology.world_size()).collect(),
        kinds: topology.kinds().into_iter().map(PlanKind::Group).collect(),
        groups,
    }
}

/// Megatron-Core 0.19's kinds whose groups are exactly an earlier kind's with the same
/// communicator options (e.g. every one of them at gtp = egtp = 1), with that kind: they get no
/// creation step (no split collective, no communicator) and share its communicators.
fn aliased_kinds(topology: &Topology, config: &super::CommConfig) -> Vec<(GroupKind, GroupKind)> {
    topology
        .kinds()
        .into_iter()
        .filter_map(|k| topology.alias_of(k).map(|src| (k, src)))
        .filter(|(k, src)| config.options_for(*k) == config.options_for(*src))
        .collect()
}

/// This rank's groups of the aliased kinds, sharing the communicators of their source kinds.
fn add_alias_groups(view: &RankView, aliases: &[(GroupKind, GroupKind)], groups: &mut Vec<LiveGroup>) {
    for (kind, src) in aliases {
        let (Some(m), Some(shared)) = (view.get(*kind), groups.iter().find(|g| g.plan.kind == PlanKind::Group(*src)))
        else {
            continue;
        };
        let alias = LiveGroup {
            plan: GroupPlan { kind: PlanKind::Group(*kind), index: m.group_index() as u32, members: m.members() },
            group_rank: m.rank,
            comm_name: shared.comm_name.clone(),
            comm: shared.comm.clone(),
            created_in: Duration::ZERO,
        };
        groups.push(alias);
    }
}

/// The twins this rank creates: its groups of the layout's twin kinds under their twin keys.
/// Every kind is listed for every rank (the plan is rank-independent); the twins get the default
/// communicator options.
fn all_gather_plan(topology: &Topology, view: &RankView, main: &RankPlan) -> RankPlan {
    let kinds = topology.all_gather_twin_kinds();
    RankPlan {
        rank: main.rank,
        world: main.world.clone(),
        kinds: kinds.iter().map(|&k| PlanKind::AllGatherTwin(k)).collect(),
        groups: kinds
            .iter()
            .filter_map(|&k| view.get(k))
            .map(|m| GroupPlan {
                kind: PlanKind::AllGatherTwin(m.kind()),
                index: m.group_index() as u32,
                members: m.members(),
            })
            .collect(),
    }
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
    if let Some(d) = args.device {
        return Err(RuntimeError::InvalidArgument(format!(
            "device {d} was given, but backend '{}' does not take a device (only nccl does)",
            args.backend
        )));
    }
    Ok(Arc::new(crate::backend::resolve(&args.backend)?))
}

/// Initialize from the process environment. Same settings again: `Ok(AlreadyUp)`, nothing done.
pub fn initialize(args: InitArgs) -> Result<InitOutcome, RuntimeError> {
    let env = LaunchEnv::from_process()?;
    initialize_with(args, env, &default_factory)
}

/// Initialize with an explicit environment and backend resolution (tests, embedders).
pub fn initialize_with(args: InitArgs, env: LaunchEnv, factory: &BackendResolver) -> Result<InitOutcome, RuntimeError> {
    init_slot(args, env, factory, None)
}

/// What a recovery carries into the new layout's bring-up: the store and attempt prefix the
/// survivors already share, the timeout the runtime keeps, and communicators it already has.
pub(super) struct Carried {
    pub store: StoreHandles,
    pub attempt: String,
    /// The runtime's timeout from then on (`args` carries what is left of the recovery's deadline).
    pub timeout: Duration,
    /// The split strategy's world communicator, made already (the old world shrunk), used
    /// instead of creating a new one.
    pub world: Option<Box<dyn Communicator>>,
    /// This rank's groups of the kinds whose membership did not change, planned for the new
    /// layout, with their old communicators: those kinds are not created again.
    pub kept: Vec<LiveGroup>,
}

/// Bring up the layout `args` describes on `env` with what a recovery carries (see
/// [`Carried`]), the backend resolved by [`default_factory`].
pub(super) fn initialize_on_store(
    args: InitArgs,
    env: LaunchEnv,
    carried: Carried,
) -> Result<InitOutcome, RuntimeError> {
    init_slot(args, env, &default_factory, Some(carried))
}

fn init_slot(
    args: InitArgs,
    env: LaunchEnv,
    factory: &BackendResolver,
    carried: Option<Carried>,
) -> Result<InitOutcome, RuntimeError> {
    let settings = settings_of(&args, env.world_size);
    let fingerprint = settings.fingerprint();
    let keep = carried.as_ref().map(|c| c.timeout);
    let fresh = carried.is_none();
    if env.rank >= args.layout_world(env.world_size)? {
        if is_spare() {
            return Ok(InitOutcome::Spare);
        }
        if fresh {
            discard_pending();
        }
        // A spare has no communicators to be given.
        let reuse = carried.map(|c| (c.store, c.attempt));
        return check_in_spare(&args, env, fingerprint.as_bytes(), reuse).map(|()| InitOutcome::Spare);
    }
    RUNTIME
        .init(settings, || {
            if fresh {
                // A new attempt: the store of a failed one that nobody recovered goes.
                discard_pending();
            }
            let mut rt = bring_up(&args, env, fingerprint.as_bytes(), factory, carried)?;
            if let Some(t) = keep {
                (rt.timeout, rt.args.timeout) = (t, t);
            }
            Ok(rt)
        })
        .map_err(|e| match e {
            SlotError::DifferentSettings(diff) => RuntimeError::AlreadyInitialized(diff),
            SlotError::Busy(what) => RuntimeError::Busy(what.into()),
            SlotError::BringUp(e) => e,
        })
}

/// Take the live runtime out (recovery tears it down its own way). Waits for other threads
/// still using it (a collective in progress) at most the runtime's timeout; `Busy` past that.
pub(super) fn take_runtime() -> Result<Option<Runtime>, RuntimeError> {
    RUNTIME.take(|rt| rt.timeout).map(|taken| taken.map(|(_, rt)| rt)).map_err(|what| RuntimeError::Busy(what.into()))
}

fn bring_up(
    args: &InitArgs,
    env: LaunchEnv,
    fingerprint: &[u8],
    factory: &BackendResolver,
    carried: Option<Carried>,
) -> Result<Runtime, RuntimeError> {
    let start = Instant::now();
    if args.timeout.is_zero() {
        return Err(RuntimeError::InvalidArgument("init timeout must be > 0".into()));
    }
    // Validate the layout before touching the network: a bad layout fails fast on every rank.
    let layout_world = args.layout_world(env.world_size)?;
    let topology = Topology::new(args.topology.clone(), layout_world)?;
    if topology.rank_offset() != 0 || topology.world_size() != layout_world {
        // Every rank knows this: all fail at once instead of waiting for ranks with no group.
        return Err(RuntimeError::InvalidArgument(format!(
            "the layout's grid covers ranks {}..{} of a world of {}: the ranks outside it would belong to \
             no group, and the runtime needs every rank of the world in the grid (launch only the grid's \
             ranks, or drop local_world_size/rank_offset)",
            topology.rank_offset(),
            u64::from(topology.rank_offset()) + u64::from(topology.world_size()) - 1,
            layout_world
        )));
    }
    let view = topology.rank_view(env.rank)?;
    let rng = match args.seed {
        None => None,
        Some(seed) => {
            let req = seed_request(&topology, env.rank, &args.seed_policy, seed, args.data_parallel_random_init)?;
            let mut rng = RankRng::new(coordinates(&topology, env.rank)?);
            rng.seed(&req)?;
            Some(Arc::new(Mutex::new(rng)))
        }
    };
    let backend = factory(args)?;
    let strategy = resolve_strategy(args.comm_strategy, backend.as_ref()).map_err(RuntimeError::InvalidArgument)?;
    if let (true, Some(why)) = (args.verify, backend.verify_unavailable()) {
        return Err(RuntimeError::InvalidArgument(format!(
            "verification was requested (the default), but {why}: initialize with verify off"
        )));
    }
    if args.create_all_gather_groups {
        resolve_strategy(CommStrategy::PerGroup, backend.as_ref()).map_err(|why| {
            RuntimeError::InvalidArgument(format!("create_all_gather_groups creates its twins per group: {why}"))
        })?;
    }
    let mut plan = plan_for(&topology, &view);
    let aliases = aliased_kinds(&topology, &args.comm_config);
    plan.kinds.retain(|k| !aliases.iter().any(|(a, _)| PlanKind::Group(*a) == *k));
    plan.groups.retain(|g| !aliases.iter().any(|(a, _)| PlanKind::Group(*a) == g.kind));
    // Kinds a recovery kept are not created again (every rank keeps the same kinds).
    let (reuse, premade_world, kept) = match carried {
        Some(Carried { store, attempt, world, kept, .. }) => (Some((store, attempt)), world, kept),
        None => (None, None, Vec::new()),
    };
    plan.kinds.retain(|k| !kept.iter().any(|g| g.plan.kind == *k));
    plan.groups.retain(|p| !kept.iter().any(|g| g.plan.kind == p.kind));
    let options_error =
        |what: String| move |e: CommError| RuntimeError::Comm(e.context(format!("communicator options of {what}")));
    backend.check_options(&args.comm_config.default).map_err(options_error("every kind (the default)".into()))?;
    for kind in &plan.kinds {
        backend.check_options(&kind.options(&args.comm_config)).map_err(options_error(kind.to_string()))?;
    }

    // One deadline bounds every wait below: each phase gets what is left of it.
    let deadline = start + args.timeout;
    let left = || deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    let (store, attempt) = open_attempt(&env, args, reuse)?;
    let liveness = start_liveness(&env, &attempt, left());
    if let (Some(l), Some(abort)) = (&liveness, store.aborter()) {
        l.on_store_gone(abort);
    }
    let base: Arc<dyn Store> = Arc::new(PrefixStore::new(&attempt, store.client()));
    // Once the heartbeat finds the store's host gone, every store call fails at once, naming it.
    let base = match &liveness {
        Some(l) => l.guard(base),
        None => base,
    };
    let host = store.host();
    if std::env::var("MCORE_LOG").is_ok_and(|v| v.trim().eq_ignore_ascii_case("debug")) {
        eprintln!("mcore_init: rank {} on host {} advertises {} ({})", env.rank, host.label(), host.addr, host.why);
    }
    let t_store = start.elapsed();

    let created = (|| -> Result<(CreatedGroups, usize, Duration, Duration), RuntimeError> {
        host::publish(base.as_ref(), env.rank, &host)?;
        check_in(base.as_ref(), env.rank, env.world_size, env.local_world_size, fingerprint, left())?;
        let t_checkin = start.elapsed();
        phase(InitPhase::CheckedIn);
        let group_store =
            |name: &str| -> Arc<dyn Store> { Arc::new(PrefixStore::new(&format!("group/{name}"), base.clone())) };
        let host_addr = host.addr.to_string();
        // Every creation shares the one deadline (what is left of it) and this rank's address.
        let create = |plan: &RankPlan, strategy: CommStrategy, world: Option<Box<dyn Communicator>>| {
            let (store, config, addr) = (base.as_ref(), &args.comm_config, Some(host_addr.as_str()));
            create_groups_from(plan, strategy, backend.as_ref(), &group_store, store, config, left(), addr, world)
        };
        let mut created = create(&plan, strategy, premade_world)?;
        created.groups.extend(kept);
        // In the layout's kind order, as if all were created now.
        let order = topology.kinds();
        created.groups.sort_by_key(|g| order.iter().position(|&k| PlanKind::Group(k) == g.plan.kind));
        add_alias_groups(&view, &aliases, &mut created.groups);
        if args.create_all_gather_groups {
            let made = create(&all_gather_plan(&topology, &view, &plan), CommStrategy::PerGroup, None)?;
            created.groups.extend(made.groups);
        }
        let t_groups = start.elapsed();
        phase(InitPhase::Created);
        let communicators = if args.verify {
            verify_groups(&created.groups, env.rank, backend.verifies_concurrently())?
        } else {
            distinct_communicators(&created.groups).len()
        };
        Ok((created, communicators, t_checkin, t_groups))
    })();
    let created = created.map_err(|e| blame_peers(e, liveness.as_ref(), &env));
    if let (Err(e), true) = (&created, liveness.as_ref().is_some_and(|l| l.store_silent().is_some())) {
        // The store's host is gone: nobody can read a verdict or recover through it.
        return Err(e.clone());
    }
    let (CreatedGroups { groups, world, world_time }, communicators, t_checkin, t_groups) = match created {
        Ok(c) => c,
        Err(e) if failed_for_a_peer(&e) => {
            // Recovery can continue from here (`recovery::reinitialize`, whose request tells the
            // ranks whose init succeeded, through their health check): keep the store (a host
            // keeps serving).
            let suspected = match e.cause() {
                RuntimeError::Checkin(CheckinError::Missing { ranks, .. }) => ranks.clone(),
                _ => super::progress::record_of(base.as_ref(), env.rank).unwrap_or_default(),
            };
            // As any failed init (below), so that ranks that do not recover read their error
            // from a store that is still up; then the store is kept for recovery.
            // A host stops waiting as soon as a rank asks for recovery: it is needed there.
            let arrived = env.world_size.saturating_sub(suspected.len() as u32);
            let wait = (deadline + LEAVE_GRACE).saturating_duration_since(Instant::now());
            leave_unless(&base, &env, arrived, wait, Some(RECOVERY_REQUESTED_KEY), liveness.as_ref());
            let (args, settled_by) = (args.clone(), deadline + LEAVE_GRACE);
            keep_pending(Pending { env, topology, args, store, base, attempt, suspected, spare: false, settled_by });
            return Err(e);
        }
        Err(e) => {
            // Keep the store up until the ranks that arrived have read the verdict and left.
            let arrived = match e.cause() {
                RuntimeError::Checkin(CheckinError::Missing { ranks, .. }) => env.world_size - ranks.len() as u32,
                _ => env.world_size,
            };
            // Wait for them only until a little past the deadline (not past the time this error
            // took to explain, e.g. waiting for failure records): ranks that died never leave.
            let wait = (deadline + LEAVE_GRACE).saturating_duration_since(Instant::now());
            leave(&base, &env, arrived, wait, liveness.as_ref());
            return Err(e);
        }
    };
    let total = start.elapsed();
    Ok(Runtime {
        timings: InitTimings {
            store: t_store,
            checkin: t_checkin - t_store,
            groups: t_groups - t_checkin,
            world: world_time,
            verify: total - t_groups,
            total,
        },
        backend_name: backend.name().to_string(),
        strategy,
        env,
        topology,
        view,
        groups,
        communicators,
        host,
        rng,
        world,
        base,
        timeout: args.timeout,
        store,
        args: args.clone(),
        attempt,
        health_checks: AtomicU64::new(0),
        liveness,
    })
}

/// Start this rank's heartbeat (see [`super::liveness`]) on a connection of its own to the store
/// at MASTER_ADDR:MASTER_PORT; none in a world of one. A heartbeat that cannot start costs the
/// init nothing but the naming of dead ranks.
fn start_liveness(env: &LaunchEnv, attempt: &str, within: Duration) -> Option<Liveness> {
    if env.world_size <= 1 {
        return None;
    }
    let who = if env.use_agent_store { "torchrun's agent" } else { "rank 0" };
    let host = format!("{who} at {}:{}", env.master_addr, env.master_port);
    Liveness::start(&env.master_addr, env.master_port, attempt, env.rank, host, within.min(Duration::from_secs(2))).ok()
}

/// `e` with the peers that stopped answering named first, when it is a failure that a dead or
/// frozen peer can cause (a timeout, a lost peer, a store that went away).
fn blame_peers(e: RuntimeError, liveness: Option<&Liveness>, env: &LaunchEnv) -> RuntimeError {
    let Some(l) = liveness else { return e };
    let peerish = match &e {
        RuntimeError::Group(g) => {
            matches!(g.error.kind, CommErrorKind::Timeout | CommErrorKind::PeerFailed | CommErrorKind::Store)
        }
        RuntimeError::Store(_) | RuntimeError::StoreConnect { .. } | RuntimeError::Comm(_) => true,
        RuntimeError::Checkin(CheckinError::Store(_)) => true,
        _ => false,
    };
    if !peerish {
        return e;
    }
    let everyone: Vec<u32> = (0..env.world_size).collect();
    match l.blame(&everyone, env.rank) {
        Some(who) => RuntimeError::PeersGone { who, source: Box::new(e) },
        None => e,
    }
}

/// `e` (a failed collective over `members`) with the silent ranks named first.
fn explain_with(liveness: Option<&Liveness>, me: u32, members: &[u32], e: CommError) -> CommError {
    match (liveness, e.kind) {
        (Some(l), CommErrorKind::Timeout | CommErrorKind::PeerFailed) => match l.blame(members, me) {
            Some(who) => CommError { kind: e.kind, message: format!("{who}; {}", e.message) },
            None => e,
        },
        _ => e,
    }
}

/// Whether an initialization failed because a peer did not come or went away (a rank missing at
/// check-in, a group whose creation or verification timed out or lost a peer): recovery can
/// continue from it.
fn failed_for_a_peer(e: &RuntimeError) -> bool {
    use crate::backend::CommErrorKind as K;
    match e.cause() {
        RuntimeError::Checkin(CheckinError::Missing { .. }) => true,
        RuntimeError::Group(g) => matches!(g.error.kind, K::Timeout | K::PeerFailed),
        _ => false,
    }
}

/// An initialization that `recovery::reinitialize` continues from: one that failed for a peer
/// ([`failed_for_a_peer`]; `suspected` are the ranks the failure named), or a spare's, checked in
/// and standing by. It keeps the layout, the store (a host keeps serving until this is dropped)
/// and the attempt's prefix.
pub(super) struct Pending {
    pub env: LaunchEnv,
    pub topology: Topology,
    pub args: InitArgs,
    pub store: StoreHandles,
    pub base: Arc<dyn Store>,
    pub attempt: String,
    pub suspected: Vec<u32>,
    pub spare: bool,
    /// When every other rank of that initialization has reached its own end (its deadline, a
    /// little past for ranks that started later): a recovery's agreement waits for the ranks
    /// still alive until then, as a rank stuck in a collective with a dead peer fails only at its
    /// deadline.
    pub settled_by: Instant,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

/// Take the kept initialization out (recovery continues from it).
pub(super) fn take_pending() -> Option<Pending> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// Keep an initialization for recovery (again, when recovery was called with bad arguments).
pub(super) fn keep_pending(pending: Pending) {
    *PENDING.lock().unwrap_or_else(|p| p.into_inner()) = Some(pending);
}

/// Drop a kept initialization (a store host stops serving; a spare leaves). `false` when there
/// was none.
pub(super) fn discard_pending() -> bool {
    let Some(p) = take_pending() else { return false };
    if p.spare {
        // The layout's ranks wait for every rank of the world, spares included, to leave.
        let _ = p.base.add("leave/count", 1);
    }
    true
}

/// Whether a spare is standing by in this process (see [`InitArgs::spares`]).
pub fn is_spare() -> bool {
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|p| p.spare)
}

/// A spare's initialization: it checks in with the whole world (so the layout's ranks know it
/// is there) and is kept, standing by, for `recovery::reinitialize`.
fn check_in_spare(
    args: &InitArgs,
    env: LaunchEnv,
    fingerprint: &[u8],
    reuse: Option<(StoreHandles, String)>,
) -> Result<(), RuntimeError> {
    let start = Instant::now();
    if args.timeout.is_zero() {
        return Err(RuntimeError::InvalidArgument("init timeout must be > 0".into()));
    }
    let topology = Topology::new(args.topology.clone(), args.layout_world(env.world_size)?)?;
    let (store, attempt) = open_attempt(&env, args, reuse)?;
    let base: Arc<dyn Store> = Arc::new(PrefixStore::new(&attempt, store.client()));
    host::publish(base.as_ref(), env.rank, &store.host())?;
    // A rank missing at check-in does not end a spare's part: it stands by for the recovery that
    // follows, suspecting the missing ranks.
    let suspected =
        match check_in(base.as_ref(), env.rank, env.world_size, env.local_world_size, fingerprint, args.timeout) {
            Ok(_) => vec![],
            Err(CheckinError::Missing { ranks, .. }) => {
                // As a failed init's ranks do, so the store's host need not wait for this one.
                let _ = base.add("leave/count", 1);
                ranks
            }
            Err(e) => return Err(e.into()),
        };
    let (args, settled_by) = (args.clone(), start + args.timeout + LEAVE_GRACE);
    keep_pending(Pending { env, topology, args, store, base, attempt, suspected, spare: true, settled_by });
    Ok(())
}

/// The store and key prefix of an initialization: those of an earlier attempt (recovery), or
/// a new attempt's.
fn open_attempt(
    env: &LaunchEnv,
    args: &InitArgs,
    reuse: Option<(StoreHandles, String)>,
) -> Result<(StoreHandles, String), RuntimeError> {
    Ok(match reuse {
        Some(reused) => reused,
        None => {
            let epoch = EPOCH.fetch_add(1, Ordering::SeqCst);
            let attempt = format!("mcore_init/{}/{}/{}", env.run_id, env.restart_count, epoch);
            (open_store(env, args.timeout, &attempt)?, attempt)
        }
    })
}

/// Longest time the store host waits for the other ranks to leave.
const LEAVE_WAIT: Duration = Duration::from_secs(10);
/// After a failed initialization, how long past the init deadline the store host waits for the
/// ranks that arrived to read the verdict and leave (they explain their failure within
/// `progress::RECORD_GRACE` + `liveness::SILENT_AFTER` of it): inside the deadline + 2 s bound.
const LEAVE_GRACE: Duration = Duration::from_millis(1800);

/// Announce that this rank is done with the store; the rank hosting the store server waits (at
/// most `LEAVE_WAIT`, and at most `timeout`) until `expected` ranks have, so none loses the
/// server mid-request, or until the ranks that have not left stopped answering (`liveness`).
fn leave(base: &Arc<dyn Store>, env: &LaunchEnv, expected: u32, timeout: Duration, liveness: Option<&Liveness>) {
    leave_unless(base, env, expected, timeout, None, liveness)
}

/// Above this many ranks the store host does not look for dead ranks while it waits for the
/// others to leave (one store request per rank each time).
const LEAVE_LIVENESS_MAX: u32 = 1024;
/// The longest a rank that does not host the store waits to have announced that it leaves.
const LEAVE_SEND: Duration = Duration::from_millis(500);

/// [`leave`], but the host also stops waiting once `stop_key` exists.
fn leave_unless(
    base: &Arc<dyn Store>,
    env: &LaunchEnv,
    expected: u32,
    timeout: Duration,
    stop_key: Option<&str>,
    liveness: Option<&Liveness>,
) {
    if env.world_size <= 1 {
        return;
    }
    let _ = base.set(&format!("leave/{}", env.rank), b"1");
    if !env.hosts_store() {
        // The count's reply is not needed: a store host that froze must not hold this rank
        // (at most LEAVE_SEND; the request finishes or fails on its own thread).
        let b = Arc::clone(base);
        let (tx, rx) = std::sync::mpsc::channel();
        let sent = std::thread::Builder::new().name("mcore-leave".into()).spawn(move || {
            let _ = b.add("leave/count", 1);
            let _ = tx.send(());
        });
        if sent.is_ok() {
            let _ = rx.recv_timeout(LEAVE_SEND);
        }
        return;
    }
    if base.add("leave/count", 1).is_err() {
        return;
    }
    let start = Instant::now();
    let deadline = start + LEAVE_WAIT.min(timeout);
    let mut look_at = start;
    let watch = liveness.filter(|_| env.world_size <= LEAVE_LIVENESS_MAX);
    while Instant::now() < deadline {
        if stop_key.is_some_and(|k| base.check(&[k]).unwrap_or(false)) {
            return;
        }
        let left = match base.add("leave/count", 0) {
            Ok(n) if n < i64::from(expected) => n,
            _ => return,
        };
        std::thread::sleep(Duration::from_millis(2));
        let Some(l) = watch else { continue };
        // Those that have not left and stopped answering (found so by this rank's own failure,
        // or by asking now) never will.
        let known = l.known_silent_count(LEAVE_GRACE);
        let now = Instant::now();
        if left + known as i64 >= i64::from(expected) || now >= look_at {
            let missing: Vec<u32> =
                (0..env.world_size).filter(|r| !base.check(&[&format!("leave/{r}")]).unwrap_or(true)).collect();
            if l.known_silent(&missing, LEAVE_GRACE) {
                return;
            }
            if now >= look_at {
                if l.silent(&missing).map_or(true, |silent| silent.len() == missing.len()) {
                    return;
                }
                look_at = Instant::now() + SILENT_AFTER;
            }
        }
    }
}

/// The key a recovery writes first under its attempt's prefix (with the ranks it suspects), so
/// that the other ranks learn of it (`recovery::check_health`, a spare standing by, a store host
/// waiting for ranks to leave a failed init).
pub(super) const RECOVERY_REQUESTED_KEY: &str = "recovery/requested";

/// The key the layout's ranks write when they tear their runtime down: the job ends, and spares
/// standing by leave.
pub(super) const ENDED_KEY: &str = "ended";

/// Tear down what `initialize` brought up (see [`super::destroy`]). `false` when nothing was
/// initialized.
///
/// Every rank announces that it is done with the store; the rank hosting the store server waits
/// (at most `LEAVE_WAIT`) until all have, so no rank loses the server in the middle of a request.
/// Teardown itself never fails because a peer is gone.
pub(super) fn teardown() -> Result<bool, RuntimeError> {
    let Some(runtime) = take_runtime()? else { return Ok(false) };
    let Runtime { groups, world, base, store, env, timeout, liveness, .. } = runtime;
    // Communicators first (groups, then the world they were split from): their last
    // collectives completed on every member before anyone announces leaving.
    drop(groups);
    drop(world);
    let _ = base.set(ENDED_KEY, b"1");
    leave(&base, &env, env.world_size, timeout, liveness.as_ref());
    drop(liveness);
    drop(base);
    drop(store);
    Ok(true)
}

/// Whether the runtime is initialized.
pub fn is_initialized() -> bool {
    RUNTIME.is_up()
}

/// Run `f` with the live runtime.
pub fn with_runtime<R>(f: impl FnOnce(&Runtime) -> R) -> Result<R, RuntimeError> {
    RUNTIME.with(f).ok_or(RuntimeError::NotInitialized)
}
