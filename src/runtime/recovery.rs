//! Recovery after a failure (docs/recovery.md): the survivors of an initialized world (or of an
//! initialization that failed for a peer) agree on the failed ranks through the store, plan the
//! next layout ([`plan_recovery`]; spares take failed ranks' places; a job of several grids:
//! [`plan_grids_recovery`], every grid re-formed or the recovery refused naming the grid), abort
//! their communicators but those that live on (a world shrunk to the survivors, with one grid the
//! groups of unchanged kinds) and bring the new layout's other groups up on the store they
//! already share. Ranks the plan drops
//! leave with [`Reinitialized::Left`]. [`check_health`] lets ranks learn that a recovery began.
//!
//! Agreement: a meeting (`runtime::meeting`) of the world in `recovery/present` under the attempt's key prefix (so
//! the keys of an earlier attempt are never read). Every rank that takes part arrives with the
//! ranks it suspects, then reads who is present: the arrival that finds every rank of the world
//! present or suspected by a present rank decides at once (the last arrival always sees all
//! arrivals before it); the others wait, parked, for the decision until the detection window
//! ends, and then decide themselves. A proposal is the set of absent ranks; the first one
//! (compare-and-set on the meeting's end) is the verdict every participant reads. A rank that
//! arrives after the verdict and finds itself in it is excluded and leaves.

use super::creation::comm_config::CommStrategy;
use super::creation::groups::{GroupPlan, LiveGroup, PlanKind, SharedComm};
use super::error::RuntimeError;
use super::faults::bulletin::{Bulletin, Event};
use super::launch::env::LaunchEnv;
use super::launch::store_setup::StoreHandles;
use super::lifecycle::bring_up::Carried;
use super::lifecycle::init::{claim_runtime, initialize_on_store, with_runtime, RECOVERING};
use super::lifecycle::init_args::InitArgs;
use super::lifecycle::leave::{announce, end_for_recovery};
use super::lifecycle::pending::{Kept, Lingering, Pending, RuntimeClaim};
use super::lifecycle::settings::InitOutcome;
use super::meeting::keys;
use super::meeting::meet::{MeetError, Meeting};
use crate::backend::{CommError, CommErrorKind, Communicator};
use crate::lock::Unpoisoned;
use crate::store::{PrefixStore, Store};
use crate::timeout::Deadline;
use crate::topology::{plan_grids_recovery, plan_recovery, GridRecovery, RecoveryPlan, Topology};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default detection window: how long survivors wait for ranks that neither show up nor are
/// named failed by a survivor.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(3);

/// What a recovery is given.
#[derive(Clone, Debug, Default)]
pub struct ReinitArgs {
    /// Ranks this rank knows or suspects to have failed (e.g. named by a failed collective); may
    /// be empty. A suspected rank that takes part is not failed.
    pub suspected: Vec<u32>,
    /// How long to wait for ranks that neither take part nor are suspected (`None`: [`DEFAULT_WINDOW`],
    /// at most the timeout).
    pub window: Option<Duration>,
    /// Bound of the re-forming once the failed ranks are agreed on (`None`: the init timeout of
    /// the runtime); the agreement itself takes at most the window (after a failed init, until
    /// every rank's init deadline has passed). On a spare: how long it stands by (`None`: until
    /// the job ends).
    pub timeout: Option<Duration>,
}

/// What happened to this rank.
#[derive(Clone, Debug, PartialEq)]
pub enum Reinitialized {
    /// This rank is on the new layout (the runtime is up again under its new rank).
    Recovered(RecoveryReport),
    /// This rank is not on the new layout: it failed in the others' view (arrived too late), or
    /// its replica was dropped. Its runtime is torn down; it should exit.
    Left(RecoveryReport),
}

/// The agreed failure and this rank's place after it.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoveryReport {
    pub old_rank: u32,
    /// `None` for a rank that left.
    pub new_rank: Option<u32>,
    pub old_world_size: u32,
    pub new_world_size: u32,
    /// The agreed failed ranks (old numbering), ascending.
    pub failed: Vec<u32>,
    /// Every old rank not on the new layout (failed and leaving), ascending.
    pub dropped: Vec<u32>,
    /// Keys of the group kinds whose membership changed.
    pub changed_kinds: Vec<String>,
    /// Time to agree on the failed set, and the whole recovery.
    pub agree: Duration,
    pub total: Duration,
    /// How the new layout's world communicator was made (split strategy).
    pub world_from: WorldFrom,
    /// Kinds whose communicators this rank kept (their membership did not change).
    pub kept_kinds: Vec<String>,
}

/// How recovery made the new layout's world communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorldFrom {
    /// The old world shrunk to the survivors (`Communicator::shrink`, NCCL's `ncclCommShrink`).
    Shrink,
    /// A new world created from scratch through the store (the backend cannot shrink).
    New,
    /// No world communicator: the per-group strategy, or a rank that left.
    None,
}

impl WorldFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            WorldFrom::Shrink => "shrink",
            WorldFrom::New => "new",
            WorldFrom::None => "none",
        }
    }
}

fn encode(ranks: &[u32]) -> Vec<u8> {
    let v: Vec<String> = ranks.iter().map(u32::to_string).collect();
    format!("failed:{}", v.join(",")).into_bytes()
}

fn decode(bytes: &[u8], what: &str) -> Result<Vec<u32>, RuntimeError> {
    let text = String::from_utf8_lossy(bytes);
    let list = text.strip_prefix("failed:").ok_or_else(|| {
        RuntimeError::InvalidArgument(format!("recovery: {what} in the store is not a rank list: '{text}'"))
    })?;
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| RuntimeError::InvalidArgument(format!("recovery: bad rank '{s}' in {what}"))))
        .collect()
}

