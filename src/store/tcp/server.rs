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
//!   for the new one, and if there is none, a spare descriptor accepts and closes the new one
//!   (no busy retry on a full backlog).
//!
//! A request that arrives in pieces is parsed a few times, not once per piece (the parser's
//! `Incomplete` counts the length prefixes still to come). The protocol has no error reply, so a
//! refused request closes that client's connection (as torch's server does for a request over
//! its limits), and the server logs the client's address and the limit crossed to stderr (at
//! most one line per second per kind, the rest counted). `shutdown` (or drop) stops the loop and
//! closes every descriptor.
//!
//! Every query of torch 2.15's `QueryType` is served (docs/wire-protocol.md): the key-value ones
//! here, QUEUE_PUSH/POP/LEN, LIST_KEYS and BARRIER in `queues` (this module's child), which also
//! tells CHECK and WAIT that a non-empty queue counts as a present key. A parked BARRIER arrival
//! is a waiter like a WAIT's, listed under its counter key. With a token (see [`super::auth`]) a
//! connection is served only once it proves it holds it.

mod queues;

use super::auth::{self, ConnAuth, ServerAuth, Step, StoreToken};
use super::wire::{self, Frame, Request};
use crate::store::StoreError;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::io::{ErrorKind, Read, Write};
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
    /// Most open client connections (default 262,144); more are accepted and closed at once,
    /// after evicting the oldest connection that has made no request, if any. The open-file
    /// limit less [`ServerLimits::reserved_fds`] caps it too.
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

    /// New connections must prove the secret given to [`Self::bind_with_session`] from now on;
    /// connections already made (those that sent a first byte) go on. Used once a job's
    /// initialization is over: its ranks hold the job's secret, outsiders do not. No effect on a
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
        let mut ev = EventLoop {
            close: Arc::clone(&close),
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
        Ok(TcpStoreServer { stop, close, waker, addr, thread: Some(thread) })
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

/// A WAIT parked until its keys exist.
struct Waiter {
    id: u64,
    conn: usize,
    /// Keys missing when it parked (shared with the index); listed under each in
    /// `State::waiting` until created.
    keys: Vec<Arc<[u8]>>,
    /// How many of `keys` are still missing.
    missing: usize,
}

/// Bytes charged to the memory budget for one parked WAIT and for each of its keys (the waiter,
/// its index entries, the connection's list), besides a key's bytes the first time it is indexed.
const WAITER_COST: u64 = 96;
const WAIT_KEY_COST: u64 = 48;
/// Bytes charged per stored key besides its key and value (the hash table entry).
const ENTRY_COST: u64 = 64;
/// Bytes charged per connection besides its buffers.
const CONN_COST: u64 = 512;

/// The parked waiters in a slab: an id is its slot (low 32 bits) and a count of the waiters
/// parked before it (high 32 bits, so an id recurs only after 4 billion WAITs). Growing it copies
/// a vector once in a while; a hash table of 250,000 waiters took tens of milliseconds to rehash.
#[derive(Default)]
struct Waiters {
    slots: Vec<Option<Waiter>>,
    free: Vec<u32>,
    count: u32,
}

impl Waiters {
    /// The id the next [`Waiters::insert`] must use.
    fn next_id(&mut self) -> u64 {
        self.count = self.count.wrapping_add(1);
        let slot = self.free.last().map_or(self.slots.len() as u64, |s| u64::from(*s));
        (u64::from(self.count) << 32) | (slot & 0xFFFF_FFFF)
    }
    /// Store `w` under `id` (from [`Waiters::next_id`], nothing inserted in between).
    fn insert(&mut self, id: u64, w: Waiter) {
        let slot = (id & 0xFFFF_FFFF) as usize;
        if self.free.last().is_some_and(|s| *s as usize == slot) {
            self.free.pop();
            self.slots[slot] = Some(w);
        } else {
            self.slots.push(Some(w));
        }
    }
    fn get_mut(&mut self, id: u64) -> Option<&mut Waiter> {
        self.slots.get_mut((id & 0xFFFF_FFFF) as usize)?.as_mut().filter(|w| w.id == id)
    }
    fn remove(&mut self, id: u64) -> Option<Waiter> {
        let slot = (id & 0xFFFF_FFFF) as usize;
        let s = self.slots.get_mut(slot)?;
        if s.as_ref()?.id != id {
            return None;
        }
        self.free.push(slot as u32);
        s.take()
    }
}

/// Hashing of waiter ids (numbered by the server, so no client chooses them): a multiply, far
/// cheaper than SipHash when a table of 250,000 waiters grows or is walked.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Ids = std::hash::BuildHasherDefault<IdHasher>;

#[derive(Default)]
struct State {
    map: HashMap<Vec<u8>, Vec<u8>>,
    /// Bytes of all keys and values in `map`, and of the queues (see `queues`).
    bytes: u64,
    /// QUEUE_* state; LIST_KEYS and BARRIER are served there too.
    queues: queues::Queues,
    waiters: Waiters,
    /// Key -> ids of the waiters parked on it: a WAIT under each key missing when it parked, a
    /// BARRIER arrival under its (existing) counter key (see `queues`). An ordered set: a
    /// canceled or closed waiter leaves in time logarithmic in the others, and a QUEUE_PUSH
    /// releases the oldest waiter first (ids grow with each park, see [`Waiters`]).
    waiting: HashMap<Arc<[u8]>, BTreeSet<u64>>,
    /// Bytes charged for the parked waiters and their index.
    wait_bytes: u64,
    /// Waiters one of whose keys was created, not yet counted (see [`EventLoop::backlogs`]).
    woken: VecDeque<u64>,
    /// Waiters canceled or closed, not yet removed from the index (see [`EventLoop::backlogs`]).
    doomed: Vec<u64>,
}

impl State {
    /// Bytes the store would hold with `key` set to a value of `len` bytes.
    fn bytes_with(&self, key: &[u8], len: usize) -> u64 {
        match self.map.get(key) {
            Some(v) => self.bytes - v.len() as u64 + len as u64,
            None => self.bytes + (key.len() + len) as u64,
        }
    }

    /// Bytes charged to the memory budget for the data and the waiters.
    fn charged(&self) -> u64 {
        self.bytes + ENTRY_COST * self.map.len() as u64 + self.wait_bytes
    }

    /// Set `key`. When it was missing, its waiters move to [`State::woken`], served a share per
    /// turn of the loop (those parked on an existing key, BARRIER arrivals, are released by
    /// [`EventLoop::written`]).
    fn insert(&mut self, key: &[u8], value: Vec<u8>) {
        self.bytes = self.bytes_with(key, value.len());
        if let Some(v) = self.map.get_mut(key) {
            *v = value;
            return;
        }
        self.map.insert(key.to_vec(), value);
        let Some(ids) = self.waiting.remove(key) else { return };
        self.wait_bytes -= key.len() as u64;
        self.woken.extend(ids);
    }

    /// One of waiter `id`'s keys was created: the (connection, key count) of the waiter if that
    /// was its last missing key (it is then forgotten).
    fn key_created(&mut self, id: u64) -> Option<(usize, usize)> {
        let w = self.waiters.get_mut(id)?;
        w.missing -= 1;
        if w.missing > 0 {
            return None;
        }
        let w = self.waiters.remove(id)?;
        self.wait_bytes -= WAITER_COST + WAIT_KEY_COST * w.keys.len() as u64;
        Some((w.conn, w.keys.len()))
    }

    fn remove(&mut self, key: &[u8]) -> bool {
        match self.map.remove(key) {
            Some(v) => {
                self.bytes -= (key.len() + v.len()) as u64;
                true
            }
            None => false,
        }
    }

    /// Bytes parking a waiter for `missing` would charge.
    fn park_cost(&self, missing: &[&[u8]]) -> u64 {
        let new_keys: u64 = missing.iter().filter(|k| !self.waiting.contains_key(**k)).map(|k| k.len() as u64).sum();
        WAITER_COST + WAIT_KEY_COST * missing.len() as u64 + new_keys
    }

    /// Park a waiter for `missing` keys (not empty, no duplicates); returns its id.
    fn park(&mut self, conn: usize, missing: &[&[u8]]) -> u64 {
        let id = self.waiters.next_id();
        self.wait_bytes += self.park_cost(missing);
        let mut keys = Vec::with_capacity(missing.len());
        for k in missing {
            let shared = match self.waiting.get_key_value(*k) {
                Some((shared, _)) => shared.clone(),
                None => Arc::from(*k),
            };
            self.waiting.entry(shared.clone()).or_default().insert(id);
            keys.push(shared);
        }
        self.waiters.insert(id, Waiter { id, conn, keys, missing: missing.len() });
        id
    }

    /// Forget waiter `id` (canceled, or its connection closed), in time proportional to its keys.
    fn unpark(&mut self, id: u64) {
        let Some(w) = self.waiters.remove(id) else { return };
        self.wait_bytes -= WAITER_COST + WAIT_KEY_COST * w.keys.len() as u64;
        // Keys created since have no set left (or a new one without this id).
        for k in w.keys {
            if let Some(ids) = self.waiting.get_mut(&k) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.waiting.remove(&k);
                    self.wait_bytes -= k.len() as u64;
                }
            }
        }
    }
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    rbuf: Vec<u8>,
    /// Least length `rbuf` needs before the next request can parse.
    need: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Ids of this connection's parked waiters.
    waits: HashSet<u64, Ids>,
    /// Keys of this connection's parked waiters, in all.
    wait_keys: usize,
    /// The peer closed its side: serve what arrived, then close.
    eof: bool,
    in_dirty: bool,
    /// Listed in `EventLoop::again` (listed once however often it is deferred).
    in_again: bool,
    /// It made a request other than VALIDATE: never dropped as idle.
    served: bool,
    accepted: Instant,
    /// When bytes last arrived.
    heard: Instant,
    /// Which connection this is (slots are reused; `EventLoop::fresh` names connections by it).
    serial: u64,
    /// Bytes of its buffers charged to the memory budget.
    charged: u64,
    /// Where the connection is in the token exchange ([`ConnAuth::Done`] without a token).
    auth: ConnAuth,
    /// Appended (value to key) when the client's side closes: see [`wire::Query::OnClose`].
    on_close: Option<(Vec<u8>, Vec<u8>)>,
}

