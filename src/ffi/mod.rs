//! The C ABI: every `extern "C"` export of the public API, the handles, the checked views of C
//! arguments, the one map from typed errors to `mcore_status`, the thread-local last error and
//! the panic boundary. The top layer: nothing else in the crate imports it.
//!
//! Conventions (docs/abi.md): object first, inputs, then out-params; out-params are written only
//! on success; destroy functions accept NULL; no panic crosses the boundary.

pub(crate) mod args;
pub mod backend;
mod boundary;
pub mod error;
pub mod grid_args;
pub mod grids;
mod handle;
pub mod id_group;
pub mod megatron;
pub mod member_groups;
pub mod recovery;
pub mod rng;
pub mod runtime;
mod status_map;
pub mod store;
pub mod suspend;
pub mod topology;
pub mod topology_nodes;
pub mod version;

pub use crate::abi::mcore_status;
pub use boundary::{ffi_guard, ffi_guard_ptr};
pub use error::FfiError;
