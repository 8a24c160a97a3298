//! Opening the rendezvous store a rank uses: rank 0 hosts a TCP store on MASTER_PORT unless
//! torchrun's agent already serves one (then every rank is a client); a world of one process
//! without a launcher uses an in-process store. Under PMIx rank 0 binds an ephemeral port and
//! the ranks learn it through PMIx ([`super::pmix_rendezvous`]).

use super::env::{LaunchEnv, Rendezvous};
use super::pmix_rendezvous::{self, StoreRecord};
use crate::quote::quoted;
use crate::runtime::error::RuntimeError;
use crate::runtime::meeting::checkin::CheckinError;
use crate::store::tcp::auth::TokenCell;
use crate::store::{MemoryStore, ServerLimits, Store, StoreError, StoreToken, TcpStore, TcpStorePool, TcpStoreServer};
use crate::timeout::Deadline;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The store of an initialized process. Fields drop in order: client, then the server.
pub struct StoreHandles {
    client: Arc<dyn Store>,
    /// This rank's first connection, until [`Self::let_go_of_unproven_first`].
    tcp: Option<Arc<TcpStore>>,
    pool: Option<Arc<TcpStorePool>>,
    /// This rank's host and advertised address (see [`Self::host`]).
    host: super::host::HostInfo,
    /// What this rank's new connections prove: the user's token, or the job's own secret once
    /// learnt (the host's from the start; another rank's from its liveness claim, see
    /// [`TcpStoreServer::expect_ranks`]).
    token: TokenCell,
    /// The host's server and, unless the store stays open to everyone, the job's secret it will
    /// require once the initialization is over.
    server: Option<(TcpStoreServer, Option<StoreToken>)>,
    /// The port the store was found on (one of the job's `port_candidates`, or the one rank 0
    /// published through PMIx).
    port: u16,
}

/// Environment variable: `1` keeps rank 0's store open to every client after initialization
/// (e.g. for torch clients of the job's own on the same store).
pub const KEEP_OPEN_ENV: &str = "MCORE_STORE_KEEP_OPEN";

impl StoreHandles {
    pub fn client(&self) -> Arc<dyn Store> {
        self.client.clone()
    }

    /// `env` with MASTER_PORT where this store was found: a job whose port is derived may have
    /// met on a later candidate than the first (see [`super::env::port_candidates`]).
    pub fn resolved(&self, env: &LaunchEnv) -> LaunchEnv {
        let mut env = env.clone();
        if let (Rendezvous::Pmix, Some(pool)) = (env.rendezvous, &self.pool) {
            // Where rank 0 published its store (the pool connects there).
            (env.master_addr, env.master_port) = (pool.host().to_string(), self.port);
            return env;
        }
        if self.port != env.master_port && self.pool.is_some() {
            let i = env.port_candidates.iter().position(|p| *p == self.port).unwrap_or(0);
            env.rendezvous_why = format!(
                "{}; port {} taken by another job, candidate {} of {}: {}",
                env.rendezvous_why,
                env.master_port,
                i + 1,
                env.port_candidates.len(),
                self.port
            );
            env.master_port = self.port;
        }
        env
    }

    /// The pool of connections to the TCP store (none for the in-process store).
    pub fn pool(&self) -> Option<Arc<TcpStorePool>> {
        self.pool.clone()
    }

    /// This rank's first connection (none for the in-process store).
    pub fn first_connection(&self) -> Option<Arc<TcpStore>> {
        self.tcp.clone()
    }

    /// Once this rank knows the job's secret (its liveness claimed its counter): its connections
    /// made before, which nothing proves, are let go. The store would cut them off at the end of
    /// the initialization, when it comes to serve only the job's ranks, with a line on its
    /// host's stderr. A spare standing by keeps its first one: its claim is on it.
    pub fn let_go_of_unproven_first(&mut self) {
        if self.token.get().is_none() {
            return;
        }
        if let Some(pool) = &self.pool {
            pool.let_go_of_unproven();
        }
        if self.tcp.as_ref().is_some_and(|t| !t.proven()) {
            self.tcp = None;
        }
    }

    /// What this rank's new connections prove (shared with its heartbeat).
    pub fn token(&self) -> TokenCell {
        self.token.clone()
    }

    /// The host, once the initialization is over: from now on serve only the job's ranks'
    /// connections (see [`TcpStoreServer::serve_only_holders`]).
    pub fn close_to_outsiders(&self) {
        if let Some((server, Some(_))) = &self.server {
            server.serve_only_holders();
        }
    }

    /// This rank's host and advertised address: the local address of its TCP store connection
    /// (see [`super::host`]).
    pub fn host(&self) -> super::host::HostInfo {
        self.host.clone()
    }

