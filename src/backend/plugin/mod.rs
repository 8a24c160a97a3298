//! The host side of the backend plugin ABI (`crate::abi::backend`): a validated copy of a
//! plugin's vtable and safe calls into its slots, the store callbacks a plugin rendezvous
//! through, and loading a plugin `.so`. The only `unsafe` of the backend module besides the
//! NCCL loader.
#![allow(unsafe_code)]

pub mod loader;
mod store_bridge;
mod vtable;

pub use store_bridge::store_error_status;
pub use vtable::{RawComm, Vtable};
