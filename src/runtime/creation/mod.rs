//! The communicators: what a rank creates (plan, config, the grids' rule), creating and verifying them, Megatron's collections, groups made after init, suspend and resume.

pub mod comm_config;
pub(crate) mod grid_rule;
pub mod groups;
pub mod member_groups;
pub(crate) mod member_registry;
pub(crate) mod pg_collection;
pub(crate) mod plan;
pub mod suspend;
