//! Creating this rank's communicators from its group plan, and verifying them.
//!
//! Two strategies: per group (each communicator from its own rendezvous through the store), or
//! split (a world communicator, then one split collective per group kind in the layout's kind
//! order, which every rank of the world joins; ranks outside any group of the kind, or whose
//! group already has a communicator, pass no color).
//!
//! Backends may create concurrently: per group, all of a rank's communicators started at once
//! ([`CommFactory::creates_together`]); split, children handed out still initializing while the
//! next kinds split. Either way every communicator is waited for
//! ([`Communicator::wait_ready`]) before creation counts as done.
//!
//! Per group, every communicator comes from [`create_comms`], the runtime's one creation call;
//! the split strategy's world (`create_world`) and split collectives are the backend's other
//! calls. A failure of any of them is explained once, by `runtime::meeting::explain` (at init,
//! the members whose progress mark is below the step are behind).
//!
//! Every group kind partitions the ranks it covers, so for a member set M the first kind (in
//! the plan's rank-independent kind order) whose group is M is the same on every member of M.
//! Kinds whose groups have identical members (Megatron aliases, e.g. `data_parallel` and
//! `data_parallel_with_cp` when cp = 1) therefore share one communicator, named after that kind.
//! MindSpeed's groups never share: each is a `new_group` of its own in MindSpeed (its overlap
//! twins exist to be separate communicators).

use super::comm_config::{CommConfig, CommStrategy};
use crate::backend::{CommError, CommErrorKind, CommFactory, CommOptions, Communicator, GroupInfo, GroupRequest};
use crate::runtime::meeting::explain::{Behind, Explainer, Waited};
use crate::runtime::meeting::progress::Progress;
use crate::store::Store;
use crate::timeout::Deadline;
use crate::topology::{GroupKind, MindSpeedKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a planned communicator is: a group of a kind, the all-gather twin of one (Megatron's
/// `create_all_gather_groups`: the same members, a communicator of its own), or one of
/// MindSpeed's groups (its kind and copy: the hot-expert groups come in several copies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanKind {
    Group(GroupKind),
    AllGatherTwin(GroupKind),
    MindSpeed(MindSpeedKind, u32),
}

impl PlanKind {
    /// The Megatron group kind whose members this has (`None` for MindSpeed's).
    pub fn group_kind(self) -> Option<GroupKind> {
        match self {
            PlanKind::Group(k) | PlanKind::AllGatherTwin(k) => Some(k),
            PlanKind::MindSpeed(..) => None,
        }
    }

    /// The communicator options: the kind's; a twin gets the default (Megatron configures none).
    pub fn options(self, config: &CommConfig) -> CommOptions {
        match self {
            PlanKind::Group(k) => config.options_for(k),
            PlanKind::AllGatherTwin(_) => config.default.clone(),
            PlanKind::MindSpeed(k, _) => config.options_for_mindspeed(k),
        }
    }

    /// What keeps this kind's communicators from being shared with an earlier kind's group of
    /// the same members and options: MindSpeed's groups are each a communicator of their own.
    fn own_communicator(self) -> Option<PlanKind> {
        matches!(self, PlanKind::MindSpeed(..)).then_some(self)
    }
}

impl std::fmt::Display for PlanKind {
    /// The kind's key; a twin's is `<key>_all_gather`; MindSpeed's `pg_name`, and `exp_<copy>`
    /// for the hot-expert copies after the first.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanKind::Group(k) => write!(f, "{k}"),
            PlanKind::AllGatherTwin(k) => write!(f, "{k}_all_gather"),
            PlanKind::MindSpeed(k, 0) => write!(f, "{k}"),
            PlanKind::MindSpeed(k, copy) => write!(f, "{k}_{copy}"),
        }
    }
}

/// Which grid of the job a planned group belongs to: its name when the job has several grids
/// (see [`crate::runtime::GridSpec`]), `None` when it has one (names and store keys as before grids).
pub type GridTag = Option<Arc<str>>;

/// One group of this rank, as the topology lays it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    /// The grid it belongs to.
    pub grid: GridTag,
    /// What it is, e.g. the `tensor_model_parallel` kind.
    pub kind: PlanKind,
    /// Index of the group among the groups of its kind (rank-independent).
    pub index: u32,
    /// Members in communicator order (ascending).
    pub members: Vec<u32>,
}

