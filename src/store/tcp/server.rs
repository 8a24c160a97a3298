//! The TCPStore server: one event-loop thread (mio over epoll) serves every connection, as torch's
//! libuv server does. One descriptor per connection, a listen backlog of at least 4096, reads
//! buffered per connection, replies queued per connection and written without blocking, so a
//! client that stops reading only fills its own queue. A WAIT whose keys are missing is indexed
//! under each missing key: creating a key costs what its own waiters are, not what all are.
//! Memory is bounded: values (APPEND results included) by [`wire::MAX_VALUE_LEN`], the bytes of
//! all keys and values by [`ServerLimits::max_store_bytes`], connections by
//! [`ServerLimits::max_connections`], one request by [`wire::MAX_REQUEST_LEN`]. The protocol has
//! no error reply, so a refused request closes that client's connection (as torch's server does
//! for a request over its limits) and the server logs the reason to stderr, naming the client.
//! `shutdown` (or drop) stops the loop and closes every descriptor.
//!
//! Every query of torch 2.15's `QueryType` is served (docs/wire-protocol.md): the key-value ones
//! here, QUEUE_PUSH/POP/LEN, LIST_KEYS and BARRIER in `queues` (this module's child), which also
//! tells CHECK and WAIT that a non-empty queue counts as a present key. A parked BARRIER arrival
//! is a waiter like a WAIT's, listed under its counter key.

mod queues;

use super::auth::{self, ConnAuth, ServerAuth, Step, StoreToken};
use super::wire::{self, Encoder, Frame, Request};
use crate::store::StoreError;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::HashMap;
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

/// Bounds on what clients can make the server hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Most bytes of keys plus values stored at once (default 4 GiB).
    pub max_store_bytes: u64,
    /// Most open client connections (default 262,144); more are accepted and closed at once.
    pub max_connections: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits { max_store_bytes: 4 << 30, max_connections: 262_144 }
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
        Self::bind_inner(host, port, limits, token.map(|t| (t, false)))
    }

    /// `token`: the secret, and whether it is a job's own (optional until
    /// [`Self::serve_only_holders`]).
    fn bind_inner(
        host: &str,
        port: u16,
        limits: ServerLimits,
        token: Option<(StoreToken, bool)>,
    ) -> Result<TcpStoreServer, StoreError> {
        let auth = token
            .map(|(t, session)| if session { ServerAuth::session(t) } else { ServerAuth::new(t) })
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
            auth,
        };
        let thread = std::thread::Builder::new()
            .name(format!("store-server-{}", addr.port()))
            .spawn(move || ev.run())
            .map_err(|e| io("spawn the thread", e))?;
        Ok(TcpStoreServer { stop, close, waker, addr, thread: Some(thread) })
    }

    /// Listen on `host:port` with the job's own secret `session`: until
    /// [`Self::serve_only_holders`] a client may prove it or not (torch's clients are served as
    /// without a token); from then on only new connections that prove it are served.
    pub fn bind_with_session(
        host: &str,
        port: u16,
        limits: ServerLimits,
        session: StoreToken,
    ) -> Result<TcpStoreServer, StoreError> {
        Self::bind_inner(host, port, limits, Some((session, true)))
    }

    /// New connections must prove the secret given to [`Self::bind_with_session`] from now on;
    /// connections already made (those that sent a first byte) go on. Used once a job's
    /// initialization is over: its ranks hold the job's secret, outsiders do not. No effect on a
    /// server without one.
    pub fn serve_only_holders(&self) {
        self.close.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
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
    conn: usize,
    /// Keys missing when it parked; it is listed under each in `State::waiting` until created.
    keys: Vec<Vec<u8>>,
    /// How many of `keys` are still missing.
    missing: usize,
}

#[derive(Default)]
struct State {
    map: HashMap<Vec<u8>, Vec<u8>>,
    /// Bytes of all keys and values in `map`, and of the queues (see `queues`).
    bytes: u64,
    /// QUEUE_* state; LIST_KEYS and BARRIER are served there too.
    queues: queues::Queues,
    waiters: HashMap<u64, Waiter>,
    /// Key -> ids of the waiters parked on it: a WAIT under each key missing when it parked, a
    /// BARRIER arrival under its (existing) counter key (see `queues`).
    waiting: HashMap<Vec<u8>, Vec<u64>>,
    next_wait: u64,
}

impl State {
    /// Bytes the store would hold with `key` set to a value of `len` bytes.
    fn bytes_with(&self, key: &[u8], len: usize) -> u64 {
        match self.map.get(key) {
            Some(v) => self.bytes - v.len() as u64 + len as u64,
            None => self.bytes + (key.len() + len) as u64,
        }
    }

