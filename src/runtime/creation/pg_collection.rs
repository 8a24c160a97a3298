//! Megatron-Core's `ProcessGroupCollection` (0.19.2, the per-model set of process groups that is
//! replacing its global getters) as a view of one grid's live groups: its field names, each
//! mapped to the group kind (or all-gather twin) that fills it.

use super::groups::{LiveGroup, PlanKind};
use super::plan::Grid;
use crate::runtime::lifecycle::runtime_state::Runtime;
use crate::topology::GroupKind;

/// What fills a `ProcessGroupCollection` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgSource {
    /// This rank's group of the kind.
    Kind(GroupKind),
    /// The all-gather twin of the kind (`create_all_gather_groups`).
    AllGather(GroupKind),
    /// Every hierarchical context-parallel level's group, in level order (a list in Megatron).
    HierarchicalCp,
}

/// Megatron-Core 0.19.2's `ProcessGroupCollection` fields, in its order, with their sources (the
/// groups its `use_mpu_process_groups` fills them with).
pub const PG_COLLECTION_FIELDS: &[(&str, PgSource)] = {
    use GroupKind::*;
    use PgSource::{AllGather, HierarchicalCp, Kind};
    &[
        ("tp", Kind(TensorModelParallel)),
        ("pp", Kind(PipelineModelParallel)),
        ("mp", Kind(ModelParallel)),
        ("embd", Kind(Embedding)),
        ("pos_embd", Kind(PositionEmbedding)),
        ("cp", Kind(ContextParallel)),
        ("tp_cp", Kind(TensorAndContextParallel)),
        ("hcp", HierarchicalCp),
        ("ep", Kind(ExpertModelParallel)),
        ("expt_tp", Kind(ExpertTensorParallel)),
        ("tp_ep", Kind(ExpertTensorAndModelParallel)),
        ("tp_ep_pp", Kind(ExpertTensorModelPipelineParallel)),
        ("tp_ep_pp_with_egtp_remat", Kind(ExpertTensorModelPipelineParallelWithEgtp)),
        ("tp_dp_cp", Kind(TensorAndDataParallelWithCp)),
        ("dp", Kind(DataParallel)),
        ("dp_cp", Kind(DataParallelWithCp)),
        ("dp_cp_gtp_remat", Kind(DataParallelWithCpWithGtpRemat)),
        ("dp_cp_ag", AllGather(DataParallelWithCp)),
        ("gtp_remat", Kind(GtpWeightRemat)),
        ("expt_gtp_remat", Kind(ExpertGtpWeightRemat)),
        ("expt_dp", Kind(ExpertDataParallel)),
        ("expt_dp_gtp_remat", Kind(ExpertDataParallelWithGtpRemat)),
        ("expt_dp_ag", AllGather(ExpertDataParallel)),
        ("intra_dp_cp", Kind(IntraPartialDataParallelWithCp)),
        ("intra_expt_dp", Kind(IntraPartialExpertDataParallel)),
        ("inter_dist_opt", Kind(InterPartialExpertDataParallel)),
        ("intra_dist_opt", Kind(IntraDistributedOptimizerInstance)),
    ]
};

/// Megatron-Core 0.20's `HyperCommGrid` views: the `base` factorization (dense tp, cp, dp, pp)
/// and the mandatory `expert` one, which factors the same ranks as expt_tp, ep, expt_dp and pp
/// (pp shared with the base view).
pub const BASE_VIEW: &str = "base";
/// See [`BASE_VIEW`].
pub const EXPERT_VIEW: &str = "expert";

/// The `ProcessGroupCollection` fields the `expert` view's groups fill (Megatron-Core 0.20 creates
/// ep, expt_tp, expt_dp and their combinations through `view="expert"`; their remat and
/// partial-optimizer variants and the all-gather twin are expert groups too).
pub const EXPERT_VIEW_FIELDS: [&str; 11] = [
    "ep",
    "expt_tp",
    "tp_ep",
    "tp_ep_pp",
    "tp_ep_pp_with_egtp_remat",
    "expt_gtp_remat",
    "expt_dp",
    "expt_dp_gtp_remat",
    "expt_dp_ag",
    "intra_expt_dp",
    "inter_dist_opt",
];

/// The `HyperCommGrid` view a `ProcessGroupCollection` field belongs to: [`EXPERT_VIEW`] or
/// [`BASE_VIEW`] (`pp` is in both: the expert view shares the base view's pipeline groups).
pub fn pg_collection_view(field: &str) -> &'static str {
    if EXPERT_VIEW_FIELDS.contains(&field) {
        EXPERT_VIEW
    } else {
        BASE_VIEW
    }
}

impl Runtime {
    /// `grid`'s `ProcessGroupCollection` fields of one `HyperCommGrid` view ([`BASE_VIEW`] or
    /// [`EXPERT_VIEW`]); `pp` is in both, as Megatron-Core 0.20's expert view shares it.
    pub fn pg_collection_view(&self, grid: &Grid, view: &str) -> Vec<(&'static str, &LiveGroup)> {
        self.pg_collection(grid)
            .into_iter()
            .filter(|(field, _)| pg_collection_view(field) == view || (*field == "pp" && view == EXPERT_VIEW))
            .collect()
    }

    /// `grid`'s `ProcessGroupCollection` view on this rank: each field it has a group for, in
    /// field order, with that group (`hcp` once per level, in level order). Fields this rank has
    /// no group for (a twin not created, the embedding group off its stages, a grid it is
    /// outside of) are absent.
    pub fn pg_collection(&self, grid: &Grid) -> Vec<(&'static str, &LiveGroup)> {
        let find = |kind: PlanKind| self.groups.iter().find(|g| g.plan.is(&grid.tag, kind));
        let mut out = Vec::new();
        for &(field, source) in PG_COLLECTION_FIELDS {
            match source {
                PgSource::Kind(k) => out.extend(find(PlanKind::Group(k)).map(|g| (field, g))),
                PgSource::AllGather(k) => out.extend(find(PlanKind::AllGatherTwin(k)).map(|g| (field, g))),
                PgSource::HierarchicalCp => {
                    for level in 0..grid.topology.hierarchical_cp_levels() {
                        let kind = PlanKind::Group(GroupKind::HierarchicalContextParallel(level));
                        out.extend(find(kind).map(|g| (field, g)));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expert_view_holds_the_expert_fields_and_every_field_is_in_a_view() {
        for f in EXPERT_VIEW_FIELDS {
            assert!(PG_COLLECTION_FIELDS.iter().any(|(name, _)| *name == f), "{f} is no field");
            assert_eq!(pg_collection_view(f), EXPERT_VIEW);
        }
        for (f, source) in PG_COLLECTION_FIELDS {
            let expert = match source {
                PgSource::Kind(k) | PgSource::AllGather(k) => k.key().contains("expert"),
                PgSource::HierarchicalCp => false,
            };
            assert_eq!(pg_collection_view(f) == EXPERT_VIEW, expert, "{f}");
        }
        assert_eq!(pg_collection_view("pp"), BASE_VIEW);
    }
}