/// Agree with the other survivors on the failed ranks of a world of `world` (see the module
/// documentation). Every participant gets the same set. `still_coming(absent)`: those of the
/// ranks absent when the window ends that are known alive and merely late (after a failed init,
/// a rank that started late fails its init late): waited for until `deadline`, not voted out.
#[allow(clippy::too_many_arguments)]
fn agree(
    store: &dyn Store,
    rank: u32,
    world: u32,
    suspected: &[u32],
    host: Option<u32>,
    window: Duration,
    deadline: Deadline,
    still_coming: &dyn Fn(&[u32]) -> Vec<u32>,
) -> Result<Vec<u32>, RuntimeError> {
    let window_end = Deadline::at((Instant::now() + window).min(deadline.instant()));
    let what = "the recovery's agreement";
    let meeting = Meeting::new(store, keys::RECOVERY_PRESENT, what, (0..world).collect(), rank, window_end);
    meeting.arrive(&encode(suspected)).map_err(agreement_error)?;
    let (settled, proposal) = presence(&meeting, world, host)?;
    let verdict = if settled {
        meeting.decide(&encode(&proposal)).map_err(agreement_error)?
    } else {
        match meeting.await_end_by(window_end).map_err(agreement_error)? {
            Some(verdict) => verdict,
            // The window is over: propose who is absent now.
            None => {
                let mut absent = presence(&meeting, world, host)?.1;
                if !still_coming(&absent).is_empty() {
                    // Alive, late: its arrival settles the agreement (or the deadline ends the wait).
                    if let Some(verdict) = meeting.await_end_by(deadline).map_err(agreement_error)? {
                        return decode(&verdict, keys::RECOVERY_VERDICT);
                    }
                    absent = presence(&meeting, world, host)?.1;
                }
                meeting.decide(&encode(&absent)).map_err(agreement_error)?
            }
        }
    };
    decode(&verdict, keys::RECOVERY_VERDICT)
}

/// A failure of the recovery's agreement: the store's (its host is needed), or another.
fn agreement_error(e: MeetError) -> RuntimeError {
    match e {
        MeetError::Store(source) => RuntimeError::StoreConnect {
            what: "the rendezvous store to agree on the failed ranks (recovery needs its host, rank 0 or torchrun's \
                   agent, to survive)"
                .into(),
            source,
        },
        other => RuntimeError::InvalidArgument(other.to_string()),
    }
}

/// Whether every rank of the world is present (the store's `host` counts as present while the
/// store answers) or suspected by a present rank; and the ranks absent now.
fn presence(meeting: &Meeting, world: u32, host: Option<u32>) -> Result<(bool, Vec<u32>), RuntimeError> {
    let arrivals = meeting.arrivals().map_err(agreement_error)?;
    let mut named = vec![false; world as usize];
    for payload in arrivals.iter().flatten() {
        for s in decode(payload, keys::RECOVERY_PRESENT)? {
            if s < world {
                named[s as usize] = true;
            }
        }
    }
    let alive = |r: u32| arrivals[r as usize].is_some() || host == Some(r);
    let settled = (0..world).all(|r| alive(r) || named[r as usize]);
    Ok((settled, (0..world).filter(|&r| !alive(r)).collect()))
}

/// Tell every rank that a recovery has begun (their [`check_health`] reports it, a spare standing
/// by wakes), naming the ranks this one suspects: posted to the attempt's bulletin, where the
/// first request stands. A store failure is left to the agreement.
fn request(bulletin: &Bulletin, store: &dyn Store, suspected: &[u32]) {
    // Posted before the health check's latest number is read: a check that began before this
    // read is ended below, one that begins after it reads the request (see `check_health`).
    let _ = bulletin.post(&Event::RecoveryRequested(suspected.to_vec()));
    // Whoever waits in a meeting must look: a store host waiting for a failed init's ranks to
    // leave, and the health checks now running (the latest and its neighbours: ranks one check
    // apart).
    end_for_recovery(store);
    let latest =
        store.check(&[keys::HEALTH_LATEST]).ok().filter(|&b| b).and_then(|_| store.get(keys::HEALTH_LATEST).ok());
    if let Some(n) = latest.and_then(|v| String::from_utf8_lossy(&v).parse::<u64>().ok()) {
        for g in n.saturating_sub(1)..=n + 1 {
            // Only a check still running: one that already ended keeps the verdict its ranks read.
            let _ = Meeting::from_outside(store, &format!("{}/{g}", keys::HEALTH)).decide(HEALTH_ENDED_BY_REQUEST);
        }
    }
}

/// The end a recovery request gives the health checks running (see [`request`]).
const HEALTH_ENDED_BY_REQUEST: &[u8] = b"recovery requested";

/// The ranks named by the first recovery request, when one was made (the bulletin read now).
fn requested(bulletin: &Bulletin) -> Result<Option<Vec<u32>>, RuntimeError> {
    bulletin.look().map_err(|e| store_lost(e, "looking for a recovery request"))?;
    Ok(bulletin.recovery_requested())
}

/// What [`check_health`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Every rank of the world took part, and no recovery was requested.
    Healthy,
    /// A recovery is needed: a rank asked for one (its init or a collective failed), or these
    /// ranks did not take part within the window. The ranks are the suspects to pass to
    /// [`reinitialize`] (possibly empty).
    Failed(Vec<u32>),
}

