//! The TCPStore server: one thread accepts, one thread serves each connection. A WAIT whose keys
//! are missing is parked in the shared state; whoever creates the last missing key answers it
//! STOP_WAITING (under the state lock, so a later WAIT_CANCELED can never overtake it).
//! `shutdown` (or drop) stops the accept loop, shuts every connection socket and joins every
//! thread, so no descriptor or thread outlives the server.

use super::wire::{self, Decoder, Encoder, Query, ReadError};
use crate::store::StoreError;
use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest a reply write may block on a client that stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

type Writer = Arc<Mutex<TcpStream>>;

/// A WAIT parked until its keys exist.
struct Waiter {
    conn: u64,
    missing: HashSet<Vec<u8>>,
    writer: Writer,
}

#[derive(Default)]
struct State {
    map: HashMap<Vec<u8>, Vec<u8>>,
    waiters: Vec<Waiter>,
}

impl State {
    /// Record that `key` now exists: answer every waiter whose last missing key it was.
    fn created(&mut self, key: &[u8]) {
        let mut i = 0;
        while i < self.waiters.len() {
            let w = &mut self.waiters[i];
            if w.missing.remove(key) && w.missing.is_empty() {
                let w = self.waiters.swap_remove(i);
                // A failed write means the client is gone; its own thread will notice.
                let _ = lock(&w.writer).write_all(&[wire::STOP_WAITING]);
            } else {
                i += 1;
            }
        }
    }

    fn insert(&mut self, key: Vec<u8>, value: Vec<u8>) {
        let new = !self.map.contains_key(&key);
        self.map.insert(key.clone(), value);
        if new {
            self.created(&key);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Conn {
    stream: TcpStream,
    thread: JoinHandle<()>,
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    conns: Mutex<Vec<Conn>>,
}

/// A TCPStore server, wire-compatible with torch's (REFERENCE.md §6).
pub struct TcpStoreServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl TcpStoreServer {
    /// Listen on `host:port` (port 0: a free port, see [`TcpStoreServer::port`]).
    pub fn bind(host: &str, port: u16) -> Result<TcpStoreServer, StoreError> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| StoreError::InvalidArgument(format!("cannot resolve store host '{host}': {e}")))?
            .collect();
        let mut last = None;
        let mut listener = None;
        for a in &addrs {
            match TcpListener::bind(a) {
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
            None => StoreError::InvalidArgument(format!("store host '{host}' resolves to no address")),
        })?;
        let addr = listener.local_addr().map_err(|e| StoreError::Io(format!("local address of {host}:{port}: {e}")))?;
        let shared = Arc::new(Shared { state: Mutex::default(), stop: AtomicBool::new(false), conns: Mutex::default() });
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("store-accept-{}", addr.port()))
                .spawn(move || accept_loop(listener, shared))
                .map_err(|e| StoreError::Io(format!("spawn the store accept thread: {e}")))?
        };
        Ok(TcpStoreServer { shared, addr, accept: Some(accept) })
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting, close every connection and join every thread. Idempotent.
    pub fn shutdown(&mut self) {
        let Some(accept) = self.accept.take() else { return };
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => [127, 0, 0, 1].into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(5));
        let _ = accept.join();
        let conns = std::mem::take(&mut *lock(&self.shared.conns));
        for c in &conns {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        for c in conns {
            let _ = c.thread.join();
        }
        lock(&self.shared.state).waiters.clear();
    }
}

impl Drop for TcpStoreServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut next_id = 0u64;
    loop {
        let accepted = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok((stream, _)) = accepted else {
            // EMFILE and friends: back off a little instead of spinning.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let (Ok(keep), Ok(writer)) = (stream.try_clone(), stream.try_clone()) else { continue };
        next_id += 1;
        let id = next_id;
        let sh = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("store-conn-{id}"))
            .spawn(move || serve(id, stream, Arc::new(Mutex::new(writer)), sh));
        let mut conns = lock(&shared.conns);
        // Forget finished connections so a long-lived server does not accumulate them.
        let (done, live): (Vec<Conn>, Vec<Conn>) =
            std::mem::take(&mut *conns).into_iter().partition(|c| c.thread.is_finished());
        *conns = live;
        for c in done {
            let _ = c.thread.join();
        }
        if let Ok(thread) = spawned {
            conns.push(Conn { stream: keep, thread });
        }
        // The stop flag may have been set while we spawned: shutdown() handles the rest.
    }
}

/// Serve one connection until it closes or misbehaves.
fn serve(id: u64, stream: TcpStream, writer: Writer, shared: Arc<Shared>) {
    let mut d = Decoder::new(stream);
    while !shared.stop.load(Ordering::SeqCst) {
        match handle(id, &mut d, &writer, &shared) {
            Ok(true) => {}
            Ok(false) | Err(_) => break,
        }
    }
    lock(&shared.state).waiters.retain(|w| w.conn != id);
    let _ = d.get_mut().shutdown(Shutdown::Both);
}

