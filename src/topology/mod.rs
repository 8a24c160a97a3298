//! The topology engine: Megatron-Core's process-group layout, computed purely from
//! (config, world size, rank). One rank's groups take a few index calculations per kind; the full
//! enumeration of a kind's groups is available for tools and communicator creation.
//!
//! ```
//! use mcore_init::topology::{GroupKind, Topology, TopologyConfig};
//! let cfg = TopologyConfig { tp: 2, pp: 4, ..Default::default() };
//! let topo = Topology::new(cfg, 16).unwrap();
//! let dp = topo.membership(GroupKind::DataParallel, 5).unwrap().unwrap();
//! assert_eq!(dp.members(), vec![5, 7]);
//! assert_eq!(dp.rank, 0);
//! assert_eq!(topo.pipeline(5).unwrap().next, 9);
//! ```
#![forbid(unsafe_code)]

mod config;
mod error;
mod generator;
mod grids_recovery;
mod group;
mod kind;
mod layout;
mod mindspeed;
mod nodes;
mod picture;
mod recovery;
mod validate;

pub use config::{EmbeddingRanksFn, Sizes, TopologyConfig, DEFAULT_ORDER};
pub use error::{TopologyError, TopologyErrorKind};
pub use grids_recovery::{plan_grids_recovery, GridRecovery, GridsRecoveryPlan};
pub use group::{Group, Members, RankBox};
pub use kind::GroupKind;
pub use layout::{Membership, PipelineView, RankView, Topology};
pub use mindspeed::{
    CpAlgo, MindSpeedGroup, MindSpeedKind, MindSpeedLayout, MindSpeedOptions, RankLists, DEFAULT_ATTENTION_HEADS,
    MAX_HOT_EXPERT_GROUPS, OPTION_KEYS,
};
pub use nodes::{
    grid_node_spans, node_placement, KindPlacement, NodeFix, NodePlacement, NodeSpan, NodeWarning,
    MAX_PLACEMENT_GROUPS, NODE_LOCAL_KINDS,
};
pub use picture::{grids_svg, layout_svg, PictureOptions, MAX_PICTURE_GRIDS, MAX_PICTURE_RANKS, PALETTE};
pub use recovery::{plan_recovery, RecoveryPlan};

#[cfg(test)]
mod tests;
