//! The one explanation of a failed communicator creation, for every creation of the runtime
//! (init, groups made after init, a recreate-mode resume, recovery's re-forming).
//!
//! A creation waits for some members ([`Waited`]). When it fails, the members that are *behind*
//! are found the way the creation knows ([`Behind`]): at init, a progress mark below the step
//! (`super::progress`); after init, no arrival in the creation's meeting (`super::meet`).
//! A member that is behind may itself be alive, stuck at an earlier group that waits for a dead
//! rank. So a rank whose creation fails records whom it blames (`alive/<rank>/blame`, the one blame
//! record), and a failure that finds members behind waits briefly ([`RECORD_GRACE`]) for their
//! records: a member with a record is reported as stuck, and the chain of records is followed to
//! the ranks without one, which are blamed instead; only members without a record are said to
//! have never arrived, in the one wording of [`did_not_come`]. A member that was merely fast
//! (it reached the step or arrived during the grace) is read again after it and not named.
//!
//! Liveness (`crate::runtime::faults::liveness`) keeps no record of its own: it reads and adds to the
//! same record, and follows it with the same walker ([`follow`]), counting its ends its own way.
//!
//! The grace is a wait for the records of the living members behind: a peer's death does not end
//! it, since the members failing with this rank fail of that death (see `liveness::guard`).

use super::keys::blame as blame_key;
use super::meet::Meeting;
use super::progress::{self, Progress};
use crate::backend::CommError;
use crate::runtime::faults::interrupt::Interrupt;
use crate::runtime::faults::verdict::did_not_come;
use crate::runtime::launch::host::describe;
use crate::store::Store;
use std::collections::BTreeSet;
use std::time::Duration;

/// How long a failing rank waits for the failure records of the members that are behind it:
/// members stuck on the same dead rank fail within about this much of each other (they share
/// one deadline). Short, since every wait must end within its deadline + 2 s, and naming the
/// dead (`crate::runtime::faults::liveness`) and leaving come after it.
pub const RECORD_GRACE: Duration = Duration::from_millis(400);

/// The most members whose marks or records a failure reads (one store request each).
pub(crate) const MAX_CHECKED: usize = 65_536;

/// Up to this many members, a failure where every member arrived names each member's host.
const MAX_DESCRIBED: usize = 64;

/// How to tell, among the members a creation waited for, the ones that are behind.
#[derive(Clone, Copy)]
pub enum Behind<'a> {
    /// At init: a progress mark below this creation step.
    Step(u64),
    /// After init: no arrival in this meeting, which also says what they were waited for.
    Absent(&'a Meeting<'a>),
}

/// Who one creation request waited for, and how to tell who of them is behind.
#[derive(Clone, Copy)]
pub struct Waited<'a> {
    pub members: &'a [u32],
    pub behind: Behind<'a>,
}

impl Waited<'_> {
    /// Those of `ranks` that are behind (of the first [`MAX_CHECKED`]).
    fn behind(&self, store: &dyn Store, ranks: &[u32]) -> Vec<u32> {
        let ranks = &ranks[..ranks.len().min(MAX_CHECKED)];
        match self.behind {
            Behind::Step(step) => progress::behind(store, ranks, step),
            Behind::Absent(m) => m.absent(ranks),
        }
    }

    /// `never` as members that did not come, in the one wording.
    fn did_not_come(&self, store: &dyn Store, never: Vec<u32>) -> String {
        let scope = if self.members.len() > MAX_CHECKED {
            format!(" (of the first {MAX_CHECKED} checked)")
        } else {
            String::new()
        };
        match self.behind {
            Behind::Step(_) => did_not_come(&format!("{}{scope}", describe(store, &never)), "this group"),
            Behind::Absent(m) => format!("{}{scope}", m.explain(never)),
        }
    }
}