impl GroupPlan {
    /// The communicator's name, `<kind>/<index>` (`<grid>:<kind>/<index>` when the job has
    /// several grids), equal on every member.
    pub fn name(&self) -> String {
        format!("{}{}/{}", grid_prefix(&self.grid), self.kind, self.index)
    }

    /// Its kind's key, `<grid>:<kind>` when the job has several grids.
    pub fn key(&self) -> String {
        format!("{}{}", grid_prefix(&self.grid), self.kind)
    }

    /// Whether this is the group of `kind` in `grid`.
    pub fn is(&self, grid: &GridTag, kind: PlanKind) -> bool {
        self.kind == kind && self.grid == *grid
    }
}

/// `<grid>:` for a grid of a job with several, nothing for the only grid.
pub fn grid_prefix(grid: &GridTag) -> String {
    grid.as_deref().map(|g| format!("{g}:")).unwrap_or_default()
}

/// A live group's communicator, locked. The one exception to the crate's lock-poison policy
/// (`crate::lock`): a lock whose holder panicked inside a backend call leaves a communicator in an
/// unknown state, so it is an error, never taken as it is.
pub fn lock_comm(comm: &SharedComm) -> Result<std::sync::MutexGuard<'_, Box<dyn Communicator>>, CommError> {
    comm.lock().map_err(|_| CommError::new(CommErrorKind::Backend, "communicator lock poisoned"))
}

/// What one rank creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankPlan {
    /// This process's global rank.
    pub rank: u32,
    /// The world's global ranks, ascending (the split strategy's parent communicator).
    pub world: Vec<u32>,
    /// Every group kind of every grid, in a rank-independent order (the grids in the job's
    /// order, each's kinds in its layout's order): the order of creation and of the splits.
    pub kinds: Vec<(GridTag, PlanKind)>,
    /// This rank's groups, in the order of `kinds` (kinds it is in no group of are absent).
    pub groups: Vec<GroupPlan>,
}

/// The strategy to use: `requested`, with `Auto` resolved to split when the backend can (unless
/// it prefers per group and can do that), else per group. An explicit request the backend cannot
/// honour is an error saying why.
pub fn resolve_strategy(requested: CommStrategy, factory: &dyn CommFactory) -> Result<CommStrategy, String> {
    let split = factory.split_unavailable();
    let per_group = factory.per_group_unavailable();
    match (requested, split, per_group) {
        (CommStrategy::Auto, None, Some(_)) => Ok(CommStrategy::Split),
        (CommStrategy::Auto, None, None) if !factory.prefers_per_group() => Ok(CommStrategy::Split),
        (CommStrategy::Auto, _, None) => Ok(CommStrategy::PerGroup),
        (CommStrategy::Auto, Some(no_split), Some(no_group)) => {
            Err(format!("no way to create communicators: {no_split}, and {no_group}"))
        }
        (CommStrategy::Split, None, _) => Ok(CommStrategy::Split),
        (CommStrategy::Split, Some(why), _) => Err(format!("the split strategy was requested, but {why}")),
        (CommStrategy::PerGroup, _, None) => Ok(CommStrategy::PerGroup),
        (CommStrategy::PerGroup, _, Some(why)) => Err(format!("the per-group strategy was requested, but {why}")),
    }
}

