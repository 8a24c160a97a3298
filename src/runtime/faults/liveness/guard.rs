//! The store calls of an attempt guarded by its liveness: once the store's host is found gone,
//! every call fails at once naming it (see [`super::Liveness::guard`]). Deaths of ranks are not
//! its business: the interrupt's levers and the watching meetings handle them.

use super::Shared;
use crate::lock::Unpoisoned;
use crate::store::{Around, Store, StoreError};
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

    /// `f` on the store unless its host is known gone; a failure that comes with the host found
    /// gone (the call was ended by it) is reported as that. After init a call that returns within
    /// `BUSY_PROBE_AFTER` costs the watcher nothing (a longer one has it probe the host until it
    /// returns), and one that got no answer has the host checked (`Shared::check_host_after`).
    fn call<T>(&self, f: impl FnOnce(&dyn Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
        if let Some(e) = self.gone() {
            return Err(e);
        }
        let s = &self.liveness;
        // Counted under the lock of `busy_since`, so that the two always agree.
        {
            let mut since = s.busy_since.locked();
            if s.busy.fetch_add(1, Ordering::SeqCst) == 0 {
                *since = Some(Instant::now());
            }
        }
        let got = f(self.inner.as_ref());
        {
            let mut since = s.busy_since.locked();
            if s.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
                *since = None;
            }
        }
        got.map_err(|e| {
            if self.gone().is_none() {
                s.check_host_after(&e);
            }
            self.gone().unwrap_or(e)
        })
    }
}

impl Around for Guarded {
    fn around<T>(&self, _: bool, f: impl FnOnce(&dyn Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.call(f)
    }
    fn inner_timeout(&self) -> Duration {
        self.inner.timeout()
    }
}

/// The rank's own liveness connection as a store (see [`super::Liveness::own_store`]): each call
/// borrows it from the watcher.
pub(super) struct Own(pub(super) Arc<Shared>);

impl Around for Own {
    fn around<T>(&self, _: bool, f: impl FnOnce(&dyn Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let store = self.0.borrow();
        f(&*store)
    }
    fn inner_timeout(&self) -> Duration {
        self.0.store().timeout()
    }
}
