//! Recovery after a failure (docs/recovery.md): the survivors of an initialized world agree on
//! the failed ranks through the store, plan the next layout ([`plan_recovery`]), tear down their
//! communicators and bring the new layout's groups up on the store they already share. Ranks the
//! plan drops leave with [`Reinitialized::Left`].
//!
//! Agreement: every rank that takes part writes `recovery/present/<rank>` (with the ranks it
//! suspects) under its attempt's key prefix, so the keys of an earlier attempt are never read.
//! Each waits until every rank of the world is present or suspected by a present rank, or until
//! the detection window ends; its proposal is the set of absent ranks, and the first proposal
//! written to `recovery/verdict` (compare-and-set) is the verdict every participant reads. A rank
//! that arrives after the verdict and finds itself in it is excluded and leaves.

use super::comm_config::CommStrategy;
use super::env::LaunchEnv;
use super::error::RuntimeError;
use super::groups::{LiveGroup, SharedComm};
use super::init::{initialize_on_store, initialize_on_store_from_world, take_runtime, with_runtime, InitArgs};
use super::store_setup::StoreHandles;
use crate::backend::{CommErrorKind, Communicator};
use crate::store::{PrefixStore, Store};
use crate::topology::{plan_recovery, RecoveryPlan};
use std::sync::{Arc, Mutex};
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
    /// Bound of the whole recovery (`None`: the init timeout of the runtime).
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

/// The store of a leaving rank that hosts the rendezvous server: kept up until the survivors
/// have left their new layout (see [`release_lingering_store`]).
struct Lingering {
    store: StoreHandles,
    /// The survivors' key prefix and their number.
    survivors: Arc<dyn Store>,
    expected: u32,
    timeout: Duration,
}

static LINGERING: Mutex<Option<Lingering>> = Mutex::new(None);

/// Called by `destroy` when no runtime is up: a leaving rank that hosts the store waits (at most
/// its init timeout) until the survivors have destroyed their runtime, then stops the server.
/// Returns whether there was such a store.
pub(super) fn release_lingering_store() -> bool {
    let Some(l) = LINGERING.lock().unwrap_or_else(|e| e.into_inner()).take() else { return false };
    let deadline = Instant::now() + l.timeout;
    while Instant::now() < deadline {
        match l.survivors.add("leave/count", 0) {
            Ok(n) if n < i64::from(l.expected) => std::thread::sleep(Duration::from_millis(5)),
            _ => break,
        }
    }
    drop(l.store);
    true
}

