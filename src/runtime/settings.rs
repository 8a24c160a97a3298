//! The settings that define an initialization, and the idempotent slot holding the live state.
//!
//! `Settings` is an ordered list of `key=value` pairs: its text is the config fingerprint that
//! ranks compare at check-in, and comparing two of them names the keys that differ. Settings
//! that differ between ranks by design (the CUDA device) are local: compared between two calls
//! of one process, left out of the fingerprint.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Ordered `key=value` settings of one initialization.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    shared: Vec<(String, String)>,
    local: Vec<(String, String)>,
}

fn put(list: &mut Vec<(String, String)>, key: &str, value: String) {
    match list.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => list.push((key.to_string(), value)),
    }
}

impl Settings {
    pub fn new() -> Self {
        Settings::default()
    }

    /// Append a setting every rank must share (keys are unique; a repeated key replaces the
    /// earlier value).
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        put(&mut self.shared, key, value.to_string());
        self
    }

    /// Append a setting of this rank alone (not in the fingerprint).
    pub fn with_local(mut self, key: &str, value: impl ToString) -> Self {
        put(&mut self.local, key, value.to_string());
        self
    }

    fn all(&self) -> impl Iterator<Item = &(String, String)> {
        self.shared.iter().chain(&self.local)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.all().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The shared `key=value` pairs joined by spaces: the fingerprint ranks compare.
    pub fn fingerprint(&self) -> String {
        self.shared.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }

    /// Human-readable differences `key: this -> other`, in key order of `self` then `other`.
    pub fn diff(&self, other: &Settings) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v) in self.all() {
            match other.get(k) {
                Some(w) if w == v => {}
                Some(w) => out.push(format!("{k}: {v} -> {w}")),
                None => out.push(format!("{k}: {v} -> (unset)")),
            }
        }
        for (k, w) in other.all() {
            if self.get(k).is_none() {
                out.push(format!("{k}: (unset) -> {w}"));
            }
        }
        out
    }
}

/// What `IdempotentSlot::init` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitOutcome {
    /// Brought up now.
    Created,
    /// Already up with the same settings: nothing done.
    AlreadyUp,
    /// This rank is a spare ([`super::InitArgs::spares`]): checked in, outside the layout, and
    /// standing by; `recovery::reinitialize` waits until a recovery needs it or the job ends.
    Spare,
}

/// Why `IdempotentSlot::init` or `IdempotentSlot::take` failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotError<E> {
    /// Up already with other settings; lists the differences.
    DifferentSettings(Vec<String>),
    /// Another thread is between states (bringing the slot up, or taking it down); what it is doing.
    Busy(&'static str),
    /// Bringing up failed.
    BringUp(E),
}

/// The lifecycle of the one live state. The lock around it is held only for a transition, never
/// across a wait: bringing up runs with the slot marked `Initializing` and the lock released, so a
/// query from another thread answers at once ("not up").
enum Lifecycle<T> {
    Idle,
    /// A bring-up is running on some thread.
    Initializing,
    /// Up: the state is shared with whoever is using it right now (see [`IdempotentSlot::with`]).
    Up(Settings, Arc<T>),
    /// A take is waiting for the last user of the state to finish.
    Closing,
}

/// Why a slot refuses at once: another thread is bringing it up.
const INITIALIZING: &str = "an initialize is in progress";

/// Holds the live state of one initialization: init with the same settings is a no-op, with
/// other settings an error; `take` empties it so that init works again. A second init while one
/// is running, or while the state is being taken, is refused at once (`SlotError::Busy`).
pub struct IdempotentSlot<T> {
    inner: Mutex<Lifecycle<T>>,
}

impl<T> Default for IdempotentSlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Puts a slot left `Initializing` by a bring-up that panicked back to `Idle`.
struct ResetOnUnwind<'a, T> {
    slot: &'a IdempotentSlot<T>,
    armed: bool,
}

impl<T> Drop for ResetOnUnwind<'_, T> {
    fn drop(&mut self) {
        if self.armed {
            *self.slot.lock() = Lifecycle::Idle;
        }
    }
}

impl<T> IdempotentSlot<T> {
    pub const fn new() -> Self {
        IdempotentSlot { inner: Mutex::new(Lifecycle::Idle) }
    }

