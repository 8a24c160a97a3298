//! The named stream tracker with Megatron-Core's `CudaRNGStatesTracker` semantics (docs/topology.md,
//! "The named tracker"),
//! plus the "current device generator" it forks, modelled as a `(seed, offset)` pair.

use super::RngError;
use std::collections::BTreeSet;

/// Name of the stream that is current outside any fork (never stored in the map).
pub const DEFAULT_STATE_NAME: &str = "default-rng";
/// The caller-facing name of the default device generator (live only outside any fork).
pub const DEFAULT_STREAM: &str = "default";
/// The stream `fork` uses when no name is given.
pub const MODEL_PARALLEL_RNG: &str = "model-parallel-rng";
pub const EXPERT_PARALLEL_RNG: &str = "expert-parallel-rng";
pub const DATA_PARALLEL_RNG: &str = "data-parallel-rng";
/// Megatron-Core 0.19's stream for the dense weight-rematerialization axis (only when gtp > 1).
pub const GTP_REMAT_RNG: &str = "gtp-remat-rng";
/// Megatron-Core 0.19's stream for the expert weight-rematerialization axis (only when egtp > 1).
pub const EGTP_REMAT_RNG: &str = "egtp-remat-rng";

/// A Philox generator state: 16 bytes, the layout of a CUDA generator state in PyTorch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PhiloxState {
    pub seed: u64,
    pub offset: u64,
}

/// The device's current generator. `seed` is `None` until something seeds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Generator {
    pub seed: Option<u64>,
    pub offset: u64,
}

impl From<PhiloxState> for Generator {
    fn from(s: PhiloxState) -> Self {
        Generator { seed: Some(s.seed), offset: s.offset }
    }
}

impl Generator {
    fn as_state(self) -> PhiloxState {
        PhiloxState { seed: self.seed.unwrap_or(0), offset: self.offset }
    }
}

/// What one scoped fork remembers between enter and exit (the context manager's locals).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "pass the frame to Tracker::fork_exit"]
pub struct ForkFrame {
    name: String,
    outer_name: String,
    outer_state: Generator,
    /// An inference tracker's fork: nothing to undo.
    noop: bool,
}

impl ForkFrame {
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Rounds a Philox launch increment up to a multiple of 4, as PyTorch does.
pub fn round_increment(count: u64) -> Result<u64, RngError> {
    count
        .checked_add(3)
        .map(|c| c / 4 * 4)
        .ok_or_else(|| RngError::Overflow(format!("Philox increment {count} overflows 64 bits")))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracker {
    states: Vec<(String, PhiloxState)>,
    seeds: BTreeSet<u64>,
    initialized: bool,
    current_name: String,
    current: Generator,
    inference: bool,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            states: Vec::new(),
            seeds: BTreeSet::new(),
            initialized: false,
            current_name: DEFAULT_STATE_NAME.to_string(),
            current: Generator::default(),
            inference: false,
        }
    }
}

