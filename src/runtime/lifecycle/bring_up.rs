//! Bringing one rank's layout up, as named steps: validate (layout, RNG, backend, plan), open the
//! store with the heartbeat, check in, create, verify; and the end of a bring-up that failed (kept
//! for recovery, or left once the ranks that arrived have read the verdict).

use super::init_args::{check_grid_name, BackendResolver, InitArgs};
use super::leave::{leave, Watch, LEAVE_GRACE};
use super::pending::{Kept, Pending, RuntimeClaim};
use super::runtime_state::{InitTimings, Runtime};
use crate::backend::{CommError, CommFactory, Communicator};
use crate::lock::Unpoisoned;
use crate::rng::layout::{coordinates, seed_request};
use crate::rng::RankRng;
use crate::runtime::creation::comm_config::CommStrategy;
use crate::runtime::creation::groups::{
    distinct_communicators, resolve_strategy, verify_groups, CreatedGroups, GridTag, GroupCreator, LiveGroup, PlanKind,
    RankPlan,
};
use crate::runtime::creation::plan::{add_alias_groups, aliased_kinds, all_gather_plan, grid_kinds, job_plan, Grid};
use crate::runtime::error::RuntimeError;
use crate::runtime::faults::{failed_for_a_peer, Faults};
use crate::runtime::launch::env::LaunchEnv;
use crate::runtime::launch::host::{self, HostInfo};
use crate::runtime::launch::pmix_rendezvous::{self, CheckIn, WorldExchange};
use crate::runtime::launch::store_setup::{open_attempt, StoreHandles};
use crate::runtime::meeting::checkin::{check_in_from, verdict, CheckinError, Seat};
use crate::runtime::meeting::progress::Progress;
use crate::store::{PrefixStore, Store};
use crate::timeout::Deadline;
use crate::topology::{MindSpeedLayout, Topology, TopologyError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    *PHASE_HOOK.locked() = hook;
}

fn phase(p: InitPhase) {
    let hook = *PHASE_HOOK.locked();
    if let Some(hook) = hook {
        hook(p);
    }
}

/// What a recovery carries into the new layout's bring-up: the store and attempt prefix the
/// survivors already share, the timeout the runtime keeps, and communicators it already has.
pub(crate) struct Carried {
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
    /// The launcher's rank of each rank of the new world (PMIx's events name those).
    pub launcher: Vec<u32>,
}

/// The job's grids, validated before touching the network, and what this rank creates in them.
struct Layout {
    /// The first is the default grid.
    grids: Vec<Grid>,
    backend: Arc<dyn CommFactory>,
    /// The strategy used (`Auto` resolved).
    strategy: CommStrategy,
    /// What this rank creates: the aliased kinds (and the kinds a recovery kept) left out.
    plan: RankPlan,
}

/// This initialization's store, open. Fields drop in order: the view of the store, the
/// heartbeat, then the store itself (a host's server last).
struct Opened {
    /// The attempt's private view of the store (guarded by the heartbeat, when there is one).
    base: Arc<dyn Store>,
    faults: Faults,
    store: StoreHandles,
    attempt: String,
    host: HostInfo,
}

/// What the steps after opening the store share.
struct Steps<'a> {
    args: &'a InitArgs,
    env: &'a LaunchEnv,
    layout: &'a Layout,
    opened: &'a Opened,
    start: Instant,
    /// One deadline bounds every wait: each step gets what is left of it.
    deadline: Deadline,
    /// Check in and exchange the world communicator's addresses through PMIx
    /// ([`super::pmix_rendezvous`]): a first bring-up under PMIx, not a recovery's.
    pmix: Option<&'static crate::backend::pmix::PmixClient>,
}

/// The communicators made and verified, and when check-in and creation ended (since the start).
struct Made {
    created: CreatedGroups,
    communicators: usize,
    t_checkin: Duration,
    t_groups: Duration,
}

