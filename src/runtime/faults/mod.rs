//! Failure as one capability: knowing that ranks failed, telling every wait, and saying who.
//!
//! One [`Faults`] per initialization attempt owns the rank's liveness (`liveness/`: it only
//! *finds* deaths and silences), the job's bulletin of events in the store (`bulletin.rs`: deaths,
//! questions, recovery requests, the job's end; one writer, one reader), the attempt's one
//! interrupt and dead list (`interrupt.rs`: every finder reports there — the bulletin's close
//! notices, rank 0's scan of heartbeats posted to it, PMIx events from the launcher), the levers
//! a fault pulls, armed only from here, and the verdict: who is gone and why, worded once
//! (`verdict.rs`). The route of a death is in docs/architecture.md.

mod backend_store;
pub mod bulletin;
pub mod interrupt;
pub mod liveness;
pub mod verdict;

use crate::backend::pmix::ProcEntry;
use crate::backend::{CommError, CommErrorKind, CommFactory};
use crate::runtime::error::RuntimeError;
use crate::runtime::faults::bulletin::Bulletin;
use crate::runtime::faults::interrupt::{Cause, Death, Interrupt};
use crate::runtime::faults::liveness::{Liveness, StartError, SILENT_AFTER};
use crate::runtime::launch::env::LaunchEnv;
use crate::runtime::launch::host;
use crate::runtime::launch::store_setup::StoreHandles;
use crate::runtime::meeting::checkin::CheckinError;
use crate::runtime::meeting::explain;
use crate::store::{Store, StoreError};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most ranks one question reads (two store requests each).
const MAX_ASKED: usize = 4096;

/// How long the verdict waits for the launcher's word about a rank whose death the store found
/// first, where PMIx events are listened for (the launcher's event follows the store's close
/// notice by 1-50 ms, and says how the process ended).
const LAUNCHER_GRACE: Duration = Duration::from_millis(100);

/// The faults of one initialization attempt (see the module docs).
pub struct Faults {
    liveness: Option<Liveness>,
    interrupt: Arc<Interrupt>,
    bulletin: Option<Arc<Bulletin>>,
    rank: u32,
    world: u32,
    /// The launcher's rank (PMIx's numbering) of each rank of this attempt, after a recovery
    /// renumbered them; `None`: the same numbering.
    launcher: Option<Arc<Vec<u32>>>,
}

impl Faults {
    /// No liveness (a world of one, a spare standing by, a recovery's old store): deaths are found
    /// only by what reports to the interrupt (PMIx).
    pub(crate) fn none(env: &LaunchEnv) -> Faults {
        Faults {
            liveness: None,
            interrupt: Interrupt::new(),
            bulletin: None,
            rank: env.rank,
            world: env.world_size,
            launcher: None,
        }
    }

    /// The faults of rank `rank` of a world of `world` around a liveness already started (tests;
    /// the runtime uses `Faults::start`).
    pub fn of(liveness: Liveness, rank: u32, world: u32) -> Faults {
        let interrupt = Arc::clone(liveness.interrupt());
        Faults { liveness: Some(liveness), interrupt, bulletin: None, rank, world, launcher: None }
    }

    /// This rank's liveness, if it has one.
    pub fn liveness(&self) -> Option<&Liveness> {
        self.liveness.as_ref()
    }