    fn lock(&self) -> MutexGuard<'_, Lifecycle<T>> {
        // Nothing panics while the lock is held (transitions only): a poisoned lock still holds a
        // consistent state.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bring the state up with `bring_up` unless it is up already (see type docs). `bring_up`
    /// runs without the lock.
    pub fn init<E>(
        &self,
        settings: Settings,
        bring_up: impl FnOnce() -> Result<T, E>,
    ) -> Result<InitOutcome, SlotError<E>> {
        {
            let mut slot = self.lock();
            match &*slot {
                Lifecycle::Idle => *slot = Lifecycle::Initializing,
                Lifecycle::Initializing => return Err(SlotError::Busy(INITIALIZING)),
                Lifecycle::Closing => return Err(SlotError::Busy("a destroy is in progress")),
                Lifecycle::Up(current, _) => {
                    let diff = current.diff(&settings);
                    return if diff.is_empty() {
                        Ok(InitOutcome::AlreadyUp)
                    } else {
                        Err(SlotError::DifferentSettings(diff))
                    };
                }
            }
        }
        let mut reset = ResetOnUnwind { slot: self, armed: true };
        let result = bring_up();
        reset.armed = false;
        let mut slot = self.lock();
        match result {
            Ok(state) => {
                *slot = Lifecycle::Up(settings, Arc::new(state));
                Ok(InitOutcome::Created)
            }
            Err(e) => {
                *slot = Lifecycle::Idle;
                Err(SlotError::BringUp(e))
            }
        }
    }

