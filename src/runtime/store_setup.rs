//! Opening the rendezvous store a rank uses: rank 0 hosts a TCP store on MASTER_PORT unless
//! torchrun's agent already serves one (then every rank is a client); a world of one process
//! without a launcher uses an in-process store.

use super::env::LaunchEnv;
use super::error::RuntimeError;
use crate::store::{MemoryStore, Store, StoreError, TcpStore, TcpStorePool, TcpStoreServer};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The store of an initialized process. Fields drop in order: client, then the server.
pub struct StoreHandles {
    client: Arc<dyn Store>,
    tcp: Option<Arc<TcpStore>>,
    pool: Option<Arc<TcpStorePool>>,
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
        self.pool.as_ref().map(|p| p.round_trips()).unwrap_or(0)
    }
}

/// Environment variable naming the address rank 0's store server binds (see [`host_server`]).
pub const STORE_BIND_ENV: &str = "MCORE_INIT_STORE_BIND";

/// Whether `host` resolves to an address of this machine (one a socket can bind).
fn is_local(host: &str) -> bool {
    use std::net::ToSocketAddrs;
    (host, 0).to_socket_addrs().is_ok_and(|mut a| a.any(|a| std::net::TcpListener::bind(a).is_ok()))
}

/// Host rank 0's store server. Bind policy: `bind` (from `MCORE_INIT_STORE_BIND`) when given,
/// exactly (`0.0.0.0` or `::` for every interface). Otherwise, when MASTER_ADDR is `localhost`
/// or an IP address of this machine, that address only: the store listens where the ranks are
/// told to connect and nowhere else (loopback stays loopback; a cluster-network address is not
/// also served on other interfaces). Any other MASTER_ADDR (a host name, which other hosts may
/// resolve differently, e.g. Debian maps the own name to 127.0.1.1; an address behind NAT) binds
/// every interface, as torch's server always does; for an IP address that is not local the
/// server says so on stderr.
pub fn host_server(master_addr: &str, port: u16, bind: Option<&str>) -> Result<TcpStoreServer, StoreError> {
    if let Some(b) = bind {
        return TcpStoreServer::bind(b, port);
    }
    let literal = master_addr.parse::<std::net::IpAddr>().is_ok();
    if master_addr == "localhost" || (literal && is_local(master_addr)) {
        return TcpStoreServer::bind(master_addr, port);
    }
    if literal {
        eprintln!(
            "mcore_init: MASTER_ADDR={master_addr} is not an address of this host: the rendezvous store binds every \
             interface (0.0.0.0:{port}); set {STORE_BIND_ENV} to the address to listen on"
        );
    }
    TcpStoreServer::bind("0.0.0.0", port)
}

/// Open the store this rank rendezvous through (see module docs). `attempt` names this init
/// attempt (`mcore_init/<run>/<restart>/<epoch>`): the host marks its fresh server open for it,
/// and clients wait for that mark, reconnecting meanwhile, so that a client never settles on the
/// server of a previous attempt that is still shutting down.
pub fn open_store(env: &LaunchEnv, timeout: Duration, attempt: &str) -> Result<StoreHandles, RuntimeError> {
    if env.world_size == 1 && !env.use_agent_store {
        return Ok(StoreHandles { client: Arc::new(MemoryStore::new(timeout)), tcp: None, pool: None, _server: None });
    }
    let deadline = Instant::now() + timeout;
    let server = if env.hosts_store() {
        let bind = std::env::var(STORE_BIND_ENV).ok().filter(|b| !b.is_empty());
        Some(host_server(&env.master_addr, env.master_port, bind.as_deref()).map_err(|e| {
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
        what: format!(
            "the rendezvous store of {who} at {}:{} (MASTER_ADDR/MASTER_PORT)",
            crate::quote::clip(&env.master_addr),
            env.master_port
        ),
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
    // A pool, so that threads creating communicators together never queue behind another
    // thread's WAIT on one connection (see [`TcpStorePool`]).
    let tcp = Arc::new(client);
    let pool = Arc::new(TcpStorePool::new(tcp.clone(), &env.master_addr, env.master_port));
    Ok(StoreHandles { client: pool.clone(), tcp: Some(tcp), pool: Some(pool), _server: server })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The former policy bound 127.0.0.1 for any loopback MASTER_ADDR and 0.0.0.0 for any other.
    #[test]
    fn the_store_binds_master_addr_itself_or_every_interface_when_it_is_not_local() {
        let s = host_server("127.0.0.2", 0, None).unwrap();
        assert_eq!(s.local_addr().ip().to_string(), "127.0.0.2");
        let s = host_server("localhost", 0, None).unwrap();
        assert!(s.local_addr().ip().is_loopback(), "{}", s.local_addr());
        // 192.0.2.1 (TEST-NET-1) is no address of this host: nothing is sent, only bound.
        assert!(!is_local("192.0.2.1"));
        let s = host_server("192.0.2.1", 0, None).unwrap();
        assert!(s.local_addr().ip().is_unspecified(), "{}", s.local_addr());
        // A host name may resolve differently elsewhere: every interface.
        let s = host_server("no-such-host.invalid", 0, None).unwrap();
        assert!(s.local_addr().ip().is_unspecified(), "{}", s.local_addr());
        let s = host_server("192.0.2.1", 0, Some("127.0.0.3")).unwrap();
        assert_eq!(s.local_addr().ip().to_string(), "127.0.0.3");
        match host_server("127.0.0.1", 0, Some("no-such-host.invalid")) {
            Err(StoreError::InvalidArgument(m)) => assert!(m.contains("no-such-host.invalid"), "{m}"),
            other => panic!("{:?}", other.map(|s| s.local_addr())),
        }
    }
}
