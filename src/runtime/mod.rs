//! The runtime: the launcher environment, rendezvous, group creation through the backend seam,
//! and the idempotent initializer.
//!
//! Its parts, one folder each (docs/architecture.md): `launch` (what the launcher hands a rank
//! and the store it opens), `meeting` (the one rendezvous and its uses before communicators
//! exist), `creation` (the communicators), `lifecycle` (the idempotent initializer and what it
//! keeps), `faults` (who is gone: liveness, the one interrupt and dead list, the verdict); `recovery` and the one error type beside them.
#![forbid(unsafe_code)]

mod creation;
pub mod error;
pub mod faults;
mod launch;
mod lifecycle;
mod meeting;
pub mod recovery;

// The modules public before the runtime was split into folders keep their paths.
pub use creation::{comm_config, groups, member_groups, suspend};
pub use faults::liveness;
pub use launch::{env, host, hostlist};
pub use lifecycle::settings;
pub use meeting::checkin;

pub use creation::comm_config::{CommConfig, CommOptions, CommStrategy};
pub use creation::grid_rule::check_disjoint_or_identical;
pub use creation::groups::{GridTag, GroupPlan, LiveGroup, PlanKind, RankPlan};
pub use creation::member_groups::{
    create_group, create_groups, destroy_group, member_group, member_group_names, start_group, GroupOptions, GroupSpec,
    MemberGroup,
};
pub use creation::pg_collection::{
    pg_collection_view, PgSource, BASE_VIEW, EXPERT_VIEW, EXPERT_VIEW_FIELDS, PG_COLLECTION_FIELDS,
};
pub use creation::plan::{plan_for, Grid};
pub use creation::suspend::{
    resume, suspend, CommMemoryEntry, CommTransition, SharedComm, SuspendMode, SuspendReport, SuspendRequest,
};
pub use error::RuntimeError;
pub use launch::env::{EnvError, LaunchEnv, LauncherKind, Rendezvous};
pub use lifecycle::bring_up::{set_phase_hook, InitPhase, PhaseHook};
pub use lifecycle::comm_generation::comm_generation;
pub use lifecycle::init::{initialize, initialize_with, is_initialized, is_spare, with_runtime};
pub use lifecycle::init_args::{
    check_grid_name, default_factory, settings_of, timeout_from_env, BackendResolver, GridSpec, InitArgs, DEFAULT_GRID,
    DEFAULT_INIT_TIMEOUT, MAX_GRID_NAME,
};
pub use lifecycle::runtime_state::{InitTimings, Runtime};
pub use lifecycle::settings::InitOutcome;

/// Tear down what `initialize` brought up; `Ok(false)` when nothing was initialized. A rank that
/// left a recovered world and hosts the store keeps serving the survivors until they are done
/// (see [`recovery`]), and stops the server here; so does a rank whose initialization failed for
/// a peer (kept for recovery) and that does not recover.
pub fn destroy() -> Result<bool, RuntimeError> {
    lifecycle::init::destroy()
}
