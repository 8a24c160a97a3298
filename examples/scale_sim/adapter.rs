//! The one place the simulator touches the runtime's protocol code: what one simulated rank of
//! this project does at the store during init (a store client, the liveness connections,
//! the check-in meeting) and what it keeps while the job runs (the liveness). When the runtime's
//! rendezvous or liveness change (issue 33: one meeting, event-driven liveness), re-point these
//! two functions at the new public entry points; nothing else in the simulator names them.

use mcore_init::runtime::checkin::check_in;
use mcore_init::runtime::liveness::{Liveness, IDLE_RENEW};
use mcore_init::runtime::LaunchEnv;
use mcore_init::store::tcp::auth::TokenCell;
use mcore_init::store::{PrefixStore, Store, TcpStore};
use std::sync::Arc;
use std::time::Duration;

/// Key prefix of the simulated init attempt (the runtime uses one per attempt).
const PREFIX: &str = "mcore_init/sim/0";

/// What a ready rank holds while the job runs: its store client and its liveness.
pub struct Ready {
    _store: Arc<TcpStore>,
    _liveness: Liveness,
}

/// Requests per second one idle rank sends by construction: its watcher's one parked WAIT on the
/// next death notice, renewed every [`IDLE_RENEW`] (the figures measured at the server are
/// segments, see the JSON's `idle_*`).
pub fn idle_requests_per_rank_per_s() -> f64 {
    1.0 / IDLE_RENEW.as_secs_f64()
}

/// Rank `rank` of `world` (`per_node` ranks a node) at the store on 127.0.0.1:`port`: connect,
/// start the liveness, check in with a fingerprint. Returns what it holds and the requests its
/// rendezvous connection sent (the liveness connection's are not counted here).
pub fn bring_up(port: u16, rank: u32, world: u32, per_node: u32, timeout: Duration) -> Result<(Ready, u64), String> {
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
    let liveness =
        Liveness::start(&env, PREFIX, timeout, TokenCell::new(None)).map_err(|e| format!("liveness: {e:?}"))?;
    let view = PrefixStore::new(PREFIX, Arc::clone(&store) as Arc<dyn Store>);
    let fingerprint = b"tp=8 pp=4 cp=1 ep=1 order=tp-cp-ep-dp-pp backend=nccl seed=1234";
    check_in(&view, rank, world, per_node, fingerprint, timeout).map_err(|e| format!("check-in: {e}"))?;
    let requests = store.round_trips();
    Ok((Ready { _store: store, _liveness: liveness }, requests))
}
