//! The runtime: the launcher environment, rendezvous, and the idempotent initializer.
#![forbid(unsafe_code)]

pub mod checkin;
pub mod comm;
pub mod env;
pub mod groups;
pub mod settings;

pub use env::{EnvError, LaunchEnv, LauncherKind};