/// A health check of the initialized world through the store, collective over the layout's ranks
/// (call it at the same points on every rank, e.g. every N steps; spares do not take part): each
/// rank checks in under a new generation of keys and waits until all have, at most `window`
/// ([`DEFAULT_WINDOW`] when `None`). It reports [`Health::Failed`] when a rank asked for recovery (a rank whose init failed
/// for a peer does, so ranks whose init succeeded learn of it here) or some ranks did not come.
/// A meeting (a barrier) of the layout's ranks: three store requests per rank and a parked wait,
/// which a recovery request ends at once.
pub fn check_health(window: Option<Duration>) -> Result<Health, RuntimeError> {
    // The layout's ranks take part (every grid's: the world less the spares); spares stand by
    // elsewhere (a recovery's agreement sees them).
    let (base, rank, world, space, bulletin) = with_runtime(|rt| {
        let layout_world = rt.env.world_size - rt.args.spares;
        let bulletin = rt.faults.bulletin().unwrap_or_else(|| Arc::new(Bulletin::of(&rt.store, &rt.attempt, &rt.env)));
        (rt.base.clone(), rt.env.rank, layout_world, rt.key_spaces.next(keys::HEALTH), bulletin)
    })?;
    let err = |e| store_lost(e, "a health check");
    let meet_err = |e: MeetError| match e {
        MeetError::Store(e) => err(e),
        other => RuntimeError::InvalidArgument(other.to_string()),
    };
    let deadline = Deadline::after(window.unwrap_or(DEFAULT_WINDOW));
    let meeting = Meeting::new(base.as_ref(), &space, "the health check", (0..world).collect(), rank, deadline);
    meeting.arrive_counted().map_err(meet_err)?;
    let number = space.rsplit('/').next().unwrap_or("0");
    base.set(keys::HEALTH_LATEST, number.as_bytes()).map_err(err)?;
    // A request made before the check ends it as requested, unless the check ended first: the
    // first verdict stands (compare-and-set), so every rank reports the same.
    if requested(&bulletin)?.is_some() {
        meeting.decide(HEALTH_ENDED_BY_REQUEST).map_err(meet_err)?;
    }
    match meeting.await_end_by(deadline).map_err(meet_err)? {
        Some(end) if end == HEALTH_ENDED_BY_REQUEST => Ok(Health::Failed(requested(&bulletin)?.unwrap_or_default())),
        Some(_) => Ok(Health::Healthy),
        None => {
            let missing = meeting.missing();
            Ok(if missing.is_empty() { Health::Healthy } else { Health::Failed(missing) })
        }
    }
}

/// Where a recovery starts from: the live runtime, an initialization that failed for a peer, or
/// a spare standing by.
struct Origin {
    env: LaunchEnv,
    topology: crate::topology::Topology,
    args: InitArgs,
    store: StoreHandles,
    base: Arc<dyn Store>,
    attempt: String,
    suspected: Vec<u32>,
    /// The old communicators, not aborted yet (the world may be shrunk, groups of kinds that keep
    /// their membership are kept), and the strategy that made them.
    comms: Option<(Vec<LiveGroup>, Option<SharedComm>)>,
    strategy: Option<CommStrategy>,
    /// The agreement waits for absent ranks at least until then (a failed init: see
    /// [`Pending::settled_by`]).
    settled_by: Option<Instant>,
    /// The old runtime's heartbeat, kept beating through the recovery: it notices a store host
    /// that froze and ends the calls blocked on it, naming it.
    faults: Option<super::faults::Faults>,
}

/// The live runtime as an [`Origin`]. Its communicators are aborted once the plan is known (a
/// peer is gone: the backend's abort where it has one; dropping closes their connections without
/// a collective), except the world when it is shrunk and the groups of kinds whose membership did
/// not change, which are kept.
fn from_runtime(rt: super::lifecycle::runtime_state::Runtime, suspected: Vec<u32>) -> Origin {
    let super::lifecycle::runtime_state::Runtime {
        env,
        mut grids,
        groups,
        world,
        base,
        store,
        args,
        attempt,
        strategy,
        faults,
        ..
    } = rt;
    Origin {
        env,
        topology: grids.swap_remove(0).topology,
        args,
        store,
        base,
        attempt,
        suspected,
        comms: Some((groups, world)),
        strategy: Some(strategy),
        settled_by: None,
        faults: Some(faults),
    }
}

/// A kept initialization as an [`Origin`]: the ranks it named are suspected with `more`.
fn from_pending(pending: Pending, more: &[u32]) -> Origin {
    let Pending { env, topology, args, store, base, attempt, mut suspected, settled_by, .. } = pending;
    suspected.extend(more);
    let settled_by = Some(settled_by);
    Origin {
        env,
        topology,
        args,
        store,
        base,
        attempt,
        suspected,
        comms: None,
        strategy: None,
        settled_by,
        faults: None,
    }
}

