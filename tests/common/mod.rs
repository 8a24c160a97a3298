//! Shared helpers for integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The folder with Megatron-Core's ground-truth vectors: `$MCORE_CONFORMANCE_DIR`, else the
/// copy in the repository, `tests/data/conformance` (0.16.1 at the top, 0.19.2 in `v0.19.2/`;
/// see docs/conformance.md). Panics with a clear message when absent.
pub fn conformance_dir() -> PathBuf {
    let dir = match std::env::var_os("MCORE_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance"),
    };
    assert!(
        dir.is_dir(),
        "conformance vectors not found at {}: set MCORE_CONFORMANCE_DIR",
        dir.display()
    );
    dir
}

/// Read and parse a JSON file of the conformance folder (`.json` or `.json.gz`).
pub fn read_conformance_json(name: &str) -> serde_json::Value {
    use std::io::Read;
    let path = conformance_dir().join(name);
    let raw = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let text = if name.ends_with(".gz") {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&raw[..]).read_to_string(&mut s).expect("gunzip");
        s
    } else {
        String::from_utf8(raw).expect("utf-8")
    };
    serde_json::from_str(&text).expect("valid JSON")
}

/// xorshift64*: a small, seeded, reproducible generator for the bounded fuzz tests (no
/// dependency; the same seed gives the same cases).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}