    /// A function that ends every call blocked on this rank's store connections (once the
    /// store's host is known to be gone); None for the in-process store.
    pub fn aborter(&self) -> Option<Box<dyn Fn() + Send + Sync>> {
        let pool = self.pool.clone()?;
        Some(Box::new(move || pool.abort_all()))
    }

    /// A function that ends the calls blocked on this rank's store connections right now (a peer
    /// they wait for died), leaving the store usable; None for the in-process store.
    pub fn busy_aborter(&self) -> Option<Box<dyn Fn() + Send + Sync>> {
        let pool = self.pool.clone()?;
        Some(Box::new(move || pool.abort_busy()))
    }

    /// Requests this rank's store server has served so far, from every rank (None: this rank
    /// hosts no store).
    pub fn requests_served(&self) -> Option<u64> {
        self.server.as_ref().map(|(s, _)| s.requests_served())
    }

    /// Request/response exchanges with the TCP store so far (0 for the in-process store).
    pub fn round_trips(&self) -> u64 {
        self.pool.as_ref().map(|p| p.round_trips()).unwrap_or(0)
    }
}

/// Environment variable naming the address rank 0's store server binds (see [`host_server`]).
pub const STORE_BIND_ENV: &str = "MCORE_INIT_STORE_BIND";

/// Store key under which the store's host publishes its job id (see [`super::env::JobId`]) before
/// any rank checks in. Every other rank reads it before writing anything, so that a rank of
/// another job that reaches this store (two jobs on one MASTER_ADDR:MASTER_PORT) fails at once,
/// naming both ids, without touching this job's keys.
pub const JOB_KEY: &str = "mcore_init/job";

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
/// server says so on stderr, and so it does for a host name (every interface is served: the
/// store is reachable from every network this host is on).
///
/// A `bind` that does not cover MASTER_ADDR, when MASTER_ADDR is an address of this host, is
/// refused at once naming both: every rank, rank 0 included, connects to MASTER_ADDR, where
/// nothing would listen, and rank 0 would wait the whole timeout for its own store.
/// With a `token`, the server serves only clients that prove they hold it; else with a
/// `session` secret (and the job's id), until [`TcpStoreServer::serve_only_holders`] every
/// client, then only those that prove it.
pub fn host_server(
    master_addr: &str,
    port: u16,
    bind: Option<&str>,
    token: Option<StoreToken>,
    session: Option<(StoreToken, &str)>,
) -> Result<TcpStoreServer, StoreError> {
    let limits = server_limits()?;
    let serve = |host: &str| match (&token, &session) {
        (None, Some((s, job))) => TcpStoreServer::bind_with_session(host, port, limits, s.clone(), job),
        _ => TcpStoreServer::bind_with_token(host, port, limits, token.clone()),
    };
    if let Some(b) = bind {
        check_bind_covers(b, master_addr)?;
        return serve(b);
    }
    let literal = master_addr.parse::<std::net::IpAddr>().is_ok();
    if master_addr == "localhost" || (literal && is_local(master_addr)) {
        return serve(master_addr);
    }
    let why = if literal { "is not an address of this host" } else { "is a host name, not an IP address" };
    eprintln!(
        "mcore_init: MASTER_ADDR={} {why}: the rendezvous store binds every interface (0.0.0.0:{port}), \
         reachable from every network this host is on; set {STORE_BIND_ENV} to the address to listen on",
        crate::quote::quoted(master_addr)
    );
    serve("0.0.0.0")
}

/// How a store's job id is named: `job 'x'`, or `no job id`.
fn job_named(theirs: &[u8]) -> String {
    let theirs = String::from_utf8_lossy(theirs);
    if theirs.is_empty() {
        "no job id".to_string()
    } else {
        format!("job {}", crate::quote::quoted(&theirs))
    }
}

/// The error of a rank of job `ours` that found only other jobs' stores: `found` holds (port,
/// that store's job id) for every candidate port, all taken.
fn other_jobs(env: &LaunchEnv, found: &[(u16, Vec<u8>)]) -> CheckinError {
    let addr = crate::quote::clip(&env.master_addr);
    let places: Vec<String> = found.iter().map(|(p, j)| format!("{addr}:{p} belongs to {}", job_named(j))).collect();
    let fix = if env.port_candidates.len() > 1 {
        format!("every one of this job's {} candidate ports is taken by another job; set MASTER_PORT", found.len())
    } else {
        "two jobs use the same MASTER_ADDR:MASTER_PORT; give each job its own MASTER_PORT".to_string()
    };
    CheckinError::OtherJob(format!(
        "rank {} belongs to job {}, but the rendezvous store at {} (MASTER_ADDR/MASTER_PORT; {}): {fix} (this rank \
         wrote nothing in another job's store)",
        env.rank,
        env.job_id.describe(),
        places.join(", and at "),
        env.rendezvous_why
    ))
}