/// The one creation call of the runtime (init, groups made after init, a recreate-mode resume,
/// recovery's re-forming): the communicators of `requests`, made together (the backend's
/// [`CommFactory::create_groups_together`]) when `together`, else one by one; their number
/// checked; and, when `ready`, each waited for until ready ([`Communicator::wait_ready`]). A
/// failure comes with the index of the request it concerns, already explained by `explainer`
/// (who of `waited[i]`, the members request `i` waited for, kept it: see
/// `runtime::meeting::explain`).
pub fn create_comms(
    factory: &dyn CommFactory,
    requests: &[GroupRequest<'_>],
    waited: &[Waited<'_>],
    explainer: &Explainer<'_>,
    together: bool,
    ready: bool,
) -> Result<Vec<Box<dyn Communicator>>, (usize, CommError)> {
    let explained = |(i, e): (usize, CommError)| {
        let i = i.min(waited.len().saturating_sub(1));
        let e = match waited.get(i) {
            Some(w) => explainer.explain(w, e),
            None => e,
        };
        (i, e)
    };
    let mut made = if together {
        factory.create_groups_together(requests).map_err(explained)?
    } else {
        let one = |(i, (info, options, store)): (usize, &GroupRequest<'_>)| {
            factory.create_group(info, options, store.clone()).map_err(|e| explained((i, e)))
        };
        requests.iter().enumerate().map(one).collect::<Result<Vec<_>, _>>()?
    };
    if made.len() != requests.len() {
        let message =
            format!("backend '{}' returned {} communicators for {} groups", factory.name(), made.len(), requests.len());
        return Err(explained((0, CommError::new(CommErrorKind::Backend, message))));
    }
    if ready {
        for (i, c) in made.iter_mut().enumerate() {
            c.wait_ready().map_err(|e| explained((i, e)))?;
        }
    }
    Ok(made)
}

/// What decides that two groups share a communicator: members, options and, for a kind whose
/// groups never share, the kind itself.
type ShareKey = (Vec<u32>, CommOptions, Option<PlanKind>);

/// A communicator shared by every kind whose group has the same members.
pub type SharedComm = Arc<Mutex<Box<dyn Communicator>>>;

/// A created group of this rank.
pub struct LiveGroup {
    pub plan: GroupPlan,
    pub group_rank: u32,
    /// Name of the communicator (`<kind>/<index>` of the first kind with these members).
    pub comm_name: String,
    pub comm: SharedComm,
    /// Time this rank spent creating the kind's communicator: its split collective (joined by
    /// every rank, members or not), or its own creation (zero when it shares an earlier one),
    /// plus the time it waited for it to become ready. With creation together (per group) the
    /// kind's creation is the shared start of all of them, so the times overlap.
    pub created_in: Duration,
}

/// The communicators of one rank.
pub struct CreatedGroups {
    pub groups: Vec<LiveGroup>,
    /// The split strategy's world communicator (kept until teardown, after the groups).
    pub world: Option<SharedComm>,
    /// Time spent creating the world communicator.
    pub world_time: Duration,
}

/// Why creating or verifying a group failed; names the group and keeps the backend's typed error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupError {
    pub group: String,
    pub members: Vec<u32>,
    pub error: CommError,
}

impl GroupError {
    fn new(group: impl Into<String>, members: &[u32], error: CommError) -> Self {
        GroupError { group: group.into(), members: members.to_vec(), error }
    }
}

impl std::fmt::Display for GroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "group {} (ranks {}): {}",
            self.group,
            crate::runtime::launch::host::format_ranks(&self.members),
            self.error
        )
    }
}

impl std::error::Error for GroupError {}

/// Create this rank's communicators of `plan` with `strategy` (resolved: split or per group).
/// `store_for(name)` gives the store private to the communicator called `name` (`world` for the
/// split strategy's parent); `progress_store` holds every rank's progress marks (see
/// `runtime::progress`), so a failure names the members that never arrived; `config` gives each kind's
/// options. Kinds whose groups have the same members and options share one communicator.
/// `timeout` bounds the whole creation: each group gets what is left of it. `host_addr` is the
/// address this rank advertises to peers (handed to the backend with each group). See
/// [`GroupCreator`].
#[allow(clippy::too_many_arguments)]
pub fn create_groups(
    plan: &RankPlan,
    strategy: CommStrategy,
    factory: &dyn CommFactory,
    store_for: &dyn Fn(&str) -> Arc<dyn Store>,
    progress_store: Arc<dyn Store>,
    config: &CommConfig,
    timeout: Duration,
    host_addr: Option<&str>,
) -> Result<CreatedGroups, GroupError> {
    let deadline = Deadline::after(timeout);
    // Its marks end with it (no `Progress::finish`): to the others, as if it stopped there.
    let progress = Progress::start(progress_store, plan.rank);
    GroupCreator { plan, factory, store_for, progress: &progress, config, deadline, host_addr, device: None }
        .create(strategy, None)
}

/// One rank's creation of the communicators of its plan: what both strategies share (see
/// [`create_groups`] for the parameters).
pub struct GroupCreator<'a> {
    pub plan: &'a RankPlan,
    pub factory: &'a dyn CommFactory,
    /// The store private to the communicator called `name` (`world` for the split strategy's parent).
    pub store_for: &'a dyn Fn(&str) -> Arc<dyn Store>,
    /// This rank's progress marks (see `runtime::progress`).
    pub progress: &'a Progress,
    pub config: &'a CommConfig,
    /// Bounds the whole creation: each group gets what is left of it.
    pub deadline: Deadline,
    pub host_addr: Option<&'a str>,
    /// The device the caller asked for, handed to backends that take one.
    pub device: Option<u32>,
}

