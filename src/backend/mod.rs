//! Communicator backends: the seam every backend satisfies ([`seam`]: a factory of
//! communicators per group or by splitting a world communicator), the built-in NCCL backend,
//! the host side of the C plugin ABI ([`plugin`]), and the registry that resolves a backend by
//! name, pointer or plugin file. A [`Backend`] is a validated copy of a C vtable; it creates a
//! [`Comm`] per group, which verifies itself and is destroyed on drop.
//!
//! `unsafe` is confined to [`plugin`], the NCCL loader, the PMIx client ([`pmix`]), the one
//! `dlopen` helper (`dynlib`) and
//! [`registry::register_vtable`] (which takes a vtable by pointer).
#![deny(unsafe_code)]

mod comm;
pub(crate) mod dynlib;
mod error;
mod group;
pub mod id_group;
pub mod nccl;
pub mod options;
pub mod plugin;
pub mod pmix;
pub mod registry;
pub mod seam;
mod vtable_seam;

/// Whether `MCORE_LOG=debug`: the library's debug lines on stderr (NCCL's settings, where a
/// rank meets the others, why PMIx is not used).
pub(crate) fn debug_log() -> bool {
    std::env::var("MCORE_LOG").is_ok_and(|v| v.trim().eq_ignore_ascii_case("debug"))
}

pub use comm::{Backend, Comm};
pub use error::BackendError;
pub use group::GroupInfo;
pub use options::CommOptions;
pub use registry::{get, load_plugin, load_plugins_from_env, names, register_vtable, resolve, unregister, PLUGIN_ENV};
pub use seam::{CommError, CommErrorKind, CommFactory, CommMemory, Communicator, GroupRequest, SuspendedComm};