    /// Set `key`; returns the connections of the waiters it released.
    fn insert(&mut self, key: &[u8], value: Vec<u8>) -> Vec<usize> {
        self.bytes = self.bytes_with(key, value.len());
        if let Some(v) = self.map.get_mut(key) {
            *v = value;
            return Vec::new();
        }
        self.map.insert(key.to_vec(), value);
        let mut released = Vec::new();
        for id in self.waiting.remove(key).unwrap_or_default() {
            let Some(w) = self.waiters.get_mut(&id) else { continue };
            w.missing -= 1;
            if w.missing == 0 {
                released.push(w.conn);
                self.waiters.remove(&id);
            }
        }
        released
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

    /// Park a waiter for `missing` keys (not empty, no duplicates); returns its id.
    fn park(&mut self, conn: usize, missing: Vec<Vec<u8>>) -> u64 {
        self.next_wait += 1;
        let id = self.next_wait;
        for k in &missing {
            self.waiting.entry(k.clone()).or_default().push(id);
        }
        let missing_n = missing.len();
        self.waiters.insert(id, Waiter { conn, keys: missing, missing: missing_n });
        id
    }

    /// Forget waiter `id` (canceled, or its connection closed). Whether it was still parked.
    fn unpark(&mut self, id: u64) -> bool {
        let Some(w) = self.waiters.remove(&id) else { return false };
        // Keys created since have no list left (or a new one without this id).
        for k in w.keys {
            if let Some(ids) = self.waiting.get_mut(&k) {
                ids.retain(|i| *i != id);
                if ids.is_empty() {
                    self.waiting.remove(&k);
                }
            }
        }
        true
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
    waits: Vec<u64>,
    /// The peer closed its side: serve what arrived, then close.
    eof: bool,
    /// Where the connection is in the token exchange ([`ConnAuth::Done`] without a token).
    auth: ConnAuth,
    in_dirty: bool,
    /// Appended (value to key) when the client's side closes: see [`wire::Query::OnClose`].
    on_close: Option<(Vec<u8>, Vec<u8>)>,
}

impl Conn {
    fn queued(&self) -> usize {
        self.wbuf.len() - self.wpos
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
    /// The token and nonce source when clients must prove they hold the token.
    auth: Option<ServerAuth>,
    /// Set when the optional secret becomes required ([`TcpStoreServer::serve_only_holders`]).
    close: Arc<AtomicBool>,
}

/// What to do with a connection after a request.
enum Next {
    Continue,
    Close(String),
}

fn parse_counter(v: &[u8]) -> Option<i64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

impl EventLoop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(4096);
        let mut accept_paused = false;
        let mut scratch = vec![0u8; 64 * 1024];
        while !self.stop.load(Ordering::SeqCst) {
            let timeout = if !self.again.is_empty() {
                Some(Duration::ZERO)
            } else if accept_paused {
                Some(Duration::from_millis(10))
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
            if accept_paused || events.iter().any(|e| e.token() == LISTENER) {
                accept_paused = self.accept();
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
            for i in std::mem::take(&mut self.again) {
                self.read(i, &mut scratch, false);
            }
            for i in std::mem::take(&mut self.dirty) {
                if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                    c.in_dirty = false;
                }
                self.flush(i);
            }
        }
    }

    /// Accept until the backlog is empty. Returns true when out of descriptors (retry soon).
    fn accept(&mut self) -> bool {
        loop {
            match self.listener.accept() {
                Ok((mut stream, peer)) => {
                    if self.live >= self.limits.max_connections {
                        let max = self.limits.max_connections;
                        self.log.log("connections", || {
                            format!("refused client {peer}: at the limit of {max} connections (connection closed)")
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
                    self.conns[i] = Some(Conn {
                        stream,
                        peer,
                        rbuf: Vec::new(),
                        need: 1,
                        wbuf: Vec::new(),
                        wpos: 0,
                        waits: Vec::new(),
                        eof: false,
                        auth: self.auth.as_ref().map_or(ConnAuth::Open, ServerAuth::first_state),
                        in_dirty: false,
                        on_close: None,
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    // EMFILE/ENFILE/ENOBUFS: the pending connections wait in the backlog.
                    self.log.log("accept", || format!("cannot accept connections: {e} (retrying)"));
                    return true;
                }
            }
        }
    }

    fn close(&mut self, i: usize, why: Option<String>) {
        let Some(mut c) = self.conns.get_mut(i).and_then(Option::take) else { return };
        let refused = why.is_some();
        if let Some(why) = why {
            let peer = c.peer;
            self.log.log("refused", || format!("closed the connection of client {peer}: {why}"));
        }
        for id in c.waits.drain(..) {
            self.state.unpark(id);
        }
        let _ = self.poll.registry().deregister(&mut c.stream);
        self.live -= 1;
        self.free.push(i);
        // The client's side went (not a refusal): tell whoever watches it.
        if let (false, Some((k, v))) = (refused, c.on_close.take()) {
            if let Err(why) = self.append(&k, &v) {
                let peer = c.peer;
                self.log.log("on-close", || format!("dropped the close notice of client {peer}: {why}"));
            }
        }
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

    /// Write what connection `i` has queued, without blocking.
    fn flush(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        let was_full = c.queued() >= WRITE_HIGH_WATER;
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
        }
        if was_full && c.queued() < WRITE_HIGH_WATER {
            self.again.push(i);
        }
    }

    /// Read what connection `i` has (up to the budget) and serve every complete request.
    /// `short_ok`: a short read may end the reading (else read until WouldBlock or the end).
    fn read(&mut self, i: usize, scratch: &mut [u8], short_ok: bool) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        if c.queued() >= WRITE_HIGH_WATER {
            return; // resumed by flush once the client reads
        }
        let mut got = 0;
        let mut more = false;
        while !c.eof {
            if got >= READ_BUDGET {
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
        if c.auth != ConnAuth::Done && !self.authenticate(i) {
            self.flush(i);
            let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
            if c.auth == ConnAuth::Refused {
                // The refusal is sent; the client sees the end of the stream after it.
                let _ = c.stream.shutdown(std::net::Shutdown::Write);
            }
            if c.eof {
                return self.close(i, None);
            }
            if more {
                self.again.push(i);
            }
            return;
        }
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        let mut rbuf = std::mem::take(&mut c.rbuf);
        let (mut pos, mut need) = (0, c.need);
        let mut outcome = Next::Continue;
        while rbuf.len() - pos >= need {
            match wire::parse_request(&rbuf[pos..]) {
                Ok(Frame::Incomplete(n)) => need = n,
                Ok(Frame::Complete(req, n)) => {
                    pos += n;
                    need = 1;
                    outcome = self.handle(i, req);
                    let queued = self.conns[i].as_ref().map_or(0, Conn::queued);
                    if matches!(outcome, Next::Close(_)) || queued >= WRITE_HIGH_WATER {
                        break;
                    }
                }
                Err(e) => {
                    outcome = Next::Close(format!("{}", e.into_store("the client")));
                    break;
                }
            }
        }
        if let Next::Close(why) = outcome {
            return self.close(i, Some(why));
        }
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        rbuf.drain(..pos);
        if rbuf.is_empty() && rbuf.capacity() > READ_BUDGET {
            rbuf = Vec::new(); // a big request is done: do not keep its buffer per connection
        }
        c.rbuf = rbuf;
        c.need = need;
        if c.eof {
            // Replies to what arrived before the close are flushed first (best effort).
            self.flush(i);
            return self.close(i, None);
        }
        if more {
            self.again.push(i);
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
    /// requests may be served now. A refused client's input is discarded until it closes.
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
                        self.set(k, desired.to_vec());
                        desired.to_vec()
                    }
                };
                self.reply(i, &Encoder::default().bytes(&now).finish());
            }
            Request::Get(k) => {
                let msg = Encoder::default().bytes(self.state.map.get(k).map_or(&[][..], |v| v)).finish();
                self.reply(i, &msg);
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
                self.set(k, v);
                self.reply(i, &now.to_le_bytes());
            }
            Request::Check(keys) => {
                let ready = keys.iter().all(|k| self.state.present(k));
                self.reply(i, &[if ready { wire::CHECK_READY } else { wire::CHECK_NOT_READY }]);
            }
            Request::Wait(keys) => {
                let mut missing: Vec<Vec<u8>> =
                    keys.into_iter().filter(|k| !self.state.present(k)).map(<[u8]>::to_vec).collect();
                missing.sort();
                missing.dedup();
                if missing.is_empty() {
                    self.reply(i, &[wire::STOP_WAITING]);
                } else {
                    let id = self.state.park(i, missing);
                    if let Some(c) = self.conns[i].as_mut() {
                        c.waits.push(id);
                    }
                }
            }
            Request::CancelWait => {
                // In order on this connection: a STOP_WAITING of a wait that fired is queued before.
                let waits = self.conns[i].as_mut().map(|c| std::mem::take(&mut c.waits)).unwrap_or_default();
                for id in waits {
                    self.state.unpark(id);
                }
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
                if let Err(why) = self.append(k, v) {
                    return Next::Close(why);
                }
            }
            Request::OnClose(k, v) => {
                if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
                    c.on_close = (!k.is_empty()).then(|| (k.to_vec(), v.to_vec()));
                }
            }
            Request::MultiGet(keys) => {
                let e =
                    keys.iter().fold(Encoder::default(), |e, k| e.bytes(self.state.map.get(*k).map_or(&[][..], |v| v)));
                self.reply(i, &e.finish());
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
    /// otherwise.
    fn append(&mut self, k: &[u8], v: &[u8]) -> Result<(), String> {
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

    /// Set a key and answer the waiters it releases.
    fn set(&mut self, k: &[u8], v: Vec<u8>) {
        for conn in self.state.insert(k, v) {
            if let Some(c) = self.conns[conn].as_mut() {
                // The waiter is done: drop its id (at most a few per connection).
                let state = &self.state;
                c.waits.retain(|id| state.waiters.contains_key(id));
            }
            self.reply(conn, &[wire::STOP_WAITING]);
        }
        self.written(k);
    }
}