fn reply(writer: &Writer, msg: &[u8]) -> Result<(), ReadError> {
    lock(writer).write_all(msg).map_err(ReadError::Io)
}

fn parse_counter(v: &[u8]) -> Option<i64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// Handle one request. `Ok(false)`: close the connection (a bad magic, an unknown query).
fn handle(id: u64, d: &mut Decoder<TcpStream>, writer: &Writer, shared: &Shared) -> Result<bool, ReadError> {
    let Some(q) = Query::from_u8(d.u8()?) else { return Ok(false) };
    let state = || lock(&shared.state);
    match q {
        Query::Validate => return Ok(d.u32()? == wire::VALIDATE_MAGIC),
        Query::Ping => {
            let nonce = d.u32()?;
            reply(writer, &Encoder::default().u32(nonce).finish())?;
        }
        Query::Set => {
            let (k, v) = (d.key_bytes()?, d.value()?);
            state().insert(k, v);
        }
        Query::CompareSet => {
            let (k, expected, desired) = (d.key_bytes()?, d.value()?, d.value()?);
            let now = {
                let mut s = state();
                match s.map.get(&k) {
                    None if expected.is_empty() => {
                        s.insert(k, desired.clone());
                        desired
                    }
                    None => expected,
                    Some(cur) if *cur == expected => {
                        s.insert(k, desired.clone());
                        desired
                    }
                    Some(cur) => cur.clone(),
                }
            };
            reply(writer, &Encoder::default().bytes(&now).finish())?;
        }
        Query::Get => {
            let k = d.key_bytes()?;
            let v = state().map.get(&k).cloned().unwrap_or_default();
            reply(writer, &Encoder::default().bytes(&v).finish())?;
        }
        Query::Add => {
            let (k, delta) = (d.key_bytes()?, d.i64()?);
            let now = {
                let mut s = state();
                let cur = match s.map.get(&k) {
                    None => 0,
                    // Not a counter, or overflow: no error reply exists; drop the connection.
                    Some(v) => match parse_counter(v) {
                        Some(n) => n,
                        None => return Ok(false),
                    },
                };
                let Some(now) = cur.checked_add(delta) else { return Ok(false) };
                s.insert(k, now.to_string().into_bytes());
                now
            };
            reply(writer, &Encoder::default().i64(now).finish())?;
        }
        Query::Check => {
            let keys = d.keys_bytes()?;
            let ready = {
                let s = state();
                keys.iter().all(|k| s.map.contains_key(k))
            };
            let r = if ready { wire::CHECK_READY } else { wire::CHECK_NOT_READY };
            reply(writer, &[r])?;
        }
        Query::Wait => {
            let keys = d.keys_bytes()?;
            let mut s = state();
            let missing: HashSet<Vec<u8>> = keys.into_iter().filter(|k| !s.map.contains_key(k)).collect();
            if missing.is_empty() {
                drop(s);
                reply(writer, &[wire::STOP_WAITING])?;
            } else {
                s.waiters.push(Waiter { conn: id, missing, writer: writer.clone() });
            }
        }
        Query::CancelWait => {
            // Under the state lock: a STOP_WAITING for a wait that fired is already written.
            let mut s = state();
            s.waiters.retain(|w| w.conn != id);
            lock(writer).write_all(&[wire::WAIT_CANCELED]).map_err(ReadError::Io)?;
        }
        Query::GetNumKeys => {
            let n = state().map.len() as i64;
            reply(writer, &Encoder::default().i64(n).finish())?;
        }
        Query::DeleteKey => {
            let k = d.key_bytes()?;
            let n = i64::from(state().map.remove(&k).is_some());
            reply(writer, &Encoder::default().i64(n).finish())?;
        }
        Query::Append => {
            let (k, v) = (d.key_bytes()?, d.value()?);
            let mut s = state();
            match s.map.get_mut(&k) {
                Some(cur) => cur.extend_from_slice(&v),
                None => s.insert(k, v),
            }
        }
        Query::MultiGet => {
            let keys = d.keys_bytes()?;
            let msg = {
                let s = state();
                keys.iter().fold(Encoder::default(), |e, k| e.bytes(s.map.get(k).map_or(&[][..], |v| v)))
            };
            reply(writer, &msg.finish())?;
        }
        Query::MultiSet => {
            let n = d.count()?;
            let items = (0..n).map(|_| Ok((d.key_bytes()?, d.value()?))).collect::<Result<Vec<_>, ReadError>>()?;
            let mut s = state();
            for (k, v) in items {
                s.insert(k, v);
            }
        }
    }
    Ok(true)
}
