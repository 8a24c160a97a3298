//! The TCPStore client: one connection behind a mutex, requests as torch's client sends them
//! (leading `/` on user keys, WAIT before GET, VALIDATE + PING after connecting).

use super::auth::{self, StoreToken};
use super::server::TcpStoreServer;
use super::wire::{self, Decoder, Encoder, Query, ReadError};
use crate::lock::Unpoisoned;
use crate::store::{Store, StoreError};
use std::io::{BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// First pause between connection attempts; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long to wait for WAIT_CANCELED after sending CANCEL_WAIT. Short: the WAIT has already
/// timed out (the caller's deadline has passed), and a live server answers at once; a server
/// that does not (its process frozen) must not hold the caller past its deadline for long.
const CANCEL_REPLY_TIMEOUT: Duration = Duration::from_secs(1);
/// Why a server closes a connection (ours logs which one; the protocol has no error reply).
const CLOSE_REASONS: &str = "either the server is gone (its process ended or was killed), or it closed this \
     connection for breaking one of its limits: an APPEND growing a value past 8 MiB, the store's data or memory \
     limit, a reply too big (MULTI_GET) or too many replies left unread, too many parked WAITs, its connection limit \
     (an idle connection is evicted), no request within its idle timeout, or an ADD to a non-integer; our server's \
     log names the client and the limit";
/// How often a wakeable WAIT's reader looks whether a wake canceled it (nothing is sent).
const WAKE_SLICE: Duration = Duration::from_secs(1);
/// Least time to wait for the reply to a non-waiting request: a short store timeout bounds key
/// waits, not a loaded server's answer to a GET or ADD.
const MIN_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

struct Conn {
    /// Replies are read through a buffer (a reply's fields are many small reads); requests are
    /// written to the stream itself.
    stream: BufReader<TcpStream>,
    /// The socket's read timeout now, so that it is set only when it changes.
    read_timeout: Option<Duration>,
    /// Set when the stream is out of step with the server (a reply never came): every later
    /// call fails with this text instead of reading someone else's reply.
    broken: Option<String>,
    /// A WAIT whose time ran out was canceled and the server has not answered the CANCEL_WAIT
    /// yet (a stopped host): its WAIT_CANCELED (after a STOP_WAITING, if the keys came first) is
    /// read before the next reply ([`TcpStore::settle`]), so a wait in slices survives a pause.
    cancel_unanswered: bool,
}

/// A client of a TCPStore server (ours or torch's).
pub struct TcpStore {
    conn: Mutex<Conn>,
    peer: String,
    timeout: Duration,
    /// The wait for the reply to a non-waiting request (`None`: the store timeout, at least
    /// [`MIN_REPLY_TIMEOUT`]), in nanoseconds, [`NO_REPLY_LIMIT`] for none; see
    /// [`TcpStore::set_reply_timeout`].
    reply_timeout: AtomicU64,
    /// The state of a WAIT another thread may end (see [`TcpStore::wait_wakeable`]).
    park: Mutex<Park>,
    round_trips: AtomicU64,
    /// A second handle of the connection's socket, outside the lock, so that [`TcpStore::abort`]
    /// can end a call blocked on it.
    aborter: Option<TcpStream>,
    /// It proved a token when it connected (see [`TcpStore::connect_with_token`]).
    proven: bool,
}

/// The reply timeout's "none": the store timeout, at least [`MIN_REPLY_TIMEOUT`].
const NO_REPLY_LIMIT: u64 = u64::MAX;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(NO_REPLY_LIMIT - 1)
}

/// Asked while a wakeable WAIT is parked: `true` wakes it (see [`TcpStore::wait_nudged`]).
pub type Nudge<'a> = &'a dyn Fn() -> bool;

/// A WAIT another thread may end (see [`TcpStore::wait_wakeable`] and [`TcpStore::wake`]).
#[derive(Default)]
struct Park {
    /// A wakeable WAIT is on the wire, its STOP_WAITING not read yet.
    parked: bool,
    /// [`TcpStore::wake`] was called since the last wakeable WAIT ended.
    wake: bool,
    /// When a CANCEL_WAIT was written for the parked WAIT (its WAIT_CANCELED is still to be
    /// read).
    canceled: Option<Instant>,
}

