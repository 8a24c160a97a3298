//! CPU random streams: one ChaCha20 generator (`rand_chacha`) per name, each checkpointable to the
//! exact 32-bit word position.

use super::RngError;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// A stream's checkpoint: its seed and how many 32-bit words it has produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuStreamState {
    pub seed: u64,
    pub word_pos: u128,
}

#[derive(Debug, Clone)]
struct CpuStream {
    seed: u64,
    rng: ChaCha20Rng,
}

/// Named ChaCha20 streams in insertion order. A stream seeded with `s` is
/// `ChaCha20Rng::seed_from_u64(s)` (rand_core's documented seed expansion).
#[derive(Debug, Clone, Default)]
pub struct CpuStreams {
    streams: Vec<(String, CpuStream)>,
}

impl CpuStreams {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn clear(&mut self) {
        self.streams.clear();
    }

    /// Adds stream `name` seeded with `seed`; a duplicate name is an error.
    pub fn add(&mut self, name: &str, seed: u64) -> Result<(), RngError> {
        if self.streams.iter().any(|(n, _)| n == name) {
            return Err(RngError::Invalid(format!("CPU stream {name} already exists")));
        }
        self.streams.push((name.to_string(), CpuStream { seed, rng: ChaCha20Rng::seed_from_u64(seed) }));
        Ok(())
    }

    fn get_mut(&mut self, name: &str) -> Result<&mut ChaCha20Rng, RngError> {
        self.streams
            .iter_mut()
            .find(|(n, _)| n == name)
            .map(|(_, s)| &mut s.rng)
            .ok_or_else(|| RngError::NotAdded(format!("CPU stream {name}")))
    }

    pub fn fill_u32(&mut self, name: &str, out: &mut [u32]) -> Result<(), RngError> {
        let rng = self.get_mut(name)?;
        for v in out {
            *v = rng.next_u32();
        }
        Ok(())
    }

    /// Uniform doubles in [0, 1): the top 53 bits of a 64-bit draw times 2^-53.
    pub fn fill_f64(&mut self, name: &str, out: &mut [f64]) -> Result<(), RngError> {
        let rng = self.get_mut(name)?;
        for v in out {
            *v = (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        }
        Ok(())
    }

    /// Every stream's `(name, state)` in insertion order.
    pub fn states(&self) -> Vec<(String, CpuStreamState)> {
        self.streams
            .iter()
            .map(|(n, s)| (n.clone(), CpuStreamState { seed: s.seed, word_pos: s.rng.get_word_pos() }))
            .collect()
    }

    /// Replaces all streams with the given states (exact word positions).
    pub fn set_states(&mut self, states: &[(String, CpuStreamState)]) -> Result<(), RngError> {
        let mut fresh = CpuStreams::new();
        for (name, st) in states {
            fresh.add(name, st.seed)?;
            if let Some((_, s)) = fresh.streams.last_mut() {
                s.rng.set_word_pos(st.word_pos);
            }
        }
        *self = fresh;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_position_round_trips_mid_block() {
        let mut a = CpuStreams::new();
        a.add("default", 1234).unwrap();
        a.add("model-parallel-rng", 3952).unwrap();
        let mut skip = [0u32; 7];
        a.fill_u32("default", &mut skip).unwrap();
        let saved = a.states();
        assert_eq!(saved[0].1.word_pos, 7);
        let mut want = [0u32; 40];
        a.fill_u32("default", &mut want).unwrap();
        let mut b = CpuStreams::new();
        b.set_states(&saved).unwrap();
        let mut got = [0u32; 40];
        b.fill_u32("default", &mut got).unwrap();
        assert_eq!(got, want);
        assert!(a.add("default", 1).is_err());
        assert!(matches!(b.fill_u32("nope", &mut got), Err(RngError::NotAdded(_))));
    }

    #[test]
    fn streams_with_different_seeds_differ_and_f64_is_in_unit_interval() {
        let mut s = CpuStreams::new();
        s.add("a", 1).unwrap();
        s.add("b", 2).unwrap();
        let (mut x, mut y) = ([0u32; 4], [0u32; 4]);
        s.fill_u32("a", &mut x).unwrap();
        s.fill_u32("b", &mut y).unwrap();
        assert_ne!(x, y);
        let mut f = [0f64; 64];
        s.fill_f64("a", &mut f).unwrap();
        assert!(f.iter().all(|v| (0.0..1.0).contains(v)));
        assert_eq!(s.states()[0].1.word_pos, 4 + 128);
    }
}
