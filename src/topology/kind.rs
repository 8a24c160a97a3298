//! Group kinds: the process groups Megatron-Core creates, with their keys and Megatron's short
//! names (docs/topology.md, "Group kinds").

use std::borrow::Cow;
use std::fmt;

/// One kind of process group. Keys are Megatron-Core's module-global names without the leading
/// underscore and the `_GROUP` part, lower-cased (`tensor_model_parallel`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupKind {
    TensorModelParallel,
    PipelineModelParallel,
    DataParallel,
    DataParallelWithCp,
    ContextParallel,
    /// Level `i` of hierarchical context parallelism (`hierarchical_context_parallel_<i>`).
    HierarchicalContextParallel(u32),
    ModelParallel,
    TensorAndDataParallel,
    TensorAndDataParallelWithCp,
    TensorAndContextParallel,
    IntraPartialDataParallelWithCp,
    IntraDistributedOptimizerInstance,
    Embedding,
    PositionEmbedding,
    ExpertModelParallel,
    ExpertTensorParallel,
    ExpertTensorAndModelParallel,
    ExpertTensorModelPipelineParallel,
    ExpertDataParallel,
    IntraPartialExpertDataParallel,
    InterPartialExpertDataParallel,
    /// Megatron-Core 0.19: ranks equal in every dense coordinate but gtp (single-rank at gtp=1).
    GtpWeightRemat,
    /// Megatron-Core 0.19: data-parallel joined with its gtp peers (the data-parallel groups at gtp=1).
    DataParallelWithGtpRemat,
    /// Megatron-Core 0.19: data-parallel with cp joined with its gtp peers.
    DataParallelWithCpWithGtpRemat,
    /// Megatron-Core 0.19: ranks equal in every expert coordinate but egtp.
    ExpertGtpWeightRemat,
    /// Megatron-Core 0.19: an etp·ep·pp group merged with its egtp peers.
    ExpertTensorModelPipelineParallelWithEgtp,
    /// Megatron-Core 0.19: expert data-parallel joined with its egtp peers.
    ExpertDataParallelWithGtpRemat,
}

const HCP_PREFIX: &str = "hierarchical_context_parallel_";

impl GroupKind {
    /// Most hierarchical context-parallel levels a layout may have (a level of size 1 is
    /// allowed, so the product of the sizes does not bound their number by itself): level
    /// numbers at or above it name no kind, so that a large number is refused as unknown
    /// instead of read as a level no layout has.
    pub const MAX_HCP_LEVELS: u32 = 64;

    /// Every kind except the hierarchical-CP levels, in table order (docs/topology.md, "Group kinds").
    /// The six kinds of Megatron-Core 0.19 come last (appended, so older numbers keep their place).
    pub const FIXED: [GroupKind; 26] = [
        GroupKind::TensorModelParallel,
        GroupKind::PipelineModelParallel,
        GroupKind::DataParallel,
        GroupKind::DataParallelWithCp,
        GroupKind::ContextParallel,
        GroupKind::ModelParallel,
        GroupKind::TensorAndDataParallel,
        GroupKind::TensorAndDataParallelWithCp,
        GroupKind::TensorAndContextParallel,
        GroupKind::IntraPartialDataParallelWithCp,
        GroupKind::IntraDistributedOptimizerInstance,
        GroupKind::Embedding,
        GroupKind::PositionEmbedding,
        GroupKind::ExpertModelParallel,
        GroupKind::ExpertTensorParallel,
        GroupKind::ExpertTensorAndModelParallel,
        GroupKind::ExpertTensorModelPipelineParallel,
        GroupKind::ExpertDataParallel,
        GroupKind::IntraPartialExpertDataParallel,
        GroupKind::InterPartialExpertDataParallel,
        GroupKind::GtpWeightRemat,
        GroupKind::DataParallelWithGtpRemat,
        GroupKind::DataParallelWithCpWithGtpRemat,
        GroupKind::ExpertGtpWeightRemat,
        GroupKind::ExpertTensorModelPipelineParallelWithEgtp,
        GroupKind::ExpertDataParallelWithGtpRemat,
    ];