impl Conn {
    fn queued(&self) -> usize {
        self.wbuf.len() - self.wpos
    }
    /// Bytes this connection holds for requests not served yet and replies not sent yet.
    fn held(&self) -> usize {
        let waits = self.waits.len() as u64 * WAITER_COST + self.wait_keys as u64 * WAIT_KEY_COST;
        self.rbuf.len() + self.queued() + waits as usize + self.on_close_len()
    }
    /// Bytes of its close notice (see [`Conn::on_close`]).
    fn on_close_len(&self) -> usize {
        self.on_close.as_ref().map_or(0, |(k, v)| k.len() + v.len())
    }
}

/// stderr lines about refused clients, at most one per second per kind (the rest counted).
#[derive(Default)]
struct RateLog {
    last: HashMap<&'static str, (Instant, u64)>,
}

impl RateLog {
    fn log(&mut self, kind: &'static str, msg: impl FnOnce() -> String) {
        let now = Instant::now();
        let e = self.last.entry(kind).or_insert((now - Duration::from_secs(2), 0));
        if now.duration_since(e.0) >= Duration::from_secs(1) {
            let more = if e.1 > 0 { format!(" ({} more like it not shown)", e.1) } else { String::new() };
            eprintln!("mcore_init store server: {}{more}", msg());
            *e = (now, 0);
        } else {
            e.1 += 1;
        }
    }
}

