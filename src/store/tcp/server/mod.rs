//! The TCPStore server: one event-loop thread (mio over epoll) serves every connection, as torch's
//! libuv server does. One descriptor per connection, a listen backlog of at least 4096, reads
//! buffered per connection, replies queued per connection and written without blocking, so a
//! client that stops reading only fills its own queue. A WAIT whose keys are missing is indexed
//! under each missing key in a set: creating a key costs what its own waiters are, and a WAIT
//! canceled or closed costs its own keys, whatever the number of other waiters.
//!
//! No request can kill or stall the server; every bound is a [`ServerLimits`] field:
//! - data: values (APPEND results included) by [`wire::MAX_VALUE_LEN`], the bytes of all keys and
//!   values by `max_store_bytes` (4 GiB);
//! - everything held (data, buffered requests, unsent replies, parked WAITs) by
//!   `max_memory_bytes` (6 GiB), less 64 KiB per connection (see the field);
//! - one request by `max_request_bytes` (64 MiB); one reply by `max_reply_bytes` (64 MiB): a
//!   MULTI_GET's reply is sized before it is built and refused if larger; unsent replies per
//!   connection by `max_unsent_bytes` (80 MiB), and a connection with 16 MiB unsent is not read
//!   until its client reads;
//! - parked WAIT keys per connection by `max_parked_keys` (262,144);
//! - connections by `max_connections` (262,144) and by the open-file limit less `reserved_fds`
//!   (128). A connection with no request (VALIDATE aside) `idle_timeout` (20 s) after connecting
//!   is closed, as is one whose request stays half-sent that long; at the connection cap, or when
//!   accept runs out of descriptors, the oldest connection that has made no request is evicted
//!   for the new one, else the one quiet the longest of those that proved nothing (neither the
//!   job's secret nor a rank's claim), whatever WAITs it has parked (they end with it), and if
//!   there is none, a spare descriptor accepts and closes the new one (no busy retry on a full
//!   backlog).
//!
//! A request that arrives in pieces is parsed a few times, not once per piece (the parser's
//! `Incomplete` counts the length prefixes still to come). The protocol has no error reply, so a
//! refused request closes that client's connection (as torch's server does for a request over
//! its limits), and the server logs the client's address and the limit crossed to stderr (at
//! most one line per second per kind, the rest counted). `shutdown` (or drop) stops the loop and
//! closes every descriptor.
//!
//! Every query of torch 2.15's `QueryType` is served (docs/wire-protocol.md). The parts:
//! `state` (the data: keys and values, queues, liveness claims, the parked waiters; it imports
//! none of the others), `event_loop` (accepting, reading, flushing, closing, the bounds per
//! connection), and the requests it serves: `dispatch` (one arm per key-value query), `queues`
//! (QUEUE_PUSH/POP/LEN, LIST_KEYS and BARRIER) and `claims` (CLAIM, ON_CLOSE, NOTICE and who may
//! write a claimed key). A parked BARRIER arrival is a waiter like a WAIT's, listed under its
//! counter key. With a token (see [`super::auth`]) a
//! connection is served only once it proves it holds it.

mod claims;
mod dispatch;
mod event_loop;
mod queues;
mod state;

use crate::lock::Unpoisoned;
use event_loop::{EventLoop, RateLog};
use state::State;

