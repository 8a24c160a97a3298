//! The runtime: the launcher environment, rendezvous, and the idempotent initializer.
#![forbid(unsafe_code)]

pub mod checkin;
pub mod env;

pub use env::{EnvError, LaunchEnv, LauncherKind};