/// Recover after a failure: agree on the failed ranks with the other survivors, plan the next
/// layout, and bring the new layout's groups up, verified as at init. See the module docs.
///
/// Runs on an initialized runtime (its communicators are aborted once the plan is known: a peer
/// is gone; the world may be shrunk and unchanged kinds' groups kept), or after an `initialize`
/// that failed for a peer (a rank missing at check-in, a group that timed
/// out or lost a peer), continuing on that attempt's store; the ranks that failure named are
/// suspected along with `args.suspected`. On a spare ([`super::InitOutcome::Spare`]) it stands
/// by: it waits until a recovery needs it (then it runs the new layout under the failed rank's
/// coordinates), or the job ends (`Left`), or `args.timeout` passes (a TIMEOUT error; call it
/// again to keep standing by; no limit when `None`).
///
/// A job of several grids re-forms every grid (one set of ranks leaves the whole job; no
/// communicator is kept), or every survivor refuses naming the grid that cannot be re-formed.
///
/// Bad arguments (a suspected rank outside the world, a zero timeout) leave the runtime (or the
/// failed init) as it was. Otherwise the runtime is torn down whatever the outcome; on an error
/// (no valid layout remains, the store host failed, a wait ran out) it is not up again.
pub fn reinitialize(args: ReinitArgs) -> Result<Reinitialized, RuntimeError> {
    let start = Instant::now();
    let check = |world: u32, init_timeout: Duration| -> Result<Duration, RuntimeError> {
        let timeout = args.timeout.unwrap_or(init_timeout);
        if timeout.is_zero() {
            return Err(RuntimeError::InvalidArgument("recovery timeout must be > 0".into()));
        }
        if let Some(&s) = args.suspected.iter().find(|&&s| s >= world) {
            return Err(RuntimeError::InvalidArgument(format!(
                "suspected rank {s} is not a rank of the world of {world}"
            )));
        }
        Ok(timeout)
    };
    let window = |timeout: Duration| args.window.unwrap_or(DEFAULT_WINDOW).min(timeout);
    let (mut claim, state) = claim_runtime(RECOVERING)?;
    let (origin, timeout) = match state {
        Some((settings, rt)) => match check(rt.env.world_size, rt.timeout) {
            Ok(timeout) => (from_runtime(rt, args.suspected.clone()), timeout),
            Err(e) => {
                claim.up(settings, rt);
                return Err(e);
            }
        },
        None => {
            let pending = match claim.take_kept() {
                Some(Kept::Attempt(pending)) => *pending,
                other => {
                    // Nothing to recover from (a lingering store stays kept).
                    if let Some(kept) = other {
                        claim.keep(kept);
                    }
                    return Err(RuntimeError::NotInitialized);
                }
            };
            match check(pending.env.world_size, pending.args.timeout) {
                Ok(_) if pending.spare => return stand_by(claim, pending, &args, start, window),
                Ok(timeout) => (from_pending(pending, &args.suspected), timeout),
                Err(e) => {
                    claim.keep(Kept::Attempt(Box::new(pending)));
                    return Err(e);
                }
            }
        }
    };
    match recover(claim, origin, start, timeout, window(timeout))? {
        Some(done) => Ok(done),
        None => Err(RuntimeError::InvalidArgument("a rank of the layout cannot become a spare".into())),
    }
}

/// A spare stands by (see [`reinitialize`]): it waits for a recovery request or the end of the
/// job, and takes part in every recovery until one places it.
fn stand_by(
    mut claim: RuntimeClaim,
    mut pending: Pending,
    args: &ReinitArgs,
    start: Instant,
    window: impl Fn(Duration) -> Duration,
) -> Result<Reinitialized, RuntimeError> {
    let until = args.timeout.map(|t| start + t);
    loop {
        let bulletin = Bulletin::of(&pending.store, &pending.attempt, &pending.env);
        let lost = |e| store_lost(e, "a spare standing by");
        bulletin.look().map_err(lost)?;
        while bulletin.recovery_requested().is_none() {
            if bulletin.ended() {
                // The layout's ranks are tearing down: the job ends without needing this spare.
                announce(pending.base.as_ref(), &pending.env);
                return Ok(Reinitialized::Left(left_unneeded(&pending.env, start)));
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                let rank = pending.env.rank;
                claim.keep(Kept::Attempt(Box::new(pending)));
                return Err(RuntimeError::Comm(CommError::new(
                    CommErrorKind::Timeout,
                    format!(
                        "spare rank {rank} stood by for {:.1} s and no recovery needed it (call reinitialize again \
                         to keep standing by)",
                        start.elapsed().as_secs_f64()
                    ),
                )));
            }
            // Parked until the next event of the job (a recovery request, the job's end), or `until`.
            let left = until.map_or(crate::timeout::NO_LIMIT, |u| u.saturating_duration_since(Instant::now()));
            bulletin.await_next(left).map_err(lost)?;
        }
        let timeout = pending.args.timeout;
        match recover(claim, from_pending(pending, &[]), Instant::now(), timeout, window(timeout))? {
            Some(done) => return Ok(done),
            // Still a spare of the new layout: stand by on its attempt.
            None => {
                claim = claim_runtime(RECOVERING)?.0;
                pending = match claim.take_kept() {
                    Some(Kept::Attempt(p)) => *p,
                    _ => return Err(RuntimeError::NotInitialized),
                };
            }
        }
    }
}

/// The report of spare `env.rank` that leaves, unneeded, as the job ends.
fn left_unneeded(env: &LaunchEnv, start: Instant) -> RecoveryReport {
    RecoveryReport {
        old_rank: env.rank,
        new_rank: None,
        old_world_size: env.world_size,
        new_world_size: env.world_size,
        failed: vec![],
        dropped: vec![],
        changed_kinds: vec![],
        agree: Duration::ZERO,
        total: start.elapsed(),
        world_from: WorldFrom::None,
        kept_kinds: vec![],
    }
}

/// The store failed while `doing` something.
fn store_lost(source: crate::store::StoreError, doing: &str) -> RuntimeError {
    RuntimeError::StoreConnect { what: format!("the rendezvous store ({doing})"), source }
}