    /// Start this rank's liveness (see [`liveness`]) on a connection of its own to `store` at
    /// MASTER_ADDR:MASTER_PORT of `env`, within `within` (the time the init has left); none in a
    /// world of one. The attempt's bulletin is read and written through `store`. A liveness that
    /// cannot start costs the init the naming of dead ranks (said once, on stderr); one whose rank
    /// another client posed as fails it, naming that client. PMIx's death events report to this
    /// attempt's dead list from now on, numbered as this attempt numbers its ranks (`launcher`:
    /// the launcher's rank of each, after a recovery; an event about a rank outside this
    /// attempt's world — one that left, or had died before — is not this attempt's).
    pub(crate) fn start(
        env: &LaunchEnv,
        attempt: &str,
        within: Duration,
        store: &StoreHandles,
        launcher: Option<Vec<u32>>,
    ) -> Result<Faults, RuntimeError> {
        let mut faults = Faults::none(env);
        faults.launcher = launcher.map(Arc::new);
        faults.bulletin = Some(Arc::new(Bulletin::of(store, attempt, env)));
        let sink = Arc::downgrade(&faults.interrupt);
        let numbering = faults.launcher.clone();
        let world = env.world_size;
        crate::backend::pmix::on_death(Some(Box::new(move |launcher_rank, what| {
            let rank = attempt_rank(numbering.as_deref().map(Vec::as_slice), world, launcher_rank);
            if let (Some(i), Some(rank)) = (sink.upgrade(), rank) {
                i.died([(rank, Death { cause: Cause::Launcher(what), host: None })]);
            }
        })));
        if env.world_size <= 1 {
            return Ok(faults);
        }
        match Liveness::start(env, attempt, within, store.token(), Arc::clone(&faults.interrupt)) {
            Ok(l) => faults.liveness = Some(l),
            Err(StartError::Unreachable(why)) => eprintln!("mcore_init: rank {}: {why}", env.rank),
            Err(StartError::Posed(why)) => return Err(RuntimeError::Store(StoreError::Protocol(why))),
        }
        Ok(faults)
    }

    /// Register the levers a fault pulls while armed (the calls blocked on `store`, every call of
    /// `backend`, PMIx's waits), and have a store host found gone end every call on `store`.
    /// Once per attempt, before the first [`Faults::arm`].
    pub(crate) fn levers(&self, store: &StoreHandles, backend: &Arc<dyn CommFactory>) {
        if let Some(abort) = store.busy_aborter() {
            self.interrupt.add_lever(Box::new(move |on| {
                if on {
                    abort()
                }
            }));
        }
        let backend = Arc::clone(backend);
        self.interrupt.add_lever(Box::new(move |on| backend.interrupt(on)));
        // PMIx's waits that involve a rank found dead end; the others go on.
        let (dead_list, numbering) = (Arc::downgrade(&self.interrupt), self.launcher.clone());
        self.interrupt.add_lever(Box::new(move |on| {
            let dead = if on { dead_list.upgrade().map(|i| i.dead()).unwrap_or_default() } else { Vec::new() };
            crate::backend::pmix::interrupt_waits(&launcher_of(numbering.as_deref().map(Vec::as_slice), dead));
        }));
        if let (Some(l), Some(abort)) = (&self.liveness, store.aborter()) {
            l.on_store_gone(abort);
        }
    }

