//! What a rank creates: its group plan ([`plan_for`]), the aliased kinds that share an earlier
//! kind's communicators, and the plan of the all-gather twins.

use super::comm_config::CommConfig;
use super::groups::{GroupPlan, LiveGroup, PlanKind, RankPlan};
use crate::topology::{GroupKind, RankView, Topology};
use std::time::Duration;

/// What `view`'s rank creates: its groups, every kind of the layout in order, the world.
pub fn plan_for(topology: &Topology, view: &RankView) -> RankPlan {
    let groups = view
        .groups
        .iter()
        .map(|m| GroupPlan { kind: PlanKind::Group(m.kind()), index: m.group_index() as u32, members: m.members() })
        .collect();
    let first = topology.rank_offset();
    RankPlan {
        rank: view.rank,
        world: (first..first + topology.world_size()).collect(),
        kinds: topology.kinds().into_iter().map(PlanKind::Group).collect(),
        groups,
    }
}

/// Megatron-Core 0.19's kinds whose groups are exactly an earlier kind's with the same
/// communicator options (e.g. every one of them at gtp = egtp = 1), with that kind: they get no
/// creation step (no split collective, no communicator) and share its communicators.
pub(super) fn aliased_kinds(topology: &Topology, config: &CommConfig) -> Vec<(GroupKind, GroupKind)> {
    topology
        .kinds()
        .into_iter()
        .filter_map(|k| topology.alias_of(k).map(|src| (k, src)))
        .filter(|(k, src)| config.options_for(*k) == config.options_for(*src))
        .collect()
}

/// This rank's groups of the aliased kinds, sharing the communicators of their source kinds.
pub(super) fn add_alias_groups(view: &RankView, aliases: &[(GroupKind, GroupKind)], groups: &mut Vec<LiveGroup>) {
    for (kind, src) in aliases {
        let (Some(m), Some(shared)) = (view.get(*kind), groups.iter().find(|g| g.plan.kind == PlanKind::Group(*src)))
        else {
            continue;
        };
        let alias = LiveGroup {
            plan: GroupPlan { kind: PlanKind::Group(*kind), index: m.group_index() as u32, members: m.members() },
            group_rank: m.rank,
            comm_name: shared.comm_name.clone(),
            comm: shared.comm.clone(),
            created_in: Duration::ZERO,
        };
        groups.push(alias);
    }
}

/// The twins this rank creates: its groups of the layout's twin kinds under their twin keys.
/// Every kind is listed for every rank (the plan is rank-independent); the twins get the default
/// communicator options.
pub(super) fn all_gather_plan(topology: &Topology, view: &RankView, main: &RankPlan) -> RankPlan {
    let kinds = topology.all_gather_twin_kinds();
    RankPlan {
        rank: main.rank,
        world: main.world.clone(),
        kinds: kinds.iter().map(|&k| PlanKind::AllGatherTwin(k)).collect(),
        groups: kinds
            .iter()
            .filter_map(|&k| view.get(k))
            .map(|m| GroupPlan {
                kind: PlanKind::AllGatherTwin(m.kind()),
                index: m.group_index() as u32,
                members: m.members(),
            })
            .collect(),
    }
}