/// Where a kind's new communicator comes from.
enum Source<'w> {
    /// A split collective of the world communicator, which every rank of the world joins.
    Split(&'w mut dyn Communicator),
    /// The group's own creation, or a communicator started together with the others (by name).
    PerGroup(HashMap<String, Box<dyn Communicator>>),
}

impl GroupCreator<'_> {
    /// Create the communicators with `strategy` (resolved: split or per group); for the split
    /// strategy, `premade_world` is a world communicator made already (recovery: the old world
    /// shrunk to the survivors) used instead of `create_world`. Another strategy aborts it.
    pub fn create(
        &self,
        strategy: CommStrategy,
        premade_world: Option<Box<dyn Communicator>>,
    ) -> Result<CreatedGroups, GroupError> {
        match strategy {
            CommStrategy::Split => self.create_split(premade_world),
            _ => {
                if let Some(mut unused) = premade_world {
                    unused.abort();
                }
                self.create_per_group()
            }
        }
    }

    /// Split: the world communicator (step 1), then one split collective per kind.
    fn create_split(&self, premade_world: Option<Box<dyn Communicator>>) -> Result<CreatedGroups, GroupError> {
        let plan = self.plan;
        let start = Instant::now();
        let info = self.info_of("world", &plan.world)?;
        self.mark(1);
        let mut world = match premade_world {
            Some(comm) => comm,
            None => self
                .factory
                .create_world(&info, &self.config.default, (self.store_for)("world"))
                .map_err(|e| self.failed(1, "world", &plan.world, e))?,
        };
        let world_time = start.elapsed();
        let groups = self.create_kinds(&mut Source::Split(world.as_mut()), None)?;
        Ok(CreatedGroups { groups, world: Some(Arc::new(Mutex::new(world)) as SharedComm), world_time })
    }

    /// Per group: each group's own communicator; with a backend that creates them together, every
    /// distinct group's is started at once (this rank is past every step then), and taken in plan
    /// order.
    fn create_per_group(&self) -> Result<CreatedGroups, GroupError> {
        let together = self.factory.creates_together();
        let t_together = Instant::now();
        let started = if together { self.start_together()? } else { HashMap::new() };
        let groups = self.create_kinds(&mut Source::PerGroup(started), together.then_some(t_together))?;
        Ok(CreatedGroups { groups, world: None, world_time: Duration::ZERO })
    }

    /// Every distinct group's communicator (by members and options) of this rank, started at once,
    /// by name.
    fn start_together(&self) -> Result<HashMap<String, Box<dyn Communicator>>, GroupError> {
        let (plan, factory) = (self.plan, self.factory);
        let mut distinct: Vec<(u64, &GroupPlan, CommOptions)> = Vec::new();
        for (step, (grid, kind)) in (2u64..).zip(&plan.kinds) {
            let options = kind.options(self.config);
            if let Some(p) = plan.groups.iter().find(|g| g.is(grid, *kind)) {
                let shared = |q: &GroupPlan, o: &CommOptions| {
                    q.members == p.members
                        && *o == options
                        && kind.own_communicator().is_none()
                        && q.kind.own_communicator().is_none()
                };
                if !distinct.iter().any(|(_, q, o)| shared(q, o)) {
                    distinct.push((step, p, options));
                }
            }
        }
        let names: Vec<String> = distinct.iter().map(|(_, p, _)| p.name()).collect();
        let infos = names
            .iter()
            .zip(&distinct)
            .map(|(n, (_, p, _))| self.info_of(n, &p.members))
            .collect::<Result<Vec<_>, _>>()?;
        let requests: Vec<_> =
            infos.iter().zip(&distinct).map(|(info, (_, _, o))| (info, o, (self.store_for)(&info.name))).collect();
        if let Some(last) = distinct.last() {
            self.mark(last.0);
        }
        let waited: Vec<Waited<'_>> = distinct.iter().map(|(step, p, _)| waited_at(*step, &p.members)).collect();
        // Each is waited for in plan order (`wait_ready`), its time counted to its kind.
        let comms = create_comms(factory, &requests, &waited, &Explainer::of(self.progress), true, false)
            .map_err(|(i, e)| GroupError::new(&names[i], &distinct[i].1.members, e))?;
        Ok(names.into_iter().zip(comms).collect())
    }

    /// This rank's group of each kind, in plan order (step k + 2 for the k-th kind): sharing the
    /// communicator of an earlier kind with the same members and options, or a new one from
    /// `source`; then every new one waited for. `together`: when the communicators were started
    /// together (each kind's time counts from then).
    fn create_kinds(&self, source: &mut Source, together: Option<Instant>) -> Result<Vec<LiveGroup>, GroupError> {
        let plan = self.plan;
        let mut by_key: HashMap<ShareKey, (String, SharedComm)> = HashMap::new();
        let mut live = Vec::with_capacity(plan.groups.len());
        // (index into `live`, step) of each communicator this rank created, to wait for.
        let mut created: Vec<(usize, u64)> = Vec::new();
        for (step, (grid, kind)) in (2u64..).zip(&plan.kinds) {
            let options = kind.options(self.config);
            let start = together.unwrap_or_else(Instant::now);
            let Some(p) = plan.groups.iter().find(|g| g.is(grid, *kind)) else {
                self.join_without_color(source, step, grid, kind, &options)?;
                continue;
            };
            let name = p.name();
            let info = self.info_of(&name, &p.members)?;
            let key = (p.members.clone(), options.clone(), kind.own_communicator());
            let (comm_name, comm) = match by_key.get(&key) {
                Some(shared) => {
                    self.join_without_color(source, step, grid, kind, &options)?;
                    let shared = shared.clone();
                    let created_in = if together.is_some() { Duration::ZERO } else { start.elapsed() };
                    live.push(LiveGroup {
                        plan: p.clone(),
                        group_rank: info.group_rank,
                        comm_name: shared.0,
                        comm: shared.1,
                        created_in,
                    });
                    continue;
                }
                None => {
                    let comm = self.new_comm(source, step, p, &name, &info, &options)?;
                    created.push((live.len(), step));
                    let shared = (name, Arc::new(Mutex::new(comm)) as SharedComm);
                    by_key.insert(key, shared.clone());
                    shared
                }
            };
            live.push(LiveGroup {
                plan: p.clone(),
                group_rank: info.group_rank,
                comm_name,
                comm,
                created_in: start.elapsed(),
            });
        }
        self.wait_ready(&mut live, created)?;
        Ok(live)
    }

    /// Split collectives are over the whole world: a rank that creates nothing of `kind` (or
    /// shares an earlier kind's communicator) joins without a color. Nothing to do per group.
    fn join_without_color(
        &self,
        source: &mut Source,
        step: u64,
        grid: &GridTag,
        kind: &PlanKind,
        options: &CommOptions,
    ) -> Result<(), GroupError> {
        let Source::Split(w) = source else { return Ok(()) };
        let what = format!("{}{kind} (split, joined without a group)", grid_prefix(grid));
        self.mark(step);
        w.split(0, None, options).map(drop).map_err(|e| self.failed(step, &what, &self.plan.world, e))
    }

    /// A new communicator for this rank's group `p` (called `name`), from `source`.
    fn new_comm(
        &self,
        source: &mut Source,
        step: u64,
        p: &GroupPlan,
        name: &str,
        info: &GroupInfo,
        options: &CommOptions,
    ) -> Result<Box<dyn Communicator>, GroupError> {
        // A split waits for the whole world, a group's own creation for its members.
        let waited_for = if matches!(source, Source::Split(_)) { &self.plan.world } else { &p.members };
        let fail = |e: CommError| GroupError::new(name, &p.members, self.explained(step, waited_for, e));
        match source {
            Source::PerGroup(started) => match started.remove(name) {
                Some(comm) => Ok(comm),
                None => {
                    self.mark(step);
                    let request = [(info, options, (self.store_for)(name))];
                    let waited = [waited_at(step, &p.members)];
                    create_comms(self.factory, &request, &waited, &Explainer::of(self.progress), false, false)
                        .map_err(|(_, e)| GroupError::new(name, &p.members, e))?
                        .pop()
                        .ok_or_else(|| fail(CommError::new(CommErrorKind::Backend, "no communicator was returned")))
                }
            },
            Source::Split(w) => {
                self.mark(step);
                w.split(p.index, Some(info), options).map_err(&fail)?.ok_or_else(|| {
                    fail(CommError::new(CommErrorKind::Backend, "the split gave this member no communicator"))
                })
            }
        }
    }

    /// Communicators created together may still be initializing: wait for each of `created`
    /// (index into `live`, step; its deadline is the backend's); a kind's time is what this rank
    /// spent creating it plus waiting for it.
    fn wait_ready(&self, live: &mut [LiveGroup], created: Vec<(usize, u64)>) -> Result<(), GroupError> {
        for (i, step) in created {
            let waiting = Instant::now();
            let g = &mut live[i];
            let ready = lock_comm(&g.comm).and_then(|mut c| c.wait_ready());
            if let Err(e) = ready {
                return Err(GroupError::new(&g.comm_name, &g.plan.members, self.explained(step, &g.plan.members, e)));
            }
            g.created_in += waiting.elapsed();
        }
        Ok(())
    }

    /// The group `name` of `members` as the backend is given it, with what is left of the deadline.
    fn info_of(&self, name: &str, members: &[u32]) -> Result<GroupInfo, GroupError> {
        let left = self.deadline.left();
        GroupInfo::new(name, members.to_vec(), self.plan.rank, left)
            .map(|g| g.with_host_addr(self.host_addr).with_device(self.device))
            .map_err(|e| GroupError::new(name, members, e.into()))
    }

    /// Mark this rank past `step` (step 1 is the world communicator, step k + 2 the k-th kind).
    fn mark(&self, step: u64) {
        self.progress.mark(step)
    }

    /// `e`, having waited for `waited_for` at `step`, explained (the one explanation of a failed
    /// creation: `runtime::meeting::explain`).
    fn explained(&self, step: u64, waited_for: &[u32], e: CommError) -> CommError {
        Explainer::of(self.progress).explain(&waited_at(step, waited_for), e)
    }

    /// Creating `group` of `members` at `step` failed with `e`.
    fn failed(&self, step: u64, group: &str, members: &[u32], e: CommError) -> GroupError {
        GroupError::new(group, members, self.explained(step, members, e))
    }
}

