//! The layout configuration: sizes, order, offsets and the optional embedding-ranks callbacks.

use std::fmt;
use std::sync::Arc;

/// A user choice of embedding (or position-embedding) ranks. Called with the members of one
/// pipeline group (ascending); returns the members of that pipeline group that form its
/// embedding group (any order, non-empty, no duplicates, all from the given list), or an error
/// text. Must be deterministic: every rank evaluates it independently.
pub type EmbeddingRanksFn = Arc<dyn Fn(&[u32]) -> Result<Vec<u32>, String> + Send + Sync>;

/// The default order string of Megatron-Core.
pub const DEFAULT_ORDER: &str = "tp-cp-ep-dp-pp";

/// What `initialize_model_parallel` is given, minus the world size.
#[derive(Clone)]
pub struct TopologyConfig {
    /// Tensor-model-parallel size (tp).
    pub tp: u32,
    /// Pipeline-model-parallel size (pp).
    pub pp: u32,
    /// Virtual pipeline size (interleaved schedule); needs pp > 1.
    pub vpp: Option<u32>,
    /// Context-parallel size (cp).
    pub cp: u32,
    /// Hierarchical context-parallel sizes (product = cp); empty = not used.
    pub hierarchical_cp: Vec<u32>,
    /// Expert-model-parallel size (ep).
    pub ep: u32,
    /// Expert tensor-parallel size; `None` = same as tp.
    pub etp: Option<u32>,
    /// Number of distributed-optimizer instances (Megatron's `num_distributed_optimizer_instances`).
    pub dist_opt_instances: u32,
    /// Order string, e.g. `tp-cp-ep-dp-pp` (first token varies fastest).
    pub order: String,
    /// Global rank of the layout's rank 0: the layout covers `rank_offset .. rank_offset + world`.
    pub rank_offset: u32,
    /// Custom embedding ranks per pipeline group; `None` = first and last stage.
    pub embedding_ranks: Option<EmbeddingRanksFn>,
    /// Custom position-embedding ranks per pipeline group; `None` = first stage.
    pub position_embedding_ranks: Option<EmbeddingRanksFn>,
    /// Megatron-Core 0.19's `gtp_remat_size`: the dense weight-rematerialization axis (placed
    /// right after `tp` in the order). dp = local world / (tp·pp·cp·gtp).
    pub gtp: u32,
    /// Megatron-Core 0.19's `expert_gtp_remat_size`: the same axis on the expert grid (placed
    /// after `ep`, else after `tp`, else first). expert dp = local world / (etp·ep·pp·egtp).
    pub egtp: u32,
    /// Megatron-Core 0.19's `local_world_size`: the grid covers `rank_offset .. rank_offset +
    /// local_world_size` of a world of the size given to [`Topology::new`](super::Topology::new);
    /// the other ranks belong to no group. `None` = the grid is the given world size (with
    /// `rank_offset` shifting it, this library's form before 0.19).
    pub local_world_size: Option<u32>,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            tp: 1,
            pp: 1,
            vpp: None,
            cp: 1,
            hierarchical_cp: Vec::new(),
            ep: 1,
            etp: None,
            dist_opt_instances: 1,
            order: DEFAULT_ORDER.to_string(),
            rank_offset: 0,
            embedding_ranks: None,
            position_embedding_ranks: None,
            gtp: 1,
            egtp: 1,
            local_world_size: None,
        }
    }
}

impl fmt::Debug for TopologyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TopologyConfig")
            .field("tp", &self.tp)
            .field("pp", &self.pp)
            .field("vpp", &self.vpp)
            .field("cp", &self.cp)
            .field("hierarchical_cp", &self.hierarchical_cp)
            .field("ep", &self.ep)
            .field("etp", &self.etp)
            .field("dist_opt_instances", &self.dist_opt_instances)
            .field("order", &self.order)
            .field("rank_offset", &self.rank_offset)
            .field("embedding_ranks", &self.embedding_ranks.as_ref().map(|_| "custom"))
            .field("position_embedding_ranks", &self.position_embedding_ranks.as_ref().map(|_| "custom"))
            .field("gtp", &self.gtp)
            .field("egtp", &self.egtp)
            .field("local_world_size", &self.local_world_size)
            .finish()
    }
}

/// The sizes of a validated layout, derived ones included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizes {
    /// Number of ranks of the grid (the local world size when one is given).
    pub world_size: u32,
    pub tp: u32,
    pub pp: u32,
    pub vpp: Option<u32>,
    pub cp: u32,
    pub hierarchical_cp: Vec<u32>,
    pub ep: u32,
    /// Effective expert tensor-parallel size (tp when not given).
    pub etp: u32,
    /// Data-parallel (replicate) size: world / (tp·pp·cp·gtp).
    pub dp: u32,
    /// Expert data-parallel (replicate) size: world / (etp·ep·pp·egtp).
    pub expert_dp: u32,
    pub dist_opt_instances: u32,
    /// Dense weight-rematerialization size (1 = off).
    pub gtp: u32,
    /// Expert weight-rematerialization size (1 = off).
    pub egtp: u32,
    /// The whole world: equal to `world_size` unless a local world size was given.
    pub total_world_size: u32,
}