struct EventLoop {
    poll: Poll,
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    limits: ServerLimits,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    live: usize,
    state: State,
    /// Connections with replies queued since their last flush.
    dirty: Vec<usize>,
    /// Connections that may have unread input (read budget spent, or paused for their queue).
    again: Vec<usize>,
    log: RateLog,
    /// Bytes of every connection's buffers charged to the memory budget.
    buffered: u64,
    /// Connections that have made no request yet, oldest first (slot, serial); stale entries
    /// (closed or served since) are skipped when met.
    fresh: VecDeque<(usize, u64)>,
    next_serial: u64,
    /// A descriptor kept in reserve: when accept fails for want of descriptors (EMFILE) and no
    /// idle connection can be evicted, it is closed to accept and close one pending connection
    /// (the client sees a reset and retries), so the loop does not spin on a full backlog.
    spare: Option<std::fs::File>,
    next_sweep: Instant,
    /// Bytes of big replies (over 64 KiB) built in this turn of the loop.
    turn_big: usize,
    /// When this turn of the loop began (the clock of idle and stalled connections).
    turn_start: Instant,
    /// [`EventLoop::connection_cap`] as last computed.
    cap: usize,
    /// The token and nonce source when clients must prove they hold the token.
    auth: Option<ServerAuth>,
    /// Set when the optional secret becomes required ([`TcpStoreServer::serve_only_holders`]).
    close: Arc<AtomicBool>,
}

/// What to do with a connection after a request.
enum Next {
    Continue,
    Close(String),
    /// Not served now (this turn's share of big replies is spent): serve it again next turn.
    Defer,
}

fn parse_counter(v: &[u8]) -> Option<i64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// The soft limit on open descriptors of this process (`RLIMIT_NOFILE`, from
/// /proc/self/limits: this module has no unsafe code), if known.
fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
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