/// How long before the init deadline the backend's waits end: the time a failure takes to be
/// explained (a member behind is waited for briefly, silent ranks are read twice: see
/// `explain::RECORD_GRACE` and `liveness::SILENT_AFTER`), so that the error, explained, comes
/// within the deadline + 2 s even on a loaded machine. At most a tenth of the whole timeout.
fn creation_deadline(deadline: Deadline, timeout: Duration) -> Deadline {
    let reserve = (crate::runtime::meeting::explain::RECORD_GRACE + crate::runtime::faults::liveness::SILENT_AFTER)
        .min(timeout / 10);
    deadline.earlier_by(reserve)
}

/// Bring up the layout `args` describes: validate, open the store, check in, create, verify.
pub(crate) fn bring_up(
    claim: &mut RuntimeClaim,
    args: &InitArgs,
    env: LaunchEnv,
    fingerprint: &[u8],
    factory: &BackendResolver,
    carried: Option<Carried>,
) -> Result<Runtime, RuntimeError> {
    let start = Instant::now();
    let mut layout = validate(args, &env, factory)?;
    let pmix = if carried.is_none() { pmix_rendezvous::usable(&env) } else { None };
    // Kinds a recovery kept are not created again (every rank keeps the same kinds).
    let (reuse, premade_world, kept) = match carried {
        Some(Carried { store, attempt, world, kept, launcher, .. }) => (Some((store, attempt, launcher)), world, kept),
        None => (None, None, Vec::new()),
    };
    layout.plan.kinds.retain(|(t, k)| !kept.iter().any(|g| g.plan.is(t, *k)));
    layout.plan.groups.retain(|p| !kept.iter().any(|g| g.plan.is(&p.grid, p.kind)));
    check_options(args, &layout)?;

    let deadline = Deadline::at(start + crate::timeout::clamp(args.timeout));
    let opened = open(&env, args, reuse, deadline, &layout.backend)?;
    let env = opened.store.resolved(&env);
    let t_store = start.elapsed();
    let steps = Steps { args, env: &env, layout: &layout, opened: &opened, start, deadline, pmix };
    let made = check_in_create_verify(&steps, fingerprint, premade_world, kept);
    let made = made.map_err(|e| opened.faults.verdict(e));
    match made {
        Ok(made) => {
            // Up: a death from now on is found by what fails (or a health check).
            init_over(&opened.faults, args);
            // Every rank holds the job's secret: the store serves only them from now on.
            opened.store.close_to_outsiders();
            Ok(assemble(args, env, layout, opened, made, start, t_store))
        }
        Err(e) => {
            let first = layout.grids.swap_remove(0).topology;
            init_over(&opened.faults, args);
            Err(failed(claim, e, args, env, first, opened, deadline))
        }
    }
}

/// Validate everything that needs no network, so that a bad layout or backend fails fast on every
/// rank: the timeout, every grid and this rank's place in it, its RNG streams, the backend and
/// strategy, and the plan of what this rank creates.
fn validate(args: &InitArgs, env: &LaunchEnv, factory: &BackendResolver) -> Result<Layout, RuntimeError> {
    if args.timeout.is_zero() {
        return Err(RuntimeError::InvalidArgument("init timeout must be > 0".into()));
    }
    let grids = if args.grids.is_empty() { vec![only_grid(args, env)?] } else { several_grids(args, env)? };
    let (backend, strategy) = choose_backend(args, factory)?;
    let layout_world = args.layout_world(env.world_size)?;
    let plan = job_plan(&grids, env.rank, (0..layout_world).collect())?;
    Ok(Layout { grids, backend, strategy, plan })
}

/// A grid of the job as this rank sees it: its layout over `layout_world`, this rank's place in
/// it (when in its window) and RNG streams (when `seed` is given), `tag` its groups' tag.
fn grid(
    args: &InitArgs,
    name: &str,
    tag: GridTag,
    topology: Topology,
    seed: Option<i64>,
    rank: u32,
) -> Result<Grid, RuntimeError> {
    let view = if topology.in_grid(rank) { Some(topology.rank_view(rank)?) } else { None };
    let rng = match (seed, &view) {
        (Some(seed), Some(_)) => seed_rng(args, &topology, rank, seed)?,
        _ => None,
    };
    let aliases = aliased_kinds(&topology, &args.comm_config);
    Ok(Grid { name: name.to_string(), tag, topology, view, rng, aliases, mindspeed: None })
}

