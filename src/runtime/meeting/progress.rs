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
//! fast (at the step for less than [`PUBLISH_AFTER`]) is read again after [`RECORD_GRACE`], long
//! after it published, so it is never named as one that did not come.
//!
//! A member that is behind may itself be alive, stuck at an earlier group that waits for a dead
//! rank. So a rank whose creation fails also records whom it blamed (`blame/<rank>`, the one blame record),
//! and a failure that finds a member behind waits briefly ([`RECORD_GRACE`]) for that member's
//! record: a member with a record is reported as stuck, and the ranks it blamed are blamed
//! instead; only members without one are said to have never arrived.

use super::meet::did_not_come;
use crate::runtime::launch::host::describe;
use crate::store::Store;
use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a failing rank waits for the failure records of the members that are behind it:
/// members stuck on the same dead rank fail within about this much of each other (they share
/// one deadline). Short, since every wait must end within its deadline + 2 s, and naming the
/// dead (`crate::runtime::liveness`) and leaving come after it.
pub const RECORD_GRACE: Duration = Duration::from_millis(400);

/// How long a step lasts before its mark is published: well below [`RECORD_GRACE`], so that a
/// failing rank that waited out its grace reads the current mark of every member that is alive.
pub const PUBLISH_AFTER: Duration = Duration::from_millis(100);

/// The mark of a rank whose creation is over: past every step.
pub const FINISHED: u64 = i64::MAX as u64;

/// The most members whose marks a failure reads (one store request each).
const MAX_CHECKED: usize = 65_536;

