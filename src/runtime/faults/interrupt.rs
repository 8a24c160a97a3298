//! The one interrupt of an initialization attempt and its one dead list: an epoch that moves on
//! every fault, the ranks known dead (with how each was found, and its host), and the levers a
//! fault pulls while the interrupt is armed.
//!
//! NCCL has one abort flag that every wait checks; wasmtime one epoch counter that every guest
//! observes. Here every finder of a death (the liveness watcher's close notices, rank 0's scan of
//! the heartbeats where the store is torchrun's agent's, a PMIx event from the launcher) reports
//! to [`Interrupt::died`]; nothing else keeps a list of the dead. A wait observes the epoch: a
//! `Meeting` (`runtime/meeting/meet.rs`) given the interrupt checks the dead list before it
//! parks, and a wait ended by a lever (or a slice, while disarmed) looks again.
//!
//! The levers end calls in flight: the store's blocked calls (the pool's busy-abort), the
//! backend's calls (`CommFactory::interrupt`), PMIx's waits. They are registered once per attempt
//! by `super::Faults` and pulled only while armed: an initialization, a recreate-mode resume, the
//! store host's wait for the others to leave. After init a death ends no backend call of a group
//! without the dead rank.

use crate::lock::{Unpoisoned, UnpoisonedWait};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A lever: `true` ends the calls it reaches (and fails those that start) until `false`.
pub type Lever = Box<dyn Fn(bool) + Send + Sync>;

/// How a rank's death was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Its liveness connection to our store closed without a goodbye.
    ConnectionClosed,
    /// Where the store is torchrun's agent's: its heartbeat stood still this long.
    HeartbeatStill(Duration),
    /// The launcher said so (a PMIx event), with what it said of the exit.
    Launcher(String),
}

/// One rank known dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    pub cause: Cause,
    /// Its host's label, read as the death was found (the store may be gone when it is told).
    pub host: Option<String>,
}

/// See the module docs. Shared (`Arc`) by the finders, the levers' owner and every wait.
#[derive(Default)]
pub struct Interrupt {
    epoch: AtomicU64,
    armed: AtomicBool,
    levers: Mutex<Vec<Lever>>,
    dead: Mutex<BTreeMap<u32, Death>>,
    /// Notified whenever the dead list changes ([`Interrupt::await_dead`]).
    changed: Condvar,
    /// Whether a death is pulling the levers now (so that a disarm pulls them back).
    pulled: AtomicBool,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.locked()
}

impl Interrupt {
    pub fn new() -> Arc<Interrupt> {
        Arc::new(Interrupt::default())
    }

    /// How many faults have moved it so far.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Register a lever (see the module docs); `super::Faults` only.
    pub(super) fn add_lever(&self, lever: Lever) {
        locked(&self.levers).push(lever);
    }

    /// From now on a fault pulls the levers; pulled at once when a rank is known dead already.
    pub(super) fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
        if !locked(&self.dead).is_empty() {
            self.pull(true);
        }
    }

    /// A fault pulls nothing any more, and the levers pulled are let go (every call they could
    /// end has returned: the caller says so by disarming).
    pub(super) fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
        if self.pulled.swap(false, Ordering::SeqCst) {
            for l in locked(&self.levers).iter() {
                l(false);
            }
        }
    }

    /// Whether a fault pulls the levers now.
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst)
    }

    fn pull(&self, on: bool) {
        self.pulled.store(on, Ordering::SeqCst);
        for l in locked(&self.levers).iter() {
            l(on);
        }
    }

    /// Ranks found dead (`deaths`): those not known before join the dead list, the epoch moves,
    /// and, armed, the levers are pulled. Whether any was new. The launcher's word about a rank
    /// known dead by other means replaces theirs (it says how the process ended) and moves nothing.
    pub fn died(&self, deaths: impl IntoIterator<Item = (u32, Death)>) -> bool {
        let mut new = false;
        {
            let mut dead = locked(&self.dead);
            for (r, d) in deaths {
                match dead.entry(r) {
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert(d);
                        new = true;
                    }
                    std::collections::btree_map::Entry::Occupied(mut o) => {
                        let known = o.get_mut();
                        if matches!(d.cause, Cause::Launcher(_)) && !matches!(known.cause, Cause::Launcher(_)) {
                            known.cause = d.cause;
                            known.host = known.host.take().or(d.host);
                        }
                    }
                }
            }
        }
        self.changed.notify_all();
        if new {
            self.moved();
        }
        new
    }

    /// Wait until `done` holds of the dead list, or `until` passes (parked: woken by each change).
    pub fn await_dead(&self, until: Instant, done: impl Fn(&BTreeMap<u32, Death>) -> bool) {
        let mut dead = locked(&self.dead);
        while !done(&dead) {
            let now = Instant::now();
            if now >= until {
                return;
            }
            dead = self.changed.wait_up_to(dead, until - now);
        }
    }

    /// Something every wait should look at again happened (a death, the store's host gone):
    /// the epoch moves and, armed, the levers are pulled.
    pub fn moved(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.armed() {
            self.pull(true);
        }
    }

    /// The ranks known dead, ascending.
    pub fn dead(&self) -> Vec<u32> {
        locked(&self.dead).keys().copied().collect()
    }

    /// How `rank` was found dead, if it was.
    pub fn death(&self, rank: u32) -> Option<Death> {
        locked(&self.dead).get(&rank).cloned()
    }

    /// Those of `ranks` known dead, ascending.
    pub fn dead_among(&self, ranks: &[u32]) -> Vec<u32> {
        let dead = locked(&self.dead);
        let mut out: Vec<u32> = ranks.iter().copied().filter(|r| dead.contains_key(r)).collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn closed() -> Death {
        Death { cause: Cause::ConnectionClosed, host: None }
    }

    #[test]
    fn a_death_moves_the_epoch_once_and_pulls_the_levers_only_while_armed() {
        let i = Interrupt::new();
        let (on, off) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (on2, off2) = (on.clone(), off.clone());
        i.add_lever(Box::new(move |pull| {
            if pull { &on2 } else { &off2 }.fetch_add(1, Ordering::SeqCst);
        }));
        assert!(i.died([(3, closed())]));
        assert!(!i.died([(3, closed())]), "a rank known dead is not new");
        assert_eq!((i.epoch(), on.load(Ordering::SeqCst)), (1, 0), "disarmed: nothing pulled");
        i.arm();
        assert_eq!(on.load(Ordering::SeqCst), 1, "armed with a rank known dead: pulled at once");
        i.died([(5, closed())]);
        assert_eq!((i.epoch(), on.load(Ordering::SeqCst)), (2, 2));
        i.disarm();
        assert_eq!(off.load(Ordering::SeqCst), 1);
        i.disarm();
        assert_eq!(off.load(Ordering::SeqCst), 1, "let go once");
        assert_eq!(i.dead(), [3, 5]);
        assert_eq!(i.dead_among(&[5, 4, 5]), [5]);
        // The launcher's word about a rank known dead replaces the close notice, moving nothing.
        let launcher = Death { cause: Cause::Launcher("killed by signal 9".into()), host: None };
        assert!(!i.died([(5, launcher.clone())]));
        assert_eq!((i.epoch(), i.death(5).map(|d| d.cause)), (2, Some(launcher.cause.clone())));
        assert!(!i.died([(5, closed())]));
        assert_eq!(i.death(5).map(|d| d.cause), Some(launcher.cause), "and is not replaced back");
    }
}