impl EventLoop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(4096);
        let mut accept_again: Option<Duration> = None;
        let mut scratch = vec![0u8; 64 * 1024];
        while !self.stop.load(Ordering::SeqCst) {
            self.turn_big = 0;
            let now = Instant::now();
            self.turn_start = now;
            if now >= self.next_sweep {
                self.cap = self.connection_cap();
                self.sweep(now);
                self.next_sweep = now + SWEEP_EVERY;
            }
            let timeout = if !self.again.is_empty() || !self.state.woken.is_empty() || !self.state.doomed.is_empty() {
                Some(Duration::ZERO)
            } else if let Some(d) = accept_again {
                Some(d)
            } else if self.live > 0 {
                Some(self.next_sweep.saturating_duration_since(now))
            } else {
                None
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("mcore_init store server: event loop failed: {e}; the server stops");
                return;
            }
            self.require_later_token();
            if accept_again.is_some() || events.iter().any(|e| e.token() == LISTENER) {
                accept_again = self.accept();
            }
            for e in events.iter() {
                let t = e.token().0;
                if t < FIRST_CONN {
                    continue;
                }
                let i = t - FIRST_CONN;
                if e.is_writable() {
                    self.flush(i);
                }
                if e.is_readable() || e.is_read_closed() || e.is_error() {
                    // Stopping at a short read is safe only if the peer's close is not already
                    // behind this event (a later close raises an event of its own).
                    self.read(i, &mut scratch, !(e.is_read_closed() || e.is_error()));
                }
            }
            // Connections left with work (by the last turn or by these events) get one more
            // visit: a turn visits each connection at most twice (round robin).
            for i in std::mem::take(&mut self.again) {
                if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                    c.in_again = false;
                }
                self.read(i, &mut scratch, false);
            }
            self.backlogs();
            for i in std::mem::take(&mut self.dirty) {
                if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                    c.in_dirty = false;
                }
                self.flush(i);
            }
        }
    }

    /// Most connections served at once: the limit, and the open-file limit less the descriptors
    /// left to the rest of the process (read again at every sweep: the process may raise it).
    fn connection_cap(&self) -> usize {
        let fds = open_file_limit().map_or(usize::MAX, |n| n.saturating_sub(self.limits.reserved_fds as u64) as usize);
        self.limits.max_connections.min(fds).max(1)
    }

    /// Close the oldest connection that has made no request. Whether there was one.
    fn evict_idle(&mut self, why: &str) -> bool {
        while let Some((i, serial)) = self.fresh.pop_front() {
            let idle = self.conns.get(i).and_then(Option::as_ref).is_some_and(|c| c.serial == serial && !c.served);
            if idle {
                self.close_as(i, "idle", format!("no request since it connected, evicted {why}"));
                return true;
            }
        }
        false
    }

    /// Drop connections that made no request within the idle timeout, and those whose request
    /// stopped arriving half-sent for as long.
    fn sweep(&mut self, now: Instant) {
        let window = self.limits.idle_timeout;
        while let Some(&(i, serial)) = self.fresh.front() {
            let Some(c) = self.conns.get(i).and_then(Option::as_ref).filter(|c| c.serial == serial && !c.served) else {
                self.fresh.pop_front();
                continue;
            };
            if now.duration_since(c.accepted) < window {
                break;
            }
            self.fresh.pop_front();
            let secs = window.as_secs_f64();
            self.close_as(i, "idle", format!("no request within {secs:.0} s of connecting (the idle timeout)"));
        }
        let stalled: Vec<usize> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
            .filter(|(_, c)| !c.rbuf.is_empty() && c.rbuf.len() < c.need && now.duration_since(c.heard) >= window)
            .map(|(i, _)| i)
            .collect();
        for i in stalled {
            let secs = window.as_secs_f64();
            self.close_as(i, "stalled", format!("a request left half-sent for {secs:.0} s (the idle timeout)"));
        }
    }

    /// Accept until the backlog is empty; `Some(pause)`: the backlog may hold more, accept
    /// again after `pause` (none: more this turn's share; 10 ms: out of descriptors).
    fn accept(&mut self) -> Option<Duration> {
        let cap = self.cap;
        // At most half the cap per turn: connections accepted earlier get their first request
        // read before a flood of new ones could evict them as idle.
        for _ in 0..cap.div_ceil(2) {
            match self.listener.accept() {
                Ok((mut stream, peer)) => {
                    if self.live >= cap && !self.evict_idle("for a new connection at the connection limit") {
                        self.log.log("connections", || {
                            format!("refused client {peer}: at the limit of {cap} connections (connection closed)")
                        });
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let i = self.free.pop().unwrap_or_else(|| {
                        self.conns.push(None);
                        self.conns.len() - 1
                    });
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    if let Err(e) = self.poll.registry().register(&mut stream, Token(i + FIRST_CONN), interest) {
                        self.log.log("register", || format!("cannot serve client {peer}: {e}"));
                        self.free.push(i);
                        continue;
                    }
                    self.live += 1;
                    self.next_serial += 1;
                    let now = self.turn_start;
                    self.conns[i] = Some(Conn {
                        stream,
                        peer,
                        rbuf: Vec::new(),
                        need: 1,
                        wbuf: Vec::new(),
                        wpos: 0,
                        waits: HashSet::default(),
                        wait_keys: 0,
                        eof: false,
                        in_dirty: false,
                        in_again: false,
                        served: false,
                        accepted: now,
                        heard: now,
                        serial: self.next_serial,
                        charged: CONN_COST,
                        auth: self.auth.as_ref().map_or(ConnAuth::Open, ServerAuth::first_state),
                        on_close: None,
                    });
                    self.buffered += CONN_COST;
                    self.fresh.push_back((i, self.next_serial));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    // EMFILE/ENFILE/ENOBUFS: make room by evicting an idle connection, else
                    // refuse one pending connection with the spare descriptor.
                    if self.evict_idle("for a new connection: out of descriptors") {
                        continue;
                    }
                    if let Some(spare) = self.spare.take() {
                        drop(spare);
                        if let Ok((s, peer)) = self.listener.accept() {
                            drop(s);
                            self.log.log("accept", || {
                                format!("refused client {peer}: out of descriptors ({e}; connection closed)")
                            });
                        }
                        self.spare = std::fs::File::open("/dev/null").ok();
                        if self.spare.is_some() {
                            continue;
                        }
                    }
                    self.log.log("accept", || format!("cannot accept connections: {e} (retrying)"));
                    return Some(Duration::from_millis(10));
                }
            }
        }
        // The turn's share is spent: come back after serving what arrived.
        Some(Duration::ZERO)
    }

    /// Close connection `i`: `why` the server refuses it (logged), none when the client's side
    /// went (its end of the stream, or an error on its socket).
    fn close(&mut self, i: usize, why: Option<String>) {
        match why {
            Some(why) => self.close_as(i, "refused", why),
            None => self.drop_conn(i, true),
        }
    }

    /// Close connection `i`, logging (rate-limited per `kind`) the client and `why`.
    fn close_as(&mut self, i: usize, kind: &'static str, why: String) {
        let Some(peer) = self.conns.get(i).and_then(Option::as_ref).map(|c| c.peer) else { return };
        self.log.log(kind, || format!("closed the connection of client {peer}: {why}"));
        self.drop_conn(i, false);
    }

    /// Forget connection `i`. `client_gone`: the client's side closed (not a refusal, an idle
    /// eviction or a stall by the server), so its close notice ([`Conn::on_close`]) is appended:
    /// only a client's death is news to whoever watches it.
    fn drop_conn(&mut self, i: usize, client_gone: bool) {
        let Some(mut c) = self.conns.get_mut(i).and_then(Option::take) else { return };
        self.state.doomed.extend(c.waits.drain());
        let _ = self.poll.registry().deregister(&mut c.stream);
        self.buffered -= c.charged;
        self.live -= 1;
        self.free.push(i);
        if let (true, Some((k, v))) = (client_gone, c.on_close.take()) {
            if let Err(why) = self.append(&k, &v, None) {
                let peer = c.peer;
                self.log.log("on-close", || format!("dropped the close notice of client {peer}: {why}"));
            }
        }
    }

    /// Bytes charged to the memory budget: data, waiters, connections and their buffers.
    fn memory(&self) -> u64 {
        self.state.charged() + self.buffered
    }

    /// Charge connection `i`'s buffers as they are now.
    fn account(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        let now = CONN_COST + (c.rbuf.capacity() + c.wbuf.capacity() + c.on_close_len()) as u64;
        self.buffered = self.buffered - c.charged + now;
        c.charged = now;
    }

    /// Why connection `i` may not hold `more` bytes more (request or reply) on top of what it
    /// holds, if it may not: over the memory budget (a connection holding at most
    /// [`SMALL_HOLD`] bytes is always served, so that a full budget never locks out ordinary
    /// clients), or, for a reply, over the per-request or per-connection reply limits.
    fn refusal(&self, i: usize, more: usize, reply: bool) -> Option<String> {
        let c = self.conns.get(i).and_then(Option::as_ref)?;
        let l = &self.limits;
        if reply && more > l.max_reply_bytes {
            return Some(format!("a reply of {more} bytes, over the limit of {} bytes per request", l.max_reply_bytes));
        }
        if reply && c.queued() + more > l.max_unsent_bytes {
            return Some(format!(
                "{} reply bytes unsent to it, over the limit of {} bytes per connection",
                c.queued() + more,
                l.max_unsent_bytes
            ));
        }
        let total = self.memory() + more as u64;
        if total > l.max_memory_bytes && c.held() + more > SMALL_HOLD {
            return Some(format!(
                "holding {} more bytes for it would make the server hold {total} bytes, over its memory budget of {} \
                 bytes",
                c.held() + more,
                l.max_memory_bytes
            ));
        }
        None
    }

    /// Queue `msg` for connection `i`.
    fn reply(&mut self, i: usize, msg: &[u8]) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        c.wbuf.extend_from_slice(msg);
        if !c.in_dirty {
            c.in_dirty = true;
            self.dirty.push(i);
        }
    }

    /// Queue a reply of `len` bytes built by `build` (which must write exactly `len` bytes),
    /// or refuse it before building it. `deferrable` (a request that changed nothing: GET,
    /// MULTI_GET): a big reply past this turn's share is built on a later turn instead, so that
    /// clients with small requests are answered between the copies of big replies.
    fn reply_with(&mut self, i: usize, len: usize, deferrable: bool, build: impl FnOnce(&State, &mut Vec<u8>)) -> Next {
        if let Some(why) = self.refusal(i, len, true) {
            return Next::Close(why);
        }
        if len > SMALL_HOLD {
            if deferrable && self.turn_big >= TURN_BIG_REPLIES {
                return Next::Defer;
            }
            self.turn_big += len;
        }
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return Next::Continue };
        c.wbuf.reserve(len);
        build(&self.state, &mut c.wbuf);
        if !c.in_dirty {
            c.in_dirty = true;
            self.dirty.push(i);
        }
        self.account(i);
        Next::Continue
    }

    /// Unsent bytes at which a connection is no longer read until its client reads.
    fn pause_at(&self) -> usize {
        WRITE_HIGH_WATER.min(self.limits.max_unsent_bytes / 2).max(1)
    }

    /// Write what connection `i` has queued, without blocking.
    fn flush(&mut self, i: usize) {
        let pause = self.pause_at();
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        let was_full = c.queued() >= pause;
        while c.wpos < c.wbuf.len() {
            match c.stream.write(&c.wbuf[c.wpos..]) {
                Ok(0) => return self.close(i, None),
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.close(i, None),
            }
        }
        if c.wpos == c.wbuf.len() {
            if c.wbuf.capacity() > READ_BUDGET {
                c.wbuf = Vec::new();
            }
            c.wbuf.clear();
            c.wpos = 0;
        } else if c.wpos > c.wbuf.len() / 2 {
            c.wbuf.drain(..c.wpos);
            c.wpos = 0;
            if c.wbuf.capacity() > 2 * c.wbuf.len() + READ_BUDGET {
                c.wbuf.shrink_to(c.wbuf.len() + READ_BUDGET);
            }
        }
        if was_full && c.queued() < pause && !c.in_again {
            c.in_again = true;
            self.again.push(i);
        }
        self.account(i);
    }

    /// Read what connection `i` has (up to the budget) and serve every complete request.
    /// `short_ok`: a short read may end the reading (else read until WouldBlock or the end).
    fn read(&mut self, i: usize, scratch: &mut [u8], short_ok: bool) {
        let pause = self.pause_at();
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        if c.queued() >= pause {
            return; // resumed by flush once the client reads
        }
        let mut got = 0;
        let mut more = false;
        while !c.eof {
            // Enough read for this visit, or enough buffered to serve before reading on.
            if got >= READ_BUDGET || c.rbuf.len() >= c.need.max(READ_BUDGET) {
                more = true;
                break;
            }
            match c.stream.read(scratch) {
                Ok(0) => c.eof = true,
                Ok(n) => {
                    c.rbuf.extend_from_slice(&scratch[..n]);
                    got += n;
                    if short_ok && n < scratch.len() {
                        // A short read emptied the socket: data arriving later raises a new
                        // event, so skip the read that would only say WouldBlock.
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.close(i, None),
            }
        }
        if got > 0 {
            c.heard = self.turn_start;
        }
        if c.auth != ConnAuth::Done && !self.authenticate(i) {
            self.flush(i);
            self.account(i);
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
            if c.auth == ConnAuth::Refused {
                // The refusal is sent; the client sees the end of the stream after it.
                let _ = c.stream.shutdown(std::net::Shutdown::Write);
            }
            if c.eof {
                return self.close(i, None);
            }
            if more && !c.in_again {
                c.in_again = true;
                self.again.push(i);
            }
            return;
        }
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        let mut rbuf = std::mem::take(&mut c.rbuf);
        let (mut pos, mut need) = (0, c.need);
        let mut outcome = Next::Continue;
        let mut served = 0;
        while rbuf.len() - pos >= need {
            if served == VISIT_REQUESTS {
                more = true; // the rest on the next turn
                break;
            }
            served += 1;
            match wire::parse_request(&rbuf[pos..]) {
                Ok(Frame::Incomplete(n)) => need = n,
                Ok(Frame::Complete(req, n)) => {
                    if !matches!(req, Request::Validate(_)) {
                        if let Some(c) = self.conns[i].as_mut() {
                            c.served = true;
                        }
                    }
                    outcome = self.handle(i, req);
                    if matches!(outcome, Next::Defer) {
                        // Served on a later turn, from the same bytes.
                        more = true;
                        break;
                    }
                    pos += n;
                    need = 1;
                    let queued = self.conns[i].as_ref().map_or(0, Conn::queued);
                    if matches!(outcome, Next::Close(_)) || queued >= pause {
                        break;
                    }
                }
                Err(e) => {
                    outcome = Next::Close(format!("{}", e.into_store("the client")));
                    break;
                }
            }
        }
        if matches!(outcome, Next::Continue) && need > self.limits.max_request_bytes {
            outcome = Next::Close(format!(
                "a request of at least {need} bytes, over the limit of {} bytes buffered per connection",
                self.limits.max_request_bytes
            ));
        }
        if let Next::Close(why) = outcome {
            return self.close(i, Some(why));
        }
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        rbuf.drain(..pos);
        if rbuf.capacity() > READ_BUDGET && rbuf.capacity() > 2 * rbuf.len() {
            // A big request is done: do not keep its buffer per connection.
            rbuf.shrink_to(rbuf.len().max(READ_BUDGET / 4));
        }
        c.rbuf = rbuf;
        c.need = need;
        let eof = c.eof;
        self.account(i);
        if let Some(why) = self.refusal(i, 0, false) {
            return self.close(i, Some(why));
        }
        if more {
            if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut).filter(|c| !c.in_again) {
                c.in_again = true;
                self.again.push(i);
            }
            return;
        }
        if eof {
            // Replies to what arrived before the close are flushed first (best effort).
            self.flush(i);
            self.close(i, None);
        }
    }

    /// Once [`TcpStoreServer::serve_only_holders`] was called: new connections, and those that
    /// have not sent a byte yet, must prove the secret.
    fn require_later_token(&mut self) {
        if !self.close.swap(false, Ordering::SeqCst) {
            return;
        }
        let Some(a) = self.auth.as_mut().filter(|a| a.optional) else { return };
        a.require();
        for c in self.conns.iter_mut().flatten() {
            if c.auth == ConnAuth::Open && c.rbuf.is_empty() {
                c.auth = ConnAuth::Hello;
            }
        }
    }

    /// Run the token exchange on what connection `i` has read (see [`super::auth`]); whether its
    /// requests may be served now. A refused client's input is discarded until it closes (or
    /// the idle timeout drops it: it never made a request).
    fn authenticate(&mut self, i: usize) -> bool {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return false };
        loop {
            match c.auth {
                ConnAuth::Done => return true,
                ConnAuth::Refused => {
                    c.rbuf = Vec::new();
                    return false;
                }
                ConnAuth::Hello | ConnAuth::Proof(_) | ConnAuth::Open => {}
            }
            let step = match self.auth.as_mut() {
                Some(a) => a.step(&mut c.auth, &c.rbuf),
                None => auth::step_open(&mut c.auth, &c.rbuf),
            };
            match step {
                Step::Need => return false,
                Step::Reply { consumed, reply } => {
                    c.rbuf.drain(..consumed);
                    c.wbuf.extend_from_slice(&reply);
                    if !reply.is_empty() && !c.in_dirty {
                        c.in_dirty = true;
                        self.dirty.push(i);
                    }
                }
                Step::Refuse { reply, why } => {
                    c.wbuf.extend_from_slice(&reply);
                    let peer = c.peer;
                    self.log.log("auth", || format!("refused client {peer}: {why} (connection closed)"));
                }
            }
        }
    }

    /// Serve one request of connection `i`.
    fn handle(&mut self, i: usize, req: Request<'_>) -> Next {
        let max_bytes = self.limits.max_store_bytes;
        let over = |what: &str, key: &[u8], total: u64| {
            Next::Close(format!(
                "{what} to key '{}' would make the store hold {total} bytes, over its limit of {max_bytes} bytes",
                String::from_utf8_lossy(key)
            ))
        };
        match req {
            Request::Validate(m) if m == wire::VALIDATE_MAGIC => {}
            Request::Validate(m) => return Next::Close(format!("bad VALIDATE magic {m:#x}")),
            Request::Ping(nonce) => self.reply(i, &nonce.to_le_bytes()),
            Request::Set(k, v) => {
                let total = self.state.bytes_with(k, v.len());
                if total > max_bytes {
                    return over("SET", k, total);
                }
                if let Some(why) = self.growth_refusal(i, total) {
                    return Next::Close(why);
                }
                self.set(k, v.to_vec());
            }
            Request::CompareSet(k, expected, desired) => {
                let now = match self.state.map.get(k) {
                    None if expected.is_empty() => None,
                    None => Some(expected.to_vec()),
                    Some(cur) if cur.as_slice() == expected => None,
                    Some(cur) => Some(cur.clone()),
                };
                let now = match now {
                    Some(v) => v,
                    None => {
                        let total = self.state.bytes_with(k, desired.len());
                        if total > max_bytes {
                            return over("COMPARE_SET", k, total);
                        }
                        if let Some(why) = self.growth_refusal(i, total) {
                            return Next::Close(why);
                        }
                        self.set(k, desired.to_vec());
                        desired.to_vec()
                    }
                };
                return self.reply_with(i, 8 + now.len(), false, |_, w| put_value(w, Some(&now)));
            }
            Request::Get(k) => {
                let len = 8 + self.state.map.get(k).map_or(0, Vec::len);
                return self.reply_with(i, len, true, |s, w| put_value(w, s.map.get(k)));
            }
            Request::Add(k, delta) => {
                let cur = match self.state.map.get(k) {
                    None => 0,
                    // Not a counter: no error reply exists; close the connection.
                    Some(v) => match parse_counter(v) {
                        Some(n) => n,
                        None => {
                            return Next::Close(format!(
                                "ADD to key '{}' whose value is not an integer",
                                String::from_utf8_lossy(k)
                            ))
                        }
                    },
                };
                let Some(now) = cur.checked_add(delta) else {
                    return Next::Close(format!("ADD {delta} to key '{}' overflows", String::from_utf8_lossy(k)));
                };
                let v = now.to_string().into_bytes();
                let total = self.state.bytes_with(k, v.len());
                if total > max_bytes {
                    return over("ADD", k, total);
                }
                if let Some(why) = self.growth_refusal(i, total) {
                    return Next::Close(why);
                }
                self.set(k, v);
                self.reply(i, &now.to_le_bytes());
            }
            Request::Check(keys) => {
                let ready = keys.iter().all(|k| self.state.present(k));
                self.reply(i, &[if ready { wire::CHECK_READY } else { wire::CHECK_NOT_READY }]);
            }
            Request::Wait(keys) => {
                let mut missing: Vec<&[u8]> = keys.into_iter().filter(|k| !self.state.present(k)).collect();
                missing.sort();
                missing.dedup();
                if missing.is_empty() {
                    self.reply(i, &[wire::STOP_WAITING]);
                } else {
                    let parked = self.conns[i].as_ref().map_or(0, |c| c.wait_keys);
                    let max = self.limits.max_parked_keys;
                    if parked + missing.len() > max {
                        return Next::Close(format!(
                            "a WAIT for {} missing keys on top of {parked} parked, over the limit of {max} parked WAIT \
                             keys per connection",
                            missing.len()
                        ));
                    }
                    if let Some(why) = self.refusal(i, self.state.park_cost(&missing) as usize, false) {
                        return Next::Close(why);
                    }
                    let id = self.state.park(i, &missing);
                    if let Some(c) = self.conns[i].as_mut() {
                        c.waits.insert(id);
                        c.wait_keys += missing.len();
                    }
                }
            }
            Request::CancelWait => {
                // In order on this connection: a STOP_WAITING of a wait that fired is queued before.
                let waits = self.conns[i].as_mut().map(|c| {
                    c.wait_keys = 0;
                    std::mem::take(&mut c.waits)
                });
                // Removed from the index a share per turn; a wake-up of theirs is dropped as they
                // are no longer among the connection's waits.
                self.state.doomed.extend(waits.unwrap_or_default());
                self.reply(i, &[wire::WAIT_CANCELED]);
            }
            Request::GetNumKeys => {
                let n = self.state.map.len() as i64;
                self.reply(i, &n.to_le_bytes());
            }
            Request::DeleteKey(k) => {
                let n = i64::from(self.state.remove(k));
                self.reply(i, &n.to_le_bytes());
            }
            Request::Append(k, v) => {
                if let Err(why) = self.append(k, v, Some(i)) {
                    return Next::Close(why);
                }
            }
            Request::OnClose(k, v) => {
                let now = if k.is_empty() { 0 } else { k.len() + v.len() };
                let was = self.conns[i].as_ref().map_or(0, Conn::on_close_len);
                if now > was {
                    if let Some(why) = self.refusal(i, now - was, false) {
                        return Next::Close(why);
                    }
                }
                if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                    c.on_close = (!k.is_empty()).then(|| (k.to_vec(), v.to_vec()));
                }
                self.account(i);
            }
            Request::MultiGet(keys) => {
                // The reply's size first: one too big is refused before anything is built.
                let len =
                    keys.iter().map(|k| 8 + self.state.map.get(*k).map_or(0, Vec::len)).fold(0, usize::saturating_add);
                return self.reply_with(i, len, true, |s, w| keys.iter().for_each(|k| put_value(w, s.map.get(*k))));
            }
            Request::MultiSet(items) => {
                // All or nothing: check the bytes the whole request would leave first.
                let mut total = self.state.bytes;
                for (k, v) in &items {
                    total = total.saturating_add((k.len() + v.len()) as u64);
                }
                if total > max_bytes {
                    let k = items.first().map_or(&[][..], |x| x.0);
                    return over("MULTI_SET", k, total);
                }
                if let Some(why) = self.growth_refusal(i, total) {
                    return Next::Close(why);
                }
                for (k, v) in items {
                    self.set(k, v.to_vec());
                }
            }
            req @ (Request::QueuePush(..)
            | Request::QueuePop(_)
            | Request::QueueLen(_)
            | Request::ListKeys
            | Request::Barrier(..)) => return self.handle_extended(i, req),
        }
        Next::Continue
    }

    /// Append `v` to the value of `k` (set it when missing), within the limits; the refusal
    /// otherwise. `by`: the connection asking, whose growth the memory budget must allow (none
    /// for a close notice: its bytes were charged to its connection, gone now).
    fn append(&mut self, k: &[u8], v: &[u8], by: Option<usize>) -> Result<(), String> {
        let cur = self.state.map.get(k).map_or(0, Vec::len);
        let len = cur as u64 + v.len() as u64;
        if len > wire::MAX_VALUE_LEN {
            return Err(format!(
                "APPEND of {} bytes to key '{}' would grow its value to {len} bytes, over the limit of {} bytes",
                v.len(),
                String::from_utf8_lossy(k),
                wire::MAX_VALUE_LEN
            ));
        }
        let total = self.state.bytes_with(k, len as usize);
        if total > self.limits.max_store_bytes {
            return Err(format!(
                "APPEND to key '{}' would make the store hold {total} bytes, over its limit of {} bytes",
                String::from_utf8_lossy(k),
                self.limits.max_store_bytes
            ));
        }
        if let Some(why) = by.and_then(|i| self.growth_refusal(i, total)) {
            return Err(why);
        }
        match self.state.map.get_mut(k) {
            Some(cur) => {
                cur.extend_from_slice(v);
                self.state.bytes += v.len() as u64;
                self.written(k);
            }
            None => self.set(k, v.to_vec()),
        }
        Ok(())
    }

    /// Set a key; the waiters it releases are answered by [`EventLoop::backlogs`] (WAITs for it
    /// when it was missing) or by [`EventLoop::written`] (BARRIER arrivals parked on it).
    fn set(&mut self, k: &[u8], v: Vec<u8>) {
        self.state.insert(k, v);
        self.written(k);
    }

    /// A share of the waiters woken (answered when their last key was created) and of those
    /// canceled or closed (removed from the index), so that one SET releasing 250,000 waiters
    /// or one close of a connection with as many stalls no other client for long.
    fn backlogs(&mut self) {
        for _ in 0..BACKLOG_SHARE {
            let Some(id) = self.state.woken.pop_front() else { break };
            let Some((conn, keys)) = self.state.key_created(id) else { continue };
            self.wake(conn, id, keys);
        }
        for _ in 0..BACKLOG_SHARE {
            let Some(id) = self.state.doomed.pop() else { break };
            self.state.unpark(id);
        }
    }

    /// Answer STOP_WAITING to connection `conn` for its waiter `id` (of `keys` keys), released.
    fn wake(&mut self, conn: usize, id: u64, keys: usize) {
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else { return };
        // Not among the connection's waits: canceled (or its connection closed, the slot
        // reused) since; ids are never reused.
        if c.waits.remove(&id) {
            c.wait_keys -= keys;
            // One byte, never refused: a connection has at most `max_parked_keys` pending.
            self.reply(conn, &[wire::STOP_WAITING]);
        }
    }

    /// Why storing data that leaves the store holding `total` bytes of keys and values is
    /// refused by the memory budget, if it is.
    fn growth_refusal(&self, i: usize, total: u64) -> Option<String> {
        let growth = total.saturating_sub(self.state.bytes) + ENTRY_COST;
        self.refusal(i, growth as usize, false)
    }
}

/// A value as the protocol writes it (`u64` length + bytes; a missing key reads as empty).
fn put_value(w: &mut Vec<u8>, v: Option<&Vec<u8>>) {
    let v = v.map_or(&[][..], |v| v.as_slice());
    w.extend_from_slice(&(v.len() as u64).to_le_bytes());
    w.extend_from_slice(v);
}
