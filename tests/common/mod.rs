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