/// The agreement's `still_coming` (see [`agree`]): after a failed init (`after_failed_init`), the
/// absent ranks that checked in to it (in `store`, the attempt's): alive when the init began, and
/// merely late to its end (a rank that died since is suspected by the others, through its close
/// notice). Otherwise none: after init, a rank that does not take part is not waited for past
/// the window.
fn checked_in_if_late(store: &dyn Store, after_failed_init: bool) -> impl Fn(&[u32]) -> Vec<u32> + '_ {
    move |absent| {
        let checked_in = |r: &u32| store.check(&[&super::meeting::checkin::arrival_key(*r)]).unwrap_or(false);
        absent.iter().copied().filter(|r| after_failed_init && checked_in(r)).collect()
    }
}

/// One recovery from `origin`: agree, plan (the world's ranks past the layout are its spares),
/// then leave, re-form, or (`None`) stand by again as a spare of the new layout.
fn recover(
    mut claim: RuntimeClaim,
    origin: Origin,
    start: Instant,
    timeout: Duration,
    window: Duration,
) -> Result<Option<Reinitialized>, RuntimeError> {
    let Origin {
        env,
        topology,
        args: init_args,
        store,
        base,
        attempt,
        suspected,
        mut comms,
        strategy,
        settled_by,
        faults: beating,
    } = origin;
    // After a failed init, ranks still alive may be stuck in a collective until their own
    // deadline: they are waited for until then, not voted out for being late.
    let window = settled_by.map_or(window, |t| window.max(t.saturating_duration_since(Instant::now())));
    let old_rank = env.rank;
    let old_world = env.world_size;
    request(&Bulletin::of(&store, &attempt, &env), base.as_ref(), &suspected);
    // The rank hosting the store is alive while the store answers: never proposed failed.
    let host = (!env.use_agent_store).then_some(0);
    let agreed_by = Deadline::at(start + crate::timeout::clamp(window.max(timeout)));
    let still_coming = checked_in_if_late(base.as_ref(), settled_by.is_some());
    let failed = agree(base.as_ref(), old_rank, old_world, &suspected, host, window, agreed_by, &still_coming)?;
    // The new layout gets the whole timeout from the verdict on, as an init would.
    let deadline = Deadline::after(timeout);
    let agree_time = start.elapsed();
    // Every participant has read the verdict: the store's host may go on (see
    // `hold_store_until_read`).
    let read = read_meeting(base.as_ref(), old_world, old_rank, deadline);
    let _ = read.arrive_counted();
    let plan = match plan_next(&topology, &init_args, old_world, &failed) {
        Ok(plan) => plan,
        Err(e) => {
            abort_all(comms.take());
            return Err(hold_store_until_read(e, &env, base.as_ref(), &failed, deadline));
        }
    };
    // The new world: the new layout, then the spares left, in their old order.
    let new_world = plan.layout_world + plan.spares_left.len() as u32;
    let new_rank = plan.new_rank(old_rank);
    let new_attempt = format!("{attempt}/recovery");
    let mut report = report_of(&plan, old_rank, new_rank, old_world, new_world, agree_time);
    let Some(new_rank) = new_rank else {
        abort_all(comms.take());
        if env.hosts_store() {
            claim.keep(Kept::Lingering(Box::new(linger(store, &new_attempt, new_world, timeout))));
        }
        report.total = start.elapsed();
        return Ok(Some(Reinitialized::Left(report)));
    };
    let new_env = LaunchEnv { rank: new_rank, world_size: new_world, ..env.clone() };
    let new_args = next_args(init_args, &plan, deadline);
    let kept = keep_unchanged(comms.as_mut(), &plan, new_rank, &new_args);
    report.kept_kinds = kept.iter().map(|g| g.plan.kind.to_string()).collect();
    let shrunk = shrink_world(comms.as_ref().and_then(|(_, w)| w.as_ref()), &plan, &new_args);
    abort_all(comms.take());
    let world = shrunk.map_err(|e| hold_store_until_read(e, &env, base.as_ref(), &failed, deadline))?;
    report.world_from = world_from(world.is_some(), strategy);
    let launcher = launcher_ranks(beating.as_ref(), old_numbers(&plan, old_world, new_world));
    let carried = Carried { store, attempt: new_attempt, timeout, world, kept, launcher };
    let outcome = initialize_on_store(claim, new_args, new_env, carried)?;
    if outcome == InitOutcome::Spare {
        return Ok(None);
    }
    // Messages name ranks in the new numbering and, beside it, the one the user started with.
    let _ = with_runtime(|rt| rt.number_as_before(old_numbers(&plan, old_world, new_world)));
    report.total = start.elapsed();
    Ok(Some(Reinitialized::Recovered(report)))
}

/// The next layout, of a job of one grid ([`plan_recovery`], spares included) or of several
/// ([`plan_grids_recovery`], no spares), in the terms the re-forming needs.
struct Next {
    /// The new layout's world size (the spares left not counted).
    layout_world: u32,
    /// Old rank (or spare) -> new rank for every process of the new layout, ascending by old.
    rank_map: Vec<(u32, u32)>,
    spares_left: Vec<u32>,
    /// Whether a spare takes a failed rank's place (the renumbering is then not a shrink's).
    spares_used: bool,
    failed: Vec<u32>,
    dropped: Vec<u32>,
    /// The kinds whose membership changed: their keys (`grid:kind` with several grids).
    changed_kinds: Vec<String>,
    /// The plan of a job of one grid: its unchanged kinds' communicators can be kept.
    one: Option<RecoveryPlan>,
    /// The plan of every grid of a job of several, in the job's order.
    grids: Option<Vec<GridRecovery>>,
}

