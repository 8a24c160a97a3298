//! The store calls of an initialization guarded by its liveness (see [`super::Liveness::guard`]).

use super::Shared;
use crate::lock::Unpoisoned;
use crate::runtime::meeting::keys::{blame, BLAME_PREFIX};
use crate::store::{Store, StoreError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// See [`super::Liveness::guard`].
pub(super) struct Guarded {
    pub(super) inner: Arc<dyn Store>,
    pub(super) liveness: Arc<Shared>,
}

impl Guarded {
    fn gone(&self) -> Option<StoreError> {
        let silent = self.liveness.store_silent.locked();
        silent.as_ref().map(|why| StoreError::Closed(self.liveness.gone_text(why)))
    }

    /// While peers' deaths end waits (see [`super::Liveness::on_peer_death`]) and one died: waiting for
    /// keys is pointless, a wait fails at once naming the dead.
    fn dead(&self) -> Option<StoreError> {
        if self.liveness.on_dead.locked().is_none() {
            return None;
        }
        let dead = self.liveness.dead.locked();
        (!dead.is_empty()).then(|| {
            StoreError::Closed(format!(
                "rank(s) {} died or stopped answering: not waiting for keys any longer",
                crate::runtime::launch::host::format_ranks(&dead)
            ))
        })
    }

    /// A wait (`f`), failing at once once a peer died (see [`Self::dead`]), and reported as that
    /// when a death ended it.
    fn wait_call<T>(&self, f: impl FnOnce(&dyn Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
        if let Some(e) = self.dead() {
            return Err(e);
        }
        self.call(f).map_err(|e| self.dead().unwrap_or(e))
    }

    /// A wait for blame records only (`meeting::explain`'s grace: a failing rank waits for the
    /// records of the members behind it). A death does not end it, since the ranks it waits for
    /// fail of that death too and record so at once; a dead rank's record is not waited for (it
    /// never comes), and a death during the wait leaves it waiting for the living. `None` when
    /// `keys` are not all blame records.
    fn grace_wait(&self, keys: &[&str], timeout: Duration) -> Option<Result<(), StoreError>> {
        let ranks: Vec<u32> = keys.iter().map(|k| blame_rank(k)).collect::<Option<_>>()?;
        let end = Instant::now() + timeout;
        Some(loop {
            let dead = self.liveness.dead.locked().clone();
            let living: Vec<&str> =
                keys.iter().zip(&ranks).filter(|(_, r)| !dead.contains(r)).map(|(k, _)| *k).collect();
            let left = end.saturating_duration_since(Instant::now());
            if living.is_empty() || left.is_zero() {
                break Err(StoreError::Timeout { keys: keys.iter().map(|k| k.to_string()).collect(), waited: timeout });
            }
            match self.call(|s| s.wait(&living, left)) {
                Err(_) if self.liveness.dead.locked().len() > dead.len() => {}
                got => break got,
            }
        })
    }

    /// `f` on the store unless its host is known gone; a failure that comes with the host found
    /// gone (the call was ended by it) is reported as that.
    fn call<T>(&self, f: impl FnOnce(&dyn Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
        if let Some(e) = self.gone() {
            return Err(e);
        }
        let s = &self.liveness;
        if s.busy.fetch_add(1, Ordering::SeqCst) == 0 && s.long_park.load(Ordering::SeqCst) {
            // The watcher is parked for a minute: wake it to check the host while this runs.
            s.wake();
        }
        let got = f(self.inner.as_ref());
        *s.busy_until.locked() = Some(Instant::now() + super::BUSY_LINGER);
        s.busy.fetch_sub(1, Ordering::SeqCst);
        got.map_err(|e| self.gone().unwrap_or(e))
    }
}

/// The rank whose blame record `key` is (`meeting::keys::blame`), if it is one.
fn blame_rank(key: &str) -> Option<u32> {
    let rank = key.strip_prefix(BLAME_PREFIX)?.parse().ok()?;
    (blame(rank) == key).then_some(rank)
}

impl Store for Guarded {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.call(|s| s.set(key, value))
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.wait_call(|s| s.get(key))
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        self.call(|s| s.add(key, delta))
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.call(|s| s.compare_set(key, expected, desired))
    }
    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        self.call(|s| s.check(keys))
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        self.grace_wait(keys, timeout).unwrap_or_else(|| self.wait_call(|s| s.wait(keys, timeout)))
    }
    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        self.call(|s| s.delete_key(key))
    }
    fn num_keys(&self) -> Result<i64, StoreError> {
        self.call(|s| s.num_keys())
    }
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.wait_call(|s| s.multi_get(keys))
    }
    fn multi_get_existing(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.call(|s| s.multi_get_existing(keys))
    }
    fn multi_set(&self, items: &[(&str, &[u8])]) -> Result<(), StoreError> {
        self.call(|s| s.multi_set(items))
    }
}