    /// The six kinds Megatron-Core 0.19 added (the tail of [`GroupKind::FIXED`]).
    pub fn added_in_0_19() -> &'static [GroupKind] {
        &GroupKind::FIXED[20..]
    }

    /// The key (`tensor_model_parallel`, `hierarchical_context_parallel_1`, ...).
    pub fn key(self) -> Cow<'static, str> {
        use GroupKind::*;
        Cow::Borrowed(match self {
            TensorModelParallel => "tensor_model_parallel",
            PipelineModelParallel => "pipeline_model_parallel",
            DataParallel => "data_parallel",
            DataParallelWithCp => "data_parallel_with_cp",
            ContextParallel => "context_parallel",
            HierarchicalContextParallel(i) => return Cow::Owned(format!("{HCP_PREFIX}{i}")),
            ModelParallel => "model_parallel",
            TensorAndDataParallel => "tensor_and_data_parallel",
            TensorAndDataParallelWithCp => "tensor_and_data_parallel_with_cp",
            TensorAndContextParallel => "tensor_and_context_parallel",
            IntraPartialDataParallelWithCp => "intra_partial_data_parallel_with_cp",
            IntraDistributedOptimizerInstance => "intra_distributed_optimizer_instance",
            Embedding => "embedding",
            PositionEmbedding => "position_embedding",
            ExpertModelParallel => "expert_model_parallel",
            ExpertTensorParallel => "expert_tensor_parallel",
            ExpertTensorAndModelParallel => "expert_tensor_and_model_parallel",
            ExpertTensorModelPipelineParallel => "expert_tensor_model_pipeline_parallel",
            ExpertDataParallel => "expert_data_parallel",
            IntraPartialExpertDataParallel => "intra_partial_expert_data_parallel",
            InterPartialExpertDataParallel => "inter_partial_expert_data_parallel",
            GtpWeightRemat => "gtp_weight_remat",
            DataParallelWithGtpRemat => "data_parallel_with_gtp_remat",
            DataParallelWithCpWithGtpRemat => "data_parallel_with_cp_with_gtp_remat",
            ExpertGtpWeightRemat => "expert_gtp_weight_remat",
            ExpertTensorModelPipelineParallelWithEgtp => "expert_tensor_model_pipeline_parallel_with_egtp",
            ExpertDataParallelWithGtpRemat => "expert_data_parallel_with_gtp_remat",
        })
    }

    /// Megatron-Core's short name of the kind's process group, as its per-group NCCL communicator
    /// config file spells it (`tp`, `dp_cp`, `ep_dp`, ...). Every hierarchical context-parallel
    /// level is `hcp`.
    pub fn megatron_name(self) -> &'static str {
        use GroupKind::*;
        match self {
            TensorModelParallel => "tp",
            PipelineModelParallel => "pp",
            DataParallel => "dp",
            DataParallelWithCp => "dp_cp",
            ContextParallel => "cp",
            HierarchicalContextParallel(_) => "hcp",
            ModelParallel => "mp",
            TensorAndDataParallel => "tp_dp",
            TensorAndDataParallelWithCp => "tp_dp_cp",
            TensorAndContextParallel => "tp_cp",
            IntraPartialDataParallelWithCp => "intra_dp_cp",
            IntraDistributedOptimizerInstance => "intra_dist_opt_instance",
            Embedding => "embd",
            PositionEmbedding => "pos_embd",
            ExpertModelParallel => "ep",
            ExpertTensorParallel => "ep_tp",
            ExpertTensorAndModelParallel => "tp_ep_mp",
            ExpertTensorModelPipelineParallel => "tp_ep_pp",
            ExpertDataParallel => "ep_dp",
            IntraPartialExpertDataParallel => "intra_ep_dp",
            InterPartialExpertDataParallel => "inter_ep_dp",
            GtpWeightRemat => "gtp_remat",
            DataParallelWithGtpRemat => "gtp_remat_dp",
            DataParallelWithCpWithGtpRemat => "gtp_remat_dp_cp",
            ExpertGtpWeightRemat => "expt_gtp_remat",
            ExpertTensorModelPipelineParallelWithEgtp => "tp_ep_gtp_remat_pp",
            ExpertDataParallelWithGtpRemat => "ep_gtp_remat_dp",
        }
    }

    /// The kind for a key; `None` for an unknown key. Hierarchical levels are
    /// `hierarchical_context_parallel_<i>` with `i` in decimal without leading zeros, below
    /// [`GroupKind::MAX_HCP_LEVELS`].
    pub fn from_key(key: &str) -> Option<GroupKind> {
        if let Some(level) = key.strip_prefix(HCP_PREFIX) {
            let canonical = !level.is_empty()
                && level.bytes().all(|b| b.is_ascii_digit())
                && (level == "0" || !level.starts_with('0'));
            if !canonical {
                return None;
            }
            return level
                .parse()
                .ok()
                .filter(|&i| i < GroupKind::MAX_HCP_LEVELS)
                .map(GroupKind::HierarchicalContextParallel);
        }
        GroupKind::FIXED.into_iter().find(|k| k.key() == key)
    }
}

impl std::str::FromStr for GroupKind {
    type Err = super::error::TopologyError;

    /// Like [`GroupKind::from_key`], with an error naming the unknown key.
    fn from_str(key: &str) -> Result<Self, Self::Err> {
        GroupKind::from_key(key).ok_or_else(|| {
            super::error::TopologyError::unknown_kind(format!(
                "unknown group kind {} (expected e.g. tensor_model_parallel, data_parallel_with_cp, \
                 hierarchical_context_parallel_0)",
                crate::quote::quoted(key)
            ))
        })
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        for k in GroupKind::FIXED {
            assert_eq!(GroupKind::from_key(&k.key()), Some(k));
        }
        let h = GroupKind::HierarchicalContextParallel(12);
        assert_eq!(h.key(), "hierarchical_context_parallel_12");
        assert_eq!(GroupKind::from_key("hierarchical_context_parallel_12"), Some(h));
        let last = GroupKind::HierarchicalContextParallel(GroupKind::MAX_HCP_LEVELS - 1);
        assert_eq!(GroupKind::from_key(&last.key()), Some(last));
        for bad in [
            "",
            "tensor",
            "hierarchical_context_parallel_",
            "hierarchical_context_parallel_01",
            "hierarchical_context_parallel_x",
            "hierarchical_context_parallel_64",
            "hierarchical_context_parallel_8999",
            "TENSOR_MODEL_PARALLEL",
        ] {
            assert_eq!(GroupKind::from_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn megatron_names_are_distinct() {
        let mut names: Vec<_> = GroupKind::FIXED.iter().map(|k| k.megatron_name()).collect();
        names.push(GroupKind::HierarchicalContextParallel(0).megatron_name());
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "two kinds share a short name");
    }
}
