//! The NCCL backend against the libnccl double (a test double of NCCL's C API, built here; see the module's header). Its own crate: it loads the double into this process and sets its folder variable, which must not meet the real library other crates load.
//!
//! One test crate, one module per file of this folder (tests are named `FILE::TEST`: run one
//! file with `cargo test --release --test nccl_double FILE::`). To add a file: put it here and add
//! its `mod` line below; it reaches the shared helpers as `crate::common`.

#[path = "../common/mod.rs"]
mod common;

mod id_groups;
mod nccl_double;
