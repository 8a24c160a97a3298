//! The runtime with real processes: worlds over the Gloo plugin, groups made after init by their members, liveness notices.
//!
//! One test crate, one module per file of this folder (tests are named `FILE::TEST`: run one
//! file with `cargo test --release --test runtime FILE::`). To add a file: put it here and add
//! its `mod` line below; it reaches the shared helpers as `crate::common`.

#[path = "../common/mod.rs"]
mod common;

mod liveness_notices;
mod member_groups_multiprocess;
mod runtime_multiprocess;
mod wait_bounds;
mod waits_speak;