    /// Until the returned guard drops, a death ends the calls the levers reach: an
    /// initialization's steps, a recreate-mode resume, the store host's wait for the others to
    /// leave. Dropped once every call it could end has returned.
    pub(crate) fn arm(&self) -> Armed<'_> {
        self.interrupt.arm();
        Armed(&self.interrupt)
    }

    /// [`Faults::arm`] across the steps of an initialization (`false` once they are over).
    pub(crate) fn set_armed(&self, armed: bool) {
        if armed {
            self.interrupt.arm();
        } else {
            self.interrupt.disarm();
        }
    }

    /// The attempt's interrupt (every watching meeting observes it).
    pub(crate) fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// The attempt's interrupt, for a wait that outlives a borrow of this (a group made after
    /// init is created on a thread of its own).
    pub(crate) fn shared_interrupt(&self) -> Arc<Interrupt> {
        Arc::clone(&self.interrupt)
    }

    /// The attempt's bulletin (none for faults made around a liveness in tests).
    pub(crate) fn bulletin(&self) -> Option<Arc<Bulletin>> {
        self.bulletin.clone()
    }

    /// The ranks known dead, ascending: the one dead list.
    pub(crate) fn dead(&self) -> Vec<u32> {
        self.interrupt.dead()
    }

    /// The launcher's rank of each rank of a world renumbered from this one: `before` gives each
    /// new rank's number in this attempt (see [`Faults::start`]).
    pub(crate) fn launcher_ranks(&self, before: &[u32]) -> Vec<u32> {
        match &self.launcher {
            Some(map) => before.iter().map(|&old| map.get(old as usize).copied().unwrap_or(u32::MAX)).collect(),
            None => before.to_vec(),
        }
    }

    /// Why the store's host is taken for gone, when it is.
    pub(crate) fn store_silent(&self) -> Option<String> {
        self.liveness.as_ref().and_then(Liveness::store_silent)
    }

    /// See [`Liveness::set_deadline`].
    pub(crate) fn set_deadline(&self, deadline: Option<Instant>) {
        if let Some(l) = &self.liveness {
            l.set_deadline(deadline);
        }
    }

    /// See [`Liveness::set_idle_patience`].
    pub(crate) fn set_idle_patience(&self, patience: Duration) {
        if let Some(l) = &self.liveness {
            l.set_idle_patience(patience);
        }
    }

    /// `base`, failing every call at once once the store's host is found gone (see
    /// [`Liveness::guard`]).
    pub(crate) fn guard(&self, base: Arc<dyn Store>) -> Arc<dyn Store> {
        match &self.liveness {
            Some(l) => l.guard(base),
            None => base,
        }
    }

    /// `store` as a backend creating communicators sees it: while armed, a wait it begins after a
    /// death fails at once (see `backend_store.rs`).
    pub(crate) fn backend_store(&self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(backend_store::BackendStore { inner: store, interrupt: Arc::clone(&self.interrupt) })
    }

    /// Where this rank writes its blame record: its liveness connection, the only one our store
    /// lets write it (the record is under its claimed counter); `base` without a liveness.
    pub(crate) fn records(&self, base: &Arc<dyn Store>) -> Arc<dyn Store> {
        self.liveness.as_ref().map_or_else(|| Arc::clone(base), Liveness::own_store)
    }

    /// After a recovery, name ranks in both numberings (see [`Liveness::number_as_before`]).
    pub fn number_as_before(&self, before: Vec<u32>) {
        if let Some(l) = &self.liveness {
            l.number_as_before(before);
        }
    }

    /// The ranks of `missing` from a check-in through PMIx, named from the launcher's process
    /// `table`: those that ended join the dead list (found by the launcher, with how they ended and
    /// their host) and are named as died, those whose process never connected to PMIx as never
    /// started, after `waited`. `None` when the table cannot tell (a missing rank not in it, or
    /// connected: alive, perhaps late), so that the caller asks otherwise.
    pub(crate) fn missing_per_launcher(
        &self,
        missing: &[u32],
        table: &[ProcEntry],
        waited: Duration,
    ) -> Option<CheckinError> {
        let entries: Vec<&ProcEntry> =
            missing.iter().map(|r| table.iter().find(|e| e.rank == *r)).collect::<Option<_>>()?;
        let (ended, never): (Vec<&ProcEntry>, Vec<&ProcEntry>) = entries.into_iter().partition(|e| e.state.ended());
        if never.iter().any(|e| e.state != crate::backend::pmix::ProcState::NotConnected) {
            return None;
        }
        let label = |e: &ProcEntry| (!e.hostname.is_empty()).then(|| crate::quote::quoted(&e.hostname));
        self.interrupt.died(ended.iter().map(|e| {
            let cause = Cause::Launcher(verdict::ended_per_table(&e.state.to_string()));
            (e.rank, Death { cause, host: label(e) })
        }));
        let mut parts = Vec::new();
        let dead: Vec<u32> = ended.iter().map(|e| e.rank).collect();
        parts.extend(self.died(&dead));
        if !never.is_empty() {
            let ranks: Vec<u32> = never.iter().map(|e| e.rank).collect();
            let who = host::describe_by(&ranks, &|r| never.iter().find(|e| e.rank == r).and_then(|e| label(e)));
            parts.push(verdict::never_started(&who, crate::runtime::meeting::checkin::WHAT));
        }
        Some(CheckinError::Missing {
            ranks: missing.to_vec(),
            waited,
            nodes: String::new(),
            died: Some(parts.join("; ")),
        })
    }

    /// The ranks known dead and those a question of the last `within` found silent.
    pub(crate) fn recently_silent(&self, within: Duration) -> Vec<u32> {
        let mut out = self.liveness.as_ref().map(|l| l.recently_silent(within)).unwrap_or_default();
        out.extend(self.dead());
        out.sort_unstable();
        out.dedup();
        out
    }

    /// `e` with the peers that died or stopped answering named first, when it is a failure that
    /// a dead or frozen peer can cause (a timeout, a lost peer, a store that went away).
    pub(crate) fn verdict(&self, e: RuntimeError) -> RuntimeError {
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
        match self.who_is_gone() {
            Some(who) => RuntimeError::PeersGone { who, source: Box::new(e) },
            None => e,
        }
    }

    /// `e`, a failed collective, with the ranks gone named first when it timed out or lost a peer.
    pub(crate) fn explain(&self, e: CommError) -> CommError {
        match e.kind {
            CommErrorKind::Timeout | CommErrorKind::PeerFailed => match self.who_is_gone() {
                Some(who) => CommError { message: format!("{who}; {}", e.message), ..e },
                None => e,
            },
            _ => e,
        }
    }

    /// A sentence naming who of the whole world is gone (this rank left out; the world, not only a
    /// failed group's members, since a member may be alive but stuck on a rank of another group):
    /// the ranks known dead, else the store's host or the ranks whose heartbeat stood still when
    /// asked; `None` when every one answers. A silent rank that had itself failed before it went
    /// (it exits after its own error) is followed to the ranks it blamed, so that every survivor
    /// names the rank that died first; a rank that answers is never named. What this rank blames
    /// is recorded for the ranks that ask later.
    pub(crate) fn who_is_gone(&self) -> Option<String> {
        self.who_is_gone_among(&(0..self.world).collect::<Vec<_>>())
    }

    /// `Faults::who_is_gone` (the whole world) of `ranks` only.
    pub fn who_is_gone_among(&self, ranks: &[u32]) -> Option<String> {
        let others: Vec<u32> = ranks.iter().copied().filter(|&r| r != self.rank).collect();
        if others.is_empty() {
            return None;
        }
        if let Some(died) = self.died(&others) {
            return Some(died);
        }
        let l = self.liveness.as_ref()?;
        let silent = l.silent(&others);
        // A death read while the question ran says more than a heartbeat standing still.
        if let Some(died) = self.died(&others) {
            return Some(died);
        }
        let silent = match silent {
            Err(store_gone) => return Some(store_gone),
            Ok(silent) if silent.is_empty() => return None,
            Ok(silent) => silent,
        };
        // Follow the records of silent ranks that failed before they went: a rank found answering
        // ends no chain, and a silent rank whose record blames none other is a root itself.
        let checked = &others[..others.len().min(MAX_ASKED)];
        let answering = |r: &u32| checked.contains(r) && !silent.contains(r);
        let store = l.own_store();
        let (roots, followers) = explain::follow(silent.clone(), BTreeSet::from([self.rank]), MAX_ASKED, |r| {
            let blamed: Vec<u32> = explain::record_of(&*store, r)?.into_iter().filter(|b| !answering(b)).collect();
            (!blamed.is_empty()).then_some(blamed)
        });
        self.record(&roots);
        let mut text = verdict::silent(&self.who(&roots), SILENT_AFTER);
        if !followers.is_empty() {
            text.push_str("; ");
            text.push_str(&verdict::followed(&l.name_ranks(&followers)));
        }
        Some(text)
    }

    /// The sentence for the ranks of `others` known dead, if any (recorded as this rank's blame),
    /// after the launcher's word about them where it may come ([`LAUNCHER_GRACE`]).
    fn died(&self, others: &[u32]) -> Option<String> {
        let dead = self.interrupt.dead_among(others);
        if dead.is_empty() {
            return None;
        }
        if crate::backend::pmix::events_registered() {
            let heard = |list: &BTreeMap<u32, Death>| {
                dead.iter().all(|r| matches!(list.get(r).map(|d| &d.cause), Some(Cause::Launcher(_))))
            };
            self.interrupt.await_dead(Instant::now() + LAUNCHER_GRACE, heard);
        }
        self.record(&dead);
        Some(verdict::died_among(&self.interrupt, &dead, &|rs| self.who(rs)))
    }

    /// `ranks` with their hosts (read as their death was found, else published), e.g. "5 on host
    /// 'n1' (10.0.0.2)", and after a recovery with their numbers before it too.
    fn who(&self, ranks: &[u32]) -> String {
        let bare = host::format_ranks(ranks);
        let Some(l) = &self.liveness else { return bare };
        let store = l.own_store();
        let hosts = host::describe_by(ranks, &|r| {
            self.interrupt.death(r).and_then(|d| d.host).or_else(|| host::label_of(&*store, r))
        });
        let numbered = l.name_ranks(ranks);
        match (hosts == bare, numbered == bare) {
            (true, _) => numbered,
            (false, true) => hosts,
            (false, false) => format!("{numbered} ({hosts})"),
        }
    }

    /// Add `ranks` to what this rank blames in its blame record (the one record: a failed
    /// creation may have written it first), on its liveness connection, the only one the store
    /// lets write it.
    fn record(&self, ranks: &[u32]) {
        if let Some(l) = &self.liveness {
            let store = l.own_store();
            let mut blamed = explain::record_of(&*store, self.rank).unwrap_or_default();
            blamed.extend(ranks.iter().filter(|r| !blamed.contains(r)).collect::<Vec<_>>());
            explain::record(&*store, self.rank, blamed.iter());
        }
    }
}

