//! Check-in: before any communicator exists, every rank announces itself and the configuration it
//! was started with; rank 0 compares them and publishes a verdict. A rank that never arrives is
//! named in the timeout error of every rank; ranks started differently are named in the mismatch.
//!
//! A meeting (`runtime::meeting`) of the whole world: every rank arrives with its fingerprint; rank 0 gathers them
//! and ends the meeting with its verdict, which the others wait for. Store cost per rank is
//! constant (set, wait, get), whatever the world size; rank 0 reads all fingerprints in one
//! multi-get.

use super::keys;
use super::meet::{MeetError, Meeting};
use crate::runtime::faults::interrupt::Interrupt;
use crate::runtime::faults::verdict::did_not_come;
use crate::runtime::launch::host::format_ranks;
use crate::store::{Store, StoreError};
use crate::timeout::Deadline;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

const VERDICT_OK: &[u8] = b"ok";

/// Why check-in failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckinError {
    /// These ranks never checked in within the timeout; `nodes` says which nodes they make up
    /// (see [`crate::runtime::launch::host::nodes_of`]; empty when unknown). `died`: they are
    /// known dead, worded by the verdict (the meeting watched the attempt's interrupt).
    Missing { ranks: Vec<u32>, waited: Duration, nodes: String, died: Option<String> },
    /// Ranks were started with different configurations; the text names them and the values.
    Mismatch(String),
    /// This rank reached the store of another job (see `store_setup::JOB_KEY`); the text names
    /// both job ids.
    OtherJob(String),
    /// The store failed.
    Store(StoreError),
}

impl fmt::Display for CheckinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckinError::Missing { died: Some(died), waited, .. } => {
                write!(f, "{died}; this rank had waited {:.1} s for it at {WHAT}", waited.as_secs_f64())
            }
            CheckinError::Missing { ranks, waited, nodes, died: None } => write!(
                f,
                "rendezvous timed out after {:.1} s: {} (not started, crashed, cannot reach MASTER_ADDR/MASTER_PORT, \
                 or pointed at another one)",
                waited.as_secs_f64(),
                did_not_come(&format!("{}{nodes}", format_ranks(ranks)), WHAT)
            ),
            CheckinError::Mismatch(m) | CheckinError::OtherJob(m) => f.write_str(m),
            CheckinError::Store(e) => write!(f, "rendezvous store failed: {e}"),
        }
    }
}

impl std::error::Error for CheckinError {}

impl From<StoreError> for CheckinError {
    fn from(e: StoreError) -> Self {
        CheckinError::Store(e)
    }
}

impl From<MeetError> for CheckinError {
    fn from(e: MeetError) -> Self {
        match e {
            MeetError::Store(e) => CheckinError::Store(e),
            // Check-in names missing ranks by node (see `missing`), not through this.
            MeetError::Missing(m) => {
                CheckinError::Missing { ranks: m.ranks, waited: m.waited, nodes: String::new(), died: m.died }
            }
        }
    }
}

/// The key under the attempt's prefix that says `rank` has checked in (for progress reports).
pub fn arrival_key(rank: u32) -> String {
    keys::here(keys::CHECKIN, rank)
}

/// What the ranks are waited for.
pub(crate) const WHAT: &str = "the check-in";

/// The `key=value` pairs of a fingerprint (see `Settings::fingerprint`); a word without `=`
/// continues the value before it (a value with a space, e.g. a plugin path).
fn pairs(fingerprint: &[u8]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for word in String::from_utf8_lossy(fingerprint).split(' ') {
        match (word.split_once('='), out.last_mut()) {
            (Some((k, v)), _) => out.push((k.to_string(), v.to_string())),
            (None, Some(last)) => {
                last.1.push(' ');
                last.1.push_str(word);
            }
            (None, None) => out.push((word.to_string(), String::new())),
        }
    }
    out
}

/// The settings in which `other` differs from `reference`: `key: reference's -> other's`.
fn differences(reference: &[u8], other: &[u8]) -> String {
    let (a, b) = (pairs(reference), pairs(other));
    let get = |list: &[(String, String)], k: &str| list.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone());
    let mut out: Vec<String> = Vec::new();
    for (k, v) in &a {
        match get(&b, k) {
            Some(w) if w == *v => {}
            w => out.push(format!("{k}: {v} -> {}", w.unwrap_or_else(|| "(unset)".into()))),
        }
    }
    out.extend(b.iter().filter(|(k, _)| get(&a, k).is_none()).map(|(k, w)| format!("{k}: (unset) -> {w}")));
    out.join(", ")
}

