//! Philox4x32-10 on the CPU, reproducing cuRAND's `curandStatePhilox4_32_10_t` stream:
//! `curand_init(seed, subsequence, offset)` followed by `curand()` / `curand_uniform()`.
//!
//! Layout (cuRAND's `curand_philox4x32_x.h` / `curand_kernel.h`): the 64-bit seed is the key
//! (low 32 bits in key word 0, high 32 bits in key word 1); the subsequence is added to the high
//! 64 bits of the 128-bit counter (words z, w), so each subsequence is 2^66 values long; the
//! offset skips `offset / 4` counter blocks and starts inside the block at word `offset % 4`.
//! One counter block gives four 32-bit outputs. `curand_uniform(x) = x·2^-32 + 2^-33` in f32.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// One Philox4x32 round.
#[inline(always)]
fn round(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let p0 = u64::from(M0) * u64::from(ctr[0]);
    let p1 = u64::from(M1) * u64::from(ctr[2]);
    let (hi0, lo0) = ((p0 >> 32) as u32, p0 as u32);
    let (hi1, lo1) = ((p1 >> 32) as u32, p1 as u32);
    [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0]
}

/// The Philox4x32-10 block function: counter `(x, y, z, w)` and key `(k0, k1)` to four words.
#[inline]
pub fn philox4x32_10(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for _ in 0..9 {
        ctr = round(ctr, key);
        key[0] = key[0].wrapping_add(W0);
        key[1] = key[1].wrapping_add(W1);
    }
    round(ctr, key)
}

/// cuRAND's float conversion: `x·2^-32 + 2^-33`, rounded to f32 (never 0, may be 1.0).
#[inline]
pub fn curand_uniform_from_u32(x: u32) -> f32 {
    // 2^-32 and 2^-33 are exact in f32 and the product by a power of two is exact, so a fused or
    // unfused multiply-add round identically.
    (x as f32) * f32::from_bits(0x2F80_0000) + f32::from_bits(0x2F00_0000)
}

/// A CPU copy of cuRAND's Philox4_32_10 state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurandPhilox {
    ctr: [u32; 4],
    key: [u32; 2],
    output: [u32; 4],
    index: usize,
}

impl CurandPhilox {
    /// Same as `curand_init(seed, subsequence, offset, &state)`.
    pub fn new(seed: u64, subsequence: u64, offset: u64) -> Self {
        let mut s = CurandPhilox { ctr: [0; 4], key: [seed as u32, (seed >> 32) as u32], output: [0; 4], index: 0 };
        s.add_hi(subsequence);
        s.output = philox4x32_10(s.ctr, s.key);
        s.skip_ahead(offset);
        s
    }

    /// Adds `n` to the counter's high 64 bits (words z, w), as cuRAND's subsequence skip does.
    fn add_hi(&mut self, n: u64) {
        let hi = (u64::from(self.ctr[3]) << 32 | u64::from(self.ctr[2])).wrapping_add(n);
        self.ctr[2] = hi as u32;
        self.ctr[3] = (hi >> 32) as u32;
    }

    /// Adds `n` to the counter with cuRAND's carry rule (a carry out of word y moves into z, w).
    fn add(&mut self, n: u64) {
        let nlo = n as u32;
        let mut nhi = (n >> 32) as u32;
        self.ctr[0] = self.ctr[0].wrapping_add(nlo);
        if self.ctr[0] < nlo {
            nhi = nhi.wrapping_add(1);
        }
        self.ctr[1] = self.ctr[1].wrapping_add(nhi);
        if nhi <= self.ctr[1] {
            return;
        }
        self.incr_from_z();
    }

    fn incr_from_z(&mut self) {
        self.ctr[2] = self.ctr[2].wrapping_add(1);
        if self.ctr[2] == 0 {
            self.ctr[3] = self.ctr[3].wrapping_add(1);
        }
    }

    fn incr(&mut self) {
        self.ctr[0] = self.ctr[0].wrapping_add(1);
        if self.ctr[0] != 0 {
            return;
        }
        self.ctr[1] = self.ctr[1].wrapping_add(1);
        if self.ctr[1] != 0 {
            return;
        }
        self.incr_from_z();
    }

    /// Same as cuRAND's `skipahead(n, &state)`: skip `n` outputs.
    pub fn skip_ahead(&mut self, n: u64) {
        let mut index = self.index + (n & 3) as usize;
        let mut blocks = n / 4;
        if index > 3 {
            blocks += 1;
            index -= 4;
        }
        self.index = index;
        self.add(blocks);
        self.output = philox4x32_10(self.ctr, self.key);
    }

    /// Same as `curand(&state)`.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        let v = self.output[self.index];
        self.index += 1;
        if self.index > 3 {
            self.incr();
            self.output = philox4x32_10(self.ctr, self.key);
            self.index = 0;
        }
        v
    }

    /// Same as `curand_uniform(&state)`.
    #[inline]
    pub fn next_uniform(&mut self) -> f32 {
        curand_uniform_from_u32(self.next_u32())
    }

    /// The 128-bit counter `(x, y, z, w)` of the block the next output comes from.
    pub fn counter(&self) -> [u32; 4] {
        self.ctr
    }
}

