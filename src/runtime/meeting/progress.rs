//! Progress marks, so that a communicator creation that fails can name the ranks that never came.
//!
//! Before each creation step (the world communicator, then each group kind in the layout's
//! order) a rank notes the step it has reached ([`Progress::mark`]). The note stays in memory:
//! it reaches the store (`progress/<rank>`, one key per rank, overwritten as it moves on) only
//! when a step has lasted [`PUBLISH_AFTER`] (a small thread parked on a condition variable
//! publishes it; it never polls the store), when this rank's creation fails, and once when the
//! creation is over ([`Progress::finish`]). A rank that creates without a hitch thus costs the
//! store one request however many groups it creates; a rank that hangs or waits at a step is in
//! the store within [`PUBLISH_AFTER`].
//!
//! A creation that fails or passes its deadline reads its members' marks: a member whose mark is
//! below the step never arrived, because it died, hangs earlier, or was never started. This
//! matters most for NCCL, whose own timeout cannot say who is missing. A member that is merely
//! fast (at the step for less than [`PUBLISH_AFTER`]) is read again after the grace of the one
//! explanation (`RECORD_GRACE`, `meeting/explain.rs`), long after it published, so it is never
//! named as one that did not come.
//!
//! Who of the members behind never arrived and who is stuck behind another rank is told by the
//! one explanation of a failed creation (`super::explain`).

use crate::lock::{Unpoisoned, UnpoisonedWait};
use crate::runtime::faults::interrupt::Interrupt;
use crate::store::Store;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a step lasts before its mark is published: well below the grace of the one
/// explanation (`RECORD_GRACE`, `meeting/explain.rs`), so that a failing rank that waited out
/// its grace reads the current mark of every member that is alive.
pub const PUBLISH_AFTER: Duration = Duration::from_millis(100);

/// The mark of a rank whose creation is over: past every step.
pub const FINISHED: u64 = i64::MAX as u64;

use super::keys::progress as key;

/// Record that `rank` has reached `step` (steps count from 1), now.
pub fn mark(store: &dyn Store, rank: u32, step: u64) -> Result<(), String> {
    store.set(&key(rank), step.to_string().as_bytes()).map_err(|e| format!("recording progress in the store: {e}"))
}

/// What the publisher and the creating thread share.
#[derive(Default)]
struct Note {
    /// The step reached, and since when.
    step: u64,
    since: Option<Instant>,
    /// The step last published.
    published: u64,
    /// The publisher is to end.
    over: bool,
}

/// One rank's progress through its creations (see the module docs): marks kept in memory and
/// published when a step lasts, when the creation fails, and once at its end.
pub struct Progress {
    store: Arc<dyn Store>,
    /// Where this rank's blame record is written (see `super::explain::Explainer::recording_in`).
    records: Arc<dyn Store>,
    /// The attempt's interrupt, for the explanations of this rank's creations (see
    /// `super::explain::Explainer::watching`).
    interrupt: Option<Arc<Interrupt>>,
    rank: u32,
    note: Arc<(Mutex<Note>, Condvar)>,
    publisher: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Progress of `rank`, published in `store`.
    pub fn start(store: Arc<dyn Store>, rank: u32) -> Progress {
        let note: Arc<(Mutex<Note>, Condvar)> = Arc::default();
        let (s, n) = (store.clone(), note.clone());
        let publisher = std::thread::Builder::new()
            .name("mcore-progress".into())
            .spawn(move || publish_lasting(s.as_ref(), rank, &n))
            .ok();
        Progress { records: store.clone(), interrupt: None, store, rank, note, publisher }
    }

    /// The same, this rank's blame record written in `records`.
    pub fn recording_in(mut self, records: Arc<dyn Store>) -> Progress {
        self.records = records;
        self
    }

    /// Where this rank's blame record is written.
    pub fn records(&self) -> &dyn Store {
        self.records.as_ref()
    }

    /// The same, its explanations watching `interrupt`.
    pub fn watching(mut self, interrupt: Arc<Interrupt>) -> Progress {
        self.interrupt = Some(interrupt);
        self
    }

    /// The attempt's interrupt, when watched.
    pub fn interrupt(&self) -> Option<&Interrupt> {
        self.interrupt.as_deref()
    }

    /// The store the marks are published in.
    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// This rank's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    fn note(&self) -> MutexGuard<'_, Note> {
        self.note.0.locked()
    }

    /// This rank has reached `step` (in memory; see the module docs).
    pub fn mark(&self, step: u64) {
        let mut n = self.note();
        n.step = step;
        n.since = Some(Instant::now());
        drop(n);
        self.note.1.notify_one();
    }

    /// Publish the step reached now, unless published already.
    pub(crate) fn publish_now(&self) {
        let mut n = self.note();
        publish(self.store.as_ref(), self.rank, &mut n);
    }

    /// The creation is over: publish [`FINISHED`] (one request) and end the publisher.
    pub fn finish(mut self) {
        self.mark(FINISHED);
        self.stop();
        self.publish_now();
    }

    fn stop(&mut self) {
        self.note().over = true;
        self.note.1.notify_one();
        if let Some(t) = self.publisher.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Progress {
    /// A creation abandoned (failed, or this rank stops): nothing more is published.
    fn drop(&mut self) {
        self.stop();
    }
}

/// Publish `n`'s step unless it is published (the lock held: marks never go out of order).
fn publish(store: &dyn Store, rank: u32, n: &mut Note) {
    if n.step != n.published && mark(store, rank, n.step).is_ok() {
        n.published = n.step;
    }
}

/// The publisher: parked until a step has lasted [`PUBLISH_AFTER`] unpublished, then publishes it.
fn publish_lasting(store: &dyn Store, rank: u32, note: &(Mutex<Note>, Condvar)) {
    let mut n = note.0.locked();
    while !n.over {
        let due = n.since.filter(|_| n.step != n.published).map(|t| t + PUBLISH_AFTER);
        n = match due {
            None => note.1.wait_on(n),
            Some(due) if Instant::now() >= due => {
                publish(store, rank, &mut n);
                n
            }
            Some(due) => note.1.wait_up_to(n, due.saturating_duration_since(Instant::now())),
        };
    }
}

/// The members whose mark is below `step`.
pub fn behind(store: &dyn Store, members: &[u32], step: u64) -> Vec<u32> {
    members
        .iter()
        .copied()
        // `add 0` reads a counter without waiting (an absent key reads as 0).
        .filter(|&m| store.add(&key(m), 0).is_ok_and(|v| v < step.min(FINISHED) as i64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use std::time::Duration;

    #[test]
    fn members_below_the_step_are_behind() {
        let s = MemoryStore::new(Duration::from_secs(1));
        mark(&s, 0, 3).unwrap();
        mark(&s, 1, 2).unwrap();
        mark(&s, 2, 5).unwrap();
        // rank 3 never marked anything
        assert_eq!(behind(&s, &[0, 1, 2, 3], 3), vec![1, 3]);
    }
}
