//! The runtime: the launcher environment, rendezvous, group creation through the backend seam,
//! and the idempotent initializer.
#![forbid(unsafe_code)]

mod blame;
mod bring_up;
pub mod checkin;
pub mod comm_config;
pub mod env;
pub mod error;
mod grid_rule;
pub mod groups;
pub mod host;
pub mod hostlist;
mod init;
mod init_args;
mod keys;
mod leave;
pub mod liveness;
mod meeting;
pub mod member_groups;
mod member_registry;
mod pending;
mod pg_collection;
mod plan;
mod pmix_rendezvous;
mod progress;
pub mod recovery;
mod runtime_state;
pub mod settings;
mod store_setup;
pub mod suspend;

pub use bring_up::{set_phase_hook, InitPhase, PhaseHook};
pub use comm_config::{CommConfig, CommOptions, CommStrategy};
pub use env::{EnvError, LaunchEnv, LauncherKind, Rendezvous};
pub use error::RuntimeError;
pub use grid_rule::check_disjoint_or_identical;
pub use groups::{GridTag, GroupPlan, LiveGroup, PlanKind, RankPlan};
pub use init::{initialize, initialize_with, is_initialized, is_spare, with_runtime};
pub use init_args::{
    check_grid_name, default_factory, settings_of, timeout_from_env, BackendResolver, GridSpec, InitArgs, DEFAULT_GRID,
    DEFAULT_INIT_TIMEOUT, MAX_GRID_NAME,
};
pub use member_groups::{
    create_group, create_groups, destroy_group, member_group, member_group_names, start_group, GroupOptions, GroupSpec,
    MemberGroup,
};
pub use pg_collection::{
    pg_collection_view, PgSource, BASE_VIEW, EXPERT_VIEW, EXPERT_VIEW_FIELDS, PG_COLLECTION_FIELDS,
};
pub use plan::{plan_for, Grid};
pub use runtime_state::{InitTimings, Runtime};
pub use settings::InitOutcome;
pub use suspend::{
    resume, suspend, CommMemoryEntry, CommTransition, SharedComm, SuspendMode, SuspendReport, SuspendRequest,
};

/// Tear down what `initialize` brought up; `Ok(false)` when nothing was initialized. A rank that
/// left a recovered world and hosts the store keeps serving the survivors until they are done
/// (see [`recovery`]), and stops the server here; so does a rank whose initialization failed for
/// a peer (kept for recovery) and that does not recover.
pub fn destroy() -> Result<bool, RuntimeError> {
    init::destroy()
}