/// At init, a creation at `step` waited for `members`: those whose mark is below it are behind.
fn waited_at(step: u64, members: &[u32]) -> Waited<'_> {
    Waited { members, behind: Behind::Step(step) }
}

/// Verify one group's communicator with an all-reduce of `[global rank, 1]`, whose result the
/// plan predicts: `[sum of members, number of members]`. Errors name the group (`<kind>/<index>`).
pub fn verify_group(g: &LiveGroup, rank: u32) -> Result<(), GroupError> {
    let fail = |error: CommError| GroupError::new(g.plan.name(), &g.plan.members, error);
    let mut values = [rank as i64, 1];
    let mut comm = lock_comm(&g.comm).map_err(fail)?;
    comm.allreduce_sum_i64(&mut values)
        .map_err(|e| fail(CommError { message: format!("all-reduce failed: {e}"), ..e }))?;
    let want = [g.plan.members.iter().map(|&m| m as i64).sum::<i64>(), g.plan.members.len() as i64];
    if values != want {
        return Err(fail(CommError::new(
            CommErrorKind::Backend,
            format!(
                "all-reduce of [rank, 1] gave {values:?}, the layout predicts {want:?}: the communicator's members differ from the plan"
            ),
        )));
    }
    Ok(())
}

/// Names of the distinct communicators among `groups` (aliased kinds share one), in plan order.
pub fn distinct_communicators(groups: &[LiveGroup]) -> Vec<&LiveGroup> {
    let mut seen: Vec<&str> = Vec::new();
    groups
        .iter()
        .filter(|g| {
            let new = !seen.contains(&g.comm_name.as_str());
            if new {
                seen.push(&g.comm_name);
            }
            new
        })
        .collect()
}

/// Verify every distinct communicator once (see [`verify_group`]); how many were verified.
/// `concurrently` (a backend whose communicators are independent of each other, see
/// [`CommFactory::verifies_concurrently`]): one thread per communicator, so the all-reduces
/// overlap; the first failure in plan order is reported.
pub fn verify_groups(groups: &[LiveGroup], rank: u32, concurrently: bool) -> Result<usize, GroupError> {
    let distinct = distinct_communicators(groups);
    if concurrently && distinct.len() > 1 {
        let results: Vec<Result<(), GroupError>> = std::thread::scope(|s| {
            let threads: Vec<_> = distinct.iter().map(|g| s.spawn(move || verify_group(g, rank))).collect();
            threads
                .into_iter()
                .zip(&distinct)
                .map(|(t, g)| {
                    t.join().unwrap_or_else(|_| {
                        Err(GroupError::new(
                            g.plan.name(),
                            &g.plan.members,
                            CommError::new(CommErrorKind::Backend, "the verification thread panicked"),
                        ))
                    })
                })
                .collect()
        });
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
    } else {
        distinct.iter().try_for_each(|g| verify_group(g, rank))?;
    }
    Ok(distinct.len())
}

#[cfg(test)]
mod tests;