/// This rank's explanations of its failed creations: the store of the blame records (and of the
/// hosts and marks), and at init its progress, published before a failure is explained.
pub struct Explainer<'a> {
    store: &'a dyn Store,
    /// Where this rank writes its own record (its liveness connection: see
    /// `crate::runtime::faults::Faults::records`).
    records: &'a dyn Store,
    /// The attempt's interrupt: a member known dead is not waited for (its record never comes).
    interrupt: Option<&'a Interrupt>,
    rank: u32,
    progress: Option<&'a Progress>,
}

impl<'a> Explainer<'a> {
    /// Explanations for `rank`, with the blame records in `store`.
    pub fn new(store: &'a dyn Store, rank: u32) -> Self {
        Explainer { store, records: store, interrupt: None, rank, progress: None }
    }

    /// The same, not waiting for the records of members known dead to `interrupt`.
    pub fn watching(mut self, interrupt: &'a Interrupt) -> Self {
        self.interrupt = Some(interrupt);
        self
    }

    /// The same, writing this rank's record in `records` (reading every record in the store).
    pub fn recording_in(mut self, records: &'a dyn Store) -> Self {
        self.records = records;
        self
    }

    /// Explanations for the rank of `progress` (init), in its store.
    pub fn of(progress: &'a Progress) -> Self {
        Explainer {
            store: progress.store(),
            records: progress.records(),
            interrupt: progress.interrupt(),
            rank: progress.rank(),
            progress: Some(progress),
        }
    }

    /// `e`, a failure of a creation that waited for `w`, with who kept it named (see the module
    /// docs); records what this rank blames.
    pub fn explain(&self, w: &Waited<'_>, e: CommError) -> CommError {
        if let Some(p) = self.progress {
            p.publish_now();
        }
        CommError { message: self.explain_message(w, &e.message), ..e }
    }

    /// `message`, plus who kept this rank's creation that waited for `w` (the parts joined by
    /// "; "; an empty `message` adds none).
    pub fn explain_message(&self, w: &Waited<'_>, message: &str) -> String {
        let store = self.store;
        let late = self.late_after_grace(w);
        let (never, stuck, waited_on) = walk(store, self.rank, &late);
        self.record(never.iter().chain(&waited_on).collect::<BTreeSet<_>>().into_iter());
        let mut parts: Vec<String> = vec![message.to_string()];
        if !never.is_empty() {
            parts.push(w.did_not_come(store, never));
        }
        if !stuck.is_empty() {
            let mut text = format!("rank(s) {} failed at an earlier group", describe(store, &stuck));
            if !waited_on.is_empty() {
                text.push_str(&format!(", waiting for rank(s) {}", describe(store, &waited_on)));
            }
            parts.push(text);
        }
        if late.is_empty() && w.members.len() <= MAX_DESCRIBED {
            // Every member arrived (a backend that could not connect, say): name the members'
            // hosts, so that an unreachable address can be matched with its rank and host.
            let hosts = describe(store, w.members);
            if hosts.contains(" on host ") {
                parts.push(format!("the group's ranks are {hosts}"));
            }
        }
        parts.retain(|p| !p.is_empty());
        parts.join("; ")
    }

    /// The members of `w` behind, read again after the grace for their records (see the module
    /// docs): a member that was merely fast is not behind any more then.
    fn late_after_grace(&self, w: &Waited<'_>) -> Vec<u32> {
        let late = w.behind(self.store, w.members);
        if late.is_empty() {
            return late;
        }
        // A first record at once (the late members), so that ranks waiting for this one can
        // pass the blame on while this one waits for the records of its own late members.
        self.record(late.iter());
        // Ends early when every late member (alive) has failed; else after the grace. A member
        // known dead never records, and is not waited for. A wait ended by a fault (a death
        // pulls the store's busy-abort lever) is taken up again for the living.
        let end = std::time::Instant::now() + RECORD_GRACE;
        loop {
            let epoch = self.interrupt.map(Interrupt::epoch);
            let dead = self.interrupt.map(|i| i.dead_among(&late)).unwrap_or_default();
            let keys: Vec<String> = late.iter().filter(|m| !dead.contains(m)).map(|&m| blame_key(m)).collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let left = end.saturating_duration_since(std::time::Instant::now());
            if keys.is_empty() {
                break;
            }
            match self.store.wait(&keys, left.max(std::time::Duration::from_millis(1))) {
                Err(crate::store::StoreError::Timeout { .. }) | Ok(()) => break,
                // Ended by a fault (the epoch moved): look again, as a meeting does.
                Err(_) if !left.is_zero() && self.interrupt.map(Interrupt::epoch) != epoch => {}
                Err(_) => break,
            }
        }
        w.behind(self.store, &late)
    }

