//! The settings that define an initialization, and the idempotent slot holding the live state.
//!
//! `Settings` is an ordered list of `key=value` pairs: its text is the config fingerprint that
//! ranks compare at check-in, and comparing two of them names the keys that differ. Settings
//! that differ between ranks by design (the CUDA device) are local: compared between two calls
//! of one process, left out of the fingerprint.

use std::sync::{Mutex, MutexGuard};

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

/// Why `IdempotentSlot::init` failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotError<E> {
    /// Up already with other settings; lists the differences.
    DifferentSettings(Vec<String>),
    /// Bringing up failed.
    BringUp(E),
}

/// Holds the live state of one initialization behind a lock: init with the same settings is a
/// no-op, with other settings an error; `destroy` empties it so that init works again.
pub struct IdempotentSlot<T> {
    inner: Mutex<Option<(Settings, T)>>,
}

impl<T> Default for IdempotentSlot<T> {
    fn default() -> Self {
        IdempotentSlot { inner: Mutex::new(None) }
    }
}

impl<T> IdempotentSlot<T> {
    pub const fn new() -> Self {
        IdempotentSlot { inner: Mutex::new(None) }
    }

    fn lock(&self) -> MutexGuard<'_, Option<(Settings, T)>> {
        // A panic during bring-up leaves the slot empty (nothing was stored): keep using it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bring the state up with `bring_up` unless it is up already (see type docs).
    pub fn init<E>(
        &self,
        settings: Settings,
        bring_up: impl FnOnce() -> Result<T, E>,
    ) -> Result<InitOutcome, SlotError<E>> {
        let mut slot = self.lock();
        if let Some((current, _)) = slot.as_ref() {
            let diff = current.diff(&settings);
            return if diff.is_empty() { Ok(InitOutcome::AlreadyUp) } else { Err(SlotError::DifferentSettings(diff)) };
        }
        let state = bring_up().map_err(SlotError::BringUp)?;
        *slot = Some((settings, state));
        Ok(InitOutcome::Created)
    }

    /// Run `f` on the live state, or return None when not initialized.
    pub fn with<R>(&self, f: impl FnOnce(&Settings, &mut T) -> R) -> Option<R> {
        self.lock().as_mut().map(|(s, t)| f(s, t))
    }

    pub fn is_up(&self) -> bool {
        self.lock().is_some()
    }

    /// Take the state out (the caller tears it down); None when not initialized.
    pub fn take(&self) -> Option<(Settings, T)> {
        self.lock().take()
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
        assert_eq!(slot.with(|_, v| *v), Some(7));
        assert_eq!(slot.take().map(|(_, v)| v), Some(7));
        assert!(!slot.is_up());
        assert_eq!(slot.init(s(2, 4), || Err("boom")), Err(SlotError::BringUp("boom")));
        assert!(!slot.is_up());
        assert_eq!(slot.init::<()>(s(2, 4), || Ok(9)), Ok(InitOutcome::Created));
    }
}