use super::keys::{blame as failed_key, progress as key};

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
        Progress { store, rank, note, publisher }
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
        self.note.0.lock().unwrap_or_else(|p| p.into_inner())
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
    fn publish_now(&self) {
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

    /// `message`, plus who kept this rank from finishing `step` (see [`explain`]); publishes
    /// this rank's mark first.
    pub fn explain(&self, members: &[u32], step: u64, message: String) -> String {
        self.publish_now();
        explain(self.store.as_ref(), self.rank, members, step, message)
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
    let mut n = note.0.lock().unwrap_or_else(|p| p.into_inner());
    while !n.over {
        let due = n.since.filter(|_| n.step != n.published).map(|t| t + PUBLISH_AFTER);
        n = match due {
            None => note.1.wait(n).unwrap_or_else(|p| p.into_inner()),
            Some(due) if Instant::now() >= due => {
                publish(store, rank, &mut n);
                n
            }
            Some(due) => {
                note.1
                    .wait_timeout(n, due.saturating_duration_since(Instant::now()))
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
    }
}

/// The members (of the first `MAX_CHECKED`) whose mark is below `step`.
pub fn behind(store: &dyn Store, members: &[u32], step: u64) -> Vec<u32> {
    members
        .iter()
        .take(MAX_CHECKED)
        .copied()
        // `add 0` reads a counter without waiting (an absent key reads as 0).
        .filter(|&m| store.add(&key(m), 0).is_ok_and(|v| v < step.min(FINISHED) as i64))
        .collect()
}

/// Up to this many members, a failure where every member arrived names each member's host.
const MAX_DESCRIBED: usize = 64;

/// The ranks `rank`'s failure record blames, when it has one.
pub(crate) fn record_of(store: &dyn Store, rank: u32) -> Option<Vec<u32>> {
    let k = failed_key(rank);
    if !store.check(&[&k]).ok()? {
        return None;
    }
    let text = store.get(&k).ok()?;
    Some(String::from_utf8_lossy(&text).split(',').filter_map(|r| r.parse().ok()).collect())
}

/// `message`, plus who kept rank `rank` from finishing `step`: the members that never reached
/// it, and the members stuck at an earlier group with the ranks they wait for. Records what
/// this rank blames (see the module docs) for the failures of others.
pub fn explain(store: &dyn Store, rank: u32, members: &[u32], step: u64, message: String) -> String {
    let late = behind(store, members, step);
    let record = |blamed: &mut dyn Iterator<Item = &u32>| {
        let text: Vec<String> = blamed.map(u32::to_string).collect();
        let _ = store.set(&failed_key(rank), text.join(",").as_bytes());
    };
    if !late.is_empty() {
        // A first record at once (the late members), so that ranks waiting for this one can
        // pass the blame on while this one waits for the records of its own late members.
        record(&mut late.iter());
        let keys: Vec<String> = late.iter().map(|&m| failed_key(m)).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        // Ends early when every late member has failed; else after the grace. Once a peer died
        // a guarded store's waits fail at once: the re-read below still comes no sooner than
        // twice `PUBLISH_AFTER` after this began, so members failing with this rank have
        // published their marks by then.
        let began = Instant::now();
        let _ = store.wait(&keys, RECORD_GRACE);
        std::thread::sleep((began + 2 * PUBLISH_AFTER).saturating_duration_since(Instant::now()));
    }
    // Read again: a member that was merely fast has published its mark by now (it publishes a
    // step that lasts `PUBLISH_AFTER`, well within the grace).
    let late = if late.is_empty() { late } else { behind(store, &late, step) };
    let (mut never, mut stuck, mut waited_on) = (Vec::new(), Vec::new(), BTreeSet::new());
    for &m in &late {
        match record_of(store, m) {
            Some(blamed) => {
                stuck.push(m);
                // Follow the records (a chain of stuck ranks) to the ranks without one.
                let mut seen: BTreeSet<u32> = late.iter().copied().collect();
                seen.insert(rank);
                let mut queue = blamed;
                while let Some(r) = queue.pop() {
                    if !seen.insert(r) || seen.len() > MAX_CHECKED {
                        continue;
                    }
                    match record_of(store, r) {
                        Some(more) => queue.extend(more),
                        None => {
                            waited_on.insert(r);
                        }
                    }
                }
            }
            None => never.push(m),
        }
    }
    record(&mut never.iter().chain(&waited_on).collect::<BTreeSet<_>>().into_iter());
    let mut out = message;
    let scope =
        if members.len() > MAX_CHECKED { format!(" (of the first {MAX_CHECKED} checked)") } else { String::new() };
    if !never.is_empty() {
        out.push_str(&format!("; {}", did_not_come(&format!("{}{scope}", describe(store, &never)), "this group")));
    }
    if !stuck.is_empty() {
        out.push_str(&format!("; rank(s) {} failed at an earlier group", describe(store, &stuck)));
        let waited_on: Vec<u32> = waited_on.into_iter().collect();
        if !waited_on.is_empty() {
            out.push_str(&format!(", waiting for rank(s) {}", describe(store, &waited_on)));
        }
    }
    if late.is_empty() && members.len() <= MAX_DESCRIBED {
        // Every member arrived (a backend that could not connect, say): name the members' hosts,
        // so that an unreachable address can be matched with its rank and host.
        let hosts = describe(store, members);
        if hosts.contains(" on host ") {
            out.push_str(&format!("; the group's ranks are {hosts}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use std::time::Duration;

    #[test]
    fn members_below_the_step_are_named() {
        let s = MemoryStore::new(Duration::from_secs(1));
        mark(&s, 0, 3).unwrap();
        mark(&s, 1, 2).unwrap();
        mark(&s, 2, 5).unwrap();
        // rank 3 never marked anything
        assert_eq!(behind(&s, &[0, 1, 2, 3], 3), vec![1, 3]);
        let text = explain(&s, 0, &[0, 1, 2, 3], 3, "timed out".into());
        assert_eq!(text, "timed out; rank(s) 1, 3 did not come to this group");
        assert_eq!(explain(&s, 2, &[0, 2], 3, "failed".into()), "failed");
        // A member that published its host is named with it.
        let host = crate::runtime::launch::host::HostInfo {
            hostname: "n1".into(),
            addr: "10.0.0.2".parse().unwrap(),
            why: String::new(),
        };
        crate::runtime::launch::host::publish(&s, 3, &host).unwrap();
        assert_eq!(
            explain(&s, 0, &[1, 3], 3, "x".into()),
            "x; rank(s) 1; 3 on host 'n1' (10.0.0.2) did not come to this group"
        );
        // All arrived: the members' hosts are named.
        mark(&s, 3, 3).unwrap();
        assert_eq!(explain(&s, 0, &[0, 3], 3, "y".into()), "y; the group's ranks are 0; 3 on host 'n1' (10.0.0.2)");
    }

    #[test]
    fn only_a_step_that_lasts_is_published_and_a_fast_member_is_not_named() {
        let s: Arc<dyn Store> = Arc::new(MemoryStore::new(Duration::from_secs(1)));
        let fast = Progress::start(s.clone(), 1);
        for step in 1..=20 {
            fast.mark(step);
        }
        // Rank 1 has just reached step 20, published nothing yet: rank 0 failing at step 20
        // finds it behind at first, but reads it again after the grace.
        assert_eq!(behind(s.as_ref(), &[1], 20), vec![1]);
        let failing = Progress::start(s.clone(), 0);
        failing.mark(20);
        let text = failing.explain(&[0, 1], 20, "failed".into());
        assert_eq!(text, "failed", "a merely fast member was named");
        assert_eq!(s.add(&key(1), 0).unwrap(), 20, "the step that lasted is published");
        assert_eq!(s.add(&key(0), 0).unwrap(), 20, "a failing rank publishes its step at once");
        // The end is published at once; a rank that stops (drops it) publishes nothing more.
        fast.finish();
        assert_eq!(behind(s.as_ref(), &[1], 1_000), Vec::<u32>::new());
        let gone = Progress::start(s.clone(), 2);
        gone.mark(3);
        drop(gone);
        std::thread::sleep(PUBLISH_AFTER * 2);
        assert_eq!(s.add(&key(2), 0).unwrap(), 0);
    }

    #[test]
    fn a_member_stuck_behind_a_dead_rank_passes_the_blame_on() {
        let s = MemoryStore::new(Duration::from_secs(1));
        // Rank 3 died before step 2; rank 1 waited for it at step 2 and failed; rank 0 waits
        // for rank 1 at step 3.
        mark(&s, 3, 1).unwrap();
        mark(&s, 1, 2).unwrap();
        mark(&s, 0, 3).unwrap();
        assert_eq!(explain(&s, 1, &[1, 3], 2, "timed out".into()), "timed out; rank(s) 3 did not come to this group");
        let text = explain(&s, 0, &[0, 1], 3, "timed out".into());
        assert_eq!(text, "timed out; rank(s) 1 failed at an earlier group, waiting for rank(s) 3");
        // Rank 0 passes on rank 3, not rank 1, to whoever waits for it in turn.
        assert_eq!(record_of(&s, 0), Some(vec![3]));
    }
}