fn ranks_key(rank: u32) -> String {
    format!("recovery/present/{rank}")
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
/// documentation). Every participant gets the same set.
fn agree(
    store: &dyn Store,
    rank: u32,
    world: u32,
    suspected: &[u32],
    window: Duration,
    deadline: Instant,
) -> Result<Vec<u32>, RuntimeError> {
    let store_err = |source| RuntimeError::StoreConnect {
        what: "the rendezvous store to agree on the failed ranks (recovery needs its host, rank 0 or torchrun's \
               agent, to survive)"
            .into(),
        source,
    };
    store.set(&ranks_key(rank), &encode(suspected)).map_err(store_err)?;
    let window_end = (Instant::now() + window).min(deadline);
    let mut present = vec![false; world as usize];
    let mut named = vec![false; world as usize];
    loop {
        for r in 0..world {
            if present[r as usize] {
                continue;
            }
            let key = ranks_key(r);
            if store.check(&[key.as_str()]).map_err(store_err)? {
                present[r as usize] = true;
                for s in decode(&store.get(&key).map_err(store_err)?, &key)? {
                    if s < world {
                        named[s as usize] = true;
                    }
                }
            }
        }
        let settled = (0..world as usize).all(|r| present[r] || named[r]);
        if settled || Instant::now() >= window_end {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let proposal: Vec<u32> = (0..world).filter(|&r| !present[r as usize]).collect();
    let verdict = store.compare_set("recovery/verdict", b"", &encode(&proposal)).map_err(store_err)?;
    decode(&verdict, "recovery/verdict")
}

/// Recover the initialized runtime after a failure: agree on the failed ranks with the other
/// survivors, plan the next layout, tear down every communicator (a peer is gone: none is
/// used again) and create the new layout's groups, verified as at init. See the module docs.
///
/// Bad arguments (a suspected rank outside the world, a zero timeout) leave the runtime up.
/// Otherwise the runtime is torn down whatever the outcome; on an error (no valid layout
/// remains, the store host failed, a wait ran out) it is not up again.
pub fn reinitialize(args: ReinitArgs) -> Result<Reinitialized, RuntimeError> {
    let start = Instant::now();
    // Bad arguments leave the runtime as it is.
    let (old_world, init_timeout) = with_runtime(|rt| (rt.env.world_size, rt.timeout))?;
    let timeout = args.timeout.unwrap_or(init_timeout);
    if timeout.is_zero() {
        return Err(RuntimeError::InvalidArgument("recovery timeout must be > 0".into()));
    }
    if let Some(&s) = args.suspected.iter().find(|&&s| s >= old_world) {
        return Err(RuntimeError::InvalidArgument(format!(
            "suspected rank {s} is not a rank of the world of {old_world}"
        )));
    }
    let rt = take_runtime().ok_or(RuntimeError::NotInitialized)?;
    let deadline = start + timeout;
    let window = args.window.unwrap_or(DEFAULT_WINDOW).min(timeout);
    let super::init::Runtime { env, topology, groups, world, base, store, args: init_args, attempt, strategy, .. } = rt;
    // Abort: communicators with a dead peer are never used again (the backend's abort where it
    // has one; dropping them closes their connections without a collective). A world that may
    // be shrunk waits, with the groups split from it (they may share its resources), until then.
    let mut old_comms = Some((groups, world));
    if strategy != CommStrategy::Split {
        abort_all(old_comms.take());
    }
    let old_rank = env.rank;
    let failed = agree(base.as_ref(), old_rank, old_world, &args.suspected, window, deadline)?;
    let agree_time = start.elapsed();
    let _ = base.add("recovery/read", 1);
    let plan = match plan_recovery(&topology, &failed, &[]) {
        Ok(plan) => plan,
        Err(e) => {
            abort_all(old_comms.take());
            if env.hosts_store() {
                // Keep the server until every participant has read the verdict (and so meets
                // the same refusal instead of a vanished store).
                let expected = i64::from(old_world) - failed.len() as i64;
                while Instant::now() < deadline && base.add("recovery/read", 0).is_ok_and(|n| n < expected) {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            return Err(e.into());
        }
    };
    let new_rank = plan.new_rank(old_rank);
    let new_world = plan.topology.world_size();
    let new_attempt = format!("{attempt}/recovery");
    let mut report = RecoveryReport {
        old_rank,
        new_rank,
        old_world_size: old_world,
        new_world_size: new_world,
        failed: plan.failed.clone(),
        dropped: plan.dropped.clone(),
        changed_kinds: plan.changed_kinds.iter().map(|k| k.key().into_owned()).collect(),
        agree: agree_time,
        total: Duration::ZERO,
        world_from: WorldFrom::None,
    };
    let Some(new_rank) = new_rank else {
        abort_all(old_comms.take());
        if env.hosts_store() {
            // The survivors still need the server: keep it until they leave (destroy).
            let survivors: Arc<dyn Store> = Arc::new(PrefixStore::new(&new_attempt, store.client()));
            let lingering = Lingering { store, survivors, expected: new_world, timeout };
            *LINGERING.lock().unwrap_or_else(|e| e.into_inner()) = Some(lingering);
        }
        report.total = start.elapsed();
        return Ok(Reinitialized::Left(report));
    };
    let new_env = LaunchEnv { rank: new_rank, world_size: new_world, ..env.clone() };
    let mut new_args = init_args;
    new_args.timeout = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    let shrunk = shrink_world(old_comms.as_ref().and_then(|(_, w)| w.as_ref()), &plan, &new_args);
    abort_all(old_comms.take());
    let shrunk = shrunk?;
    report.world_from = match (&shrunk, strategy) {
        (Some(_), _) => WorldFrom::Shrink,
        (None, CommStrategy::Split) => WorldFrom::New,
        (None, _) => WorldFrom::None,
    };
    match shrunk {
        Some(world) => initialize_on_store_from_world(new_args, new_env, store, new_attempt, timeout, Some(world)),
        None => initialize_on_store(new_args, new_env, store, new_attempt, timeout),
    }?;
    report.total = start.elapsed();
    Ok(Reinitialized::Recovered(report))
}

/// Abort a runtime's communicators: its groups, then the world they were split from.
fn abort_all(comms: Option<(Vec<LiveGroup>, Option<SharedComm>)>) {
    let Some((groups, world)) = comms else { return };
    for comm in groups.iter().map(|g| &g.comm).chain(world.iter()) {
        comm.lock().unwrap_or_else(|e| e.into_inner()).abort();
    }
}

/// The old world shrunk to the new layout's ranks (a survivor's part of the collective; ranks
/// that leave do not take part), or `None` when the new world must be created afresh: no world
/// (per-group strategy), a plan that renumbers otherwise than shrinking does (spares taking a
/// place: the survivors in ascending old order must be new ranks 0, 1, ...), or a backend that
/// cannot shrink (`Unsupported`, `VersionTooOld`). Any other failure is the recovery's error.
fn shrink_world(
    world: Option<&SharedComm>,
    plan: &RecoveryPlan,
    args: &InitArgs,
) -> Result<Option<Box<dyn Communicator>>, RuntimeError> {
    let Some(world) = world else { return Ok(None) };
    let in_order = plan.spares_used.is_empty() && plan.rank_map.iter().zip(0..).all(|(&(_, new), i)| new == i);
    if !in_order {
        return Ok(None);
    }
    // The world's ranks are the global ranks (the grid covers the whole world).
    let mut comm = world.lock().unwrap_or_else(|e| e.into_inner());
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

    /// The agreement over an in-process store (a test double of the TCP store; the real store
    /// and processes are covered by scripts/test.d/26-recovery.sh and the Python tests).
    fn run_agreement(
        store: &Arc<MemoryStore>,
        ranks: &[u32],
        world: u32,
        suspects: &[u32],
        window: Duration,
    ) -> Vec<Vec<u32>> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let handles: Vec<_> = ranks
            .iter()
            .map(|&r| {
                let (store, suspects) = (store.clone(), if r == ranks[0] { suspects.to_vec() } else { vec![] });
                std::thread::spawn(move || agree(store.as_ref(), r, world, &suspects, window, deadline).unwrap())
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
        let late = agree(store.as_ref(), 2, 6, &[], Duration::from_millis(50), Instant::now() + Duration::from_secs(5));
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
    fn rank_lists_round_trip_and_garbage_is_named() {
        assert_eq!(decode(&encode(&[1, 5, 9]), "k").unwrap(), vec![1, 5, 9]);
        assert_eq!(decode(&encode(&[]), "k").unwrap(), Vec::<u32>::new());
        let e = decode(b"junk", "recovery/verdict").unwrap_err().to_string();
        assert!(e.contains("recovery/verdict") && e.contains("junk"), "{e}");
    }
}