impl Next {
    /// The new rank of an old rank (a layout rank, or a spare that stays one), `None` for a rank
    /// that leaves.
    fn new_rank(&self, old: u32) -> Option<u32> {
        let placed = self.rank_map.binary_search_by_key(&old, |&(o, _)| o).ok().map(|i| self.rank_map[i].1);
        let spare = || self.spares_left.iter().position(|&s| s == old).map(|i| self.layout_world + i as u32);
        placed.or_else(spare)
    }
}

/// Plan the next layout after the failure of `failed` in a world of `old_world` processes:
/// `topology` (the first grid's layout; the ranks past it are spares) for a job of one grid,
/// every grid of `args` (rebuilt over the world) for a job of several. A refusal names the grid
/// that cannot be re-formed.
fn plan_next(topology: &Topology, args: &InitArgs, old_world: u32, failed: &[u32]) -> Result<Next, RuntimeError> {
    if args.grids.is_empty() {
        let spares: Vec<u32> = (topology.world_size()..old_world).collect();
        let plan = plan_recovery(topology, failed, &spares)?;
        return Ok(Next {
            layout_world: plan.topology.world_size(),
            rank_map: plan.rank_map.clone(),
            spares_left: plan.spares_left.clone(),
            spares_used: !plan.spares_used.is_empty(),
            failed: plan.failed.clone(),
            dropped: plan.dropped.clone(),
            changed_kinds: plan.changed_kinds.iter().map(|k| k.key().into_owned()).collect(),
            one: Some(plan),
            grids: None,
        });
    }
    // Spares are refused at init with several grids: the whole world is the grids'.
    let layout_world = args.layout_world(old_world)?;
    let mut topologies = Vec::new();
    for (name, config, _) in args.all_grids() {
        let t = Topology::new(config.clone(), layout_world)
            .map_err(|e| RuntimeError::InvalidArgument(format!("recovery: grid '{name}': {e}")))?;
        topologies.push((name, t));
    }
    let named: Vec<(&str, &Topology)> = topologies.iter().map(|(n, t)| (*n, t)).collect();
    let plan = plan_grids_recovery(&named, layout_world, failed)?;
    let changed_kinds =
        plan.grids.iter().flat_map(|g| g.changed_kinds.iter().map(|k| format!("{}:{}", g.name, k.key()))).collect();
    Ok(Next {
        layout_world: plan.world_after,
        rank_map: plan.rank_map,
        spares_left: vec![],
        spares_used: false,
        failed: plan.failed,
        dropped: plan.dropped,
        changed_kinds,
        one: None,
        grids: Some(plan.grids),
    })
}

/// Each new rank's number before the recovery (index: the new rank).
fn old_numbers(plan: &Next, old_world: u32, new_world: u32) -> Vec<u32> {
    let mut before = vec![0; new_world as usize];
    for old in 0..old_world {
        if let Some(slot) = plan.new_rank(old).and_then(|n| before.get_mut(n as usize)) {
            *slot = old;
        }
    }
    before
}

/// How the new world's communicator is had: the old one shrunk (`shrunk`), a new one (the split
/// strategy), or none.
fn world_from(shrunk: bool, strategy: Option<CommStrategy>) -> WorldFrom {
    match (shrunk, strategy) {
        (true, _) => WorldFrom::Shrink,
        (false, Some(CommStrategy::Split)) => WorldFrom::New,
        (false, _) => WorldFrom::None,
    }
}

/// The launcher's rank of each rank of the new world (PMIx's events name ranks as the launcher
/// does), from each one's number in the old world (`before`) and the old world's own numbering
/// (`beating`, the old attempt's faults).
fn launcher_ranks(beating: Option<&super::faults::Faults>, before: Vec<u32>) -> Vec<u32> {
    beating.map_or_else(|| before.clone(), |f| f.launcher_ranks(&before))
}

/// The report of a recovery of `old_rank` of `old_world` ranks (`new_rank` of `new_world` after
/// it), its times and how the world was made still to be filled in.
fn report_of(
    plan: &Next,
    old_rank: u32,
    new_rank: Option<u32>,
    old_world: u32,
    new_world: u32,
    agree: Duration,
) -> RecoveryReport {
    RecoveryReport {
        old_rank,
        new_rank,
        old_world_size: old_world,
        new_world_size: new_world,
        failed: plan.failed.clone(),
        dropped: plan.dropped.clone(),
        changed_kinds: plan.changed_kinds.clone(),
        agree,
        total: Duration::ZERO,
        world_from: WorldFrom::None,
        kept_kinds: vec![],
    }
}

/// The new layout's arguments: `args` with the plan's spares and grids, and what is left of
/// `deadline`.
fn next_args(args: InitArgs, plan: &Next, deadline: Deadline) -> InitArgs {
    let mut new_args = args;
    new_args.spares = plan.spares_left.len() as u32;
    if let Some(grids) = &plan.grids {
        // Every grid's new layout; names and seeds as they were.
        new_args.topology = grids[0].topology.config().clone();
        for (spec, g) in new_args.grids.iter_mut().zip(&grids[1..]) {
            spec.topology = g.topology.config().clone();
        }
    }
    new_args.timeout = deadline.left();
    new_args
}

/// A rank that left the recovered world and hosts the store: the survivors still need the server,
/// kept (under their attempt's prefix) until they leave (destroy).
fn linger(store: StoreHandles, new_attempt: &str, new_world: u32, timeout: Duration) -> Lingering {
    let survivors: Arc<dyn Store> = Arc::new(PrefixStore::new(new_attempt, store.client()));
    Lingering { store, survivors, expected: new_world, timeout }
}

