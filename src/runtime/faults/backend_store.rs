//! The store a backend creates its communicators through, while the attempt's interrupt is armed:
//! once a rank is known dead, a wait the backend begins fails at once instead of waiting out its
//! timeout for keys a dead rank may never write (a backend call is a call the interrupt ends; one
//! in flight is ended by the store's busy-abort lever). Everything else passes through.

use super::interrupt::Interrupt;
use super::verdict;
use crate::runtime::launch::host::format_ranks;
use crate::store::{Around, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// See the module docs.
pub(super) struct BackendStore {
    pub(super) inner: Arc<dyn Store>,
    pub(super) interrupt: Arc<Interrupt>,
}

impl Around for BackendStore {
    fn around<T>(&self, waits: bool, f: impl FnOnce(&dyn Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let dead = || (waits && self.interrupt.armed()).then(|| self.interrupt.dead()).filter(|d| !d.is_empty());
        let not_waiting = |d: Vec<u32>| StoreError::Closed(verdict::not_waiting(&format_ranks(&d)));
        if let Some(d) = dead() {
            return Err(not_waiting(d));
        }
        f(self.inner.as_ref()).map_err(|e| dead().map_or(e, not_waiting))
    }
    fn inner_timeout(&self) -> Duration {
        self.inner.timeout()
    }
}