/// The job's only grid, which must cover every rank of the world less its spares.
fn only_grid(args: &InitArgs, env: &LaunchEnv) -> Result<Grid, RuntimeError> {
    check_grid_name(&args.grid_name)?;
    let topology = validate_topology(args, env)?;
    let mut g = grid(args, &args.grid_name, None, topology, args.seed, env.rank)?;
    if let Some(o) = &args.mindspeed {
        let bad = |e: TopologyError| RuntimeError::InvalidArgument(format!("mindspeed: {e}"));
        g.mindspeed = Some(MindSpeedLayout::new(&g.topology, o.clone()).map_err(bad)?);
    }
    Ok(g)
}

/// Several grids: each valid over the world and inside it, names unique, every rank of the world
/// in at least one of them.
fn several_grids(args: &InitArgs, env: &LaunchEnv) -> Result<Vec<Grid>, RuntimeError> {
    if args.mindspeed.is_some() {
        return Err(RuntimeError::InvalidArgument(
            "mindspeed: MindSpeed's groups are built on a job of one grid, not several".into(),
        ));
    }
    if args.spares > 0 {
        return Err(RuntimeError::InvalidArgument(format!(
            "spares ({}) with several grids: a spare takes a failed rank's place in a job of one grid only (recovery of several \
             grids drops whole replicas instead)",
            args.spares
        )));
    }
    let world = args.layout_world(env.world_size)?;
    let mut grids: Vec<Grid> = Vec::new();
    for (name, config, seed) in args.all_grids() {
        check_grid_name(name)?;
        if grids.iter().any(|g| g.name == name) {
            return Err(RuntimeError::InvalidArgument(format!("grid name '{name}' is given twice")));
        }
        let in_grid = |e: String| RuntimeError::InvalidArgument(format!("grid '{name}': {e}"));
        let topology = Topology::new(config.clone(), world).map_err(|e| in_grid(e.to_string()))?;
        let end = u64::from(topology.rank_offset()) + u64::from(topology.world_size());
        if end > u64::from(world) {
            return Err(in_grid(format!(
                "covers ranks {}..{}, beyond the world of {world} ranks (set local_world_size to its size)",
                topology.rank_offset(),
                end - 1
            )));
        }
        grids.push(grid(args, name, Some(Arc::from(name)), topology, seed, env.rank)?);
    }
    let mut windows: Vec<(u64, u64)> = grids
        .iter()
        .map(|g| {
            (
                u64::from(g.topology.rank_offset()),
                u64::from(g.topology.rank_offset()) + u64::from(g.topology.world_size()),
            )
        })
        .collect();
    windows.sort_unstable();
    let mut uncovered: Vec<String> = Vec::new();
    let mut next = 0u64;
    for (start, end) in windows.into_iter().chain([(u64::from(world), u64::from(world))]) {
        if start > next {
            uncovered.push(if start - next == 1 { next.to_string() } else { format!("{next}-{}", start - 1) });
        }
        next = next.max(end);
    }
    if args.grids_disjoint_or_identical {
        let spans: Vec<(&str, u32, u32)> =
            grids.iter().map(|g| (g.name.as_str(), g.topology.rank_offset(), g.topology.world_size())).collect();
        crate::runtime::creation::grid_rule::check_disjoint_or_identical(&spans, world)
            .map_err(RuntimeError::InvalidArgument)?;
    }
    if !uncovered.is_empty() {
        let names: Vec<&str> = grids.iter().map(|g| g.name.as_str()).collect();
        return Err(RuntimeError::InvalidArgument(format!(
            "rank(s) {} of the world of {world} are in none of the grids {}: every rank must be in at least one",
            uncovered.join(", "),
            names.join(", ")
        )));
    }
    Ok(grids)
}