/// Compare fingerprints against rank 0's; describe the ranks that differ, each set of ranks as
/// `describe` names it (with their hosts, when known), with the settings in which they differ
/// (a further grid's are `grid[<name>].<key>`).
fn mismatch_text(fingerprints: &[Vec<u8>], describe: &dyn Fn(&[u32]) -> String) -> Option<String> {
    let reference = &fingerprints[0];
    let mut by_value: BTreeMap<&[u8], Vec<u32>> = BTreeMap::new();
    for (r, fp) in fingerprints.iter().enumerate() {
        if fp != reference {
            by_value.entry(fp.as_slice()).or_default().push(r as u32);
        }
    }
    if by_value.is_empty() {
        return None;
    }
    // The differing settings only: the whole configurations (about 600 characters each) said
    // nothing more and buried the difference.
    let parts: Vec<String> = by_value
        .iter()
        .map(|(fp, ranks)| format!("rank(s) {} differ from rank 0 in {}", describe(ranks), differences(reference, fp)))
        .collect();
    Some(format!("ranks were started with different configurations: {}", parts.join("; ")))
}

/// The verdict on every rank's fingerprint (by rank), each set of ranks named as `describe`
/// names it: `Ok`, or the mismatch (the PMIx check-in reaches it on every rank).
pub fn verdict(fingerprints: &[Vec<u8>], describe: &dyn Fn(&[u32]) -> String) -> Result<(), CheckinError> {
    match mismatch_text(fingerprints, describe) {
        None => Ok(()),
        Some(text) => Err(CheckinError::Mismatch(text)),
    }
}

/// Announce this rank with `fingerprint` and wait until every rank of `world_size` has checked in
/// with the same one. `store` should be private to this init attempt (a prefixed view). Missing
/// ranks are also named by node when every node runs `local_world_size` ranks.
pub fn check_in(
    store: &dyn Store,
    rank: u32,
    world_size: u32,
    local_world_size: u32,
    fingerprint: &[u8],
    timeout: Duration,
) -> Result<(), CheckinError> {
    check_in_from(store, Seat { rank, world_size, local_world_size }, fingerprint, None, timeout, None)
}

/// Where a rank sits in the world it checks in with.
#[derive(Debug, Clone, Copy)]
pub struct Seat {
    pub rank: u32,
    pub world_size: u32,
    /// Ranks per node (naming missing ranks by node).
    pub local_world_size: u32,
}

