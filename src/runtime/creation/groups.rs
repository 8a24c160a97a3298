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
//! Every group kind partitions the ranks it covers, so for a member set M the first kind (in
//! the plan's rank-independent kind order) whose group is M is the same on every member of M.
//! Kinds whose groups have identical members (Megatron aliases, e.g. `data_parallel` and
//! `data_parallel_with_cp` when cp = 1) therefore share one communicator, named after that kind.

use super::comm_config::{CommConfig, CommStrategy};
use crate::backend::{CommError, CommErrorKind, CommFactory, CommOptions, Communicator, GroupInfo, GroupRequest};
use crate::runtime::meeting::progress::Progress;
use crate::store::Store;
use crate::topology::GroupKind;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a planned communicator is: a group of a kind, or the all-gather twin of one (Megatron's
/// `create_all_gather_groups`: the same members, a communicator of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanKind {
    Group(GroupKind),
    AllGatherTwin(GroupKind),
}

impl PlanKind {
    /// The group kind whose members this has.
    pub fn group_kind(self) -> GroupKind {
        match self {
            PlanKind::Group(k) | PlanKind::AllGatherTwin(k) => k,
        }
    }

    /// The communicator options: the kind's; a twin gets the default (Megatron configures none).
    pub fn options(self, config: &CommConfig) -> CommOptions {
        match self {
            PlanKind::Group(k) => config.options_for(k),
            PlanKind::AllGatherTwin(_) => config.default.clone(),
        }
    }
}

