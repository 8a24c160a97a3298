//! Opening the rendezvous store a rank uses: rank 0 hosts a TCP store on MASTER_PORT unless
//! torchrun's agent already serves one (then every rank is a client); a world of one process
//! without a launcher uses an in-process store.

use super::env::LaunchEnv;
use super::error::RuntimeError;
use crate::store::{MemoryStore, Store, StoreError, TcpStore, TcpStoreServer};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The store of an initialized process. Fields drop in order: client, then the server.
pub struct StoreHandles {
    client: Arc<dyn Store>,
    tcp: Option<Arc<TcpStore>>,
    _server: Option<TcpStoreServer>,
}

impl StoreHandles {
    pub fn client(&self) -> Arc<dyn Store> {
        self.client.clone()
    }

    /// This rank's host and advertised address: the local address of its TCP store connection
    /// (see [`super::host`]).
    pub fn host(&self) -> super::host::HostInfo {
        let tcp = self.tcp.as_ref();
        super::host::HostInfo::new(tcp.and_then(|t| t.local_addr().ok()).map(|a| a.ip()), tcp.map_or("-", |t| t.peer()))
    }

    /// Request/response exchanges with the TCP store so far (0 for the in-process store).
    pub fn round_trips(&self) -> u64 {
        self.tcp.as_ref().map(|t| t.round_trips()).unwrap_or(0)
    }
}

fn is_loopback(addr: &str) -> bool {
    matches!(addr, "localhost" | "::1") || addr.starts_with("127.")
}

/// Open the store this rank rendezvous through (see module docs). `attempt` names this init
/// attempt (`mcore_init/<run>/<restart>/<epoch>`): the host marks its fresh server open for it,
/// and clients wait for that mark, reconnecting meanwhile, so that a client never settles on the
/// server of a previous attempt that is still shutting down.
pub fn open_store(env: &LaunchEnv, timeout: Duration, attempt: &str) -> Result<StoreHandles, RuntimeError> {
    if env.world_size == 1 && !env.use_agent_store {
        return Ok(StoreHandles { client: Arc::new(MemoryStore::new(timeout)), tcp: None, _server: None });
    }
    let deadline = Instant::now() + timeout;
    let server = if env.hosts_store() {
        let bind = if is_loopback(&env.master_addr) { "127.0.0.1" } else { "0.0.0.0" };
        Some(TcpStoreServer::bind(bind, env.master_port).map_err(|e| {
            RuntimeError::Store(match e {
                StoreError::InvalidArgument(m) | StoreError::Io(m) => StoreError::InvalidArgument(format!(
                    "rank 0 cannot host the rendezvous store on MASTER_PORT={}: {m}",
                    env.master_port
                )),
                other => other,
            })
        })?)
    } else {
        None
    };
    let who = if env.use_agent_store { "torchrun's agent" } else { "rank 0" };
    let unreachable = |source| RuntimeError::StoreConnect {
        what: format!("the rendezvous store of {who} at {}:{} (MASTER_ADDR/MASTER_PORT)", env.master_addr, env.master_port),
        source,
    };
    let open_key = format!("{attempt}/open");
    // A connection cut by a previous attempt's server shutting down is retried until the deadline.
    let connect = || loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match TcpStore::connect(&env.master_addr, env.master_port, left) {
            Err(StoreError::Closed(_) | StoreError::Io(_)) if !left.is_zero() => {
                std::thread::sleep(Duration::from_millis(10))
            }
            other => return other,
        }
    };
    let mut client = connect().map_err(unreachable)?;
    if server.is_some() {
        client.set(&open_key, b"1").map_err(RuntimeError::Store)?;
    } else if !env.use_agent_store {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match client.wait(&[open_key.as_str()], left) {
                Ok(()) => break,
                // The server of a previous attempt went away under us: connect again.
                Err(StoreError::Closed(_) | StoreError::Io(_)) if !left.is_zero() => {
                    std::thread::sleep(Duration::from_millis(10));
                    client = connect().map_err(unreachable)?;
                }
                Err(e) => return Err(unreachable(e)),
            }
        }
    }
    let tcp = Arc::new(client);
    Ok(StoreHandles { client: tcp.clone(), tcp: Some(tcp), _server: server })
}
