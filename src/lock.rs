//! The crate's one lock-poison policy (a leaf, below every layer): a mutex whose holder panicked
//! is taken as it is, and so is a condition variable's wait on it. The crate's locks guard
//! state that every holder leaves whole between two statements (counters, maps, slots, flags),
//! and a panic is caught at the C boundary ([`crate::ffi`]): refusing the lock from then on would
//! turn one caught panic into a process that fails or hangs every later call. tests/hygiene
//! checks that no other file recovers a poisoned lock itself.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// [`Mutex::lock`] under the policy: the guard, poisoned or not.
pub(crate) trait Unpoisoned<T: ?Sized> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Unpoisoned<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`Condvar::wait`] and [`Condvar::wait_timeout`] under the policy: the guard back, poisoned or
/// not (a timed wait's caller reads its own clock to know whether the time is up).
pub(crate) trait UnpoisonedWait {
    fn wait_on<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T>;
    fn wait_up_to<'a, T>(&self, guard: MutexGuard<'a, T>, limit: Duration) -> MutexGuard<'a, T>;
}

impl UnpoisonedWait for Condvar {
    fn wait_on<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }
    fn wait_up_to<'a, T>(&self, guard: MutexGuard<'a, T>, limit: Duration) -> MutexGuard<'a, T> {
        self.wait_timeout(guard, limit).unwrap_or_else(PoisonError::into_inner).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_lock_whose_holder_panicked_is_taken_as_it_is() {
        let m = Arc::new(Mutex::new(1));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let mut g = held.lock().unwrap();
            *g = 2;
            panic!("holder panics");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*m.locked(), 2);
        let cv = Condvar::new();
        let g = cv.wait_up_to(m.locked(), Duration::from_millis(1));
        assert_eq!(*g, 2);
    }
}