impl Tracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Megatron's inference tracker: `add`, `set_states` and scoped forks are no-ops (it stays
    /// empty and uninitialised); every stream name designates the current generator.
    pub fn inference() -> Self {
        Tracker { inference: true, ..Self::default() }
    }

    pub fn is_inference(&self) -> bool {
        self.inference
    }

    /// Empties names and seeds, clears the initialised flag, current name back to the default.
    /// The device generator itself is untouched.
    pub fn reset(&mut self) {
        self.states.clear();
        self.seeds.clear();
        self.initialized = false;
        self.current_name = DEFAULT_STATE_NAME.to_string();
    }

    pub fn is_initialized(&self) -> bool {
        self.initialized
    }

    pub fn current_state_name(&self) -> &str {
        &self.current_name
    }

    /// Seeds ever added since the last reset, ascending.
    pub fn seeds(&self) -> impl Iterator<Item = u64> + '_ {
        self.seeds.iter().copied()
    }

    /// The named states in insertion order (a copy, like `get_states`).
    pub fn get_states(&self) -> Vec<(String, PhiloxState)> {
        self.states.clone()
    }

    pub fn get(&self, name: &str) -> Option<PhiloxState> {
        self.states.iter().find(|(n, _)| n == name).map(|(_, s)| *s)
    }

    fn slot(&mut self, name: &str) -> Option<&mut PhiloxState> {
        self.states.iter_mut().find(|(n, _)| n == name).map(|(_, s)| s)
    }

    /// Replaces the whole map (keeping the seed set) and marks the tracker initialised.
    pub fn set_states(&mut self, states: Vec<(String, PhiloxState)>) {
        if self.inference {
            return;
        }
        self.states = states;
        self.initialized = true;
    }

    /// Overwrites one existing named (stored) state.
    fn set(&mut self, name: &str, state: PhiloxState) -> Result<(), RngError> {
        *self.slot(name).ok_or_else(|| RngError::NotAdded(name.to_string()))? = state;
        Ok(())
    }

    /// Adds a stream. Megatron's order: flag set, seed checked then recorded, then the name checked
    /// (so a failed duplicate-name add still burns its seed).
    pub fn add(&mut self, name: &str, seed: u64) -> Result<(), RngError> {
        if self.inference {
            return Ok(());
        }
        self.initialized = true;
        if !self.seeds.insert(seed) {
            return Err(RngError::SeedExists(seed));
        }
        if self.get(name).is_some() {
            return Err(RngError::NameExists(name.to_string()));
        }
        self.states.push((name.to_string(), PhiloxState { seed, offset: 0 }));
        Ok(())
    }

    /// The device's current generator.
    pub fn generator(&self) -> Generator {
        self.current
    }

    /// `torch.cuda.manual_seed(seed)` on the current generator: `(seed, 0)`.
    pub fn manual_seed(&mut self, seed: u64) {
        self.current = Generator { seed: Some(seed), offset: 0 };
    }

    /// A kernel on the current generator consumed `n` offsets.
    pub fn draw(&mut self, n: u64) -> Result<(), RngError> {
        self.current.offset = self
            .current
            .offset
            .checked_add(n)
            .ok_or_else(|| RngError::Overflow(format!("offset {} + {n} overflows", self.current.offset)))?;
        Ok(())
    }

    /// Enters a scoped fork (`with tracker.fork(name)`); `None` means `model-parallel-rng`.
    pub fn fork_enter(&mut self, name: Option<&str>) -> Result<ForkFrame, RngError> {
        let name = name.unwrap_or(MODEL_PARALLEL_RNG);
        if self.inference {
            let outer_name = self.current_name.clone();
            return Ok(ForkFrame { name: name.to_string(), outer_name, outer_state: self.current, noop: true });
        }
        let target = self.get(name).ok_or_else(|| RngError::NotAdded(name.to_string()))?;
        let outer_state = self.current;
        let outer_name = self.current_name.clone();
        if outer_name != DEFAULT_STATE_NAME {
            if let Some(slot) = self.slot(&outer_name) {
                *slot = outer_state.as_state();
            }
        }
        // re-read: a re-entrant fork of the same name just wrote the live state back
        let target = self.get(name).unwrap_or(target);
        self.current = target.into();
        self.current_name = name.to_string();
        Ok(ForkFrame { name: name.to_string(), outer_name, outer_state, noop: false })
    }

    /// Leaves a scoped fork; the innermost one must be left first.
    pub fn fork_exit(&mut self, frame: ForkFrame) -> Result<(), RngError> {
        if frame.noop {
            return Ok(());
        }
        if self.current_name != frame.name {
            return Err(RngError::ForkOrder { current: self.current_name.clone(), desired: frame.name });
        }
        let live = self.current.as_state();
        if let Some(slot) = self.slot(&frame.name) {
            *slot = live;
        }
        self.current = match self.get(&frame.outer_name) {
            Some(s) if frame.outer_name != DEFAULT_STATE_NAME => s.into(),
            _ => frame.outer_state,
        };
        self.current_name = frame.outer_name;
        Ok(())
    }

    /// Whether `name` designates the live (current) generator: the stream forked into, or
    /// `default` outside any fork.
    fn is_live(&self, name: &str) -> bool {
        self.inference
            || self.current_name == name
            || (name == DEFAULT_STREAM && self.current_name == DEFAULT_STATE_NAME)
    }

    /// The state of stream `name` (`default` = the default generator outside any fork; inside a
    /// scoped fork of `name`, its live state).
    pub fn state(&self, name: &str) -> Result<PhiloxState, RngError> {
        if self.is_live(name) {
            if self.current.seed.is_none() {
                return Err(RngError::NotAdded(name.to_string()));
            }
            return Ok(self.current.as_state());
        }
        self.get(name).ok_or_else(|| RngError::NotAdded(name.to_string()))
    }

    /// Overwrites the state of stream `name` (same naming as [`Tracker::state`]).
    pub fn set_state(&mut self, name: &str, state: PhiloxState) -> Result<(), RngError> {
        if self.is_live(name) {
            self.current = state.into();
            if name == DEFAULT_STREAM || self.inference {
                return Ok(());
            }
        }
        self.set(name, state)
    }

    /// One kernel launch on stream `name`: returns the Philox `(seed, offset)` to launch with and
    /// advances the stream by `count` rounded up to a multiple of 4. Inside a scoped fork of
    /// `name` the live (current) generator is the one advanced; `default` is the default generator.
    pub fn fork(&mut self, name: &str, count: u64) -> Result<PhiloxState, RngError> {
        let inc = round_increment(count)?;
        let state = self.state(name)?;
        let next = state.offset.checked_add(inc).ok_or_else(|| {
            RngError::Overflow(format!("stream {name}: offset {} + {inc} overflows 64 bits", state.offset))
        })?;
        if self.is_live(name) {
            self.current.offset = next;
        } else if let Some(slot) = self.slot(name) {
            slot.offset = next;
        }
        Ok(state)
    }

    /// Restores the full tracker contents (used by checkpoint restore).
    pub(crate) fn from_parts(
        states: Vec<(String, PhiloxState)>,
        seeds: BTreeSet<u64>,
        initialized: bool,
        current: Generator,
    ) -> Self {
        Tracker { states, seeds, initialized, current_name: DEFAULT_STATE_NAME.to_string(), current, inference: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_rounds_increment_to_four_and_returns_pre_launch_offset() {
        let mut t = Tracker::new();
        t.add("a", 10).unwrap();
        assert_eq!(t.fork("a", 5).unwrap(), PhiloxState { seed: 10, offset: 0 });
        assert_eq!(t.fork("a", 4).unwrap(), PhiloxState { seed: 10, offset: 8 });
        assert_eq!(t.fork("a", 0).unwrap(), PhiloxState { seed: 10, offset: 12 });
        assert_eq!(t.get("a").unwrap().offset, 12);
        assert_eq!(t.fork("b", 1), Err(RngError::NotAdded("b".into())));
        assert_eq!(t.fork("default", 1), Err(RngError::NotAdded("default".into())));
        t.manual_seed(3);
        assert_eq!(t.fork("default", 1).unwrap(), PhiloxState { seed: 3, offset: 0 });
        assert_eq!(t.state("default").unwrap(), PhiloxState { seed: 3, offset: 4 });
        t.set_state("default", PhiloxState { seed: 9, offset: 8 }).unwrap();
        assert_eq!(t.generator(), Generator { seed: Some(9), offset: 8 });
        t.set_state("a", PhiloxState { seed: 10, offset: 100 }).unwrap();
        assert_eq!(t.state("a").unwrap().offset, 100);
        assert!(matches!(round_increment(u64::MAX), Err(RngError::Overflow(_))));
    }

    #[test]
    fn inference_tracker_ignores_adds_and_forks() {
        let mut t = Tracker::inference();
        t.manual_seed(1234);
        t.add("model-parallel-rng", 3952).unwrap();
        t.set_states(vec![("x".into(), PhiloxState { seed: 1, offset: 0 })]);
        assert!(t.get_states().is_empty() && !t.is_initialized() && t.seeds().next().is_none());
        let f = t.fork_enter(None).unwrap();
        t.draw(4).unwrap();
        assert_eq!(t.current_state_name(), DEFAULT_STATE_NAME);
        t.fork_exit(f).unwrap();
        assert_eq!(t.generator(), Generator { seed: Some(1234), offset: 4 });
        assert_eq!(t.fork("model-parallel-rng", 1).unwrap(), PhiloxState { seed: 1234, offset: 4 });
        assert_eq!(t.generator().offset, 8);
    }

    #[test]
    fn launch_inside_scoped_fork_advances_the_live_generator() {
        let mut t = Tracker::new();
        t.manual_seed(1);
        t.add("a", 10).unwrap();
        let f = t.fork_enter(Some("a")).unwrap();
        assert_eq!(t.fork("a", 3).unwrap(), PhiloxState { seed: 10, offset: 0 });
        assert_eq!(t.generator().offset, 4);
        t.fork_exit(f).unwrap();
        assert_eq!(t.get("a").unwrap().offset, 4);
        assert_eq!(t.generator(), Generator { seed: Some(1), offset: 0 });
    }
}
