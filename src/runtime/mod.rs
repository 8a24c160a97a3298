//! The runtime: the launcher environment, rendezvous, group creation through the backend seam,
//! and the idempotent initializer.
#![forbid(unsafe_code)]

pub mod checkin;
pub mod comm_config;
pub mod env;
pub mod error;
pub mod groups;
pub mod host;
mod init;
pub mod liveness;
mod progress;
pub mod recovery;
pub mod settings;
mod store_setup;

pub use comm_config::{CommConfig, CommOptions, CommStrategy};
pub use env::{EnvError, LaunchEnv, LauncherKind};
pub use error::RuntimeError;
pub use groups::{GroupPlan, LiveGroup, PlanKind, RankPlan};
pub use init::{
    default_factory, initialize, initialize_with, is_initialized, is_spare, plan_for, set_phase_hook, settings_of,
    timeout_from_env, with_runtime, BackendResolver, InitArgs, InitPhase, InitTimings, PhaseHook, Runtime,
    DEFAULT_INIT_TIMEOUT,
};
pub use settings::InitOutcome;

/// Tear down what `initialize` brought up; `Ok(false)` when nothing was initialized. A rank that
/// left a recovered world and hosts the store keeps serving the survivors until they are done
/// (see [`recovery`]), and stops the server here; so does a rank whose initialization failed for
/// a peer (kept for recovery) and that does not recover.
pub fn destroy() -> Result<bool, RuntimeError> {
    Ok(init::teardown()? || recovery::release_lingering_store() || init::discard_pending())
}