impl std::fmt::Display for PlanKind {
    /// The kind's key; a twin's is `<key>_all_gather`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanKind::Group(k) => write!(f, "{k}"),
            PlanKind::AllGatherTwin(k) => write!(f, "{k}_all_gather"),
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

fn poisoned() -> CommError {
    CommError::new(CommErrorKind::Backend, "communicator lock poisoned")
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

/// The one creation call of the runtime (init, groups made after init, a recreate-mode resume):
/// the communicators of `requests`, made together (the backend's
/// [`CommFactory::create_groups_together`]) when `together`, else one by one; their number
/// checked; and, when `ready`, each waited for until ready ([`Communicator::wait_ready`]). A
/// failure comes with the index of the request it concerns, for the caller to explain.
pub fn create_comms(
    factory: &dyn CommFactory,
    requests: &[GroupRequest<'_>],
    together: bool,
    ready: bool,
) -> Result<Vec<Box<dyn Communicator>>, (usize, CommError)> {
    let mut made = if together {
        factory.create_groups_together(requests)?
    } else {
        let one = |(i, (info, options, store)): (usize, &GroupRequest<'_>)| {
            factory.create_group(info, options, store.clone()).map_err(|e| (i, e))
        };
        requests.iter().enumerate().map(one).collect::<Result<Vec<_>, _>>()?
    };
    if made.len() != requests.len() {
        let message =
            format!("backend '{}' returned {} communicators for {} groups", factory.name(), made.len(), requests.len());
        return Err((0, CommError::new(CommErrorKind::Backend, message)));
    }
    if ready {
        for (i, c) in made.iter_mut().enumerate() {
            c.wait_ready().map_err(|e| (i, e))?;
        }
    }
    Ok(made)
}

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
    let deadline = Instant::now() + timeout;
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
    pub deadline: Instant,
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
                if !distinct.iter().any(|(_, q, o)| q.members == p.members && *o == options) {
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
        // Each is waited for in plan order (`wait_ready`), its time counted to its kind.
        let comms = create_comms(factory, &requests, true, false).map_err(|(i, e)| {
            let i = i.min(distinct.len() - 1);
            self.failed(distinct[i].0, &names[i], &distinct[i].1.members, e)
        })?;
        Ok(names.into_iter().zip(comms).collect())
    }

    /// This rank's group of each kind, in plan order (step k + 2 for the k-th kind): sharing the
    /// communicator of an earlier kind with the same members and options, or a new one from
    /// `source`; then every new one waited for. `together`: when the communicators were started
    /// together (each kind's time counts from then).
    fn create_kinds(&self, source: &mut Source, together: Option<Instant>) -> Result<Vec<LiveGroup>, GroupError> {
        let plan = self.plan;
        let mut by_key: HashMap<(Vec<u32>, CommOptions), (String, SharedComm)> = HashMap::new();
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
            let key = (p.members.clone(), options.clone());
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
                    self.factory.create_group(info, options, (self.store_for)(name)).map_err(&fail)
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
            let ready = g.comm.lock().map_err(|_| poisoned()).and_then(|mut c| c.wait_ready());
            if let Err(e) = ready {
                return Err(GroupError::new(&g.comm_name, &g.plan.members, self.explained(step, &g.plan.members, e)));
            }
            g.created_in += waiting.elapsed();
        }
        Ok(())
    }

    /// The group `name` of `members` as the backend is given it, with what is left of the deadline.
    fn info_of(&self, name: &str, members: &[u32]) -> Result<GroupInfo, GroupError> {
        let left = self.deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        GroupInfo::new(name, members.to_vec(), self.plan.rank, left)
            .map(|g| g.with_host_addr(self.host_addr).with_device(self.device))
            .map_err(|e| GroupError::new(name, members, e.into()))
    }

    /// Mark this rank past `step` (step 1 is the world communicator, step k + 2 the k-th kind).
    fn mark(&self, step: u64) {
        self.progress.mark(step)
    }

    /// `e`, having waited for `waited_for` at `step`, with the ranks that never arrived named.
    fn explained(&self, step: u64, waited_for: &[u32], e: CommError) -> CommError {
        let message = self.progress.explain(waited_for, step, e.message.clone());
        CommError { message, ..e }
    }

    /// Creating `group` of `members` at `step` failed with `e`.
    fn failed(&self, step: u64, group: &str, members: &[u32], e: CommError) -> GroupError {
        GroupError::new(group, members, self.explained(step, members, e))
    }
}

/// Verify one group's communicator with an all-reduce of `[global rank, 1]`, whose result the
/// plan predicts: `[sum of members, number of members]`. Errors name the group (`<kind>/<index>`).
pub fn verify_group(g: &LiveGroup, rank: u32) -> Result<(), GroupError> {
    let fail = |error: CommError| GroupError::new(g.plan.name(), &g.plan.members, error);
    let mut values = [rank as i64, 1];
    let mut comm = g.comm.lock().map_err(|_| fail(poisoned()))?;
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
mod tests {
    use super::*;

    fn plan_kind(key: &str) -> PlanKind {
        PlanKind::Group(GroupKind::from_key(key).unwrap())
    }

    fn store_err(e: crate::store::StoreError) -> CommError {
        CommError::new(CommErrorKind::Store, e.to_string())
    }
    use crate::store::{MemoryStore, PrefixStore};
    use std::ffi::c_void;

    /// Split calls a world communicator saw: (color or None, options).
    type SplitLog = Arc<Mutex<Vec<(Option<u32>, CommOptions)>>>;

    /// Unit-test double: an in-process "communicator" that reduces through the store, enough
    /// to test naming, sharing, split ordering and verification logic (real backends, Gloo and
    /// NCCL, are tested with real processes elsewhere).
    struct StoreComm {
        store: Arc<dyn Store>,
        group: GroupInfo,
        round: u32,
        bias: i64,
        splits: SplitLog,
        /// Names of the communicators `wait_ready` was called on.
        waited: Arc<Mutex<Vec<String>>>,
    }

    impl Communicator for StoreComm {
        fn allreduce_sum_i64(&mut self, values: &mut [i64]) -> Result<(), CommError> {
            self.round += 1;
            let key = |r: u32| format!("ar{}/{}", self.round, r);
            let enc: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.store.set(&key(self.group.group_rank), &enc).map_err(store_err)?;
            values.iter_mut().for_each(|v| *v = 0);
            for r in 0..self.group.size() {
                let got = self.store.get(&key(r)).map_err(store_err)?;
                for (v, chunk) in values.iter_mut().zip(got.chunks(8)) {
                    *v += i64::from_le_bytes(chunk.try_into().unwrap());
                }
            }
            values[0] += self.bias;
            Ok(())
        }
        fn barrier(&mut self) -> Result<(), CommError> {
            self.allreduce_sum_i64(&mut [0]).map(|_| ())
        }
        fn raw_handle(&self) -> *mut c_void {
            std::ptr::null_mut()
        }
        fn wait_ready(&mut self) -> Result<(), CommError> {
            self.waited.lock().unwrap().push(self.group.name.clone());
            Ok(())
        }
        fn split(
            &mut self,
            color: u32,
            group: Option<&GroupInfo>,
            options: &CommOptions,
        ) -> Result<Option<Box<dyn Communicator>>, CommError> {
            self.splits.lock().unwrap().push((group.map(|_| color), options.clone()));
            Ok(group.map(|g| {
                let store: Arc<dyn Store> =
                    Arc::new(PrefixStore::new(&format!("split/{}", g.name), self.store.clone()));
                Box::new(StoreComm {
                    store,
                    group: g.clone(),
                    round: 0,
                    bias: 0,
                    splits: Arc::default(),
                    waited: self.waited.clone(),
                }) as Box<dyn Communicator>
            }))
        }
    }

    #[derive(Default)]
    struct Factory {
        created: Mutex<Vec<String>>,
        lie_about: Option<String>,
        splits: SplitLog,
        /// Wait (this long) for every member in `create_group`, like a real rendezvous.
        rendezvous: Option<Duration>,
        /// Create the per-group strategy's groups in one `create_groups_together` call.
        together: bool,
        waited: Arc<Mutex<Vec<String>>>,
    }

    impl CommFactory for Factory {
        fn name(&self) -> &str {
            "store-double"
        }
        fn split_unavailable(&self) -> Option<String> {
            None
        }
        fn create_group(
            &self,
            group: &GroupInfo,
            _: &CommOptions,
            store: Arc<dyn Store>,
        ) -> Result<Box<dyn Communicator>, CommError> {
            self.created.lock().unwrap().push(group.name.clone());
            if let Some(t) = self.rendezvous {
                store.set(&format!("here/{}", group.group_rank), b"").map_err(store_err)?;
                let keys: Vec<String> = (0..group.size()).map(|r| format!("here/{r}")).collect();
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                store.wait(&keys, t).map_err(store_err)?;
            }
            // A "wrong" communicator: its sums include a foreign member of rank 99.
            let bias = if self.lie_about.as_deref() == Some(group.name.as_str()) { 99 } else { 0 };
            Ok(Box::new(StoreComm {
                store,
                group: group.clone(),
                round: 0,
                bias,
                splits: Arc::default(),
                waited: self.waited.clone(),
            }))
        }
        fn creates_together(&self) -> bool {
            self.together
        }
        fn create_groups_together(
            &self,
            groups: &[crate::backend::GroupRequest<'_>],
        ) -> Result<Vec<Box<dyn Communicator>>, (usize, CommError)> {
            self.created.lock().unwrap().push("(together)".into());
            groups
                .iter()
                .enumerate()
                .map(|(i, (g, o, store))| self.create_group(g, o, store.clone()).map_err(|e| (i, e)))
                .collect()
        }
        fn create_world(
            &self,
            world: &GroupInfo,
            _: &CommOptions,
            store: Arc<dyn Store>,
        ) -> Result<Box<dyn Communicator>, CommError> {
            Ok(Box::new(StoreComm {
                store,
                group: world.clone(),
                round: 0,
                bias: 0,
                splits: self.splits.clone(),
                waited: self.waited.clone(),
            }))
        }
    }

    fn plan_for(rank: u32) -> RankPlan {
        // World of 4, tp=2: tp groups {0,1},{2,3}; dp groups {0,2},{1,3}; dp_with_cp = dp (cp=1);
        // an "embedding"-like kind only ranks 0 and 3 are in.
        let tp = rank / 2;
        let dp = rank % 2;
        let mut groups = vec![
            // Aliases not adjacent: sharing must not depend on plan order.
            GroupPlan { grid: None, kind: plan_kind("data_parallel_with_cp"), index: dp, members: vec![dp, dp + 2] },
            GroupPlan {
                grid: None,
                kind: plan_kind("tensor_model_parallel"),
                index: tp,
                members: vec![2 * tp, 2 * tp + 1],
            },
            GroupPlan { grid: None, kind: plan_kind("data_parallel"), index: dp, members: vec![dp, dp + 2] },
        ];
        if rank == 0 || rank == 3 {
            groups.push(GroupPlan { grid: None, kind: plan_kind("embedding"), index: 0, members: vec![0, 3] });
        }
        let kinds = ["data_parallel_with_cp", "tensor_model_parallel", "data_parallel", "embedding"]
            .map(|k| (None, plan_kind(k)))
            .to_vec();
        RankPlan { rank, world: vec![0, 1, 2, 3], kinds, groups }
    }

    /// Per rank: verification result, communicators created per group, communicator name per
    /// plan entry, split calls on the world.
    struct Outcome {
        verified: Result<usize, GroupError>,
        created: Vec<String>,
        names: Vec<String>,
        splits: Vec<(Option<u32>, CommOptions)>,
        waited: Vec<String>,
    }

    fn run(strategy: CommStrategy, lie_about: Option<&str>, config: CommConfig) -> Vec<Outcome> {
        run_with(strategy, lie_about, config, false)
    }

    fn run_with(strategy: CommStrategy, lie_about: Option<&str>, config: CommConfig, together: bool) -> Vec<Outcome> {
        // One in-process store per communicator name, shared by the rank threads.
        let stores: Arc<Mutex<HashMap<String, Arc<dyn Store>>>> = Arc::default();
        let threads: Vec<_> = (0..4u32)
            .map(|rank| {
                let stores = stores.clone();
                let lie = lie_about.map(str::to_string);
                let config = config.clone();
                std::thread::spawn(move || {
                    let f = Factory { lie_about: lie, together, ..Default::default() };
                    let store_for = |name: &str| -> Arc<dyn Store> {
                        let mut m = stores.lock().unwrap();
                        m.entry(name.to_string())
                            .or_insert_with(|| Arc::new(MemoryStore::new(Duration::from_secs(10))))
                            .clone()
                    };
                    let progress = store_for("progress");
                    let created = create_groups(
                        &plan_for(rank),
                        strategy,
                        &f,
                        &store_for,
                        progress,
                        &config,
                        Duration::from_secs(10),
                        None,
                    )
                    .unwrap();
                    assert_eq!(created.world.is_some(), strategy == CommStrategy::Split);
                    let groups = created.groups;
                    let names = groups.iter().map(|g| g.comm_name.clone()).collect();
                    let verified = verify_groups(&groups, rank, rank % 2 == 0);
                    let created = f.created.lock().unwrap().clone();
                    let splits = f.splits.lock().unwrap().clone();
                    let waited = f.waited.lock().unwrap().clone();
                    Outcome { verified, created, names, splits, waited }
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn aliases_share_one_communicator_and_all_verify() {
        for (rank, o) in run(CommStrategy::PerGroup, None, CommConfig::default()).into_iter().enumerate() {
            let in_embedding = rank == 0 || rank == 3;
            assert_eq!(o.verified.unwrap(), 2 + in_embedding as usize, "rank {rank}");
            let dp = rank % 2;
            let tp = rank / 2;
            let mut want = vec![format!("data_parallel_with_cp/{dp}"), format!("tensor_model_parallel/{tp}")];
            if in_embedding {
                want.push("embedding/0".into());
            }
            assert_eq!(o.created, want);
            assert_eq!(o.names[2], format!("data_parallel_with_cp/{dp}"));
            assert!(o.splits.is_empty());
        }
    }

    #[test]
    fn groups_created_together_are_the_distinct_ones_each_waited_for() {
        for (rank, o) in run_with(CommStrategy::PerGroup, None, CommConfig::default(), true).into_iter().enumerate() {
            let in_embedding = rank == 0 || rank == 3;
            assert_eq!(o.verified.unwrap(), 2 + in_embedding as usize, "rank {rank}");
            let (dp, tp) = (rank % 2, rank / 2);
            let mut want = vec![
                "(together)".to_string(),
                format!("data_parallel_with_cp/{dp}"),
                format!("tensor_model_parallel/{tp}"),
            ];
            if in_embedding {
                want.push("embedding/0".into());
            }
            assert_eq!(o.created, want, "one call, the distinct groups in kind order");
            assert_eq!(o.waited, want[1..], "each distinct communicator waited for once");
            assert_eq!(o.names[2], format!("data_parallel_with_cp/{dp}"));
        }
    }

    #[test]
    fn split_joins_one_collective_per_kind_on_every_rank() {
        for (rank, o) in run(CommStrategy::Split, None, CommConfig::default()).into_iter().enumerate() {
            let in_embedding = rank == 0 || rank == 3;
            assert_eq!(o.verified.unwrap(), 2 + in_embedding as usize, "rank {rank}");
            assert!(o.created.is_empty(), "split strategy created groups one by one: {:?}", o.created);
            assert_eq!(o.waited.len(), 2 + in_embedding as usize, "every split child waited for: {:?}", o.waited);
            let (dp, tp) = (rank as u32 % 2, rank as u32 / 2);
            // dp_with_cp, tp, dp (an alias: no color), embedding (color only for members).
            let colors: Vec<Option<u32>> = o.splits.iter().map(|s| s.0).collect();
            assert_eq!(colors, vec![Some(dp), Some(tp), None, in_embedding.then_some(0)], "rank {rank}");
            assert_eq!(o.names[2], format!("data_parallel_with_cp/{dp}"));
        }
    }

    #[test]
    fn kinds_with_other_options_get_their_own_communicator() {
        let mut config = CommConfig::default();
        config.add_yaml("dp: {max_ctas: 2}", "test").unwrap();
        for (rank, o) in run(CommStrategy::Split, None, config).into_iter().enumerate() {
            let dp = rank as u32 % 2;
            assert_eq!(o.splits[2], (Some(dp), CommOptions { max_ctas: Some(2), ..Default::default() }), "rank {rank}");
            assert_eq!(o.names[2], format!("data_parallel/{dp}"));
            assert_eq!(o.verified.unwrap(), 3 + (rank == 0 || rank == 3) as usize);
        }
    }

    #[test]
    fn a_communicator_with_wrong_members_fails_verification_naming_the_group() {
        let out = run(CommStrategy::PerGroup, Some("tensor_model_parallel/0"), CommConfig::default());
        for rank in [0usize, 1] {
            let err = out[rank].verified.as_ref().unwrap_err().to_string();
            assert!(err.contains("group tensor_model_parallel/0 (ranks 0-1)"), "{err}");
        }
    }

    /// Ranks `0..n` create their groups of `plan(rank)` one by one, each creation a rendezvous
    /// that waits 0.5 s for every member: the number of groups of each, or its error.
    fn run_with_rendezvous(n: u32, plan: fn(u32) -> RankPlan) -> Vec<Result<usize, GroupError>> {
        let stores: Arc<Mutex<HashMap<String, Arc<dyn Store>>>> = Arc::default();
        let threads: Vec<_> = (0..n)
            .map(|rank| {
                let stores = stores.clone();
                std::thread::spawn(move || {
                    let f = Factory { rendezvous: Some(Duration::from_millis(500)), ..Default::default() };
                    let store_for = |name: &str| -> Arc<dyn Store> {
                        let mut m = stores.lock().unwrap();
                        m.entry(name.to_string())
                            .or_insert_with(|| Arc::new(MemoryStore::new(Duration::from_secs(10))))
                            .clone()
                    };
                    let progress = store_for("progress");
                    let config = CommConfig::default();
                    create_groups(
                        &plan(rank),
                        CommStrategy::PerGroup,
                        &f,
                        &store_for,
                        progress,
                        &config,
                        Duration::from_secs(1),
                        None,
                    )
                    .map(|c| c.groups.len())
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn a_member_that_stops_early_is_named_by_the_groups_waiting_for_it() {
        let out = run_with_rendezvous(4, |rank| {
            let mut plan = plan_for(rank);
            if rank == 3 {
                // Rank 3 creates its first kind's group, then stops (as if it hung or died).
                plan.kinds.truncate(1);
                plan.groups.truncate(1);
            }
            plan
        });
        // Rank 2's tensor group {2, 3} waits for rank 3 in vain.
        let e = out[2].as_ref().expect_err("rank 2 must fail").to_string();
        assert!(e.starts_with("group tensor_model_parallel/1 (ranks 2-3)"), "{e}");
        assert!(e.ends_with("rank(s) 3 did not come to this group"), "{e}");
        // Ranks 0 and 1 share no group with rank 3 past the first kind except the embedding
        // group {0, 3}, which rank 0 waits for.
        let e = out[0].as_ref().expect_err("rank 0 must fail").to_string();
        assert!(e.starts_with("group embedding/0 (ranks 0, 3)") && e.contains("rank(s) 3 did not come"), "{e}");
        assert_eq!(out[1].as_ref().ok(), Some(&3));
    }

    /// Rank 3 dies before creating anything. Rank 1 waits for it in data_parallel_with_cp {1, 3}
    /// and fails; rank 0 then waits in vain for rank 1 (alive, but failed at that earlier group)
    /// in tensor_model_parallel {0, 1}: rank 0 must blame rank 3, not the live rank 1.
    #[test]
    fn a_live_member_stuck_behind_a_dead_rank_is_not_blamed() {
        let out: Vec<String> = run_with_rendezvous(3, plan_for)
            .into_iter()
            .map(|r| r.expect_err("every rank fails").to_string())
            .collect();
        assert!(
            out[1].starts_with("group data_parallel_with_cp/1 (ranks 1, 3)")
                && out[1].ends_with("rank(s) 3 did not come to this group"),
            "{}",
            out[1]
        );
        assert!(
            out[2].starts_with("group tensor_model_parallel/1 (ranks 2-3)")
                && out[2].ends_with("rank(s) 3 did not come to this group"),
            "{}",
            out[2]
        );
        let e = &out[0];
        assert!(e.starts_with("group tensor_model_parallel/0 (ranks 0-1)"), "{e}");
        assert!(!e.contains("rank(s) 1 did not come"), "blames the live rank 1: {e}");
        assert!(e.ends_with("rank(s) 1 failed at an earlier group, waiting for rank(s) 3"), "{e}");
    }

    #[test]
    fn strategies_resolve_by_what_the_backend_offers() {
        let f = Factory::default();
        assert_eq!(resolve_strategy(CommStrategy::Auto, &f), Ok(CommStrategy::Split));
        assert_eq!(resolve_strategy(CommStrategy::PerGroup, &f), Ok(CommStrategy::PerGroup));
        struct NoSplit;
        impl CommFactory for NoSplit {
            fn name(&self) -> &str {
                "nosplit"
            }
            fn create_group(
                &self,
                _: &GroupInfo,
                _: &CommOptions,
                _: Arc<dyn Store>,
            ) -> Result<Box<dyn Communicator>, CommError> {
                Err(CommError::new(CommErrorKind::Unsupported, "unused"))
            }
        }
        assert_eq!(resolve_strategy(CommStrategy::Auto, &NoSplit), Ok(CommStrategy::PerGroup));
        struct Prefers;
        impl CommFactory for Prefers {
            fn name(&self) -> &str {
                "prefers"
            }
            fn split_unavailable(&self) -> Option<String> {
                None
            }
            fn prefers_per_group(&self) -> bool {
                true
            }
            fn create_group(
                &self,
                _: &GroupInfo,
                _: &CommOptions,
                _: Arc<dyn Store>,
            ) -> Result<Box<dyn Communicator>, CommError> {
                Err(CommError::new(CommErrorKind::Unsupported, "unused"))
            }
        }
        assert_eq!(resolve_strategy(CommStrategy::Auto, &Prefers), Ok(CommStrategy::PerGroup));
        assert_eq!(resolve_strategy(CommStrategy::Split, &Prefers), Ok(CommStrategy::Split));
        let e = resolve_strategy(CommStrategy::Split, &NoSplit).unwrap_err();
        assert!(e.contains("split strategy was requested") && e.contains("'nosplit'"), "{e}");
    }
}
