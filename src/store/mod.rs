//! Rendezvous key-value stores: the [`Store`] trait every store implements, and its error type.
//!
//! Implementations: a TCP store wire-compatible with PyTorch c10d's `TCPStore` (client and
//! server), a prefix wrapper giving each group its own key space, and a file store.
//! Every blocking call is bounded by a timeout whose error names the keys it waited for.
#![forbid(unsafe_code)]

pub mod memory;
pub mod prefix;
pub mod tcp;

pub use memory::MemoryStore;
pub use prefix::PrefixStore;
pub use tcp::{ServerLimits, StoreToken, TcpStore, TcpStorePool, TcpStoreServer};

use std::fmt;
use std::time::Duration;

/// Default timeout of blocking store calls (torch's `Store::kDefaultTimeout` is 300 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// What went wrong in a store call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// A blocking call ran out of time; `keys` are the keys waited for (a TCP store names all
    /// of them, as torch's client does; callers needing the missing subset check per key).
    Timeout { keys: Vec<String>, waited: Duration },
    /// Connecting, reading or writing failed; the text names the address or path.
    Io(String),
    /// The peer sent something this protocol does not allow.
    Protocol(String),
    /// A bad argument (empty key, key too long, bad address, port in use ...), named.
    InvalidArgument(String),
    /// The store was shut down (server stopped, connection closed by the peer).
    Closed(String),
    /// The store at `peer` serves only the ranks of job `job` now (that job's initialization is
    /// over): a previous initialization's store still going away, or another job's.
    Locked { peer: String, job: String },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // A wait that is not for keys (connecting to the server) names itself as `<...>`.
            StoreError::Timeout { keys, waited }
                if keys.len() == 1 && keys[0].starts_with('<') && keys[0].ends_with('>') =>
            {
                write!(f, "timed out after {:.1} s: {}", waited.as_secs_f64(), &keys[0][1..keys[0].len() - 1])
            }
            StoreError::Timeout { keys, waited } => write!(
                f,
                "timed out after {:.1} s waiting for store key(s) {}",
                waited.as_secs_f64(),
                keys.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ")
            ),
            StoreError::Io(m) => write!(f, "store I/O error: {m}"),
            StoreError::Protocol(m) => write!(f, "store protocol error: {m}"),
            StoreError::InvalidArgument(m) => write!(f, "invalid store argument: {m}"),
            StoreError::Locked { peer, job } => write!(
                f,
                "the store at {peer} serves only the ranks of job {} now: that job's initialization is over",
                crate::quote::quoted(job)
            ),
            StoreError::Closed(m) => write!(f, "store closed: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// A rendezvous key-value store shared by all ranks of a job. Thread-safe.
///
/// Semantics follow torch's c10d `Store`: `get` waits for the key (up to [`Store::timeout`]);
/// `add` keeps the counter as ASCII decimal bytes; `compare_set` with a missing key and an empty
/// `expected` sets `desired`, with a missing key and a non-empty `expected` returns `expected`.
pub trait Store: Send + Sync {
    /// Set `key` to `value` (overwrites).
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError>;
    /// The value of `key`, waiting for it up to the store timeout.
    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError>;
    /// Add `delta` to the integer under `key` (missing = 0) and return the new value.
    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError>;
    /// Atomically replace `expected` by `desired`; returns the value now stored (see above).
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError>;
    /// Whether every key exists now (no waiting).
    fn check(&self, keys: &[&str]) -> Result<bool, StoreError>;
    /// Wait until every key exists, up to `timeout`; the error names the keys waited for.
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError>;
    /// Delete `key`; whether it existed.
    fn delete_key(&self, key: &str) -> Result<bool, StoreError>;
    /// Number of keys in the store (for a prefixed view: of the whole underlying store).
    fn num_keys(&self) -> Result<i64, StoreError>;
    /// The timeout applied by `get` (and by `wait` callers that have no other).
    fn timeout(&self) -> Duration;

    /// Values of several keys, waiting for all of them.
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.wait(keys, self.timeout())?;
        keys.iter().map(|k| self.get(k)).collect()
    }
    /// Values of keys a wait has just seen, read at once (no wait first, unlike
    /// [`Store::multi_get`]): one request instead of two on the TCP store. The runtime never
    /// deletes a key it waited for; a key missing after all reads as empty (so a failure path
    /// may read which keys exist with it, in one request: empty for those that do not).
    fn multi_get_existing(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        keys.iter().map(|k| if self.check(&[k])? { self.get(k) } else { Ok(Vec::new()) }).collect()
    }
    /// Set several keys.
    fn multi_set(&self, items: &[(&str, &[u8])]) -> Result<(), StoreError> {
        items.iter().try_for_each(|(k, v)| self.set(k, v))
    }
}

/// A store that passes every call to another, around a step of its own (a check first, a
/// connection borrowed, an error reworded): implement [`Around::around`] and the [`Store`] comes
/// with it. `waits` says whether the call may wait for keys (`get`, `wait`, `multi_get`).
pub trait Around: Send + Sync {
    /// Run `f` on the store under this one.
    fn around<T>(&self, waits: bool, f: impl FnOnce(&dyn Store) -> Result<T, StoreError>) -> Result<T, StoreError>;
    /// The store's timeout (see [`Store::timeout`]).
    fn inner_timeout(&self) -> Duration;
}

impl<A: Around> Store for A {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.around(false, |s| s.set(key, value))
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.around(true, |s| s.get(key))
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        self.around(false, |s| s.add(key, delta))
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.around(false, |s| s.compare_set(key, expected, desired))
    }
    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        self.around(false, |s| s.check(keys))
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        self.around(true, |s| s.wait(keys, timeout))
    }
    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        self.around(false, |s| s.delete_key(key))
    }
    fn num_keys(&self) -> Result<i64, StoreError> {
        self.around(false, |s| s.num_keys())
    }
    fn timeout(&self) -> Duration {
        self.inner_timeout()
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.around(true, |s| s.multi_get(keys))
    }
    fn multi_get_existing(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.around(false, |s| s.multi_get_existing(keys))
    }
    fn multi_set(&self, items: &[(&str, &[u8])]) -> Result<(), StoreError> {
        self.around(false, |s| s.multi_set(items))
    }
}

pub mod file;
pub use file::FileStore;
