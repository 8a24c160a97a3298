//! A store wire-compatible with PyTorch c10d's `TCPStore` (docs/wire-protocol.md): the byte format
//! ([`wire`]), a blocking client ([`TcpStore`]) that also talks to torch's own server, and an
//! event-driven server ([`TcpStoreServer`], limits in [`ServerLimits`]) that torch's client can use.

pub mod auth;
mod client;
mod free_port;
mod pool;
mod server;
pub mod wire;

pub use auth::StoreToken;
pub use client::TcpStore;
pub use free_port::{free_port, listened_on_by_this_process, PORT_RANGE_VAR};
pub use pool::TcpStorePool;
pub use server::{ServerLimits, TcpStoreServer};