/// The layout of `args` over the world less its spares, which must cover every rank of it.
fn validate_topology(args: &InitArgs, env: &LaunchEnv) -> Result<Topology, RuntimeError> {
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
    Ok(topology)
}

/// This rank's RNG streams in `topology`, seeded by the policy from `seed`.
fn seed_rng(
    args: &InitArgs,
    topology: &Topology,
    rank: u32,
    seed: i64,
) -> Result<Option<Arc<Mutex<RankRng>>>, RuntimeError> {
    let req = seed_request(topology, rank, &args.seed_policy, seed, args.data_parallel_random_init)?;
    let mut rng = RankRng::new(coordinates(topology, rank)?);
    rng.seed(&req)?;
    Ok(Some(Arc::new(Mutex::new(rng))))
}

/// The backend `args` names and the strategy it creates with; verification and all-gather twins
/// must be possible with it.
fn choose_backend(
    args: &InitArgs,
    factory: &BackendResolver,
) -> Result<(Arc<dyn CommFactory>, CommStrategy), RuntimeError> {
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
    Ok((backend, strategy))
}

/// The backend takes the communicator options of every kind to be created (and the default).
fn check_options(args: &InitArgs, layout: &Layout) -> Result<(), RuntimeError> {
    let options_error =
        |what: String| move |e: CommError| RuntimeError::Comm(e.context(format!("communicator options of {what}")));
    let backend = &layout.backend;
    backend.check_options(&args.comm_config.default).map_err(options_error("every kind (the default)".into()))?;
    for (_, kind) in &layout.plan.kinds {
        backend.check_options(&kind.options(&args.comm_config)).map_err(options_error(kind.to_string()))?;
    }
    Ok(())
}

/// The initialization is over (up or failed; every call it made has returned): from here on (its
/// store kept for recovery, say) a death ends no wait, and the backend's calls run again.
fn init_over(faults: &Faults, args: &InitArgs) {
    faults.set_armed(false);
    faults.set_deadline(None);
    faults.set_idle_patience(args.timeout);
}

/// Open the attempt's store (or take a recovery's), start the heartbeat, and learn this rank's
/// host and the address it advertises.
fn open(
    env: &LaunchEnv,
    args: &InitArgs,
    reuse: Option<(StoreHandles, String, Vec<u32>)>,
    deadline: Deadline,
    backend: &Arc<dyn CommFactory>,
) -> Result<Opened, RuntimeError> {
    let (reuse, launcher) = match reuse {
        Some((store, attempt, launcher)) => (Some((store, attempt)), Some(launcher)),
        None => (None, None),
    };
    let (mut store, attempt) = open_attempt(env, args.timeout, reuse)?;
    let env = &store.resolved(env);
    let faults = Faults::start(env, &attempt, deadline.left(), &store, launcher)?;
    store.let_go_of_unproven_first();
    faults.set_deadline(Some(deadline.instant()));
    // While this initialization runs, a peer found dead ends the waits for it at once: the calls
    // blocked on the store, and every backend call in flight.
    faults.levers(&store, backend);
    faults.set_armed(true);
    let base: Arc<dyn Store> = Arc::new(PrefixStore::new(&attempt, store.client()));
    // Once the heartbeat finds the store's host gone, every store call fails at once, naming it.
    let base = faults.guard(base);
    let host = store.host();
    if crate::backend::debug_log() {
        eprintln!("mcore_init: rank {} on host {} advertises {} ({})", env.rank, host.label(), host.addr, host.why);
        eprintln!(
            "mcore_init: rank {} meets the others at {}:{} ({})",
            env.rank, env.master_addr, env.master_port, env.rendezvous_why
        );
    }
    Ok(Opened { base, faults, store, attempt, host })
}

