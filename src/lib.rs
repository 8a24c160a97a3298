//! mcore_init: what a distributed trainer does before step one, behind a C ABI.
//!
//! Layers, each importing only those above it in this list (docs/architecture.md):
//!
//! * [`abi`]: the C types shared by the public API and the plugin ABI (a leaf).
//! * [`quote`]: user input quoted in error messages, bounded (a leaf); [`wait_words`]: what a
//!   stopped process was waiting for (a leaf).
//! * `lock`: the one lock-poison policy, a poisoned lock taken as it is (a leaf, crate-private).
//! * [`topology`]: Megatron-Core-exact process-group layout (pure, no I/O).
//! * [`rng`]: reproducible per-rank seeds, named Philox states, CPU streams (pure).
//! * [`store`]: rendezvous key-value stores (torch-compatible TCP store, prefix, file).
//! * [`backend`]: the seam communicator backends satisfy, NCCL built in, the plugin host, the registry.
//! * [`runtime`]: the idempotent initializer.
//! * [`ffi`]: the only place with `extern "C"` exports, handles, the status map and the panic
//!   boundary; nothing imports it.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
pub mod backend;
pub mod env_vars;
pub mod ffi;
pub mod input_file;
pub(crate) mod lock;
pub mod quote;
pub mod rng;
pub mod runtime;
pub mod store;
pub mod timeout;
pub mod topology;
pub mod wait_words;

/// Crate version as a string (from Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