/// A small pseudo-random jitter source (no security needed): the clock's nanoseconds mixed.
fn jitter(max: Duration) -> Duration {
    let n = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let x = (u64::from(n) ^ u64::from(std::process::id())).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    Duration::from_nanos(x % (max.as_nanos() as u64 + 1))
}

fn prefixed(key: &str) -> Result<String, StoreError> {
    if key.is_empty() {
        return Err(StoreError::InvalidArgument("store key must not be empty".into()));
    }
    let k = format!("/{key}");
    wire::check_key(&k)?;
    Ok(k)
}

fn io_err(peer: &str, what: &str, e: std::io::Error) -> StoreError {
    StoreError::Io(format!("{what} {peer}: {e}"))
}

impl TcpStore {
    /// Connect to the server at `host:port`, retrying with exponential backoff and jitter until
    /// `timeout` has passed (a refused connection, and one reset or closed during the VALIDATE +
    /// PING handshake, as torch's client does); `timeout` is also the store timeout of `get`.
    pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStore, StoreError> {
        Self::connect_with_token(host, port, timeout, None)
    }

    /// [`TcpStore::connect`], first proving to the server that this client holds `token` (see
    /// [`super::auth`]) when one is given. A server that refuses the token, or that wants one
    /// when none is given, is an error at once (not retried).
    pub fn connect_with_token(
        host: &str,
        port: u16,
        timeout: Duration,
        token: Option<&StoreToken>,
    ) -> Result<TcpStore, StoreError> {
        Self::dial(host, port, timeout, token, false)
    }

    /// Another connection to a server this process reached before (a pool growing): as
    /// [`TcpStore::connect_with_token`], but a refused connection fails at once, for the server
    /// that answered before is gone (a server that is up, even frozen or with a full backlog,
    /// does not refuse: its kernel queues or drops the connection).
    pub fn reconnect_with_token(
        host: &str,
        port: u16,
        timeout: Duration,
        token: Option<&StoreToken>,
    ) -> Result<TcpStore, StoreError> {
        Self::dial(host, port, timeout, token, true)
    }