/// A recovery error after the agreement, returned once every participant (all but `failed`) has
/// read the verdict when this rank hosts the store (at most until `deadline`): the others then meet
/// their own outcome (the same refusal, a leave) instead of a vanished store.
fn hold_store_until_read(
    e: RuntimeError,
    env: &LaunchEnv,
    base: &dyn Store,
    failed: &[u32],
    deadline: Deadline,
) -> RuntimeError {
    if env.hosts_store() {
        // The failed ranks never read it: counted as read.
        for &r in failed {
            let _ = read_meeting(base, env.world_size, r, deadline).arrive_counted_as(b"failed");
        }
        let _ = read_meeting(base, env.world_size, env.rank, deadline).await_end();
    }
    e
}

/// The meeting of the ranks of a world of `world` that read a recovery's verdict, as `rank`
/// sees it.
fn read_meeting(base: &dyn Store, world: u32, rank: u32, deadline: Deadline) -> Meeting<'_> {
    Meeting::new(base, keys::RECOVERY_READ, "reading the recovery's verdict", (0..world).collect(), rank, deadline)
}

/// Take this rank's groups of the kinds whose membership the plan leaves as it was out of
/// `comms`, planned for the new layout (their members renumbered, their index among the kind's
/// groups), with their communicators: their peers are the same processes in the same order, so
/// the new layout does not create them again. Not kept: aliased kinds (re-derived from their
/// source), all-gather twins, kinds whose children share the parent's resources (`split_share`:
/// the world is aborted), and any group whose new place disagrees with its communicator.
/// Whatever shares a kept communicator leaves `comms` with it, so that it is not aborted.
fn keep_unchanged(
    comms: Option<&mut (Vec<LiveGroup>, Option<SharedComm>)>,
    plan: &Next,
    new_rank: u32,
    args: &InitArgs,
) -> Vec<LiveGroup> {
    // With several grids nothing is kept (docs/recovery.md): every kind is created again.
    let (Some((groups, _)), Some(plan)) = (comms, plan.one.as_ref()) else { return Vec::new() };
    let mut kept: Vec<LiveGroup> = Vec::new();
    for g in groups.iter() {
        let PlanKind::Group(kind) = g.plan.kind else { continue };
        if plan.changed_kinds.contains(&kind)
            || g.comm_name != g.plan.name()
            || args.comm_config.options_for(kind).split_share == Some(true)
        {
            continue;
        }
        let Ok(Some(m)) = plan.topology.membership(kind, new_rank) else { continue };
        if m.rank != g.group_rank || m.members().len() != g.plan.members.len() {
            continue;
        }
        let new_plan = GroupPlan { grid: None, kind: g.plan.kind, index: m.group_index() as u32, members: m.members() };
        let comm_name = new_plan.name();
        kept.push(LiveGroup {
            plan: new_plan,
            group_rank: m.rank,
            comm_name,
            comm: g.comm.clone(),
            created_in: Duration::ZERO,
        });
    }
    groups.retain(|g| !kept.iter().any(|k| Arc::ptr_eq(&k.comm, &g.comm)));
    kept
}

/// Abort a runtime's communicators: its groups, then the world they were split from.
fn abort_all(comms: Option<(Vec<LiveGroup>, Option<SharedComm>)>) {
    let Some((groups, world)) = comms else { return };
    for comm in groups.iter().map(|g| &g.comm).chain(world.iter()) {
        comm.locked().abort();
    }
}

/// The old world shrunk to the new layout's ranks (a survivor's part of the collective; ranks
/// that leave do not take part), or `None` when the new world must be created afresh: no world
/// (per-group strategy), a plan that renumbers otherwise than shrinking does (spares taking a
/// place: the survivors in ascending old order must be new ranks 0, 1, ...), or a backend that
/// cannot shrink (`Unsupported`, `VersionTooOld`). Any other failure is the recovery's error.
fn shrink_world(
    world: Option<&SharedComm>,
    plan: &Next,
    args: &InitArgs,
) -> Result<Option<Box<dyn Communicator>>, RuntimeError> {
    let Some(world) = world else { return Ok(None) };
    let in_order = !plan.spares_used && plan.rank_map.iter().zip(0..).all(|(&(_, new), i)| new == i);
    if !in_order {
        return Ok(None);
    }
    // The world's ranks are the global ranks (the grid covers the whole world).
    let mut comm = world.locked();
    match comm.shrink(&plan.dropped, &args.comm_config.default, true, args.timeout) {
        Ok(shrunk) => Ok(Some(shrunk)),
        Err(e) if matches!(e.kind, CommErrorKind::Unsupported | CommErrorKind::VersionTooOld) => Ok(None),
        Err(e) => Err(RuntimeError::Comm(
            e.context(format!("recovery: shrinking the world communicator without rank(s) {:?}", plan.dropped)),
        )),
    }
}

/// Environment variable `mcore-launch` sets to a directory of its own; see [`announce_recoverable`].
pub const LAUNCH_DIR_ENV: &str = "MCORE_LAUNCH_DIR";

