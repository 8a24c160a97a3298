//! The event loop: accepting, reading, flushing and closing connections, the token exchange, and
//! the bounds on what each connection may hold.

use super::state::{Ids, State};
use super::{
    Next, ServerLimits, CONN_COST, FIRST_CONN, LISTENER, READ_BUDGET, SMALL_HOLD, SWEEP_EVERY, TURN_BIG_REPLIES,
    VISIT_REQUESTS, WAITER_COST, WAIT_KEY_COST, WRITE_HIGH_WATER,
};
use crate::store::tcp::auth::{self, ConnAuth, ServerAuth, Step};
use crate::store::tcp::wire::{self, Frame, Request};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) rbuf: Vec<u8>,
    /// Least length `rbuf` needs before the next request can parse.
    pub(super) need: usize,
    pub(super) wbuf: Vec<u8>,
    pub(super) wpos: usize,
    /// Ids of this connection's parked waiters.
    pub(super) waits: HashSet<u64, Ids>,
    /// Keys of this connection's parked waiters, in all.
    pub(super) wait_keys: usize,
    /// The peer closed its side: serve what arrived, then close.
    pub(super) eof: bool,
    pub(super) in_dirty: bool,
    /// Listed in `EventLoop::again` (listed once however often it is deferred).
    pub(super) in_again: bool,
    /// It made a request other than VALIDATE: never dropped as idle.
    pub(super) served: bool,
    /// It made a request other than VALIDATE and PING: it may hold the job's state (evicted last).
    pub(super) worked: bool,
    pub(super) accepted: Instant,
    /// When bytes last arrived.
    pub(super) heard: Instant,
    /// Which connection this is (slots are reused; `EventLoop::fresh` names connections by it).
    pub(super) serial: u64,
    /// Bytes of its buffers charged to the memory budget.
    pub(super) charged: u64,
    /// Where the connection is in the token exchange ([`ConnAuth::Done`] without a token).
    pub(super) auth: ConnAuth,
    /// The notice key raised when the client's side closes: see [`wire::Query::OnClose`].
    pub(super) on_close: Option<Vec<u8>>,
    /// The liveness counter it claimed (see `claims`).
    pub(super) claim: Option<Vec<u8>>,
    /// It proved the token in the exchange (see [`super::auth`]).
    pub(super) proven: bool,
}

impl Conn {
    pub(super) fn queued(&self) -> usize {
        self.wbuf.len() - self.wpos
    }
    /// Bytes this connection holds for requests not served yet and replies not sent yet.
    pub(super) fn held(&self) -> usize {
        let waits = self.waits.len() as u64 * WAITER_COST + self.wait_keys as u64 * WAIT_KEY_COST;
        self.rbuf.len() + self.queued() + waits as usize + self.on_close_len()
    }
    /// Bytes of its close notice (see [`Conn::on_close`]).
    pub(super) fn on_close_len(&self) -> usize {
        self.on_close.as_ref().map_or(0, Vec::len)
    }
}

/// stderr lines about refused clients, at most one per second per kind (the rest counted).
#[derive(Default)]
pub(super) struct RateLog {
    pub(super) last: HashMap<&'static str, (Instant, u64)>,
}

