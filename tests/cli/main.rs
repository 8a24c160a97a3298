//! The tools as built binaries: mcore-topo's outputs, mcore-launch and its signal handling, hostile arguments.
//!
//! One test crate, one module per file of this folder (tests are named `FILE::TEST`: run one
//! file with `cargo test --release --test cli FILE::`). To add a file: put it here and add
//! its `mod` line below; it reaches the shared helpers as `crate::common`.

#[path = "../common/mod.rs"]
mod common;

mod cli_hardening;
mod cli_launch;
mod cli_launch_signals;
mod cli_topo;
mod cli_topo_grids;
mod cli_topo_mindspeed;
mod cli_topo_nodes;
mod cli_topo_recovery;
mod cli_topo_seeds;
