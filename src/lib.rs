//! mcore_init: what a distributed trainer does before step one, behind a C ABI.
//!
//! * [`topology`]: Megatron-Core-exact process-group layout (pure, no I/O).
//! * [`rng`]: reproducible per-rank seeds, named Philox states, CPU streams (pure).
//! * [`store`]: rendezvous key-value stores (torch-compatible TCP store, prefix, file).
//! * [`backend`]: communicator backends (NCCL built in, C vtable plugins).
//! * [`runtime`]: the idempotent initializer.
//! * [`ffi`]: the only place with `extern "C"`, handles, status codes and the panic boundary.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod backend;
pub mod ffi;
pub mod rng;
pub mod runtime;
pub mod store;
pub mod timeout;
pub mod topology;

/// Crate version as a string (from Cargo.toml).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