use super::auth::{ServerAuth, StoreToken};
use super::wire;
use crate::store::StoreError;
use mio::net::TcpListener;
use mio::{Interest, Poll, Token, Waker};
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Listen backlog asked for; the kernel clamps it to `net.core.somaxconn` (4096 by default on
/// Linux 5.4 and later). torch's libuv server asks for `somaxconn` too.
const BACKLOG: i32 = 65_535;
/// Most bytes read from one connection per turn of the loop (fairness between connections).
const READ_BUDGET: usize = 256 * 1024;
/// A connection whose queued replies exceed this is not read until they drain below it: a client
/// that sends without reading cannot grow the server's memory without bound.
const WRITE_HIGH_WATER: usize = 16 * 1024 * 1024;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
const FIRST_CONN: usize = 2;

/// A connection holding at most this many bytes (request, unsent replies, parked waits) is
/// served even when the memory budget is spent, so that hogs are refused but ordinary clients
/// are not; the budget is exceeded by at most this much per connection.
const SMALL_HOLD: usize = 64 * 1024;

/// Bounds on what clients can make the server hold. A request that would cross one closes its
/// connection (the protocol has no error reply); the server logs the client and the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Most bytes of keys plus values stored at once (default 4 GiB).
    pub max_store_bytes: u64,
    /// Most bytes the server holds in all (default 6 GiB): stored keys and values (plus 64
    /// bytes per key), connections' buffered requests and unsent replies (their buffers'
    /// capacity, plus 512 bytes per connection), parked WAITs (96 bytes each, 48 per key, and
    /// each waited-for key's bytes). A request, reply or WAIT that would cross it is refused,
    /// unless its connection holds at most 64 KiB with it (ordinary clients stay served while
    /// hogs are refused).
    pub max_memory_bytes: u64,
    /// Most open client connections (default 262,144). At the cap a new connection evicts the
    /// oldest one that has made no request, else the one quiet the longest of those that proved
    /// nothing (neither the job's secret nor a rank's claim; its parked WAITs end with it); with
    /// none to evict it is accepted and closed at once. The open-file limit less
    /// [`ServerLimits::reserved_fds`] caps it too.
    pub max_connections: usize,
    /// Descriptors left to the rest of the process (default 128): the server holds at most
    /// `RLIMIT_NOFILE` minus this many connections, so that a flood of connections cannot
    /// starve its host (a rank's own communicators) of descriptors.
    pub reserved_fds: usize,
    /// Most bytes of one request buffered per connection (default 64 MiB, the protocol's
    /// [`wire::MAX_REQUEST_LEN`]).
    pub max_request_bytes: usize,
    /// Most bytes of one reply (default 64 MiB): a MULTI_GET (or GET) whose reply would be
    /// larger is refused before its reply is built.
    pub max_reply_bytes: usize,
    /// Most reply bytes queued unsent per connection (default 80 MiB). A connection is not read
    /// while 16 MiB or more of its replies are unsent (its client does not read them).
    pub max_unsent_bytes: usize,
    /// Most keys of parked WAITs per connection, each WAIT counting its missing keys (default
    /// 262,144).
    pub max_parked_keys: usize,
    /// A connection that has made no request (VALIDATE aside) this long after connecting is
    /// closed, as is one whose request stays half-sent this long (default 20 s).
    pub idle_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_store_bytes: 4 << 30,
            max_memory_bytes: 6 << 30,
            max_connections: 262_144,
            reserved_fds: 128,
            max_request_bytes: wire::MAX_REQUEST_LEN,
            max_reply_bytes: 64 << 20,
            max_unsent_bytes: 80 << 20,
            max_parked_keys: 262_144,
            idle_timeout: Duration::from_secs(20),
        }
    }
}

