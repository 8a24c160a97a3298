//! Communicator backends: the plugin ABI with the Gloo plugin, the HCCL plugin, NCCL on CPU (the loader, search, unique ids) and on a GPU.
//!
//! One test crate, one module per file of this folder (tests are named `FILE::TEST`: run one
//! file with `cargo test --release --test backends FILE::`). To add a file: put it here and add
//! its `mod` line below; it reaches the shared helpers as `crate::common`.

#[path = "../common/mod.rs"]
mod common;

mod backend_plugin;
mod hccl_plugin;
mod nccl_cpu;
mod nccl_gpu;