impl RateLog {
    pub(super) fn log(&mut self, kind: &'static str, msg: impl FnOnce() -> String) {
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

pub(super) struct EventLoop {
    pub(super) poll: Poll,
    pub(super) listener: TcpListener,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) limits: ServerLimits,
    pub(super) conns: Vec<Option<Conn>>,
    pub(super) free: Vec<usize>,
    pub(super) live: usize,
    pub(super) state: State,
    /// Connections with replies queued since their last flush.
    pub(super) dirty: Vec<usize>,
    /// Connections that may have unread input (read budget spent, or paused for their queue).
    pub(super) again: Vec<usize>,
    pub(super) log: RateLog,
    /// Bytes of every connection's buffers charged to the memory budget.
    pub(super) buffered: u64,
    /// Connections that have made no request yet, oldest first (slot, serial); stale entries
    /// (closed or served since) are skipped when met.
    pub(super) fresh: VecDeque<(usize, u64)>,
    pub(super) next_serial: u64,
    /// A descriptor kept in reserve: when accept fails for want of descriptors (EMFILE) and no
    /// idle connection can be evicted, it is closed to accept and close one pending connection
    /// (the client sees a reset and retries), so the loop does not spin on a full backlog.
    pub(super) spare: Option<std::fs::File>,
    pub(super) next_sweep: Instant,
    /// Bytes of big replies (over 64 KiB) built in this turn of the loop.
    pub(super) turn_big: usize,
    /// When this turn of the loop began (the clock of idle and stalled connections).
    pub(super) turn_start: Instant,
    /// [`EventLoop::connection_cap`] as last computed.
    pub(super) cap: usize,
    /// The token and nonce source when clients must prove they hold the token.
    pub(super) auth: Option<ServerAuth>,
    /// Set when the optional secret becomes required ([`TcpStoreServer::serve_only_holders`]).
    pub(super) close: Arc<AtomicBool>,
    /// The job's rank counters ([`TcpStoreServer::expect_ranks`]).
    pub(super) ranks: super::JobRanks,
    /// Requests served so far ([`TcpStoreServer::requests_served`]).
    pub(super) served: Arc<std::sync::atomic::AtomicU64>,
}

/// The soft limit on open descriptors of this process (`RLIMIT_NOFILE`, from
/// /proc/self/limits: this module has no unsafe code), if known.
pub(super) fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

impl EventLoop {
    pub(super) fn run(&mut self) {
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
    pub(super) fn connection_cap(&self) -> usize {
        let fds = open_file_limit().map_or(usize::MAX, |n| n.saturating_sub(self.limits.reserved_fds as u64) as usize);
        self.limits.max_connections.min(fds).max(1)
    }

    /// Close the oldest connection that has made no request, else the one quiet the longest of
    /// those that proved nothing (see below). Whether there was one.
    pub(super) fn evict_idle(&mut self, why: &str) -> bool {
        while let Some((i, serial)) = self.fresh.pop_front() {
            let idle = self.conns.get(i).and_then(Option::as_ref).is_some_and(|c| c.serial == serial && !c.served);
            if idle {
                self.close_as(i, "idle", format!("no request since it connected, evicted {why}"));
                return true;
            }
        }
        // Else the one heard from longest ago of those that proved nothing: neither the job's
        // secret (or token) nor the claim of one of the job's rank counters ([`Self::job_own`]),
        // whatever it parked: an outsider's parked WAIT must not lock the job out (its WAITs end
        // with the connection; the protocol has no error reply). One that only ever pinged goes
        // before one that stored or waited (in a store kept open to anyone, a rank's pooled
        // connection proves nothing and is quiet between two requests); among those, the one
        // heard from longest ago, so the outsiders there before a rank connected go first.
        let outsiders = (0..self.conns.len()).filter(|&i| !self.job_own(i));
        let quiet = outsiders.filter_map(|i| self.conns[i].as_ref().map(|c| (i, (c.worked, c.heard))));
        let Some((i, (_, heard))) = quiet.min_by_key(|(_, order)| *order) else { return false };
        let secs = self.turn_start.saturating_duration_since(heard).as_secs_f64();
        let parked = self.conns[i].as_ref().is_some_and(|c| !c.waits.is_empty());
        let waits = if parked { " with WAITs parked (they end with it)" } else { "" };
        self.close_as(
            i,
            "idle",
            format!("quiet for {secs:.1} s{waits}, the longest of the connections that proved nothing, evicted {why}"),
        );
        true
    }

    /// Drop connections that made no request within the idle timeout, and those whose request
    /// stopped arriving half-sent for as long.
    pub(super) fn sweep(&mut self, now: Instant) {
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
    pub(super) fn accept(&mut self) -> Option<Duration> {
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
                        worked: false,
                        accepted: now,
                        heard: now,
                        serial: self.next_serial,
                        charged: CONN_COST,
                        auth: self.auth.as_ref().map_or(ConnAuth::Open, ServerAuth::first_state),
                        on_close: None,
                        claim: None,
                        proven: false,
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
    pub(super) fn close(&mut self, i: usize, why: Option<String>) {
        match why {
            Some(why) => self.close_as(i, "refused", why),
            None => self.drop_conn(i, true),
        }
    }

    /// Close connection `i`, logging (rate-limited per `kind`) the client and `why`.
    pub(super) fn close_as(&mut self, i: usize, kind: &'static str, why: String) {
        let Some(peer) = self.conns.get(i).and_then(Option::as_ref).map(|c| c.peer) else { return };
        self.log.log(kind, || format!("closed the connection of client {peer}: {why}"));
        self.drop_conn(i, false);
    }

    /// Forget connection `i`. `client_gone`: the client's side closed (not a refusal, an idle
    /// eviction or a stall by the server), so its close notice ([`Conn::on_close`]) is appended:
    /// only a client's death is news to whoever watches it.
    pub(super) fn drop_conn(&mut self, i: usize, client_gone: bool) {
        let Some(mut c) = self.conns.get_mut(i).and_then(Option::take) else { return };
        self.state.doomed.extend(c.waits.drain());
        let _ = self.poll.registry().deregister(&mut c.stream);
        self.buffered -= c.charged;
        self.live -= 1;
        self.free.push(i);
        if client_gone {
            self.client_gone(c.serial, c.claim.take(), c.on_close.take());
        }
    }

    /// Bytes charged to the memory budget: data, waiters, connections and their buffers.
    pub(super) fn memory(&self) -> u64 {
        self.state.charged() + self.buffered
    }

    /// Charge connection `i`'s buffers as they are now.
    pub(super) fn account(&mut self, i: usize) {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        let now = CONN_COST + (c.rbuf.capacity() + c.wbuf.capacity() + c.on_close_len()) as u64;
        self.buffered = self.buffered - c.charged + now;
        c.charged = now;
    }

    /// Why connection `i` may not hold `more` bytes more (request or reply) on top of what it
    /// holds, if it may not: over the memory budget (a connection holding at most
    /// [`SMALL_HOLD`] bytes is always served, so that a full budget never locks out ordinary
    /// clients), or, for a reply, over the per-request or per-connection reply limits.
    pub(super) fn refusal(&self, i: usize, more: usize, reply: bool) -> Option<String> {
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
    pub(super) fn reply(&mut self, i: usize, msg: &[u8]) {
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
    pub(super) fn reply_with(
        &mut self,
        i: usize,
        len: usize,
        deferrable: bool,
        build: impl FnOnce(&State, &mut Vec<u8>),
    ) -> Next {
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
    pub(super) fn pause_at(&self) -> usize {
        WRITE_HIGH_WATER.min(self.limits.max_unsent_bytes / 2).max(1)
    }

    /// Write what connection `i` has queued, without blocking.
    pub(super) fn flush(&mut self, i: usize) {
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
    pub(super) fn read(&mut self, i: usize, scratch: &mut [u8], short_ok: bool) {
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
                            c.worked |= !matches!(req, Request::Ping(_));
                        }
                    }
                    outcome = self.handle(i, req);
                    if matches!(outcome, Next::Defer) {
                        // Served on a later turn, from the same bytes.
                        more = true;
                        break;
                    }
                    self.served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
    /// have not sent a byte yet, must prove the secret; every other connection that is not one
    /// of the job's ranks' own (proven, or holding a rank's claim) is closed.
    pub(super) fn require_later_token(&mut self) {
        if !self.close.swap(false, Ordering::SeqCst) {
            return;
        }
        let Some(a) = self.auth.as_mut().filter(|a| a.optional) else { return };
        a.require();
        let mut outsiders = Vec::new();
        for (i, c) in self.conns.iter_mut().enumerate() {
            let Some(c) = c else { continue };
            if c.auth == ConnAuth::Open && c.rbuf.is_empty() {
                c.auth = ConnAuth::Hello;
            } else if matches!(c.auth, ConnAuth::Open | ConnAuth::Done) {
                outsiders.push(i);
            }
        }
        for i in outsiders {
            if self.job_own(i) {
                continue;
            }
            // Its unsent replies go first (best effort): what it asked during the init is answered.
            self.flush(i);
            self.close(
                i,
                Some(
                    "the job's initialization is over and its store serves only the job's own ranks: this \
                     connection proved neither the job's secret nor a rank's claim"
                        .into(),
                ),
            );
        }
    }

    /// Run the token exchange on what connection `i` has read (see [`super::auth`]); whether its
    /// requests may be served now. A refused client's input is discarded until it closes (or
    /// the idle timeout drops it: it never made a request).
    pub(super) fn authenticate(&mut self, i: usize) -> bool {
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
                    c.proven |= c.auth == ConnAuth::Done && reply == [auth::AUTH_OK];
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
}
