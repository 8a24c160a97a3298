//! Communicator backends: a registry of backends by name, each a validated copy of a C vtable
//! (`mcore_backend_v1`, see `ffi::backend` and docs/backends.md) registered by pointer or loaded
//! from a plugin `.so`, and the safe handles the runtime uses: [`Backend`] creates a [`Comm`]
//! per group; a `Comm` runs the verification collectives and is destroyed on drop.
//!
//! `unsafe` is confined to the dynamic loader ([`plugin_loader`]) and `ffi::backend`.
#![deny(unsafe_code)]

mod comm;
mod error;
mod group;
pub mod nccl;
pub mod plugin_loader;
pub mod registry;
mod runtime_seam;

pub use comm::{Backend, Comm};
pub use error::BackendError;
pub use group::GroupInfo;
pub use plugin_loader::{load_plugin, load_plugins_from_env, PLUGIN_ENV};
pub use registry::{get, names, resolve, unregister};