    /// Run `f` on the live state, or return None when it is not up (idle, or being brought up or
    /// taken down on another thread: answered at once). `f` runs without the slot's lock, so a
    /// long `f` (a collective) holds up no query of another thread.
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        let state = match &*self.lock() {
            Lifecycle::Up(_, state) => Arc::clone(state),
            _ => return None,
        };
        Some(f(&state))
    }

    /// Whether the state is up (not while it is being brought up or taken down).
    pub fn is_up(&self) -> bool {
        matches!(&*self.lock(), Lifecycle::Up(..))
    }

    /// Take the state out (the caller tears it down); `Ok(None)` when it is not up. Waits, at most
    /// `wait` (as `wait(&state)` tells from the state), for other threads still inside
    /// [`Self::with`] to finish; past that the state stays up and the error says why (the slot is busy).
    pub fn take(&self, wait: impl FnOnce(&T) -> Duration) -> Result<Option<(Settings, T)>, &'static str> {
        let (settings, mut state) = {
            let mut slot = self.lock();
            match std::mem::replace(&mut *slot, Lifecycle::Closing) {
                Lifecycle::Up(settings, state) => (settings, state),
                Lifecycle::Initializing => {
                    *slot = Lifecycle::Initializing;
                    return Err(INITIALIZING);
                }
                other => {
                    *slot = other;
                    return Ok(None);
                }
            }
        };
        let deadline = Instant::now() + wait(&state);
        loop {
            match Arc::try_unwrap(state) {
                Ok(owned) => {
                    *self.lock() = Lifecycle::Idle;
                    return Ok(Some((settings, owned)));
                }
                Err(shared) if Instant::now() < deadline => {
                    state = shared;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(shared) => {
                    *self.lock() = Lifecycle::Up(settings, shared);
                    return Err("another thread is still using the runtime (a collective in progress)");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(tp: u32, pp: u32) -> Settings {
        Settings::new().with("world", 8).with("tp", tp).with("pp", pp)
    }

    #[test]
    fn fingerprint_and_diff_name_keys() {
        assert_eq!(s(2, 2).fingerprint(), "world=8 tp=2 pp=2");
        assert_eq!(s(2, 2).diff(&s(4, 2)), vec!["tp: 2 -> 4"]);
        assert_eq!(s(2, 2).with("seed", 1).diff(&s(2, 2)), vec!["seed: 1 -> (unset)"]);
        assert!(s(2, 2).diff(&s(2, 2)).is_empty());
        // A local setting is compared but not fingerprinted.
        assert_eq!(s(2, 2).with_local("device", 1).fingerprint(), "world=8 tp=2 pp=2");
        assert_eq!(s(2, 2).with_local("device", 1).diff(&s(2, 2).with_local("device", 0)), vec!["device: 1 -> 0"]);
    }

    #[test]
    fn same_again_is_a_noop_other_is_an_error_destroy_allows_reinit() {
        let slot: IdempotentSlot<u32> = IdempotentSlot::new();
        let mut calls = 0;
        assert_eq!(
            slot.init::<()>(s(2, 2), || {
                calls += 1;
                Ok(7)
            }),
            Ok(InitOutcome::Created)
        );
        assert_eq!(
            slot.init::<()>(s(2, 2), || {
                calls += 1;
                Ok(8)
            }),
            Ok(InitOutcome::AlreadyUp)
        );
        assert_eq!(calls, 1);
        assert_eq!(slot.init::<()>(s(2, 4), || Ok(9)), Err(SlotError::DifferentSettings(vec!["pp: 2 -> 4".into()])));
        assert_eq!(slot.with(|v| *v), Some(7));
        assert_eq!(slot.take(|_| Duration::ZERO).unwrap().map(|(_, v)| v), Some(7));
        assert!(!slot.is_up());
        assert_eq!(slot.init(s(2, 4), || Err("boom")), Err(SlotError::BringUp("boom")));
        assert!(!slot.is_up());
        assert_eq!(slot.init::<()>(s(2, 4), || Ok(9)), Ok(InitOutcome::Created));
    }

    #[test]
    fn queries_and_a_second_init_answer_at_once_while_a_bring_up_runs() {
        use std::sync::mpsc;
        let slot: Arc<IdempotentSlot<u32>> = Arc::new(IdempotentSlot::new());
        let (entered_tx, entered_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let bringer = {
            let slot = Arc::clone(&slot);
            std::thread::spawn(move || {
                slot.init::<()>(s(2, 2), || {
                    entered_tx.send(()).unwrap();
                    release_rx.recv_timeout(Duration::from_secs(20)).unwrap();
                    Ok(5)
                })
            })
        };
        entered_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        for _ in 0..100 {
            let t0 = Instant::now();
            assert!(!slot.is_up());
            assert_eq!(slot.with(|v| *v), None);
            assert_eq!(slot.init::<()>(s(2, 2), || Ok(6)), Err(SlotError::Busy("an initialize is in progress")));
            assert_eq!(slot.take(|_| Duration::ZERO).err(), Some("an initialize is in progress"));
            assert!(t0.elapsed() < Duration::from_millis(100), "a query waited {:?}", t0.elapsed());
        }
        release_tx.send(()).unwrap();
        assert_eq!(bringer.join().unwrap(), Ok(InitOutcome::Created));
        assert_eq!(slot.with(|v| *v), Some(5));
    }

    #[test]
    fn a_panicking_bring_up_leaves_the_slot_idle() {
        let slot: IdempotentSlot<u32> = IdempotentSlot::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| slot.init::<()>(s(2, 2), || panic!("boom"))));
        assert!(r.is_err());
        assert!(!slot.is_up());
        assert_eq!(slot.init::<()>(s(2, 2), || Ok(1)), Ok(InitOutcome::Created));
    }

    #[test]
    fn take_waits_for_a_user_within_its_bound_then_reports_busy() {
        use std::sync::mpsc;
        let slot: Arc<IdempotentSlot<u32>> = Arc::new(IdempotentSlot::new());
        slot.init::<()>(s(2, 2), || Ok(3)).unwrap();
        let (inside_tx, inside_rx) = mpsc::channel();
        let (leave_tx, leave_rx) = mpsc::channel::<()>();
        let user = {
            let slot = Arc::clone(&slot);
            std::thread::spawn(move || {
                slot.with(|v| {
                    inside_tx.send(()).unwrap();
                    leave_rx.recv_timeout(Duration::from_secs(20)).unwrap();
                    *v
                })
            })
        };
        inside_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        // A user inside `with` past the bound: the state stays up.
        let t0 = Instant::now();
        assert!(slot.take(|_| Duration::from_millis(50)).unwrap_err().contains("still using"));
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert!(slot.is_up());
        // The user leaves while take waits: take gets the state.
        let slot2 = Arc::clone(&slot);
        let taker = std::thread::spawn(move || slot2.take(|_| Duration::from_secs(20)));
        std::thread::sleep(Duration::from_millis(50));
        leave_tx.send(()).unwrap();
        assert_eq!(user.join().unwrap(), Some(3));
        assert_eq!(taker.join().unwrap().unwrap().map(|(_, v)| v), Some(3));
        assert!(!slot.is_up());
    }
}