/// A client rank's check, before it writes anything: the job of the store (published under
/// [`JOB_KEY`] by its host), `Ok` when it is this rank's, with whether the host has marked the
/// attempt open (`open_key`, read along: the host sets both in one request; false without one).
/// Waits for the job key until `deadline`.
fn check_job(
    client: &TcpStore,
    env: &LaunchEnv,
    open_key: Option<&str>,
    deadline: Deadline,
) -> Result<Result<bool, Vec<u8>>, StoreError> {
    let (theirs, open) = if env.use_agent_store {
        // torchrun's agent store: no host of ours publishes it; the first rank does.
        (client.compare_set(JOB_KEY, b"", env.job_id.id.as_bytes())?, true)
    } else {
        client.wait(&[JOB_KEY], deadline.left())?;
        let keys: Vec<&str> = [JOB_KEY].into_iter().chain(open_key).collect();
        let mut got = client.multi_get_existing(&keys)?.into_iter();
        let theirs = got.next().unwrap_or_default();
        (theirs, got.next().is_some_and(|v| !v.is_empty()))
    };
    Ok(if theirs == env.job_id.id.as_bytes() { Ok(open) } else { Err(theirs) })
}

/// Rank 0 found `port` taken: the job id of the store of another job that holds it, if one says
/// so within 2 s (and before `deadline`).
fn port_taken_by_other_job(env: &LaunchEnv, port: u16, deadline: Deadline) -> Option<Vec<u8>> {
    let within = Duration::from_secs(2).min(deadline.left());
    let client = match TcpStore::connect_with_token(&env.master_addr, port, within, env.store_token.as_ref()) {
        Ok(c) => c,
        // Its initialization is over: it names its job.
        Err(StoreError::Locked { job, .. }) => return (job != env.job_id.id).then(|| job.into_bytes()),
        Err(_) => return None,
    };
    // Rank 0 hosts, so the store is not torchrun's agent's: check_job waits for the host's id.
    check_job(&client, env, None, Deadline::after(within)).ok()?.err()
}

/// Rank 0's server on the first of the job's candidate ports that is free (see
/// [`super::env::port_candidates`]); when every one is taken, the error names the jobs whose
/// stores hold them, or every port held (the bind error of a single port). Who holds them is
/// asked of all at once, within `deadline`: 8 listeners that never answer cost 2 s, not 16.
fn host_on_candidates(
    env: &LaunchEnv,
    session: Option<&StoreToken>,
    deadline: Deadline,
) -> Result<TcpStoreServer, RuntimeError> {
    let bind = std::env::var(STORE_BIND_ENV).ok().filter(|b| !b.is_empty());
    let mut held = Vec::new();
    for &port in &env.port_candidates {
        let (user, secret) = (env.store_token.clone(), session.map(|s| (s.clone(), env.job_id.id.as_str())));
        match host_server(&env.master_addr, port, bind.as_deref(), user, secret) {
            Ok(server) => return Ok(server),
            Err(e) if port_in_use(&e) => held.push((port, e)),
            Err(e) => return Err(bind_error(env, port, e)),
        }
    }
    let jobs: Vec<Option<Vec<u8>>> = std::thread::scope(|s| {
        let looks: Vec<_> =
            held.iter().map(|&(port, _)| s.spawn(move || port_taken_by_other_job(env, port, deadline))).collect();
        looks.into_iter().map(|h| h.join().unwrap_or(None)).collect()
    });
    if jobs.iter().all(Option::is_some) {
        let found: Vec<(u16, Vec<u8>)> = held.iter().zip(jobs).map(|((p, _), j)| (*p, j.unwrap_or_default())).collect();
        return Err(RuntimeError::Checkin(other_jobs(env, &found)));
    }
    if held.len() > 1 {
        return Err(all_held(env, &held, &jobs));
    }
    let (port, e) = held.pop().expect("at least one candidate port");
    Err(bind_error(env, port, e))
}

/// Rank 0's error when every one of its several candidate ports is held: each named, with the
/// job of those that are another job's store (`jobs`, by port).
fn all_held(env: &LaunchEnv, held: &[(u16, StoreError)], jobs: &[Option<Vec<u8>>]) -> RuntimeError {
    let addr = crate::quote::clip(&env.master_addr);
    let ports: Vec<String> = held
        .iter()
        .zip(jobs)
        .map(|((p, _), job)| match job {
            Some(j) => format!("{addr}:{p} (the store of {})", job_named(j)),
            None => format!("{addr}:{p}"),
        })
        .collect();
    RuntimeError::Store(StoreError::InvalidArgument(format!(
        "rank 0 cannot host the rendezvous store: all {} candidate ports are held by other programs: {} ({}): set \
         MASTER_PORT to a free port",
        held.len(),
        ports.join(", "),
        env.rendezvous_why
    )))
}

