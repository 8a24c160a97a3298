//! The settings that define an initialization, and the idempotent slot holding the live state.
//!
//! `Settings` is an ordered list of `key=value` pairs: its text is the config fingerprint that
//! ranks compare at check-in, and comparing two of them names the keys that differ. Settings
//! that differ between ranks by design (the CUDA device) are local: compared between two calls
//! of one process, left out of the fingerprint.

use crate::lock::Unpoisoned;
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
    /// This rank is a spare ([`crate::runtime::InitArgs::spares`]): checked in, outside the layout, and
    /// standing by; `recovery::reinitialize` waits until a recovery needs it or the job ends.
    Spare,
}

/// Why `IdempotentSlot::init` or `IdempotentSlot::claim` failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotError<E> {
    /// Up already with other settings; lists the differences.
    DifferentSettings(Vec<String>),
    /// Another thread is between states (bringing the slot up, recovering, or taking it down);
    /// what it is doing.
    Busy(&'static str),
    /// Bringing up failed.
    BringUp(E),
}

/// The lifecycle of the one live state. The lock around it is held only for a transition, never
/// across a wait: a transition runs with the slot marked `Busy` and the lock released (the thread
/// running it holds the [`Claim`]), so a query from another thread answers at once ("not up").
enum Lifecycle<T, K> {
    Idle,
    /// A transition (an initialize, a recovery, a destroy) is running on the thread holding the
    /// [`Claim`]; what it is.
    Busy(&'static str),
    /// Up: the state is shared with whoever is using it right now (see [`IdempotentSlot::with`]).
    Up(Settings, Arc<T>),
    /// Not up, but something an earlier transition left to continue from (for the runtime: a
    /// failed attempt kept for recovery, a spare standing by, a store kept for others).
    Kept(K),
}

/// What a slot being brought up reads as, to other threads.
pub const INITIALIZING: &str = "an initialize is in progress";

/// Holds the live state of one initialization: init with the same settings is a no-op, with
/// other settings an error; `claim` (destroy) empties it so that init works again. A second
/// transition while one is running is refused at once (`SlotError::Busy`). Besides `Up`, the slot
/// can hold something kept (`K`) that is not up: the next transition starts from it.
pub struct IdempotentSlot<T, K = ()> {
    inner: Mutex<Lifecycle<T, K>>,
}

impl<T, K> Default for IdempotentSlot<T, K> {
    fn default() -> Self {
        Self::new()
    }
}

/// The right to run one transition of a slot (the slot reads `Busy` meanwhile). It ends with
/// [`Claim::up`]; dropped otherwise (an error, a panic), the slot holds what was [`Claim::keep`]t,
/// or is idle.
pub struct Claim<'a, T, K> {
    slot: &'a IdempotentSlot<T, K>,
    kept: Option<K>,
    ended: bool,
}

impl<T, K> Claim<'_, T, K> {
    /// What the slot holds when this transition ends without bringing the state up (replaces
    /// anything kept before).
    pub fn keep(&mut self, kept: K) {
        self.kept = Some(kept);
    }

    /// Take what the slot held before this transition (or what was kept since).
    pub fn take_kept(&mut self) -> Option<K> {
        self.kept.take()
    }

    /// Look at what is kept.
    pub fn kept(&self) -> Option<&K> {
        self.kept.as_ref()
    }

    /// End the transition with the state up; anything kept is dropped.
    pub fn up(mut self, settings: Settings, state: T) {
        self.ended = true;
        *self.slot.lock() = Lifecycle::Up(settings, Arc::new(state));
    }

    /// Bring the state up with `bring_up` (run without the slot's lock): `Ok(Some(state))` ends
    /// the transition up, `Ok(None)` ends it with what is kept (`InitOutcome::Spare`).
    pub fn bring_up<E>(
        mut self,
        settings: Settings,
        bring_up: impl FnOnce(&mut Self) -> Result<Option<T>, E>,
    ) -> Result<InitOutcome, SlotError<E>> {
        match bring_up(&mut self) {
            Ok(Some(state)) => {
                self.up(settings, state);
                Ok(InitOutcome::Created)
            }
            Ok(None) => Ok(InitOutcome::Spare),
            Err(e) => Err(SlotError::BringUp(e)),
        }
    }
}

impl<T, K> Drop for Claim<'_, T, K> {
    fn drop(&mut self) {
        if !self.ended {
            *self.slot.lock() = match self.kept.take() {
                Some(k) => Lifecycle::Kept(k),
                None => Lifecycle::Idle,
            };
        }
    }
}

impl<T, K> IdempotentSlot<T, K> {
    pub const fn new() -> Self {
        IdempotentSlot { inner: Mutex::new(Lifecycle::Idle) }
    }