/// The steps on the store: check in, create the communicators, verify them.
fn check_in_create_verify(
    s: &Steps,
    fingerprint: &[u8],
    premade_world: Option<Box<dyn Communicator>>,
    kept: Vec<LiveGroup>,
) -> Result<Made, RuntimeError> {
    check_in_all(s, fingerprint)?;
    let t_checkin = s.start.elapsed();
    phase(InitPhase::CheckedIn);
    let created = create(s, premade_world, kept)?;
    let t_groups = s.start.elapsed();
    phase(InitPhase::Created);
    let communicators = verify(s, &created.groups)?;
    Ok(Made { created, communicators, t_checkin, t_groups })
}

/// Publish this rank's host, and check in with every rank of the world: through PMIx when it
/// can (rank 0 then writes every rank's host to the store in one request, for the explanations of
/// later failures; who is missing is named from the launcher's process table), else, or when
/// the table cannot tell, through the store, which names who is missing.
fn check_in_all(s: &Steps, fingerprint: &[u8]) -> Result<(), RuntimeError> {
    let (env, base, began) = (s.env, s.opened.base.as_ref(), Instant::now());
    if let Some(pmix) = s.pmix {
        // The fence ends early enough for the store's check-in to name who did not come.
        let reserve = (s.args.timeout / 5).min(Duration::from_secs(2));
        let until = s.deadline.earlier_by(reserve);
        let faults = &s.opened.faults;
        let me = (&s.opened.host, fingerprint);
        match pmix_rendezvous::check_in(pmix, &s.opened.attempt, me, until, s.deadline) {
            Ok(CheckIn::All(records)) => {
                if env.rank == 0 {
                    let keys: Vec<String> =
                        (0..records.len() as u32).map(crate::runtime::meeting::keys::host).collect();
                    let items: Vec<(&str, &[u8])> =
                        keys.iter().zip(&records).map(|(k, (h, _))| (k.as_str(), h.as_bytes())).collect();
                    base.multi_set(&items)?;
                }
                let fingerprints: Vec<Vec<u8>> = records.iter().map(|(_, f)| f.clone()).collect();
                let label = |r: u32| host::label_from(&records.get(r as usize)?.0);
                return verdict(&fingerprints, &|ranks| host::describe_by(ranks, &label))
                    .map_err(RuntimeError::Checkin);
            }
            Ok(CheckIn::Missing { ranks, fence, table }) => {
                if let Some(named) =
                    table.as_ref().ok().and_then(|t| faults.missing_per_launcher(&ranks, t, began.elapsed()))
                {
                    return Err(RuntimeError::Checkin(named));
                }
                if crate::backend::debug_log() {
                    let fence = fence.map_or_else(|| "over".to_string(), |e| e.to_string());
                    let table = table.map_or_else(|e| e.to_string(), |t| format!("{} processes", t.len()));
                    eprintln!(
                        "mcore_init: rank {}: the PMIx check-in misses rank(s) {} (fence: {fence}; the launcher's \
                         table: {table}); checking in through the store",
                        env.rank,
                        host::format_ranks(&ranks)
                    );
                }
            }
            // The death of a rank ended the fence: a rank missing, named as the verdict says it.
            Err(e) if !e.dead.is_empty() => {
                let died = faults.who_is_gone_among(&e.dead);
                let (ranks, waited, nodes) = (e.dead, began.elapsed(), String::new());
                return Err(RuntimeError::Checkin(CheckinError::Missing { ranks, waited, nodes, died }));
            }
            Err(e) => {
                if crate::backend::debug_log() {
                    eprintln!(
                        "mcore_init: rank {}: the PMIx check-in failed ({e}); checking in through the store",
                        env.rank
                    );
                }
            }
        }
    }
    let host = Some(&s.opened.host);
    let interrupt = Some(s.opened.faults.interrupt());
    let seat = Seat { rank: env.rank, world_size: env.world_size, local_world_size: env.local_world_size };
    check_in_from(base, seat, fingerprint, host, s.deadline.left(), interrupt).map_err(|e| match e {
        // After a PMIx fence that failed: the wait counts from the start of the check-in.
        CheckinError::Missing { ranks, nodes, died, .. } if s.pmix.is_some() => {
            CheckinError::Missing { ranks, nodes, waited: began.elapsed(), died }
        }
        e => e,
    })?;
    Ok(())
}

