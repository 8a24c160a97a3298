//! Opening the rendezvous store a rank uses: rank 0 hosts a TCP store on MASTER_PORT unless
//! torchrun's agent already serves one (then every rank is a client); a world of one process
//! without a launcher uses an in-process store.

use super::env::LaunchEnv;
use super::error::RuntimeError;
use crate::quote::quoted;
use crate::store::{MemoryStore, ServerLimits, Store, StoreError, TcpStore, TcpStorePool, TcpStoreServer};
use std::sync::atomic::{AtomicU64, Ordering};
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

    /// A function that ends every call blocked on this rank's store connections (once the
    /// store's host is known to be gone); None for the in-process store.
    pub fn aborter(&self) -> Option<Box<dyn Fn() + Send + Sync>> {
        let pool = self.pool.clone()?;
        Some(Box::new(move || pool.abort_all()))
    }

    /// Request/response exchanges with the TCP store so far (0 for the in-process store).
    pub fn round_trips(&self) -> u64 {
        self.pool.as_ref().map(|p| p.round_trips()).unwrap_or(0)
    }
}

/// Environment variable naming the address rank 0's store server binds (see [`host_server`]).
pub const STORE_BIND_ENV: &str = "MCORE_INIT_STORE_BIND";

/// Environment variable giving the memory budget of rank 0's store server in bytes (default:
/// [`ServerLimits::max_memory_bytes`], 6 GiB).
pub const STORE_MAX_MEMORY_ENV: &str = "MCORE_INIT_STORE_MAX_MEMORY";

/// The limits of rank 0's store server: the defaults, with the memory budget from
/// `MCORE_INIT_STORE_MAX_MEMORY` when set.
fn server_limits() -> Result<ServerLimits, StoreError> {
    let mut limits = ServerLimits::default();
    if let Some(v) = std::env::var(STORE_MAX_MEMORY_ENV).ok().filter(|v| !v.is_empty()) {
        limits.max_memory_bytes = v.trim().parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
            StoreError::InvalidArgument(format!("{STORE_MAX_MEMORY_ENV}={} is not a number of bytes", quoted(&v)))
        })?;
    }
    Ok(limits)
}

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
///
/// A `bind` that does not cover MASTER_ADDR, when MASTER_ADDR is an address of this host, is
/// refused at once naming both: every rank, rank 0 included, connects to MASTER_ADDR, where
/// nothing would listen, and rank 0 would wait the whole timeout for its own store.
pub fn host_server(master_addr: &str, port: u16, bind: Option<&str>) -> Result<TcpStoreServer, StoreError> {
    if let Some(b) = bind {
        check_bind_covers(b, master_addr)?;
        return TcpStoreServer::bind_with_limits(b, port, server_limits()?);
    }
    let literal = master_addr.parse::<std::net::IpAddr>().is_ok();
    if master_addr == "localhost" || (literal && is_local(master_addr)) {
        return TcpStoreServer::bind_with_limits(master_addr, port, server_limits()?);
    }
    if literal {
        eprintln!(
            "mcore_init: MASTER_ADDR={master_addr} is not an address of this host: the rendezvous store binds every \
             interface (0.0.0.0:{port}); set {STORE_BIND_ENV} to the address to listen on"
        );
    }
    TcpStoreServer::bind_with_limits("0.0.0.0", port, server_limits()?)
}