    fn lock(&self) -> MutexGuard<'_, Lifecycle<T, K>> {
        // Nothing panics while the lock is held (transitions only): a poisoned lock still holds a
        // consistent state.
        self.inner.locked()
    }

    /// Bring the state up with `bring_up` unless it is up already (see type docs). `bring_up`
    /// runs without the lock, with the claim on the transition (what was kept, to continue from
    /// or drop; what to keep if it ends without the state up).
    pub fn init<'s, E>(
        &'s self,
        settings: Settings,
        bring_up: impl FnOnce(&mut Claim<'s, T, K>) -> Result<Option<T>, E>,
    ) -> Result<InitOutcome, SlotError<E>> {
        let claim = {
            let mut slot = self.lock();
            if let Lifecycle::Up(current, _) = &*slot {
                let diff = current.diff(&settings);
                return if diff.is_empty() {
                    Ok(InitOutcome::AlreadyUp)
                } else {
                    Err(SlotError::DifferentSettings(diff))
                };
            }
            self.begin(&mut slot, INITIALIZING).map_err(SlotError::Busy)?
        };
        claim.bring_up(settings, bring_up)
    }

    /// Idle or kept → busy with `what` (the claim holds what was kept). Up or busy: the slot is
    /// left as it is and the error is what it is busy with.
    fn begin(&self, slot: &mut Lifecycle<T, K>, what: &'static str) -> Result<Claim<'_, T, K>, &'static str> {
        let kept = match std::mem::replace(slot, Lifecycle::Busy(what)) {
            Lifecycle::Idle => None,
            Lifecycle::Kept(k) => Some(k),
            other => {
                let busy = if let Lifecycle::Busy(w) = other { w } else { what };
                *slot = other;
                return Err(busy);
            }
        };
        Ok(Claim { slot: self, kept, ended: false })
    }

    /// Run `f` on the live state, or return None when it is not up (idle, kept, or between
    /// states on another thread: answered at once). `f` runs without the slot's lock, so a long
    /// `f` (a collective) holds up no query of another thread.
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        let state = match &*self.lock() {
            Lifecycle::Up(_, state) => Arc::clone(state),
            _ => return None,
        };
        Some(f(&state))
    }

    /// Look at what is kept (`None` when nothing is, or the slot is up or busy). `f` runs under
    /// the lock: keep it short.
    pub fn with_kept<R>(&self, f: impl FnOnce(&K) -> R) -> Option<R> {
        match &*self.lock() {
            Lifecycle::Kept(k) => Some(f(k)),
            _ => None,
        }
    }

    /// Whether the state is up (not while it is being brought up or taken down).
    pub fn is_up(&self) -> bool {
        matches!(&*self.lock(), Lifecycle::Up(..))
    }

    /// Claim the slot for a transition `what` from whatever it holds: the live state taken out
    /// (with its settings), what was kept (in the claim), or nothing. Taking the state out waits,
    /// at most `wait` (as `wait(&state)` tells from the state), for other threads still inside
    /// [`Self::with`] to finish; past that the state stays up and the error says why. Another
    /// transition in progress: refused at once with what it is.
    #[allow(clippy::type_complexity)]
    pub fn claim(
        &self,
        what: &'static str,
        wait: impl FnOnce(&T) -> Duration,
    ) -> Result<(Claim<'_, T, K>, Option<(Settings, T)>), &'static str> {
        let (settings, mut state) = {
            let mut slot = self.lock();
            if !matches!(&*slot, Lifecycle::Up(..)) {
                return self.begin(&mut slot, what).map(|c| (c, None));
            }
            match std::mem::replace(&mut *slot, Lifecycle::Busy(what)) {
                Lifecycle::Up(settings, state) => (settings, state),
                other => {
                    *slot = other;
                    return Err(what);
                }
            }
        };
        let deadline = Instant::now() + wait(&state);
        loop {
            match Arc::try_unwrap(state) {
                Ok(owned) => return Ok((Claim { slot: self, kept: None, ended: false }, Some((settings, owned)))),
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

    const DESTROYING: &str = "a destroy is in progress";

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
            slot.init::<()>(s(2, 2), |_| {
                calls += 1;
                Ok(Some(7))
            }),
            Ok(InitOutcome::Created)
        );
        assert_eq!(
            slot.init::<()>(s(2, 2), |_| {
                calls += 1;
                Ok(Some(8))
            }),
            Ok(InitOutcome::AlreadyUp)
        );
        assert_eq!(calls, 1);
        assert_eq!(
            slot.init::<()>(s(2, 4), |_| Ok(Some(9))),
            Err(SlotError::DifferentSettings(vec!["pp: 2 -> 4".into()]))
        );
        assert_eq!(slot.with(|v| *v), Some(7));
        assert_eq!(slot.claim(DESTROYING, |_| Duration::ZERO).unwrap().1.map(|(_, v)| v), Some(7));
        assert!(!slot.is_up());
        assert_eq!(slot.init(s(2, 4), |_| Err("boom")), Err(SlotError::BringUp("boom")));
        assert!(!slot.is_up());
        assert_eq!(slot.init::<()>(s(2, 4), |_| Ok(Some(9))), Ok(InitOutcome::Created));
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
                slot.init::<()>(s(2, 2), |_| {
                    entered_tx.send(()).unwrap();
                    release_rx.recv_timeout(Duration::from_secs(20)).unwrap();
                    Ok(Some(5))
                })
            })
        };
        entered_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        for _ in 0..100 {
            let t0 = Instant::now();
            assert!(!slot.is_up());
            assert_eq!(slot.with(|v| *v), None);
            assert_eq!(slot.init::<()>(s(2, 2), |_| Ok(Some(6))), Err(SlotError::Busy("an initialize is in progress")));
            assert_eq!(slot.claim(DESTROYING, |_| Duration::ZERO).err(), Some(INITIALIZING));
            assert!(t0.elapsed() < Duration::from_millis(100), "a query waited {:?}", t0.elapsed());
        }
        release_tx.send(()).unwrap();
        assert_eq!(bringer.join().unwrap(), Ok(InitOutcome::Created));
        assert_eq!(slot.with(|v| *v), Some(5));
    }

    #[test]
    fn what_a_transition_keeps_is_the_next_ones_to_continue_from() {
        let slot: IdempotentSlot<u32, &str> = IdempotentSlot::new();
        // A failed bring-up that keeps something: not up, kept.
        let r = slot.init(s(2, 2), |c| {
            c.keep("failed attempt");
            Err::<Option<u32>, _>("peer gone")
        });
        assert_eq!(r, Err(SlotError::BringUp("peer gone")));
        assert!(!slot.is_up());
        assert_eq!(slot.with_kept(|k| *k), Some("failed attempt"));
        // The next transition starts from it; ending without the state up keeps what it says.
        let r = slot.init::<()>(s(2, 2), |c| {
            assert_eq!(c.take_kept(), Some("failed attempt"));
            c.keep("spare");
            Ok(None)
        });
        assert_eq!(r, Ok(InitOutcome::Spare));
        assert_eq!(slot.with_kept(|k| *k), Some("spare"));
        // While a transition runs, another is refused with what it is.
        let (mut claim, state) = slot.claim("a recovery is in progress", |_| Duration::ZERO).unwrap();
        assert!(state.is_none());
        assert_eq!(slot.init::<()>(s(2, 2), |_| Ok(Some(1))), Err(SlotError::Busy("a recovery is in progress")));
        assert_eq!(slot.with_kept(|k| *k), None);
        assert_eq!(claim.take_kept(), Some("spare"));
        // Up: what was kept goes.
        claim.keep("dropped when up");
        claim.up(s(2, 2), 4);
        assert_eq!(slot.with(|v| *v), Some(4));
        assert_eq!(slot.with_kept(|k| *k), None);
        // A claim dropped with nothing kept leaves the slot idle.
        let (claim, state) = slot.claim(DESTROYING, |_| Duration::ZERO).unwrap();
        assert_eq!(state.map(|(_, v)| v), Some(4));
        drop(claim);
        assert!(!slot.is_up() && slot.with_kept(|k| *k).is_none());
        assert_eq!(slot.init::<()>(s(2, 4), |c| Ok(c.kept().map_or(Some(9), |_| None))), Ok(InitOutcome::Created));
    }

    #[test]
    fn a_panicking_bring_up_leaves_the_slot_idle() {
        let slot: IdempotentSlot<u32> = IdempotentSlot::new();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| slot.init::<()>(s(2, 2), |_| panic!("boom"))));
        assert!(r.is_err());
        assert!(!slot.is_up());
        assert_eq!(slot.init::<()>(s(2, 2), |_| Ok(Some(1))), Ok(InitOutcome::Created));
    }

    #[test]
    fn take_waits_for_a_user_within_its_bound_then_reports_busy() {
        use std::sync::mpsc;
        let slot: Arc<IdempotentSlot<u32>> = Arc::new(IdempotentSlot::new());
        slot.init::<()>(s(2, 2), |_| Ok(Some(3))).unwrap();
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
        assert!(slot.claim(DESTROYING, |_| Duration::from_millis(50)).err().unwrap().contains("still using"));
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert!(slot.is_up());
        // The user leaves while take waits: take gets the state.
        let slot2 = Arc::clone(&slot);
        let taker = std::thread::spawn(move || slot2.claim(DESTROYING, |_| Duration::from_secs(20)).map(|(_, v)| v));
        std::thread::sleep(Duration::from_millis(50));
        leave_tx.send(()).unwrap();
        assert_eq!(user.join().unwrap(), Some(3));
        assert_eq!(taker.join().unwrap().unwrap().map(|(_, v)| v), Some(3));
        assert!(!slot.is_up());
    }
}
