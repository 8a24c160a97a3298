//! The one place the simulator touches the runtime's protocol code: what one simulated rank of
//! this project does at the store during init and keeps while the job runs, in the order a real
//! rank does it (`runtime::bring_up`'s `open`, `check_in_all` and `init_over`), through the same
//! public entry points:
//! 1. its store client (the rendezvous connection);
//! 2. its liveness: `Liveness::start` (a second connection claims the rank's counter, arms a
//!    close notice and, as the watcher, parks a WAIT on the next death notice), given the
//!    initialization's deadline (the watcher then re-parks every `PROBE_PERIOD` and bumps the
//!    counter), with the host's loss aborting the store calls in flight (a real rank's interrupt
//!    also ends its waits on a death; the simulated ranks are never killed);
//! 3. the attempt's view of the store, guarded by the liveness (after init only a failed call
//!    has the host checked);
//! 4. its host label (`host::publish`) and the check-in meeting (`checkin::check_in`);
//! 5. init over: deaths end nothing, no deadline, idle patience = the timeout. From then on the
//!    watcher's WAIT stays parked for `IDLE_RENEW`.
//!
//! Not simulated: the open mark and job check before (a real non-host rank's first 2-3
//! requests), and everything after the check-in (progress marks, communicator creation and
//! verification): see docs/BENCHMARKS.md. When the runtime's rendezvous or liveness change,
//! re-point these functions; nothing else in the simulator names them.

use mcore_init::runtime::checkin::check_in;
use mcore_init::runtime::faults::interrupt::Interrupt;
use mcore_init::runtime::faults::liveness::{Liveness, StartError, IDLE_RENEW, PROBE_PERIOD};
use mcore_init::runtime::host::{self, HostInfo};
use mcore_init::runtime::LaunchEnv;
use mcore_init::store::tcp::auth::TokenCell;
use mcore_init::store::{PrefixStore, Store, TcpStore};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Key prefix of the simulated init attempt (the runtime uses one per attempt).
const PREFIX: &str = "mcore_init/sim/0";

/// What a ready rank holds while the job runs: its store client and its liveness (the attempt's
/// guarded view last, as the runtime holds it).
pub struct Ready {
    _base: Arc<dyn Store>,
    liveness: Option<Liveness>,
    _store: Arc<TcpStore>,
}

impl Ready {
    /// Whether this rank runs its liveness (a real rank whose liveness connection the store did
    /// not answer in time goes on without it, as this one did).
    pub fn live(&self) -> bool {
        self.liveness.is_some()
    }
}

/// Store connections one rank holds open at the store host (rendezvous, liveness).
pub const CONNECTIONS_PER_RANK: u32 = 2;

/// Requests per second one idle rank sends by construction: its watcher's one parked WAIT on the
/// next death notice, renewed every [`IDLE_RENEW`] (the figures measured at the server are
/// segments and served requests, see the JSON's `idle_*`).
pub fn idle_requests_per_rank_per_s() -> f64 {
    1.0 / IDLE_RENEW.as_secs_f64()
}

/// The window after the last rank is ready measured as "settle" before the steady state: the
/// 5 s a store call kept the watcher probing until issue 42 (`BUSY_LINGER`), a probe period
/// ([`PROBE_PERIOD`]: the probe parked when init ended) and half a second, kept at that length
/// so that figures before and after compare.
pub fn settle() -> Duration {
    Duration::from_secs(5) + PROBE_PERIOD + Duration::from_millis(500)
}

/// Rank `rank` of `world` (`per_node` ranks a node) at the store on 127.0.0.1:`port`, as
/// described in the module docs. Returns what it holds and the requests its rendezvous
/// connection sent (the liveness connections' are counted at the server only).
pub fn bring_up(port: u16, rank: u32, world: u32, per_node: u32, timeout: Duration) -> Result<(Ready, u64), String> {
    let deadline = Instant::now() + timeout;
    let left = || deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    let vars = [
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", world.to_string()),
        ("LOCAL_RANK", (rank % per_node).to_string()),
        ("LOCAL_WORLD_SIZE", per_node.to_string()),
        ("MASTER_ADDR", "127.0.0.1".to_string()),
        ("MASTER_PORT", port.to_string()),
    ];
    let env = LaunchEnv::from_lookup(&|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
        .map_err(|e| e.to_string())?;
    let store = Arc::new(TcpStore::connect("127.0.0.1", port, timeout).map_err(|e| format!("connect: {e}"))?);
    // As `faults::Faults::start`: the liveness connection within the time left; a store that
    // does not answer it in time leaves the rank without liveness, one posed as fails the rank.
    // (The simulator pulls no lever on a death: its ranks are not killed.)
    let liveness = match Liveness::start(&env, PREFIX, left(), TokenCell::new(None), Interrupt::new()) {
        Ok(l) => Some(l),
        Err(StartError::Unreachable(_)) => None,
        Err(e @ StartError::Posed(_)) => return Err(format!("liveness: {e:?}")),
    };
    let abort = |s: &Arc<TcpStore>| {
        let s = Arc::clone(s);
        move || s.abort()
    };
    let base: Arc<dyn Store> = Arc::new(PrefixStore::new(PREFIX, Arc::clone(&store) as Arc<dyn Store>));
    let base = match &liveness {
        Some(l) => {
            l.set_deadline(Some(deadline));
            l.on_store_gone(Box::new(abort(&store)));
            l.guard(base)
        }
        None => base,
    };
    let me = HostInfo {
        hostname: format!("node{:05}", rank / per_node),
        addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
        why: "simulated".into(),
    };
    host::publish(base.as_ref(), rank, &me).map_err(|e| format!("host: {e}"))?;
    let fingerprint = b"tp=8 pp=4 cp=1 ep=1 order=tp-cp-ep-dp-pp backend=nccl seed=1234";
    check_in(base.as_ref(), rank, world, per_node, fingerprint, left()).map_err(|e| format!("check-in: {e}"))?;
    // Init over (`bring_up::init_over`).
    if let Some(l) = &liveness {
        l.set_deadline(None);
        l.set_idle_patience(timeout);
    }
    let requests = store.round_trips();
    Ok((Ready { _base: base, liveness, _store: store }, requests))
}