/// Create this rank's communicators (with the groups a recovery kept, and the aliased kinds'),
/// in the layout's kind order; then the all-gather twins when asked for.
fn create(
    s: &Steps,
    premade_world: Option<Box<dyn Communicator>>,
    kept: Vec<LiveGroup>,
) -> Result<CreatedGroups, RuntimeError> {
    let (args, layout, base) = (s.args, s.layout, &s.opened.base);
    let prefixed = |name: &str| -> Arc<dyn Store> {
        s.opened
            .faults
            .backend_store(Arc::new(PrefixStore::new(&crate::runtime::meeting::keys::group(name), base.clone())))
    };
    // Under PMIx the world communicator's exchange runs through it (see `WorldExchange`).
    let exchange = s.pmix.map(|pmix| {
        let deadline = creation_deadline(s.deadline, args.timeout);
        Arc::new(WorldExchange::new(pmix, prefixed("world"), &s.opened.attempt, &layout.plan.world, deadline))
    });
    let group_store = |name: &str| -> Arc<dyn Store> {
        match &exchange {
            Some(x) if name == "world" => x.clone(),
            _ => prefixed(name),
        }
    };
    let host_addr = s.opened.host.addr.to_string();
    // One record of this rank's progress for every creation below: published once at the end
    // when nothing lasted (see `super::progress`).
    let progress = Progress::start(base.clone(), s.env.rank)
        .recording_in(s.opened.faults.records(base))
        .watching(s.opened.faults.shared_interrupt());
    // Every creation shares the one deadline (what is left of it) and this rank's address.
    let create = |plan: &RankPlan, strategy: CommStrategy, world: Option<Box<dyn Communicator>>| {
        GroupCreator {
            plan,
            factory: layout.backend.as_ref(),
            store_for: &group_store,
            progress: &progress,
            config: &args.comm_config,
            deadline: creation_deadline(s.deadline, args.timeout),
            host_addr: Some(host_addr.as_str()),
            device: args.device,
        }
        .create(strategy, world)
    };
    let created = create(&layout.plan, layout.strategy, premade_world);
    if let Some(x) = &exchange {
        x.finish();
    }
    let mut created = created?;
    created.groups.extend(kept);
    // In the grids' order and each's kind order, as if all were created now.
    let order: Vec<(&GridTag, PlanKind)> =
        layout.grids.iter().flat_map(|g| grid_kinds(g).into_iter().map(move |k| (&g.tag, k))).collect();
    created.groups.sort_by_key(|g| order.iter().position(|(t, k)| g.plan.is(t, *k)));
    for grid in &layout.grids {
        add_alias_groups(grid, &mut created.groups);
    }
    if args.create_all_gather_groups {
        let plan = all_gather_plan(&layout.grids, &layout.plan);
        let made = create(&plan, CommStrategy::PerGroup, None)?;
        created.groups.extend(made.groups);
    }
    progress.finish();
    Ok(created)
}

/// Verify every distinct communicator (when asked to); how many there are.
fn verify(s: &Steps, groups: &[LiveGroup]) -> Result<usize, RuntimeError> {
    Ok(if s.args.verify {
        verify_groups(groups, s.env.rank, s.layout.backend.verifies_concurrently())?
    } else {
        distinct_communicators(groups).len()
    })
}