/// Whether binding failed because another program holds the port.
fn port_in_use(e: &StoreError) -> bool {
    matches!(e, StoreError::InvalidArgument(m) if m.contains("already in use"))
}

/// Rank 0 cannot host on `port`: the error, naming the port and where it came from, and who
/// holds it when that is known: this process itself (torch's `env://` store made before
/// initialize), a program that took the port `mcore-launch` gave, or another program.
fn bind_error(env: &LaunchEnv, port: u16, e: StoreError) -> RuntimeError {
    let fix = if !port_in_use(&e) {
        ""
    } else if crate::store::tcp::listened_on_by_this_process(port) {
        "; this process itself listens on that port (torch's env:// store, made before mcore_init): \
         initialize mcore_init first and build torch's process group on its store (Python: \
         mcore_init.torch_store(), docs/getting-started.md), or give torch another port"
    } else if std::env::var_os("MCORE_LAUNCH_DIR").is_some() {
        // Set by mcore-launch for each rank (recovery's LAUNCH_DIR_ENV).
        "; another program took that port after mcore-launch chose it (or it was given with --master-port): \
         start the job again, or give --master-port a port no other program uses"
    } else {
        "; another program holds that port: pick another MASTER_PORT, or start the job with mcore-launch \
         without --master-port (it picks a free port)"
    };
    RuntimeError::Store(match e {
        StoreError::InvalidArgument(m) | StoreError::Io(m) => StoreError::InvalidArgument(format!(
            "rank 0 cannot host the rendezvous store on MASTER_PORT={port} ({}): {m}{fix}",
            env.rendezvous_why
        )),
        other => other,
    })
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

/// What one look at a candidate port found.
enum Found {
    /// This job's store, open for this attempt.
    Ours(TcpStore),
    /// Another job's store, naming its job.
    Other(Vec<u8>),
    /// Nothing yet (no server, a previous attempt's going away, one that does not answer).
    Nothing(StoreError),
    /// A refusal that waiting does not change (a store that wants a token this rank lacks).
    Fatal(StoreError),
}

/// A client rank: this job's store, looked for along the job's candidate ports (one, unless the
/// port is derived) until `deadline`. Another job's store is passed over once it named its job
/// (its first answer); when every candidate holds another job's store the rank fails at once,
/// naming them; a candidate with nothing there yet is looked at again (rank 0 may be late).
fn find_own_store(
    env: &LaunchEnv,
    who: &str,
    token: &TokenCell,
    open_key: &str,
    deadline: Deadline,
    unreachable: &dyn Fn(u16, StoreError) -> RuntimeError,
) -> Result<(TcpStore, u16), RuntimeError> {
    // Several candidates: a short look at each in turn; one: wait on it the whole deadline.
    let several = env.port_candidates.len() > 1;
    let look = |port: u16| -> Found {
        let left = deadline.left();
        let within = left.min(if several { Duration::from_millis(500) } else { PROGRESS_EVERY });
        let client = match TcpStore::connect_with_token(&env.master_addr, port, within, token.get().as_ref()) {
            Ok(c) => c,
            // Another job's store whose initialization is over names that job.
            Err(StoreError::Locked { job, .. }) if job != env.job_id.id => return Found::Other(job.into_bytes()),
            Err(
                e
                @ (StoreError::Closed(_) | StoreError::Io(_) | StoreError::Timeout { .. } | StoreError::Locked { .. }),
            ) => return Found::Nothing(e),
            // With several candidates, another job's store may refuse us: look at the others.
            Err(e) if several => return Found::Nothing(e),
            Err(e) => return Found::Fatal(e),
        };
        match check_job(&client, env, Some(open_key), Deadline::after(within.max(Duration::from_millis(100)))) {
            Ok(Err(theirs)) => return Found::Other(theirs),
            // torchrun's agent store has no open mark; else the attempt is open already.
            Ok(Ok(true)) => return Found::Ours(client),
            Ok(Ok(false)) => {}
            Err(e) => return Found::Nothing(e),
        }
        // Our job's store: wait until its host marks this attempt open (a previous attempt's
        // server may still be going away: then look again).
        match client.wait(&[open_key], deadline.left()) {
            Ok(()) => Found::Ours(client),
            Err(e) => Found::Nothing(e),
        }
    };
    let mut others: Vec<Option<Vec<u8>>> = vec![None; env.port_candidates.len()];
    let started = Instant::now();
    let mut next_line = started + PROGRESS_EVERY;
    loop {
        let mut last = None;
        for (i, &port) in env.port_candidates.iter().enumerate() {
            match look(port) {
                Found::Ours(client) => return Ok((client, port)),
                Found::Fatal(e) => return Err(unreachable(port, e)),
                Found::Other(job) => others[i] = Some(job),
                Found::Nothing(e) => {
                    others[i] = None;
                    last = Some((port, e));
                }
            }
        }
        if others.iter().all(Option::is_some) {
            let found: Vec<(u16, Vec<u8>)> =
                env.port_candidates.iter().zip(&others).map(|(p, j)| (*p, j.clone().unwrap_or_default())).collect();
            return Err(RuntimeError::Checkin(other_jobs(env, &found)));
        }
        if deadline.passed() {
            let (port, e) = last.expect("a candidate with nothing found");
            // The whole wait is what timed out, not the last look.
            let e = match e {
                StoreError::Timeout { keys, .. } => StoreError::Timeout { keys, waited: started.elapsed() },
                e => e,
            };
            return Err(unreachable(port, e));
        }
        // Nothing silent: a store not reachable yet is said so every PROGRESS_EVERY.
        if Instant::now() >= next_line {
            if let Some((_, StoreError::Timeout { keys, .. })) = &last {
                still_connecting(env, who, keys, deadline);
            }
            next_line += PROGRESS_EVERY;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Open the store this rank rendezvous through (see module docs). `attempt` names this init
/// attempt (`mcore_init/<run>/<restart>/<epoch>`): the host marks its fresh server open for it,
/// and clients wait for that mark, reconnecting meanwhile, so that a client never settles on the
/// server of a previous attempt that is still shutting down.
pub fn open_store(env: &LaunchEnv, timeout: Duration, attempt: &str) -> Result<StoreHandles, RuntimeError> {
    if env.world_size == 1 && !env.use_agent_store {
        let client = Arc::new(MemoryStore::new(timeout));
        let port = env.master_port;
        let (token, server, host) = (TokenCell::default(), None, super::host::HostInfo::new(None, "-"));
        return Ok(StoreHandles { client, tcp: None, pool: None, host, token, server, port });
    }
    if env.use_agent_store && env.store_token.is_some() {
        use crate::store::tcp::auth::{TOKEN_ENV, TOKEN_FILE_ENV};
        return Err(RuntimeError::InvalidArgument(format!(
            "{TOKEN_ENV} (or {TOKEN_FILE_ENV}) is set, but torchrun's agent serves the rendezvous store \
             (TORCHELASTIC_USE_AGENT_STORE=True) and torch's store cannot check a token: unset it, or let rank 0 \
             host the store"
        )));
    }
    let deadline = Deadline::after(timeout);
    let token = TokenCell::new(env.store_token.clone());
    // The job's own secret, required of new connections once the initialization is over.
    let keep_open = std::env::var(KEEP_OPEN_ENV).is_ok_and(|v| v.trim() == "1");
    let session =
        if env.hosts_store() && env.store_token.is_none() && !keep_open { StoreToken::random().ok() } else { None };
    if let Some(s) = &session {
        token.set_if_none(s.clone());
    }
    let pmix = env.rendezvous == Rendezvous::Pmix;
    // Under PMIx the one candidate is MASTER_PORT, or 0 (an ephemeral port, published).
    let server = if env.hosts_store() { Some(host_on_candidates(env, session.as_ref(), deadline)?) } else { None };
    let who = if env.use_agent_store { "torchrun's agent" } else { "rank 0" };
    let unreachable = |port: u16, source| RuntimeError::StoreConnect {
        what: format!(
            "the rendezvous store of {who} at {}:{port} (MASTER_ADDR/MASTER_PORT; {})",
            crate::quote::clip(&env.master_addr),
            env.rendezvous_why
        ),
        source,
    };
    let open_key = format!("{attempt}/open");
    let mut published = None;
    let (client, port) = match &server {
        Some(s) => {
            let port = s.port();
            let client = TcpStore::connect_with_token(&env.master_addr, port, timeout, token.get().as_ref())
                .map_err(|e| unreachable(port, e))?;
            // The host publishes its job id first, then marks the attempt open; the ranks' claims
            // of their liveness counters hand them the job's secret (stored under no key).
            s.expect_ranks(attempt, env.world_size);
            // One request, applied in order: a rank that reads the job id reads the mark with it.
            let items: [(&str, &[u8]); 2] = [(JOB_KEY, env.job_id.id.as_bytes()), (&open_key, b"1")];
            client.multi_set(&items).map_err(RuntimeError::Store)?;
            if pmix {
                let record = StoreRecord { addr: env.master_addr.clone(), port, secret: session.clone() };
                pmix_rendezvous::publish(env, attempt, &record, deadline)?;
            }
            (client, port)
        }
        None if pmix => {
            let (client, port, addr) = connect_published(env, attempt, &token, deadline)?;
            published = Some(addr);
            (client, port)
        }
        None => find_own_store(env, who, &token, &open_key, deadline, &unreachable)?,
    };
    let client = client.with_timeout(deadline.left());
    // A pool, so that threads creating communicators together never queue behind another
    // thread's WAIT on one connection (see [`TcpStorePool`]).
    let tcp = Arc::new(client);
    // A client under PMIx connects where rank 0 published; every other rank at MASTER_ADDR.
    let at = published.as_deref().unwrap_or(&env.master_addr);
    let pool = Arc::new(TcpStorePool::new(tcp.clone(), at, port).with_token(token.clone()));
    let server = server.map(|s| (s, session));
    let host = super::host::HostInfo::new(tcp.local_addr().ok().map(|a| a.ip()), tcp.peer());
    Ok(StoreHandles { client: pool.clone(), tcp: Some(tcp), pool: Some(pool), host, token, server, port })
}

/// A client under PMIx: the store rank 0 published for `attempt`, connected with the secret
/// published with it. The address is this job's own by construction: no job check, no open mark
/// to wait for. Returns the client, its port and the published address.
fn connect_published(
    env: &LaunchEnv,
    attempt: &str,
    token: &TokenCell,
    deadline: Deadline,
) -> Result<(TcpStore, u16, String), RuntimeError> {
    let record = pmix_rendezvous::find(env, attempt, deadline)?;
    if let Some(secret) = record.secret {
        token.set_if_none(secret);
    }
    let left = deadline.left();
    let client =
        TcpStore::connect_with_token(&record.addr, record.port, left, token.get().as_ref()).map_err(|source| {
            RuntimeError::StoreConnect {
                what: format!(
                    "the rendezvous store of rank 0 at {}:{} (published through PMIx)",
                    crate::quote::clip(&record.addr),
                    record.port
                ),
                source,
            }
        })?;
    Ok((client, record.port, record.addr))
}

/// How often a rank that cannot reach the rendezvous store yet says so on stderr.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// One progress line of a rank still trying to reach the store of `who` (see [`open_store`]),
/// on stderr: [`progress_line`].
fn still_connecting(env: &LaunchEnv, who: &str, keys: &[String], deadline: Deadline) {
    let left = deadline.left();
    eprintln!("{}", progress_line(env, who, keys, left, std::time::SystemTime::now() + left));
}

/// What fails (`keys`: the connect attempt's `<connect to ...: reason>`) and until when it is
/// retried, e.g. `cannot resolve MASTER_ADDR 'x' (...); ... (retrying until 06:31:05 UTC, 295 s
/// left)`.
fn progress_line(env: &LaunchEnv, who: &str, keys: &[String], left: Duration, until: std::time::SystemTime) -> String {
    let attempt = keys.first().map_or("", |k| k.trim_start_matches('<').trim_end_matches('>'));
    let reason = attempt.split_once(": ").map_or(attempt, |(_, why)| why);
    let addr = crate::quote::quoted(&env.master_addr);
    let what = match reason.strip_prefix("cannot resolve ") {
        Some(rest) => format!("cannot resolve MASTER_ADDR {addr} ({})", rest.split_once(": ").map_or(rest, |(_, e)| e)),
        None => format!("cannot reach the rendezvous store of {who} at {addr}:{} ({reason})", env.master_port),
    };
    let secs = until.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) % 86_400;
    format!(
        "mcore_init: rank {}: {what}; {} (retrying until {:02}:{:02}:{:02} UTC, {} s left)",
        env.rank,
        env.rendezvous_why,
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        left.as_secs()
    )
}

/// Distinguishes successive initializations of one process in store keys (destroy + re-init).
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// The store and key prefix of an initialization: those of an earlier attempt (recovery), or
/// a new attempt's (its store opened within `timeout`).
pub(crate) fn open_attempt(
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
        let s = host_server("127.0.0.2", 0, None, None, None).unwrap();
        assert_eq!(s.local_addr().ip().to_string(), "127.0.0.2");
        let s = host_server("localhost", 0, None, None, None).unwrap();
        assert!(s.local_addr().ip().is_loopback(), "{}", s.local_addr());
        // 192.0.2.1 (TEST-NET-1) is no address of this host: nothing is sent, only bound.
        assert!(!is_local("192.0.2.1"));
        let s = host_server("192.0.2.1", 0, None, None, None).unwrap();
        assert!(s.local_addr().ip().is_unspecified(), "{}", s.local_addr());
        // A host name may resolve differently elsewhere: every interface.
        let s = host_server("no-such-host.invalid", 0, None, None, None).unwrap();
        assert!(s.local_addr().ip().is_unspecified(), "{}", s.local_addr());
        let s = host_server("192.0.2.1", 0, Some("127.0.0.3"), None, None).unwrap();
        assert_eq!(s.local_addr().ip().to_string(), "127.0.0.3");
        match host_server("127.0.0.1", 0, Some("no-such-host.invalid"), None, None) {
            Err(StoreError::InvalidArgument(m)) => assert!(m.contains("no-such-host.invalid"), "{m}"),
            other => panic!("{:?}", other.map(|s| s.local_addr())),
        }
        // A bind that misses a MASTER_ADDR of this host is refused before binding; wildcards and
        // the address itself cover it.
        match host_server("127.0.0.1", 0, Some("127.0.0.2"), None, None) {
            Err(StoreError::InvalidArgument(m)) => {
                assert!(m.contains("MCORE_INIT_STORE_BIND='127.0.0.2'") && m.contains("MASTER_ADDR='127.0.0.1'"), "{m}")
            }
            other => panic!("{:?}", other.map(|s| s.local_addr())),
        }
        for covering in ["0.0.0.0", "127.0.0.1"] {
            let s = host_server("127.0.0.1", 0, Some(covering), None, None).unwrap();
            assert_eq!(s.local_addr().ip().to_string(), covering);
        }
        assert!(check_bind_covers("::", "127.0.0.1").is_ok());
    }

    /// Under torchrun's agent store (no host of ours) the first rank records its job id; a rank of
    /// another job is refused naming both, and writes nothing.
    #[test]
    fn on_an_agent_store_the_first_job_id_holds() {
        let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
        let env_of = |job: &str| {
            let vars = [
                ("RANK", "1".to_string()),
                ("WORLD_SIZE", "2".to_string()),
                ("MASTER_ADDR", "127.0.0.1".to_string()),
                ("MASTER_PORT", server.port().to_string()),
                ("TORCHELASTIC_USE_AGENT_STORE", "True".to_string()),
                ("TORCHELASTIC_RUN_ID", job.to_string()),
            ];
            LaunchEnv::from_lookup(&move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap()
        };
        let client = TcpStore::connect("127.0.0.1", server.port(), Duration::from_secs(10)).unwrap();
        let deadline = Deadline::after(Duration::from_secs(10));
        assert_eq!(check_job(&client, &env_of("run-1"), None, deadline).unwrap(), Ok(true));
        assert_eq!(check_job(&client, &env_of("run-1"), None, deadline).unwrap(), Ok(true));
        let keys = client.num_keys().unwrap();
        let Err(theirs) = check_job(&client, &env_of("run-2"), None, deadline).unwrap() else {
            panic!("another job passed")
        };
        assert_eq!(theirs, b"run-1");
        let e = other_jobs(&env_of("run-2"), &[(server.port(), theirs)]).to_string();
        assert!(e.contains("job 'run-1'") && e.contains("'run-2' (from TORCHELASTIC_RUN_ID)"), "{e}");
        assert_eq!(client.num_keys().unwrap(), keys, "the other job's rank wrote a key");
    }

    /// A port in use that this process itself listens on (as torch's env:// store made before
    /// initialize does) is named so, without advising mcore-launch.
    #[test]
    fn a_port_held_by_this_process_is_named_so() {
        let torch_like = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = torch_like.local_addr().unwrap().port();
        let vars = [("RANK", "0".to_string()), ("WORLD_SIZE", "2".into()), ("MASTER_ADDR", "127.0.0.1".into())];
        let env = LaunchEnv::from_lookup(&|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap();
        let in_use = || StoreError::InvalidArgument(format!("port {port} is already in use on 127.0.0.1"));
        let e = bind_error(&env, port, in_use()).to_string();
        assert!(e.contains("this process itself listens on that port") && !e.contains("mcore-launch"), "{e}");
        drop(torch_like);
        let e = bind_error(&env, port, in_use()).to_string();
        assert!(e.contains("another program") && !e.contains("this process itself"), "{e}");
    }

    /// torch's agent store cannot check a token: refused at once, naming the variable.
    #[test]
    fn a_token_with_the_agent_store_is_an_error_at_once() {
        let vars = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("MCORE_STORE_TOKEN", "t"),
        ];
        let env = LaunchEnv::from_lookup(&|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())).unwrap();
        let start = Instant::now();
        let Err(e) = open_store(&env, Duration::from_secs(30), "mcore_init/test/0/0") else { panic!("opened") };
        assert!(start.elapsed() < Duration::from_secs(5));
        let e = e.to_string();
        assert!(e.contains("MCORE_STORE_TOKEN") && e.contains("TORCHELASTIC_USE_AGENT_STORE"), "{e}");
    }

    /// The progress line of a MASTER_ADDR that does not resolve names MASTER_ADDR and the
    /// resolver's reason, and the wall-clock time until which it retries.
    #[test]
    fn an_unresolvable_master_addr_is_named_in_the_progress_line() {
        let vars = [("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "nodex"), ("MASTER_PORT", "29500")];
        let env = LaunchEnv::from_lookup(&|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())).unwrap();
        let keys = ["<connect to store server nodex:29500: cannot resolve 'nodex': Name or service not known>".into()];
        let until = std::time::UNIX_EPOCH + Duration::from_secs(86_400 * 3 + 6 * 3600 + 31 * 60 + 5);
        let line = progress_line(&env, "rank 0", &keys, Duration::from_secs(295), until);
        assert!(
            line.starts_with("mcore_init: rank 1: cannot resolve MASTER_ADDR 'nodex' (Name or service not known); ")
                && line.ends_with("(retrying until 06:31:05 UTC, 295 s left)"),
            "{line}"
        );
    }

    /// Set by [`a_rank_that_cannot_reach_the_store_says_so_every_few_seconds`] in the process it
    /// starts: run [`unreachable_store_child`] there.
    const UNREACHABLE_CHILD: &str = "MCORE_TEST_UNREACHABLE_STORE_CHILD";

    #[test]
    fn unreachable_store_child() {
        if std::env::var_os(UNREACHABLE_CHILD).is_none() {
            return;
        }
        let env = LaunchEnv::from_process().unwrap();
        let Err(e) = open_store(&env, Duration::from_secs(7), "mcore_init/test/0/0") else { panic!("opened") };
        println!("CHILD-RESULT {e}");
    }

    /// Rank 1 of 2 whose rank 0 never hosts the store (nothing listens on MASTER_PORT, on
    /// 127.0.0.1): a line on stderr every PROGRESS_EVERY naming the address and until when it
    /// retries, and an error at the timeout (7 s) that names the connect failure, not a store key.
    #[test]
    fn a_rank_that_cannot_reach_the_store_says_so_every_few_seconds() {
        let port = crate::store::tcp::free_port().unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "runtime::launch::store_setup::tests::unreachable_store_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(UNREACHABLE_CHILD, "1")
            .env("RANK", "1")
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("retrying until")).collect();
        assert_eq!(lines.len(), 1, "one progress line in 7 s:\n{stderr}");
        assert!(
            lines[0].starts_with("mcore_init: rank 1: cannot reach the rendezvous store of rank 0 at '127.0.0.1':")
                && lines[0].contains(&format!(":{port} (")),
            "{stderr}"
        );
        let result = stdout
            .lines()
            .find_map(|l| l.split_once("CHILD-RESULT ").map(|(_, r)| r))
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(result.contains("timed out after 7.") && result.contains(": connect to store server"), "{result}");
        assert!(!result.contains("store key"), "{result}");
    }

    /// Set by [`a_host_name_that_binds_every_interface_is_said_on_stderr`] in the process it
    /// starts: run [`host_name_bind_child`] there.
    const HOST_NAME_CHILD: &str = "MCORE_TEST_HOST_NAME_BIND_CHILD";

    #[test]
    fn host_name_bind_child() {
        if std::env::var_os(HOST_NAME_CHILD).is_none() {
            return;
        }
        let s = host_server("no-such-host.invalid", 0, None, None, None).unwrap();
        println!("CHILD-BOUND {}", s.local_addr());
    }

    /// A host-name MASTER_ADDR makes the store bind every interface: stderr says so, naming the
    /// variable that narrows it.
    #[test]
    fn a_host_name_that_binds_every_interface_is_said_on_stderr() {
        let run = |test: &str| {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", test, "--nocapture", "--test-threads", "1"])
                .env(HOST_NAME_CHILD, "1")
                .output()
                .unwrap();
            (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
        };
        let (stdout, stderr) = run("runtime::launch::store_setup::tests::host_name_bind_child");
        assert!(stdout.contains("CHILD-BOUND 0.0.0.0:"), "{stdout}\n{stderr}");
        assert!(
            stderr.contains("MASTER_ADDR='no-such-host.invalid' is a host name")
                && stderr.contains("binds every interface")
                && stderr.contains(STORE_BIND_ENV),
            "{stderr}"
        );
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
        let port = crate::store::tcp::free_port().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "runtime::launch::store_setup::tests::store_bind_child",
                "--nocapture",
                "--test-threads",
                "1",
            ])
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
