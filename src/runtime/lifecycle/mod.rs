//! The idempotent lifecycle: the entry points and the slot, the settings, the bring-up's steps, the live `Runtime`, what a transition keeps, leaving.

pub(crate) mod bring_up;
pub(crate) mod comm_generation;
pub(crate) mod init;
pub(crate) mod init_args;
pub(crate) mod leave;
pub(crate) mod pending;
pub(crate) mod runtime_state;
pub mod settings;