/// The live runtime of a bring-up that succeeded.
fn assemble(
    args: &InitArgs,
    env: LaunchEnv,
    layout: Layout,
    opened: Opened,
    made: Made,
    start: Instant,
    t_store: Duration,
) -> Runtime {
    let Made { created: CreatedGroups { groups, world, world_time }, communicators, t_checkin, t_groups } = made;
    let total = start.elapsed();
    Runtime {
        timings: InitTimings {
            store: t_store,
            checkin: t_checkin - t_store,
            groups: t_groups - t_checkin,
            world: world_time,
            verify: total - t_groups,
            total,
        },
        backend_name: layout.backend.name().to_string(),
        backend: layout.backend.clone(),
        member_groups: crate::runtime::creation::member_registry::MemberGroups::default(),
        strategy: layout.strategy,
        env,
        grids: layout.grids,
        groups,
        communicators,
        host: opened.host,
        world,
        base: opened.base,
        timeout: args.timeout,
        store: opened.store,
        args: args.clone(),
        attempt: opened.attempt,
        key_spaces: Default::default(),
        faults: opened.faults,
    }
}

/// The end of a bring-up that failed with `e` (its peers already blamed). One that failed for a
/// peer is kept for recovery (in `claim`); any other keeps the store up until the ranks that arrived have read
/// the verdict and left. Nothing is kept when the store's host is gone.
fn failed(
    claim: &mut RuntimeClaim,
    e: RuntimeError,
    args: &InitArgs,
    env: LaunchEnv,
    topology: Topology,
    opened: Opened,
    deadline: Deadline,
) -> RuntimeError {
    if opened.faults.store_silent().is_some() {
        // The store's host is gone: nobody can read a verdict or recover through it.
        return e;
    }
    // A peer found dead (its connection's close notice) is a failure for a peer whatever the
    // wait it ended said.
    let dead = opened.faults.dead();
    if failed_for_a_peer(&e) || !dead.is_empty() {
        claim.keep(Kept::Attempt(Box::new(keep_for_recovery(&e, args, env, topology, opened, deadline))));
        return e;
    }
    // Keep the store up until the ranks that arrived have read the verdict and left.
    let gone: &[u32] = match e.cause() {
        RuntimeError::Checkin(CheckinError::Missing { ranks, .. }) => ranks,
        _ => &[],
    };
    // Wait for them only until a little past the deadline (not past the time this error
    // took to explain, e.g. waiting for failure records): ranks that died never leave.
    let wait = (deadline.instant() + LEAVE_GRACE).saturating_duration_since(Instant::now());
    let watch = Watch { faults: &opened.faults, store: &opened.store, attempt: &opened.attempt };
    leave(&opened.base, &env, gone, wait, watch);
    e
}

/// What to keep of a bring-up that failed for a peer (`e`), for recovery.
fn keep_for_recovery(
    e: &RuntimeError,
    args: &InitArgs,
    env: LaunchEnv,
    topology: Topology,
    opened: Opened,
    deadline: Deadline,
) -> Pending {
    // Recovery can continue from here (`recovery::reinitialize`, whose request tells the
    // ranks whose init succeeded, through their health check): keep the store (a host
    // keeps serving).
    let Opened { base, faults, store, attempt, .. } = opened;
    let mut suspected = match e.cause() {
        RuntimeError::Checkin(CheckinError::Missing { ranks, .. }) => ranks.clone(),
        _ => crate::runtime::meeting::explain::record_of(base.as_ref(), env.rank).unwrap_or_default(),
    };
    for r in faults.dead() {
        if !suspected.contains(&r) {
            suspected.push(r);
        }
    }
    // As any failed init (see `failed`), so that ranks that do not recover read their error
    // from a store that is still up; then the store is kept for recovery.
    // A host stops waiting as soon as a rank asks for recovery (it ends the leave meeting): it
    // is needed there.
    let wait = (deadline.instant() + LEAVE_GRACE).saturating_duration_since(Instant::now());
    let watch = Watch { faults: &faults, store: &store, attempt: &attempt };
    leave(&base, &env, &suspected, wait, watch);
    let (args, settled_by) = (args.clone(), deadline.instant() + LEAVE_GRACE);
    Pending { env, topology, args, store, base, attempt, suspected, spare: false, settled_by }
}
