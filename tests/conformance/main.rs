//! Conformance with Megatron-Core's ground-truth vectors (topology, RNG) and bounded fuzzing of the input parsers.
//!
//! One test crate, one module per file of this folder (tests are named `FILE::TEST`: run one
//! file with `cargo test --release --test conformance FILE::`). To add a file: put it here and add
//! its `mod` line below; it reaches the shared helpers as `crate::common`.

#[path = "../common/mod.rs"]
mod common;

mod conformance_mindspeed;
mod conformance_rng;
mod conformance_topology;
mod fuzz_parsers;