/// The rank of an attempt that the launcher numbers `launcher_rank` (`numbering`: the launcher's
/// rank of each of the attempt's ranks, after a recovery; `None`: the same numbering, in a world
/// of `world`); `None` when it is not one of the attempt's ranks (it left, or died before).
fn attempt_rank(numbering: Option<&[u32]>, world: u32, launcher_rank: u32) -> Option<u32> {
    match numbering {
        Some(map) => map.iter().position(|&l| l == launcher_rank).map(|r| r as u32),
        None => Some(launcher_rank).filter(|&r| r < world),
    }
}

/// The launcher's numbers of the attempt's ranks `ranks` (see [`attempt_rank`]).
fn launcher_of(numbering: Option<&[u32]>, ranks: Vec<u32>) -> Vec<u32> {
    match numbering {
        Some(map) => ranks.iter().filter_map(|&r| map.get(r as usize).copied()).collect(),
        None => ranks,
    }
}

/// See [`Faults::arm`]; disarms on drop.
pub(crate) struct Armed<'a>(&'a Interrupt);

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.0.disarm();
    }
}

/// Whether an initialization failed because a peer did not come or went away (a rank missing at
/// check-in, a group whose creation or verification timed out or lost a peer): recovery can
/// continue from it.
pub(crate) fn failed_for_a_peer(e: &RuntimeError) -> bool {
    use crate::backend::CommErrorKind as K;
    match e.cause() {
        RuntimeError::Checkin(CheckinError::Missing { .. }) => true,
        RuntimeError::Group(g) => matches!(g.error.kind, K::Timeout | K::PeerFailed),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PMIx's events name ranks as the launcher numbered them: after a recovery renumbered the
    /// world (old 0-7, rank 5 failed, its replica 4, 6, 7 left: new 0-3 are old 0-3), an event
    /// about a rank that left or had died is not the new attempt's, and one about old rank 2 is
    /// about new rank 2; the PMIx waits told of the new attempt's dead get the launcher's numbers.
    #[test]
    fn launcher_events_are_renumbered_for_a_recovered_world() {
        let none: Option<&[u32]> = None;
        assert_eq!(attempt_rank(none, 8, 5), Some(5));
        assert_eq!(attempt_rank(none, 8, 8), None, "outside the world");
        let after: &[u32] = &[0, 1, 2, 3];
        for gone in [4, 5, 6, 7] {
            assert_eq!(attempt_rank(Some(after), 4, gone), None, "launcher rank {gone} left or died before");
        }
        assert_eq!(attempt_rank(Some(after), 4, 2), Some(2));
        // A second recovery drops new rank 1 (old 1): new 0, 1 are old 0, 2.
        let twice: &[u32] = &[0, 2];
        assert_eq!(attempt_rank(Some(twice), 2, 2), Some(1));
        assert_eq!(attempt_rank(Some(twice), 2, 1), None);
        assert_eq!(launcher_of(Some(twice), vec![1]), [2]);
        assert_eq!(launcher_of(none, vec![3, 5]), [3, 5]);
    }
}
