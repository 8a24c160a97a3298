//! The crate's hygiene: the one-way import layering of `src/` (layers), the shape of failure handling (faults_shape), the generated C headers matching the code (header_drift), the bounds on function and file sizes (size), docs that match the code (docs: the `MCORE_*` variable table, the messages troubleshooting quotes), and one lock-poison policy (lock_poison).
//!
//! One test crate, one module per file of this folder (tests are named `FILE::TEST`: run one
//! file with `cargo test --release --test hygiene FILE::`). To add a file: put it here and add
//! its `mod` line below; it reaches the shared helpers as `crate::common`.

#[path = "../common/mod.rs"]
mod common;

mod docs;
mod faults_shape;
mod header_drift;
mod layers;
mod lock_poison;
mod size;