/// Whether a server bound to `bind` is reachable at `master_addr`: a wildcard bind (`0.0.0.0`,
/// `::`) covers every address, another bind covers the addresses it resolves to. Only a
/// MASTER_ADDR of this host is known to miss it (another address may be forwarded here, e.g.
/// through NAT); names that do not resolve are left to the bind and the connect to report.
fn check_bind_covers(bind: &str, master_addr: &str) -> Result<(), StoreError> {
    use std::net::{IpAddr, ToSocketAddrs};
    let resolve = |host: &str| -> Option<Vec<IpAddr>> {
        let ips: Vec<IpAddr> = (host, 0).to_socket_addrs().ok()?.map(|a| a.ip()).collect();
        (!ips.is_empty()).then_some(ips)
    };
    let Some(binds) = resolve(bind) else { return Ok(()) };
    if binds.iter().any(|ip| ip.is_unspecified()) {
        return Ok(());
    }
    let Some(masters) = resolve(master_addr) else { return Ok(()) };
    if masters.iter().any(|m| binds.contains(m)) {
        return Ok(());
    }
    if !masters.iter().any(|m| std::net::TcpListener::bind((*m, 0)).is_ok()) {
        return Ok(());
    }
    let list = |ips: &[IpAddr]| ips.iter().map(|ip| ip.to_string()).collect::<Vec<_>>().join(", ");
    Err(StoreError::InvalidArgument(format!(
        "{STORE_BIND_ENV}={} does not cover MASTER_ADDR={}: the store would listen on {} only, but every rank, \
         rank 0 included, connects to MASTER_ADDR ({}, an address of this host), where nothing would listen; \
         bind MASTER_ADDR's address, or 0.0.0.0 / :: for every interface, or unset {STORE_BIND_ENV}",
        quoted(bind),
        quoted(master_addr),
        list(&binds),
        list(&masters)
    )))
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

/// Distinguishes successive initializations of one process in store keys (destroy + re-init).
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// The store and key prefix of an initialization: those of an earlier attempt (recovery), or
/// a new attempt's (its store opened within `timeout`).
pub(super) fn open_attempt(
    env: &LaunchEnv,
    timeout: Duration,
    reuse: Option<(StoreHandles, String)>,
) -> Result<(StoreHandles, String), RuntimeError> {
    Ok(match reuse {
        Some(reused) => reused,
        None => {
            let epoch = EPOCH.fetch_add(1, Ordering::SeqCst);
            let attempt = format!("mcore_init/{}/{}/{}", env.run_id, env.restart_count, epoch);
            (open_store(env, timeout, &attempt)?, attempt)
        }
    })
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
        // A bind that misses a MASTER_ADDR of this host is refused before binding; wildcards and
        // the address itself cover it.
        match host_server("127.0.0.1", 0, Some("127.0.0.2")) {
            Err(StoreError::InvalidArgument(m)) => {
                assert!(m.contains("MCORE_INIT_STORE_BIND='127.0.0.2'") && m.contains("MASTER_ADDR='127.0.0.1'"), "{m}")
            }
            other => panic!("{:?}", other.map(|s| s.local_addr())),
        }
        for covering in ["0.0.0.0", "127.0.0.1"] {
            let s = host_server("127.0.0.1", 0, Some(covering)).unwrap();
            assert_eq!(s.local_addr().ip().to_string(), covering);
        }
        assert!(check_bind_covers("::", "127.0.0.1").is_ok());
    }

    /// Set by [`a_store_bind_that_misses_master_addr_fails_at_once_naming_both`] in the process
    /// it starts: run [`store_bind_child`] there.
    const CHILD: &str = "MCORE_TEST_STORE_BIND_CHILD";

    /// The child half: rank 0 of 2 opening its store from the real process environment.
    #[test]
    fn store_bind_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        let env = LaunchEnv::from_process().unwrap();
        let start = Instant::now();
        let Err(e) = open_store(&env, Duration::from_secs(60), "mcore_init/test/0/0") else {
            panic!("open_store succeeded")
        };
        println!("CHILD-RESULT {:.3} {e}", start.elapsed().as_secs_f64());
    }

    /// MCORE_INIT_STORE_BIND=127.0.0.2 with MASTER_ADDR=127.0.0.1: rank 0 used to bind 127.0.0.2
    /// and then wait its whole timeout (60 s here) to reach its own store at 127.0.0.1; now it
    /// fails at once naming both. A real process with the real environment variables.
    #[test]
    fn a_store_bind_that_misses_master_addr_fails_at_once_naming_both() {
        use std::process::{Command, Stdio};
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "runtime::store_setup::tests::store_bind_child", "--nocapture", "--test-threads", "1"])
            .env(CHILD, "1")
            .env("RANK", "0")
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env(STORE_BIND_ENV, "127.0.0.2")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().find_map(|l| l.split_once("CHILD-RESULT ").map(|(_, r)| r)).unwrap_or_else(|| {
            panic!("rank 0 did not fail within 20 s:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr))
        });
        let (secs, msg) = line.split_once(' ').unwrap();
        assert!(secs.parse::<f64>().unwrap() < 5.0, "{line}");
        assert!(msg.contains("MCORE_INIT_STORE_BIND='127.0.0.2'") && msg.contains("MASTER_ADDR='127.0.0.1'"), "{msg}");
    }
}