/// `n = out.len()` successive `curand()` values after `curand_init(seed, subsequence, offset)`.
pub fn fill_u32(seed: u64, subsequence: u64, offset: u64, out: &mut [u32]) {
    let mut g = CurandPhilox::new(seed, subsequence, offset);
    for v in out {
        *v = g.next_u32();
    }
}

/// `n = out.len()` successive `curand_uniform()` values after `curand_init(seed, subsequence, offset)`.
pub fn fill_uniform(seed: u64, subsequence: u64, offset: u64, out: &mut [f32]) {
    let mut g = CurandPhilox::new(seed, subsequence, offset);
    for v in out {
        *v = g.next_uniform();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123 `tests/kat_vectors`, the three `philox4x32 10` lines: ctr[4], key[2] → out[4].
    const KAT: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
        ([0, 0, 0, 0], [0, 0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
        (
            [0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff],
            [0xffffffff, 0xffffffff],
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
        ),
        (
            [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
            [0xa4093822, 0x299f31d0],
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
        ),
    ];

    #[test]
    fn random123_known_answers() {
        for (ctr, key, want) in KAT {
            assert_eq!(philox4x32_10(ctr, key), want, "ctr {ctr:08x?} key {key:08x?}");
        }
    }

    #[test]
    fn seed_is_the_key_and_first_block_is_counter_zero() {
        // seed = key1:key0; with subsequence 0 and offset 0 the first four outputs are block 0.
        let seed = (0x299f31d0u64 << 32) | 0xa4093822;
        let mut g = CurandPhilox::new(seed, 0, 0);
        let got: Vec<u32> = (0..4).map(|_| g.next_u32()).collect();
        assert_eq!(got, philox4x32_10([0, 0, 0, 0], [0xa4093822, 0x299f31d0]).to_vec());
        // the fifth output comes from counter 1
        assert_eq!(g.next_u32(), philox4x32_10([1, 0, 0, 0], [0xa4093822, 0x299f31d0])[0]);
    }

    #[test]
    fn subsequence_goes_to_counter_words_z_w() {
        let sub = 0x0370_7344_1319_8a2eu64;
        let g = CurandPhilox::new(0, sub, 0);
        assert_eq!(g.counter(), [0, 0, 0x13198a2e, 0x03707344]);
        let mut g = CurandPhilox::new(0xffff_ffff_ffff_ffff, 0xffff_ffff_ffff_ffff, 0);
        assert_eq!(g.next_u32(), philox4x32_10([0, 0, 0xffffffff, 0xffffffff], [0xffffffff; 2])[0]);
    }

    #[test]
    fn offset_skips_whole_blocks_then_words() {
        let key = [7u32, 0];
        for offset in 0..13u64 {
            let mut g = CurandPhilox::new(7, 0, offset);
            let block = philox4x32_10([(offset / 4) as u32, 0, 0, 0], key);
            assert_eq!(g.next_u32(), block[(offset % 4) as usize], "offset {offset}");
        }
        // init at offset k equals init at 0 and discarding k values
        let mut a = CurandPhilox::new(99, 3, 0);
        for _ in 0..11 {
            a.next_u32();
        }
        let mut b = CurandPhilox::new(99, 3, 11);
        for _ in 0..9 {
            assert_eq!(a.next_u32(), b.next_u32());
        }
        // skip_ahead after draws composes like cuRAND's (word index carries into the block count)
        let mut c = CurandPhilox::new(99, 3, 3);
        c.skip_ahead(6);
        assert_eq!(c, CurandPhilox::new(99, 3, 9));
    }

    #[test]
    fn large_offset_carries_from_y_into_z() {
        // offset u64::MAX: (2^64 - 1) / 4 whole blocks, then word 3
        let mut g = CurandPhilox::new(1, 0, u64::MAX);
        assert_eq!(g.counter(), [0xffff_ffff, 0x3fff_ffff, 0, 0]);
        assert_eq!(g.next_u32(), philox4x32_10([0xffff_ffff, 0x3fff_ffff, 0, 0], [1, 0])[3]);
        // a subsequence plus an offset that overflows y carries into z
        let mut g = CurandPhilox::new(1, 5, 0);
        g.add(u64::MAX);
        assert_eq!(g.counter(), [0xffff_ffff, 0xffff_ffff, 5, 0]);
        g.add(1);
        assert_eq!(g.counter(), [0, 0, 6, 0]);
    }

    #[test]
    fn uniform_is_curands_affine_map() {
        assert_eq!(curand_uniform_from_u32(0), 2f32.powi(-33));
        assert_eq!(curand_uniform_from_u32(u32::MAX), 1.0);
        assert_eq!(curand_uniform_from_u32(1 << 31), 0.5);
        let mut u = [0f32; 8];
        let mut w = [0u32; 8];
        fill_uniform(5, 1, 2, &mut u);
        fill_u32(5, 1, 2, &mut w);
        for (a, b) in u.iter().zip(w) {
            assert_eq!(*a, curand_uniform_from_u32(b));
            assert!(*a > 0.0 && *a <= 1.0);
        }
    }
}
