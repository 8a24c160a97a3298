//! Check-in: before any communicator exists, every rank announces itself and the configuration it
//! was started with; rank 0 compares them and publishes a verdict. A rank that never arrives is
//! named in the timeout error of every rank; ranks started differently are named in the mismatch.
//!
//! Store cost per rank is constant (set, wait, get), whatever the world size; rank 0 reads all
//! fingerprints in one multi-get.

use super::host::format_ranks;
use crate::store::{Store, StoreError};
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

const VERDICT_KEY: &str = "checkin/verdict";
const VERDICT_OK: &[u8] = b"ok";

fn rank_key(rank: u32) -> String {
    format!("checkin/rank/{rank}")
}

/// Why check-in failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckinError {
    /// These ranks never checked in within the timeout; `nodes` says which nodes they make up
    /// (see [`super::host::nodes_of`]; empty when unknown).
    Missing { ranks: Vec<u32>, waited: Duration, nodes: String },
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
            CheckinError::Missing { ranks, waited, nodes } => write!(
                f,
                "rendezvous timed out after {:.1} s: rank(s) {}{nodes} never checked in (not started, crashed, \
                 cannot reach MASTER_ADDR/MASTER_PORT, or pointed at another one)",
                waited.as_secs_f64(),
                format_ranks(ranks)
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

/// Ranks whose check-in key is absent now (one CHECK per rank: used only on the failure path).
fn missing_ranks(store: &dyn Store, world_size: u32) -> Result<Vec<u32>, StoreError> {
    let mut missing = Vec::new();
    for r in 0..world_size {
        if !store.check(&[&rank_key(r)])? {
            missing.push(r);
        }
    }
    Ok(missing)
}

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
    let mut text = String::from("ranks were started with different configurations:");
    for (fp, ranks) in &by_value {
        text.push_str(&format!(" rank(s) {} differ from rank 0 in {};", describe(ranks), differences(reference, fp)));
    }
    text.push_str(&format!(" rank 0 has '{}'", String::from_utf8_lossy(reference)));
    for (fp, ranks) in by_value {
        text.push_str(&format!("; rank(s) {} have '{}'", describe(&ranks), String::from_utf8_lossy(fp)));
    }
    Some(text)
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
    let start = Instant::now();
    let missing = |store: &dyn Store| -> Result<CheckinError, StoreError> {
        let ranks = missing_ranks(store, world_size)?;
        let nodes = super::host::nodes_of(&ranks, world_size, local_world_size);
        Ok(CheckinError::Missing { ranks, waited: start.elapsed(), nodes })
    };
    store.set(&rank_key(rank), fingerprint)?;
    if rank == 0 {
        let keys: Vec<String> = (0..world_size).map(rank_key).collect();
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let verdict = match store.wait(&key_refs, timeout) {
            Err(StoreError::Timeout { .. }) => {
                let err = missing(store)?;
                store.set(VERDICT_KEY, err.to_string().as_bytes())?;
                return Err(err);
            }
            Err(e) => return Err(e.into()),
            Ok(()) => mismatch_text(&store.multi_get(&key_refs)?, &|ranks| super::host::describe(store, ranks)),
        };
        return match verdict {
            None => Ok(store.set(VERDICT_KEY, VERDICT_OK)?),
            Some(text) => {
                store.set(VERDICT_KEY, text.as_bytes())?;
                Err(CheckinError::Mismatch(text))
            }
        };
    }
    match store.wait(&[VERDICT_KEY], timeout) {
        Ok(()) => {}
        // Rank 0 may have started waiting a little later: its verdict (the same list for every
        // rank) is preferred for a short grace; after that this rank names who is absent now.
        Err(StoreError::Timeout { .. }) => match store.wait(&[VERDICT_KEY], super::progress::RECORD_GRACE.min(timeout))
        {
            Ok(()) => {}
            Err(StoreError::Timeout { .. }) => return Err(missing(store)?),
            Err(e) => return Err(e.into()),
        },
        Err(e) => return Err(e.into()),
    }
    let verdict = store.get(VERDICT_KEY)?;
    if verdict == VERDICT_OK {
        Ok(())
    } else {
        // Rank 0's verdict already names the ranks; pass it on unchanged.
        let text = String::from_utf8_lossy(&verdict).into_owned();
        if text.starts_with("rendezvous timed out") {
            Err(missing(store)?)
        } else {
            Err(CheckinError::Mismatch(text))
        }
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
                    assert!(e.to_string().contains("rank(s) 2, 4 never checked in"), "{e}")
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
    }

    #[test]
    fn mismatching_ranks_are_named_with_their_values() {
        let out =
            run_world(&[Some("tp=2"), Some("tp=2"), Some("tp=4"), Some("tp=4"), Some("tp=8")], Duration::from_secs(10));
        for r in out.into_iter().flatten() {
            let e = r.unwrap_err().to_string();
            assert!(e.contains("rank 0 has 'tp=2'"), "{e}");
            assert!(e.contains("rank(s) 2-3 have 'tp=4'") && e.contains("rank(s) 4 have 'tp=8'"), "{e}");
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
            assert!(e.contains("rank(s) 3 never checked in"), "rank {rank}: {e}");
        }
    }

    #[test]
    fn rank_ranges_are_compact() {
        assert_eq!(format_ranks(&[0, 1, 2, 5, 7, 8]), "0-2, 5, 7-8");
        assert_eq!(format_ranks(&[]), "");
    }
}