    /// Record that this rank blames `ranks` (its blame record, for the ranks waiting for it).
    fn record<'r>(&self, ranks: impl Iterator<Item = &'r u32>) {
        record(self.records, self.rank, ranks);
    }
}

/// Write `rank`'s blame record in `store`: the ranks it blames for its failure (what it had
/// recorded before is replaced).
pub(crate) fn record<'r>(store: &dyn Store, rank: u32, ranks: impl Iterator<Item = &'r u32>) {
    let text: Vec<String> = ranks.map(u32::to_string).collect();
    let _ = store.set(&blame_key(rank), text.join(",").as_bytes());
}

/// The ranks `rank`'s blame record blames, when it has one. Read without waiting (a store
/// guarded by liveness fails a waiting read once a peer died).
pub(crate) fn record_of(store: &dyn Store, rank: u32) -> Option<Vec<u32>> {
    let k = blame_key(rank);
    if !store.check(&[&k]).ok()? {
        return None;
    }
    let text = store.multi_get_existing(&[&k]).ok()?.pop()?;
    Some(String::from_utf8_lossy(&text).split(',').filter_map(|r| r.parse().ok()).collect())
}

/// Of the `late` members (behind `rank`): those that never arrived (no record), those stuck at
/// an earlier group (a record), and the ranks at the ends of the stuck ones' chains of records
/// (none of their own).
fn walk(store: &dyn Store, rank: u32, late: &[u32]) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let (mut never, mut stuck, mut blamed) = (Vec::new(), Vec::new(), Vec::new());
    for &m in late {
        match record_of(store, m) {
            Some(more) => {
                stuck.push(m);
                blamed.extend(more);
            }
            None => never.push(m),
        }
    }
    let seen: BTreeSet<u32> = late.iter().copied().chain([rank]).collect();
    let (waited_on, _) = follow(blamed, seen, MAX_CHECKED, |r| record_of(store, r));
    (never, stuck, waited_on)
}

/// The one chain walker of the blame records, for every explanation (a failed creation here,
/// the ranks that stopped answering in `crate::runtime::faults::liveness`): from the ranks of `start`,
/// leaving out those of `seen`, each rank leads on to the ranks `next` gives (the ones its record
/// blames, as the caller counts them), or ends the chain (`None`). Returns the ends and the
/// ranks passed through, each sorted; at most `limit` ranks are looked at.
pub(crate) fn follow(
    start: Vec<u32>,
    mut seen: BTreeSet<u32>,
    limit: usize,
    mut next: impl FnMut(u32) -> Option<Vec<u32>>,
) -> (Vec<u32>, Vec<u32>) {
    let (mut ends, mut through) = (BTreeSet::new(), BTreeSet::new());
    let mut queue = start;
    while let Some(r) = queue.pop() {
        if !seen.insert(r) || seen.len() > limit {
            continue;
        }
        match next(r) {
            Some(more) => {
                through.insert(r);
                queue.extend(more);
            }
            None => {
                ends.insert(r);
            }
        }
    }
    (ends.into_iter().collect(), through.into_iter().collect())
}

#[cfg(test)]
mod tests;