/// Tell `mcore-launch` (when it started this process) that the job recovers from a rank's death:
/// it then lets the other ranks go on when one is killed, instead of stopping them. Call it once
/// the runtime is up and the program is ready to call [`reinitialize`]. A no-op without the
/// launcher.
pub fn announce_recoverable() -> std::io::Result<()> {
    match std::env::var_os(LAUNCH_DIR_ENV) {
        Some(dir) => std::fs::write(std::path::Path::new(&dir).join("recoverable"), b"1"),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    /// No absent rank known alive.
    fn none_coming(_: &[u32]) -> Vec<u32> {
        Vec::new()
    }

    /// Rank 2 is alive but arrives after the window (it started late); rank 3 never comes. Rank
    /// 2 is waited for, not voted out: every verdict names rank 3 alone.
    #[test]
    fn a_rank_known_alive_that_arrives_late_is_waited_for() {
        let store = Arc::new(MemoryStore::new(Duration::from_secs(20)));
        let deadline = Deadline::after(Duration::from_secs(10));
        let window = Duration::from_millis(200);
        let handles: Vec<_> = [(0u32, 0u64), (1, 0), (2, 700)]
            .map(|(r, late_ms)| {
                let store = store.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(late_ms));
                    let coming = |absent: &[u32]| absent.iter().copied().filter(|&a| a == 2).collect();
                    agree(store.as_ref(), r, 4, &[], None, window, deadline, &coming).unwrap()
                })
            })
            .into_iter()
            .collect();
        let verdicts: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(verdicts.iter().all(|v| v == &vec![3]), "{verdicts:?}");
        // Without it, the late rank 2 is voted out with rank 3.
        let store = Arc::new(MemoryStore::new(Duration::from_secs(20)));
        assert_eq!(agree(store.as_ref(), 0, 3, &[], None, window, deadline, &none_coming).unwrap(), vec![1, 2]);
    }

    /// The agreement over an in-process store (a test double of the TCP store; the real store
    /// and processes are covered by scripts/test.d/26-recovery.sh and the Python tests).
    fn run_agreement(
        store: &Arc<MemoryStore>,
        ranks: &[u32],
        world: u32,
        suspects: &[u32],
        window: Duration,
    ) -> Vec<Vec<u32>> {
        let deadline = Deadline::after(Duration::from_secs(20));
        let handles: Vec<_> = ranks
            .iter()
            .map(|&r| {
                let (store, suspects) = (store.clone(), if r == ranks[0] { suspects.to_vec() } else { vec![] });
                std::thread::spawn(move || {
                    agree(store.as_ref(), r, world, &suspects, None, window, deadline, &none_coming).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn absent_ranks_are_found_within_the_window_and_everyone_agrees() {
        let store = Arc::new(MemoryStore::new(Duration::from_secs(20)));
        let t = Instant::now();
        let verdicts = run_agreement(&store, &[0, 1, 3, 4], 6, &[], Duration::from_millis(300));
        assert!(verdicts.iter().all(|v| v == &vec![2, 5]), "{verdicts:?}");
        assert!(t.elapsed() >= Duration::from_millis(300));
        // A rank arriving after the verdict reads it, and finds itself failed.
        let late = agree(
            store.as_ref(),
            2,
            6,
            &[],
            None,
            Duration::from_millis(50),
            Deadline::after(Duration::from_secs(5)),
            &none_coming,
        );
        assert_eq!(late.unwrap(), vec![2, 5]);
    }

    #[test]
    fn a_named_failure_ends_the_wait_early() {
        let store = Arc::new(MemoryStore::new(Duration::from_secs(20)));
        let t = Instant::now();
        let verdicts = run_agreement(&store, &[0, 1, 3], 4, &[2], Duration::from_secs(15));
        assert!(verdicts.iter().all(|v| v == &vec![2]), "{verdicts:?}");
        assert!(t.elapsed() < Duration::from_secs(10), "waited {:?}", t.elapsed());
        // Everyone present: nothing failed.
        let store = Arc::new(MemoryStore::new(Duration::from_secs(20)));
        let verdicts = run_agreement(&store, &[0, 1, 2], 3, &[], Duration::from_secs(15));
        assert!(verdicts.iter().all(|v| v.is_empty()), "{verdicts:?}");
    }

    #[test]
    fn the_store_host_is_never_proposed_failed() {
        // Rank 0 hosts the store and arrives late (after the window): alive while the store
        // answers, so the verdict names only the rank nobody heard from.
        let store = Arc::new(MemoryStore::new(Duration::from_secs(20)));
        let deadline = Deadline::after(Duration::from_secs(20));
        let window = Duration::from_millis(200);
        let verdicts: Vec<_> = [1u32, 2]
            .map(|r| {
                let store = store.clone();
                std::thread::spawn(move || {
                    agree(store.as_ref(), r, 4, &[], Some(0), window, deadline, &none_coming).unwrap()
                })
            })
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        assert!(verdicts.iter().all(|v| v == &vec![3]), "{verdicts:?}");
        assert_eq!(agree(store.as_ref(), 0, 4, &[], Some(0), window, deadline, &none_coming).unwrap(), vec![3]);
        // Without the host rule the late rank 0 would have been proposed failed.
        let store = Arc::new(MemoryStore::new(Duration::from_secs(20)));
        assert_eq!(agree(store.as_ref(), 1, 3, &[], None, window, deadline, &none_coming).unwrap(), vec![0, 2]);
    }

    #[test]
    fn rank_lists_round_trip_and_garbage_is_named() {
        assert_eq!(decode(&encode(&[1, 5, 9]), "k").unwrap(), vec![1, 5, 9]);
        assert_eq!(decode(&encode(&[]), "k").unwrap(), Vec::<u32>::new());
        let e = decode(b"junk", "recovery/verdict").unwrap_err().to_string();
        assert!(e.contains("recovery/verdict") && e.contains("junk"), "{e}");
    }
}