    fn dial(
        host: &str,
        port: u16,
        timeout: Duration,
        token: Option<&StoreToken>,
        refusal_is_final: bool,
    ) -> Result<TcpStore, StoreError> {
        let peer = format!("{}:{port}", crate::quote::clip(host));
        let start = Instant::now();
        let deadline = start + timeout;
        let mut backoff = FIRST_BACKOFF;
        let mut last_err = String::from("no attempt finished");
        loop {
            // Resolve on every attempt: a host name may appear in DNS only once its pod is up.
            match (host, port).to_socket_addrs() {
                Ok(addrs) => {
                    for a in addrs.collect::<Vec<SocketAddr>>() {
                        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
                        match TcpStream::connect_timeout(&a, left) {
                            // A reset or close during the handshake (a server whose backlog
                            // overflowed, or at its connection limit) is retried like a refusal.
                            Ok(stream) => match Self::handshake(stream, peer.clone(), timeout, token) {
                                Err(StoreError::Io(m) | StoreError::Closed(m)) => {
                                    last_err = format!("handshake failed: {m}")
                                }
                                other => return other,
                            },
                            Err(e) if refusal_is_final && e.kind() == std::io::ErrorKind::ConnectionRefused => {
                                return Err(StoreError::Closed(format!(
                                    "the store server at {peer} refused a new connection ({e}): it answered before, \
                                     so its process is gone"
                                )))
                            }
                            Err(e) => last_err = e.to_string(),
                        }
                    }
                }
                Err(e) => last_err = format!("cannot resolve {}: {e}", crate::quote::quoted(host)),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::Timeout {
                    keys: vec![format!("<connect to store server {peer}: {last_err}>")],
                    waited: start.elapsed(),
                });
            }
            let pause = (backoff / 2 + jitter(backoff / 2)).min(deadline - now);
            std::thread::sleep(pause);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Start a server on `host:port` (0: a free port) and connect a client to it (rank 0's side).
    pub fn host(host: &str, port: u16, timeout: Duration) -> Result<(TcpStoreServer, TcpStore), StoreError> {
        let server = TcpStoreServer::bind(host, port)?;
        let ip = server.local_addr().ip();
        let target = if ip.is_unspecified() { "127.0.0.1".to_string() } else { ip.to_string() };
        let client = TcpStore::connect(&target, server.port(), timeout)?;
        Ok((server, client))
    }

    fn handshake(
        stream: TcpStream,
        peer: String,
        timeout: Duration,
        token: Option<&StoreToken>,
    ) -> Result<TcpStore, StoreError> {
        stream.set_nodelay(true).map_err(|e| io_err(&peer, "set TCP_NODELAY on", e))?;
        let aborter = stream.try_clone().ok();
        let store = TcpStore {
            conn: Mutex::new(Conn {
                stream: BufReader::new(stream),
                read_timeout: None,
                broken: None,
                cancel_unanswered: false,
            }),
            peer,
            timeout,
            // The handshake answers within the connect timeout or the attempt failed (a frozen
            // server accepts connections in its kernel backlog but never answers).
            reply_timeout: AtomicU64::new(nanos(timeout.max(Duration::from_millis(1)))),
            park: Mutex::new(Park::default()),
            round_trips: AtomicU64::new(0),
            aborter,
            proven: token.is_some(),
        };
        if let Some(token) = token {
            store.authenticate(token)?;
        }
        let nonce = std::process::id();
        // VALIDATE (no reply) and PING in one write: one round trip, the PING's reply.
        let mut hello = Encoder::query(Query::Validate).u32(wire::VALIDATE_MAGIC).finish();
        hello.extend(Encoder::query(Query::Ping).u32(nonce).finish());
        let (echo, job) = store.call(&hello, |d| {
            let echo = d.u32()?;
            // A store that serves only its job's ranks names the job after its refusal.
            let job = if echo == auth::AUTH_CLOSED && nonce != auth::AUTH_CLOSED { Some(d.value()?) } else { None };
            Ok((echo, job))
        })?;
        if echo == auth::AUTH_REQUIRED && nonce != auth::AUTH_REQUIRED {
            return Err(StoreError::Protocol(format!(
                "the store at {} requires a token and refused this client: set {} (or {}) to the secret of the \
                 store's host",
                store.peer,
                auth::TOKEN_ENV,
                auth::TOKEN_FILE_ENV
            )));
        }
        if let Some(job) = job {
            let job = String::from_utf8_lossy(&job).into_owned();
            return Err(StoreError::Locked { peer: store.peer.clone(), job });
        }
        if echo != nonce {
            return Err(StoreError::Protocol(format!(
                "{} answered PING {nonce} with {echo}: not a TCPStore server?",
                store.peer
            )));
        }
        store.reply_timeout.store(NO_REPLY_LIMIT, Ordering::Relaxed);
        Ok(store)
    }

    /// Prove to the server that this client holds `token` (the exchange of [`super::auth`]).
    fn authenticate(&self, token: &StoreToken) -> Result<(), StoreError> {
        let mut c = self.lock()?;
        let limit = self.reply_limit();
        self.write(&mut c, &auth::hello())?;
        let what = "the authentication hello (MCORE_STORE_TOKEN is set here: is it set on the store's host too?)";
        let nonce = self
            .read(&mut c, limit, |d| {
                match d.u8()? {
                    auth::AUTH_CHALLENGE => {}
                    auth::AUTH_NOT_WANTED => return Ok(None),
                    other => {
                        return Err(ReadError::Protocol(format!("answered the authentication hello with {other}")))
                    }
                }
                let mut n = [0u8; auth::NONCE_LEN];
                for chunk in n.chunks_mut(8) {
                    chunk.copy_from_slice(&d.u64()?.to_le_bytes());
                }
                Ok(Some(n))
            })
            .map_err(|e| self.fail(&mut c, e, what, limit))?;
        let Some(nonce) = nonce else {
            c.broken = Some("the store wants no token".into());
            return Err(StoreError::Protocol(format!(
                "{} is set here, but the store at {} was started without one: set the same secret on the store's \
                 host (rank 0), or unset it here",
                auth::TOKEN_ENV,
                self.peer
            )));
        };
        self.write(&mut c, &token.prove(&nonce))?;
        let verdict =
            self.read(&mut c, limit, |d| d.u8()).map_err(|e| self.fail(&mut c, e, "the token proof", limit))?;
        if verdict != auth::AUTH_OK {
            c.broken = Some("the store refused our token".into());
            return Err(StoreError::Protocol(format!(
                "the store at {} refused this client's token: {} (or the file of {}) differs from the store host's",
                self.peer,
                auth::TOKEN_ENV,
                auth::TOKEN_FILE_ENV
            )));
        }
        Ok(())
    }

    /// The same connection with `timeout` as its store timeout, as if it had been made with it:
    /// a connection made with a short timeout to probe a server, kept once it is the right one.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Wait at most `limit` for the reply to a request that does not wait for keys (a liveness
    /// connection, which must notice a frozen server within its deadline; the default waits at
    /// least 10 s so that a loaded server is not taken for a dead one).
    pub fn with_reply_timeout(self, limit: Duration) -> Self {
        self.set_reply_timeout(limit);
        self
    }

    /// [`Self::with_reply_timeout`] from now on (a liveness connection claims within the time
    /// its initialization has left, then bounds each later reply by a short limit).
    pub fn set_reply_timeout(&self, limit: Duration) {
        self.reply_timeout.store(nanos(limit), Ordering::Relaxed);
    }

    fn reply_limit(&self) -> Duration {
        match self.reply_timeout.load(Ordering::Relaxed) {
            NO_REPLY_LIMIT => self.timeout.max(MIN_REPLY_TIMEOUT),
            n => Duration::from_nanos(n),
        }
    }

    /// Shut the connection down: a call blocked on it ends at once with an error, and every later
    /// call fails (used once the server is known to be gone, e.g. its process frozen).
    pub fn abort(&self) {
        if let Some(s) = &self.aborter {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Whether calls can still go over this connection (not broken by a failed exchange or an
    /// abort).
    pub fn is_usable(&self) -> bool {
        self.lock().is_ok()
    }

    /// The `host:port` this client talks to.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// This end's address of the connection to the server (`getsockname`): the address of the
    /// interface that routes to the store, which peers on other hosts can normally reach.
    pub fn local_addr(&self) -> Result<SocketAddr, StoreError> {
        let c = self.conn.locked();
        c.stream
            .get_ref()
            .local_addr()
            .map_err(|e| io_err(&self.peer, "reading the local address of the connection to", e))
    }

    /// Request/response exchanges so far (a request without a reply counts as one).
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn lock(&self) -> Result<MutexGuard<'_, Conn>, StoreError> {
        let c = self.conn.locked();
        match &c.broken {
            Some(why) => Err(StoreError::Closed(format!("connection to {} is unusable: {why}", self.peer))),
            None => Ok(c),
        }
    }

    fn write(&self, c: &mut Conn, msg: &[u8]) -> Result<(), StoreError> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        c.stream.get_ref().write_all(msg).map_err(|e| {
            c.broken = Some(format!("write failed: {e}"));
            io_err(&self.peer, "writing to", e)
        })
    }

    /// Read a reply with `f`, giving up after `limit`; a failure leaves the connection unusable.
    fn read<T>(
        &self,
        c: &mut Conn,
        limit: Duration,
        f: impl FnOnce(&mut Decoder<&mut BufReader<TcpStream>>) -> Result<T, ReadError>,
    ) -> Result<T, ReadError> {
        // One setsockopt only when the limit changes (most calls share the store timeout).
        let limit = limit.max(Duration::from_millis(1));
        if c.read_timeout != Some(limit) {
            c.stream.get_ref().set_read_timeout(Some(limit)).map_err(ReadError::Io)?;
            c.read_timeout = Some(limit);
        }
        f(&mut Decoder::new(&mut c.stream))
    }

    fn fail(&self, c: &mut Conn, e: ReadError, what: &str, limit: Duration) -> StoreError {
        c.broken = Some(format!("no complete reply to {what}"));
        if e.is_timeout() {
            return StoreError::Io(format!(
                "no reply from {} to {what} within {:.1} s",
                self.peer,
                limit.as_secs_f64()
            ));
        }
        let reset = matches!(&e, ReadError::Io(io) if matches!(io.kind(), ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted));
        match e.into_store(&self.peer) {
            StoreError::Closed(m) => StoreError::Closed(format!("{m} before it answered {what} ({CLOSE_REASONS})")),
            StoreError::Io(m) if reset => {
                StoreError::Closed(format!("{m} before it answered {what} ({CLOSE_REASONS})"))
            }
            other => other,
        }
    }

    /// A request without a reply.
    fn send(&self, msg: &[u8]) -> Result<(), StoreError> {
        let mut c = self.lock()?;
        self.write(&mut c, msg)
    }

    /// A request and its reply.
    fn call<T>(
        &self,
        msg: &[u8],
        f: impl FnOnce(&mut Decoder<&mut BufReader<TcpStream>>) -> Result<T, ReadError>,
    ) -> Result<T, StoreError> {
        let mut c = self.lock()?;
        let limit = self.reply_limit();
        // A slice's CANCEL_WAIT the server has not answered yet is answered first (in order).
        self.settle(&mut c, limit).map_err(|e| self.fail(&mut c, e, "CANCEL_WAIT", limit))?;
        self.write(&mut c, msg)?;
        // The handshake sends VALIDATE (no reply) with its PING: the reply awaited is the PING's.
        let q = match Query::from_u8(msg[0]) {
            Some(Query::Validate) => Some(Query::Ping),
            q => q,
        };
        let what = q.map_or("request".to_string(), |q| format!("{q:?}"));
        self.read(&mut c, limit, f).map_err(|e| self.fail(&mut c, e, &what, limit))
    }

    /// WAIT for already-prefixed keys; `Ok(false)` when the time ran out (wait canceled) or,
    /// `wakeable`, [`Self::wake`] ended it.
    fn wait_raw(&self, keys: &[String], timeout: Duration, nudge: Option<Nudge>) -> Result<bool, StoreError> {
        let wakeable = nudge.is_some();
        let mut c = self.lock()?;
        let park = || self.park.locked();
        if wakeable && std::mem::take(&mut park().wake) {
            return Ok(false);
        }
        // The previous slice's cancel still unanswered: this slice waits for that answer (the
        // server answers in order); not come by then, the slice is over all the same.
        let patience = timeout.max(CANCEL_REPLY_TIMEOUT);
        match self.settle(&mut c, patience) {
            Ok(()) => {}
            Err(e) if e.is_timeout() => return Ok(false),
            Err(e) => return Err(self.fail(&mut c, e, "CANCEL_WAIT", patience)),
        }
        self.write(&mut c, &Encoder::query(Query::Wait).keys(keys).finish())?;
        if wakeable {
            let mut p = park();
            p.parked = true;
            if p.wake {
                // Woken between the check above and the WAIT: cancel it now.
                self.write(&mut c, &Encoder::query(Query::CancelWait).finish())?;
                p.canceled = Some(Instant::now());
            }
        }
        let first = self.read_first(&mut c, timeout, nudge);
        // From here on a wake sends nothing: what was canceled is read below.
        let canceled = wakeable && std::mem::take(&mut *park()).canceled.is_some();
        match first {
            Ok(wire::STOP_WAITING) if !canceled => return Ok(true),
            Ok(wire::WAIT_CANCELED) if canceled => return Ok(false),
            Ok(wire::STOP_WAITING) => {
                // Fired as the wake's CANCEL_WAIT went out: its WAIT_CANCELED follows.
                let next = self.read(&mut c, CANCEL_REPLY_TIMEOUT, |d| d.u8());
                return match next {
                    Ok(wire::WAIT_CANCELED) => Ok(true),
                    Ok(other) => {
                        c.broken = Some(format!("CANCEL_WAIT answered {other}"));
                        Err(StoreError::Protocol(format!("{} answered CANCEL_WAIT with {other}", self.peer)))
                    }
                    Err(e) => Err(self.fail(&mut c, e, "CANCEL_WAIT", CANCEL_REPLY_TIMEOUT)),
                };
            }
            Ok(other) => {
                c.broken = Some(format!("WAIT answered {other}"));
                return Err(StoreError::Protocol(format!("{} answered WAIT with {other}", self.peer)));
            }
            Err(e) if e.is_timeout() => {}
            Err(e) => return Err(self.fail(&mut c, e, "WAIT", timeout)),
        }
        if !canceled {
            self.write(&mut c, &Encoder::query(Query::CancelWait).finish())?;
        }
        let canceled = self.read(&mut c, CANCEL_REPLY_TIMEOUT, |d| {
            let first = d.u8()?;
            // The keys may have appeared just before the cancel: STOP_WAITING then WAIT_CANCELED.
            let second = if first == wire::STOP_WAITING { d.u8()? } else { first };
            if second != wire::WAIT_CANCELED {
                return Err(ReadError::Protocol(format!("CANCEL_WAIT answered {second}")));
            }
            Ok(first == wire::WAIT_CANCELED)
        });
        match canceled {
            Ok(c) => Ok(!c),
            // A plain wait's slice is over; its cancel is answered before the next reply (a
            // store host stopped for a few seconds fails nothing: `settle`).
            Err(e) if e.is_timeout() && !wakeable => {
                c.cancel_unanswered = true;
                Ok(false)
            }
            Err(e) => Err(self.fail(&mut c, e, "CANCEL_WAIT", CANCEL_REPLY_TIMEOUT)),
        }
    }

    /// Read the answer to a CANCEL_WAIT left unanswered (see [`Conn::cancel_unanswered`]) within
    /// `limit`; nothing when none is outstanding.
    fn settle(&self, c: &mut Conn, limit: Duration) -> Result<(), ReadError> {
        if !c.cancel_unanswered {
            return Ok(());
        }
        // A STOP_WAITING (the keys came before the cancel) may come first, read alone when the
        // last settle timed out between the two.
        let answer = self.read(c, limit, |d| d.u8())?;
        let answer = if answer == wire::STOP_WAITING { self.read(c, limit, |d| d.u8())? } else { answer };
        if answer != wire::WAIT_CANCELED {
            return Err(ReadError::Protocol(format!("CANCEL_WAIT answered {answer}")));
        }
        c.cancel_unanswered = false;
        Ok(())
    }

    /// WAIT up to `timeout` for `keys` as [`Store::wait`] does, unless [`Self::wake`] is called
    /// (before or during the WAIT): `Ok(true)` when the keys are there, `Ok(false)` when the time
    /// ran out or a wake ended it. The connection stays usable (a liveness connection parks its
    /// watch here and is woken for other requests, without closing it).
    pub fn wait_wakeable(&self, keys: &[&str], timeout: Duration) -> Result<bool, StoreError> {
        self.wait_nudged(keys, timeout, &|| false)
    }

    /// [`Self::wait_wakeable`], woken too once `nudge` says so (asked about every
    /// `WAKE_SLICE` while the WAIT is parked: nothing is sent until it says yes).
    pub fn wait_nudged(&self, keys: &[&str], timeout: Duration, nudge: Nudge) -> Result<bool, StoreError> {
        let ks = keys.iter().map(|k| prefixed(k)).collect::<Result<Vec<_>, _>>()?;
        wire::check_count(ks.len())?;
        self.wait_raw(&ks, timeout, Some(nudge))
    }

    /// End the [`Self::wait_wakeable`] in progress (its thread holds the connection), or the next
    /// one before it parks: a CANCEL_WAIT written from this thread, whose reply the waiting one
    /// reads.
    pub fn wake(&self) {
        let mut p = self.park.locked();
        p.wake = true;
        if p.parked && p.canceled.is_none() {
            if let Some(mut s) = self.aborter.as_ref() {
                self.round_trips.fetch_add(1, Ordering::Relaxed);
                if s.write_all(&Encoder::query(Query::CancelWait).finish()).is_ok() {
                    p.canceled = Some(Instant::now());
                }
            }
        }
    }

    /// The first reply to a WAIT within `timeout`. A socket's receive timeout counts in the
    /// kernel's ticks and may end up to one tick early: the read goes on until `timeout` has
    /// passed. A wakeable WAIT is read in slices of at most [`WAKE_SLICE`], so that a wake's
    /// CANCEL_WAIT that the server leaves unanswered (its process frozen) ends the read
    /// [`CANCEL_REPLY_TIMEOUT`] after the wake, as a timeout.
    fn read_first(&self, c: &mut Conn, timeout: Duration, nudge: Option<Nudge>) -> Result<u8, ReadError> {
        let wakeable = nudge.is_some();
        let end = Instant::now() + timeout;
        loop {
            let woken = if wakeable { self.park.locked().canceled } else { None };
            let until = match woken {
                Some(at) => end.min(at + CANCEL_REPLY_TIMEOUT),
                None if wakeable => end.min(Instant::now() + WAKE_SLICE),
                None => end,
            };
            match self.read(c, until.saturating_duration_since(Instant::now()), |d| d.u8()) {
                Err(e) if e.is_timeout() && woken.is_none() && Instant::now() < end => {
                    if nudge.is_some_and(|n| n()) {
                        self.wake();
                    }
                }
                other => return other,
            }
        }
    }

    fn check_raw(&self, keys: &[String]) -> Result<bool, StoreError> {
        wire::check_count(keys.len())?;
        let r = self.call(&Encoder::query(Query::Check).keys(keys).finish(), |d| d.u8())?;
        match r {
            wire::CHECK_READY => Ok(true),
            wire::CHECK_NOT_READY => Ok(false),
            x => Err(StoreError::Protocol(format!("{} answered CHECK with {x}", self.peer))),
        }
    }

    /// Have our server raise a notice on `key` (ending `/alive/events`) naming this connection's
    /// claimed counter (see [`Self::claim`]) when the connection closes from this side without
    /// withdrawing it first (the process died); an empty `key` withdraws it. Only for a server of
    /// this project: torch's server closes the connection on this request.
    pub fn on_close(&self, key: &str) -> Result<(), StoreError> {
        let k = if key.is_empty() { String::new() } else { prefixed(key)? };
        // Sent even on a connection a missed reply made unusable: it asks no reply, and a
        // notice left armed would name this live process dead when the connection closes.
        let mut c = self.conn.locked();
        self.write(&mut c, &Encoder::query(Query::OnClose).bytes(k.as_bytes()).bytes(b"").finish())
    }

    /// Whether this connection proved a token when it connected.
    pub fn proven(&self) -> bool {
        self.proven
    }

    /// Claim the liveness counter `key` (ending `/alive/<rank>`) for this connection with
    /// `secret` (see [`Query::Claim`]): `Ok(Ok(Some(job's secret)))` when `key` is the counter of
    /// a rank of the job whose store this is (default mode), `Ok(Err(holder))` when another
    /// connection, at address `holder`, holds it with another secret. Only for a server of this
    /// project.
    pub fn claim(&self, key: &str, secret: &[u8]) -> Result<Result<Option<StoreToken>, String>, StoreError> {
        let k = prefixed(key)?;
        self.call(&Encoder::query(Query::Claim).bytes(k.as_bytes()).bytes(secret).finish(), |d| match d.u8()? {
            wire::CLAIM_OK => Ok(Ok(None)),
            wire::CLAIM_SESSION => Ok(Ok(StoreToken::new(&d.value()?))),
            wire::CLAIM_TAKEN => Ok(Err(String::from_utf8_lossy(&d.value()?).into_owned())),
            other => Err(ReadError::Protocol(format!("answered CLAIM with {other}"))),
        })
    }

    /// Raise a notice on `key` (ending `/alive/events`; see [`Query::Notice`]): a question when
    /// `value` is empty (needs a claim on this connection), else an event posted to the bulletin.
    pub fn notice(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let k = prefixed(key)?;
        wire::check_value(key, value)?;
        self.send(&Encoder::query(Query::Notice).bytes(k.as_bytes()).bytes(value).finish())
    }

    /// Append `value` to the value of `key` (creates it when missing).
    pub fn append(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let k = prefixed(key)?;
        wire::check_value(key, value)?;
        self.send(&Encoder::query(Query::Append).bytes(k.as_bytes()).bytes(value).finish())
    }
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let k = prefixed(key)?;
        wire::check_value(key, value)?;
        self.send(&Encoder::query(Query::Set).bytes(k.as_bytes()).bytes(value).finish())
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.wait(&[key], self.timeout)?;
        let k = prefixed(key)?;
        self.call(&Encoder::query(Query::Get).bytes(k.as_bytes()).finish(), |d| d.value())
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        let k = prefixed(key)?;
        self.call(&Encoder::query(Query::Add).bytes(k.as_bytes()).i64(delta).finish(), |d| d.i64()).map_err(|e| match e
        {
            StoreError::Closed(m) => StoreError::Closed(format!("{m} (on ADD {delta} to '{key}')")),
            other => other,
        })
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError> {
        let k = prefixed(key)?;
        wire::check_value(key, expected)?;
        wire::check_value(key, desired)?;
        let msg = Encoder::query(Query::CompareSet).bytes(k.as_bytes()).bytes(expected).bytes(desired).finish();
        self.call(&msg, |d| d.value())
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        let ks = keys.iter().map(|k| prefixed(k)).collect::<Result<Vec<_>, _>>()?;
        self.check_raw(&ks)
    }

    /// Like torch's client: WAIT, and on timeout CANCEL_WAIT, nothing more on the wire. The
    /// timeout error names every key waited for; a caller needing the missing subset checks
    /// each key itself.
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        let ks = keys.iter().map(|k| prefixed(k)).collect::<Result<Vec<_>, _>>()?;
        wire::check_count(ks.len())?;
        let start = Instant::now();
        if self.wait_raw(&ks, timeout, None)? {
            return Ok(());
        }
        Err(StoreError::Timeout { keys: keys.iter().map(|k| k.to_string()).collect(), waited: start.elapsed() })
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        let k = prefixed(key)?;
        Ok(self.call(&Encoder::query(Query::DeleteKey).bytes(k.as_bytes()).finish(), |d| d.i64())? > 0)
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        self.call(&Encoder::query(Query::GetNumKeys).finish(), |d| d.i64())
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.wait(keys, self.timeout)?;
        self.multi_get_existing(keys)
    }

    fn multi_get_existing(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        let ks = keys.iter().map(|k| prefixed(k)).collect::<Result<Vec<_>, _>>()?;
        wire::check_count(ks.len())?;
        self.call(&Encoder::query(Query::MultiGet).keys(&ks).finish(), |d| (0..ks.len()).map(|_| d.value()).collect())
    }

    fn multi_set(&self, items: &[(&str, &[u8])]) -> Result<(), StoreError> {
        wire::check_count(items.len())?;
        let mut e = Encoder::query(Query::MultiSet).i64(items.len() as i64);
        for (k, v) in items {
            wire::check_value(k, v)?;
            e = e.bytes(prefixed(k)?.as_bytes()).bytes(v);
        }
        self.send(&e.finish())
    }
}
