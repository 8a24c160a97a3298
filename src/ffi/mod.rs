//! The C ABI. Everything `extern "C"` lives under this module: status codes, the thread-local
//! last-error message, the panic boundary, and one file per exported object.
//!
//! Conventions (STYLE.md): object first, inputs, then out-params; out-params are written only on
//! success; destroy functions accept NULL; no panic crosses the boundary.

pub(crate) mod args;
mod boundary;
pub mod error;
pub mod rng;
pub mod status;
pub mod store;
pub mod os;
pub mod runtime;
pub mod topology;
pub mod topology_nodes;
pub mod recovery;
pub mod version;
pub mod backend;

pub use boundary::{ffi_guard, ffi_guard_ptr};
pub use error::FfiError;
pub use status::mcore_status;
