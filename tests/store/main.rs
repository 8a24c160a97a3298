//! The TCP store: its server and clients, queues, shared secret, hostile clients, server faults, torch's wire format.
//!
//! One test crate, one module per file of this folder (tests are named `FILE::TEST`: run one
//! file with `cargo test --release --test store FILE::`). To add a file: put it here and add
//! its `mod` line below; it reaches the shared helpers as `crate::common`.

#[path = "../common/mod.rs"]
mod common;

mod store_auth;
mod store_hostile;
mod store_server_faults;
mod store_tcp;
mod store_tcp_queues;
mod store_torch_fixtures;
mod store_wire_fuzz;
