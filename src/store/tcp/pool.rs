//! A TCP store client that several threads can block in at once: each call borrows an idle
//! connection, or opens one more when every connection is busy (one blocked in a WAIT, say).
//!
//! The wire is strictly request/reply per connection, so one [`TcpStore`] serialises its
//! callers, and a thread waiting for a key holds the connection until the key appears. Threads
//! that create communicators concurrently each wait for their own group's keys while other
//! threads must still publish theirs: over one connection that would wait in a cycle across
//! ranks. The pool grows to the number of calls in flight at once (one connection while calls
//! come one by one).

use super::auth::TokenCell;
use super::TcpStore;
use crate::store::{Store, StoreError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A pool of connections to one store server; implements [`Store`] like a single connection.
pub struct TcpStorePool {
    host: String,
    port: u16,
    timeout: Duration,
    /// Proven by every new connection, when set (see [`TcpStore::connect_with_token`]).
    token: TokenCell,
    idle: Mutex<Vec<Arc<TcpStore>>>,
    all: Mutex<Vec<Arc<TcpStore>>>,
}

impl TcpStorePool {
    /// A pool starting with `first`, connected to `host:port`; later connections get the same
    /// store timeout as `first`.
    pub fn new(first: Arc<TcpStore>, host: &str, port: u16) -> TcpStorePool {
        let timeout = first.timeout();
        TcpStorePool {
            host: host.to_string(),
            port,
            timeout,
            token: TokenCell::default(),
            idle: Mutex::new(vec![first.clone()]),
            all: Mutex::new(vec![first]),
        }
    }

    /// New connections prove they hold the token `token` holds then (the server asks for it).
    pub fn with_token(mut self, token: TokenCell) -> TcpStorePool {
        self.token = token;
        self
    }

    /// The host new connections go to (as given to [`TcpStorePool::new`]).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Request/response exchanges over every connection of the pool so far.
    pub fn round_trips(&self) -> u64 {
        self.all.lock().map_or(0, |all| all.iter().map(|c| c.round_trips()).sum())
    }

    /// Shut every connection down (see [`TcpStore::abort`]): calls blocked on them end at once.
    pub fn abort_all(&self) {
        if let Ok(all) = self.all.lock() {
            all.iter().for_each(|c| c.abort());
        }
    }

    /// Shut down the connections a call is blocked on right now (see [`TcpStore::abort`]): those
    /// calls end at once with an error; the pool drops those connections, and later calls go over
    /// the idle ones or new ones.
    pub fn abort_busy(&self) {
        let idle: Vec<Arc<TcpStore>> = self.idle.lock().map(|i| i.clone()).unwrap_or_default();
        if let Ok(all) = self.all.lock() {
            all.iter().filter(|c| !idle.iter().any(|i| Arc::ptr_eq(i, c))).for_each(|c| c.abort());
        }
    }

    /// Let go of the idle connections made before this rank learnt the job's secret, once it
    /// has: the store cuts them off when it comes to serve only the job's ranks (and says so on
    /// its host's stderr). A busy one goes when its call returns (see `with`).
    pub fn let_go_of_unproven(&self) {
        let (Ok(mut idle), Ok(mut all)) = (self.idle.lock(), self.all.lock()) else { return };
        let gone: Vec<Arc<TcpStore>> = idle.iter().filter(|c| self.unproven(c)).cloned().collect();
        idle.retain(|c| !gone.iter().any(|g| Arc::ptr_eq(g, c)));
        all.retain(|c| !gone.iter().any(|g| Arc::ptr_eq(g, c)));
    }

    /// Made before this rank learnt the job's secret, which it knows now: not served once the
    /// store closes to outsiders.
    fn unproven(&self, c: &TcpStore) -> bool {
        !c.proven() && self.token.get().is_some()
    }

    /// Connections opened so far (the first included).
    pub fn connections(&self) -> usize {
        self.all.lock().map_or(0, |all| all.len())
    }

    /// See [`TcpStore::notice`], on a connection of the pool, followed by a read of `key` on the
    /// same connection: once this returns, the server has raised it.
    pub fn notice(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.with(|c| {
            c.notice(key, value)?;
            c.add(key, 0).map(drop)
        })
    }

    fn with<T>(&self, f: impl FnOnce(&TcpStore) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let lock_err = || StoreError::Io("store connection pool lock poisoned".into());
        let conn = loop {
            let idle = self.idle.lock().map_err(|_| lock_err())?.pop();
            match idle {
                // Left for one that proves the secret (see `unproven`).
                Some(c) if self.unproven(&c) => {
                    self.all.lock().map_err(|_| lock_err())?.retain(|x| !Arc::ptr_eq(x, &c));
                }
                Some(c) => break c,
                None => {
                    // The server answered `first`: a refusal now means it is gone.
                    let c = Arc::new(TcpStore::reconnect_with_token(
                        &self.host,
                        self.port,
                        self.timeout,
                        self.token.get().as_ref(),
                    )?);
                    self.all.lock().map_err(|_| lock_err())?.push(c.clone());
                    break c;
                }
            }
        };
        let result = f(&conn);
        if conn.is_usable() {
            self.idle.lock().map_err(|_| lock_err())?.push(conn);
        } else {
            // A broken connection (a failed exchange, an abort) serves no later call.
            self.all.lock().map_err(|_| lock_err())?.retain(|c| !Arc::ptr_eq(c, &conn));
        }
        result
    }
}

impl Store for TcpStorePool {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.with(|c| c.set(key, value))
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.with(|c| c.get(key))
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        self.with(|c| c.add(key, delta))
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.with(|c| c.compare_set(key, expected, desired))
    }
    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        self.with(|c| c.check(keys))
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        self.with(|c| c.wait(keys, timeout))
    }
    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        self.with(|c| c.delete_key(key))
    }
    fn num_keys(&self) -> Result<i64, StoreError> {
        self.with(|c| c.num_keys())
    }
    fn timeout(&self) -> Duration {
        self.timeout
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.with(|c| c.multi_get(keys))
    }
    fn multi_get_existing(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.with(|c| c.multi_get_existing(keys))
    }
    fn multi_set(&self, items: &[(&str, &[u8])]) -> Result<(), StoreError> {
        self.with(|c| c.multi_set(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TcpStoreServer;

    /// Real server and connections: a thread blocked in a WAIT does not hold up another
    /// thread's SET on the same pool (one connection would wait for ever, here until timeout).
    #[test]
    fn a_blocked_wait_does_not_hold_up_other_calls() {
        let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
        let t = Duration::from_secs(10);
        let first = Arc::new(TcpStore::connect("127.0.0.1", server.port(), t).unwrap());
        let pool = Arc::new(TcpStorePool::new(first, "127.0.0.1", server.port()));
        let waiter = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.get("b"))
        };
        // Give the waiter time to block in its WAIT (were it late, the test passes trivially).
        std::thread::sleep(Duration::from_millis(200));
        let start = std::time::Instant::now();
        pool.set("b", b"x").unwrap();
        assert!(start.elapsed() < Duration::from_secs(5), "the set waited behind the get");
        assert_eq!(waiter.join().unwrap().unwrap(), b"x");
        assert!(pool.connections() <= 2);
        assert!(pool.round_trips() >= 2);
    }

    /// A pool whose server went away: the call on the broken connection fails, and the one that
    /// needs a new connection is refused and fails at once (not retried until the store
    /// timeout, which is what a server that was never up gets).
    #[test]
    fn a_new_connection_to_a_server_that_went_away_fails_at_once() {
        let (mut server, first) = TcpStore::host("127.0.0.1", 0, Duration::from_secs(300)).unwrap();
        let port = server.port();
        let pool = TcpStorePool::new(Arc::new(first), "127.0.0.1", port);
        pool.set("k", b"v").unwrap();
        server.shutdown();
        drop(server);
        let _ = pool.get("k"); // over the old connection, which the server closed
        match pool.get("k") {
            Err(StoreError::Closed(m)) => assert!(m.contains("refused a new connection"), "{m}"),
            other => panic!("expected the refusal to end the call: {other:?}"),
        }
    }
}