/// A TCPStore server, wire-compatible with torch's (see the module docs).
pub struct TcpStoreServer {
    stop: Arc<AtomicBool>,
    /// Set once new connections must prove the job's secret (see [`Self::serve_only_holders`]).
    close: Arc<AtomicBool>,
    /// The job's rank counters (see [`Self::expect_ranks`]).
    ranks: JobRanks,
    /// Requests served so far (see [`Self::requests_served`]).
    served: Arc<std::sync::atomic::AtomicU64>,
    waker: Arc<Waker>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

fn listen(a: &SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(*a), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    if a.is_ipv6() {
        s.set_only_v6(false).or_else(|_| s.set_only_v6(true))?;
    }
    s.bind(&(*a).into())?;
    s.listen(BACKLOG)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

impl TcpStoreServer {
    /// Listen on `host:port` (port 0: a free port, see [`TcpStoreServer::port`]) with the
    /// default [`ServerLimits`].
    pub fn bind(host: &str, port: u16) -> Result<TcpStoreServer, StoreError> {
        Self::bind_with_limits(host, port, ServerLimits::default())
    }

    /// Listen on `host:port` with the given limits.
    pub fn bind_with_limits(host: &str, port: u16, limits: ServerLimits) -> Result<TcpStoreServer, StoreError> {
        Self::bind_with_token(host, port, limits, None)
    }

    /// Listen on `host:port` with the given limits; with a `token`, serve only clients that prove
    /// they hold it (see [`super::auth`]), refusing every other (torch's clients included).
    pub fn bind_with_token(
        host: &str,
        port: u16,
        limits: ServerLimits,
        token: Option<StoreToken>,
    ) -> Result<TcpStoreServer, StoreError> {
        Self::bind_inner(host, port, limits, token.map(|t| (t, None)))
    }

    /// Listen on `host:port` with the job's own secret `session`: until
    /// [`Self::serve_only_holders`] a client may prove it or not (torch's clients are served as
    /// without a token); from then on only new connections that prove it are served.
    /// `job` (the job's id) is sent to the clients it refuses then, so that a rank of another
    /// job can name both.
    pub fn bind_with_session(
        host: &str,
        port: u16,
        limits: ServerLimits,
        session: StoreToken,
        job: &str,
    ) -> Result<TcpStoreServer, StoreError> {
        Self::bind_inner(host, port, limits, Some((session, Some(job.as_bytes().to_vec()))))
    }

    /// The liveness counters of the job's ranks are `<prefix>/alive/<r>` for `r < world`: a CLAIM
    /// of one of them is answered with the job's secret (given to [`Self::bind_with_session`]),
    /// and its connection counts as the rank's own. The secret is stored under no key: a client
    /// learns it only by claiming a rank's counter, and a rank whose counter another client
    /// claimed first fails its initialization naming that client. Call it before the ranks
    /// connect (before the attempt is marked open). No effect on a server without a job's secret.
    pub fn expect_ranks(&self, prefix: &str, world: u32) {
        *self.ranks.locked() = Some((format!("/{prefix}/alive/").into_bytes(), world));
    }

    /// New connections must prove the secret given to [`Self::bind_with_session`] from now on,
    /// and every connection made before is closed unless it is one of the job's ranks' own: it
    /// proved the secret, or it holds the claim of one of the job's rank counters (see
    /// [`Self::expect_ranks`]). Used once a job's initialization is over: its ranks hold the
    /// job's secret, outsiders do not, whether or not they were there during it. No effect on a
    /// server without one.
    pub fn serve_only_holders(&self) {
        self.close.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }

    /// `token`: the secret and, for a job's own (optional until [`Self::serve_only_holders`]),
    /// the job's id.
    fn bind_inner(
        host: &str,
        port: u16,
        limits: ServerLimits,
        token: Option<(StoreToken, Option<Vec<u8>>)>,
    ) -> Result<TcpStoreServer, StoreError> {
        let auth = token
            .map(|(t, job)| match job {
                Some(job) => ServerAuth::session(t, &job),
                None => ServerAuth::new(t),
            })
            .transpose()
            .map_err(|e| StoreError::Io(format!("seed the store server's nonces from /dev/urandom: {e}")))?;
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| {
                StoreError::InvalidArgument(format!("cannot resolve store host {}: {e}", crate::quote::quoted(host)))
            })?
            .collect();
        let mut last = None;
        let mut listener = None;
        for a in &addrs {
            match listen(a) {
                Ok(l) => {
                    listener = Some(l);
                    break;
                }
                Err(e) if e.kind() == ErrorKind::AddrInUse => {
                    return Err(StoreError::InvalidArgument(format!(
                        "port {port} is already in use on {host} ({a}): {e}"
                    )))
                }
                Err(e) => last = Some(e),
            }
        }
        let listener = listener.ok_or_else(|| match last {
            Some(e) => StoreError::Io(format!("bind store server on {host}:{port}: {e}")),
            None => {
                StoreError::InvalidArgument(format!("store host {} resolves to no address", crate::quote::quoted(host)))
            }
        })?;
        let addr = listener.local_addr().map_err(|e| StoreError::Io(format!("local address of {host}:{port}: {e}")))?;
        let io = |what: &str, e: std::io::Error| StoreError::Io(format!("{what} for the store server on {addr}: {e}"));
        let poll = Poll::new().map_err(|e| io("create the event loop", e))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(|e| io("create the waker", e))?);
        let mut listener = TcpListener::from_std(listener);
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|e| io("register the listener", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let close = Arc::new(AtomicBool::new(false));
        let ranks = JobRanks::default();
        let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut ev = EventLoop {
            close: Arc::clone(&close),
            ranks: Arc::clone(&ranks),
            served: Arc::clone(&served),
            auth,
            poll,
            listener,
            stop: stop.clone(),
            limits,
            conns: Vec::new(),
            free: Vec::new(),
            live: 0,
            state: State::default(),
            dirty: Vec::new(),
            again: Vec::new(),
            log: RateLog::default(),
            buffered: 0,
            fresh: VecDeque::new(),
            next_serial: 0,
            spare: std::fs::File::open("/dev/null").ok(),
            next_sweep: Instant::now() + SWEEP_EVERY,
            cap: 1,
            turn_big: 0,
            turn_start: Instant::now(),
        };
        ev.cap = ev.connection_cap();
        let thread = std::thread::Builder::new()
            .name(format!("store-server-{}", addr.port()))
            .spawn(move || ev.run())
            .map_err(|e| io("spawn the thread", e))?;
        Ok(TcpStoreServer { stop, close, ranks, served, waker, addr, thread: Some(thread) })
    }

    /// Requests (GET, SET, WAIT, ... each counted once, when answered or parked) this server
    /// has served so far, from every client.
    pub fn requests_served(&self) -> u64 {
        self.served.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop the loop, close every connection and the listener, and join the thread. Idempotent.
    pub fn shutdown(&mut self) {
        let Some(t) = self.thread.take() else { return };
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        let _ = t.join();
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Bytes charged to the memory budget for one parked WAIT and for each of its keys (the waiter,
/// its index entries, the connection's list), besides a key's bytes the first time it is indexed.
const WAITER_COST: u64 = 96;
const WAIT_KEY_COST: u64 = 48;
/// Bytes charged per stored key besides its key and value (the hash table entry).
const ENTRY_COST: u64 = 64;
/// Bytes charged per connection besides its buffers.
const CONN_COST: u64 = 512;

/// The prefix of the job's rank counters (`/<attempt>/alive/`, as on the wire) and the world
/// size, once the host said (see [`TcpStoreServer::expect_ranks`]).
type JobRanks = Arc<std::sync::Mutex<Option<(Vec<u8>, u32)>>>;

/// What to do with a connection after a request.
enum Next {
    Continue,
    Close(String),
    /// Not served now (this turn's share of big replies is spent): serve it again next turn.
    Defer,
}

/// Bytes of big replies built per turn of the loop, at most (one more reply may cross it).
const TURN_BIG_REPLIES: usize = 8 * 1024 * 1024;
/// Waiters woken, and waiters removed, per turn of the loop at most (each a few hash-table
/// operations: a few milliseconds a turn).
const BACKLOG_SHARE: usize = 4096;
/// Requests served per visit of a connection at most (a few hundred microseconds).
const VISIT_REQUESTS: usize = 512;
/// How often idle and stalled connections are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
