//! The C API in process: ABI growth, topology and node placement, RNG and its checkpoints, the store's C functions.
//!
//! One test crate, one module per file of this folder (tests are named `FILE::TEST`: run one
//! file with `cargo test --release --test ffi FILE::`). To add a file: put it here and add
//! its `mod` line below; it reaches the shared helpers as `crate::common`.

#[path = "../common/mod.rs"]
mod common;

mod abi_growth;
mod ffi_rng;
mod ffi_store;
mod ffi_topology;
mod ffi_topology_nodes;
mod rng_checkpoint;