/// [`check_in`], publishing this rank's `host` ([`crate::runtime::launch::host::publish`]) in the
/// same request as its arrival when given, and failing at once for a rank known dead when given
/// the attempt's `interrupt`.
pub fn check_in_from(
    store: &dyn Store,
    seat: Seat,
    fingerprint: &[u8],
    host: Option<&crate::runtime::launch::host::HostInfo>,
    timeout: Duration,
    interrupt: Option<&Interrupt>,
) -> Result<(), CheckinError> {
    let Seat { rank, world_size, local_world_size } = seat;
    let meeting = Meeting::new(store, keys::CHECKIN, WHAT, (0..world_size).collect(), rank, Deadline::after(timeout));
    let meeting = match interrupt {
        Some(i) => meeting.watching(i),
        None => meeting,
    };
    let missing = |m: &Meeting| {
        let ranks = m.missing();
        let nodes = crate::runtime::launch::host::nodes_of(&ranks, world_size, local_world_size);
        CheckinError::Missing { ranks, waited: timeout.saturating_sub(m.deadline().left()), nodes, died: None }
    };
    match host.map(|h| crate::runtime::launch::host::entry(rank, h)) {
        Some((k, v)) => meeting.arrive_with(fingerprint, &[(k.as_str(), v.as_slice())])?,
        None => meeting.arrive(fingerprint)?,
    }
    if rank == 0 {
        let (verdict, result) = match meeting.gather() {
            Err(MeetError::Missing(m)) if m.died.is_some() => {
                let err = CheckinError::from(MeetError::Missing(m));
                (err.to_string().into_bytes(), Err(err))
            }
            Err(MeetError::Missing(_)) => {
                let err = missing(&meeting);
                (err.to_string().into_bytes(), Err(err))
            }
            Err(e) => return Err(e.into()),
            Ok(fingerprints) => {
                match mismatch_text(&fingerprints, &|ranks| crate::runtime::launch::host::describe(store, ranks)) {
                    None => (VERDICT_OK.to_vec(), Ok(())),
                    Some(text) => (text.clone().into_bytes(), Err(CheckinError::Mismatch(text))),
                }
            }
        };
        meeting.end(&verdict)?;
        return result;
    }
    // Rank 0 may have started waiting a little later: its verdict (the same list for every
    // rank) is preferred for a short grace; after that this rank names who is absent now.
    let grace = Deadline::at(meeting.deadline().instant() + super::explain::RECORD_GRACE.min(timeout));
    let Some(verdict) = meeting.await_end_by(grace)? else { return Err(missing(&meeting)) };
    if verdict == VERDICT_OK {
        Ok(())
    } else if verdict.starts_with(b"rendezvous timed out") {
        Err(missing(&meeting))
    } else {
        // Rank 0's verdict already names the ranks; pass it on unchanged.
        Err(CheckinError::Mismatch(String::from_utf8_lossy(&verdict).into_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use std::sync::Arc;

    fn run_world(fps: &[Option<&'static str>], timeout: Duration) -> Vec<Option<Result<(), CheckinError>>> {
        let store = Arc::new(MemoryStore::new(timeout));
        let n = fps.len() as u32;
        let handles: Vec<_> = fps
            .iter()
            .enumerate()
            .map(|(r, fp)| {
                let store = store.clone();
                fp.map(|fp| {
                    std::thread::spawn(move || check_in(store.as_ref(), r as u32, n, n, fp.as_bytes(), timeout))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.map(|h| h.join().unwrap())).collect()
    }

    #[test]
    fn equal_configs_pass() {
        let out = run_world(&[Some("tp=2"); 6], Duration::from_secs(10));
        assert!(out.iter().all(|r| matches!(r, Some(Ok(())))), "{out:?}");
    }

    #[test]
    fn a_rank_that_never_starts_is_named_by_everyone() {
        let out = run_world(&[Some("a"), Some("a"), None, Some("a"), None], Duration::from_millis(300));
        for r in out.into_iter().flatten() {
            match r {
                Err(e @ CheckinError::Missing { .. }) => {
                    assert!(e.to_string().contains("rank(s) 2, 4 did not come to the check-in"), "{e}")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn missing_ranks_are_named_by_node_when_nodes_are_even() {
        let store = Arc::new(MemoryStore::new(Duration::from_millis(300)));
        let e = check_in(store.as_ref(), 0, 4, 2, b"a", Duration::from_millis(300)).unwrap_err();
        assert!(e.to_string().contains("rank(s) 1-3 = node 0 of 2 (ranks 1), node 1 of 2 (all its ranks: 2-3)"), "{e}");
        assert!(e.to_string().contains("did not come to the check-in"), "{e}");
    }

    #[test]
    fn mismatching_ranks_are_named_with_their_values() {
        let out =
            run_world(&[Some("tp=2"), Some("tp=2"), Some("tp=4"), Some("tp=4"), Some("tp=8")], Duration::from_secs(10));
        for r in out.into_iter().flatten() {
            let e = r.unwrap_err().to_string();
            assert_eq!(
                e,
                "ranks were started with different configurations: rank(s) 2-3 differ from rank 0 in tp: 2 -> 4; \
                 rank(s) 4 differ from rank 0 in tp: 2 -> 8"
            );
        }
    }

    /// Rank 0 starts 0.6 s after rank 1 and rank 2 another 0.6 s later (after rank 1's own
    /// deadline, before rank 0's); rank 3 never starts. Rank 1 must not blame the live, late
    /// rank 2: it takes rank 0's verdict, which names rank 3 alone.
    #[test]
    fn a_rank_whose_deadline_passes_first_takes_rank_0s_verdict() {
        let timeout = Duration::from_secs(1);
        let store = Arc::new(MemoryStore::new(timeout));
        let start = |rank: u32, delay_ms: u64| {
            let store = store.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(delay_ms));
                check_in(store.as_ref(), rank, 4, 4, b"a", timeout)
            })
        };
        let (r1, r0, r2) = (start(1, 0), start(0, 600), start(2, 1200));
        for (rank, h) in [(1, r1), (0, r0), (2, r2)] {
            let e = h.join().unwrap().unwrap_err().to_string();
            assert!(e.contains("rank(s) 3 did not come to the check-in"), "rank {rank}: {e}");
        }
    }

    #[test]
    fn rank_ranges_are_compact() {
        assert_eq!(format_ranks(&[0, 1, 2, 5, 7, 8]), "0-2, 5, 7-8");
        assert_eq!(format_ranks(&[]), "");
    }
}
