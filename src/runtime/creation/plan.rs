//! What a rank creates: the job's grids as this rank sees them ([`Grid`]), its group plan over
//! all of them ([`job_plan`], [`plan_for`] for one layout), the aliased kinds that share an
//! earlier kind's communicators, and the plan of the all-gather twins.

use super::comm_config::CommConfig;
use super::groups::{GridTag, GroupPlan, LiveGroup, PlanKind, RankPlan};
use crate::rng::RankRng;
use crate::topology::{GroupKind, MindSpeedLayout, RankView, Topology, TopologyError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One grid of the job (a named layout over a window of the world, see
/// [`crate::runtime::GridSpec`]) as this rank sees it.
pub struct Grid {
    /// Its name (`default` unless the caller named it).
    pub name: String,
    /// How its groups are tagged: `None` when it is the job's only grid.
    pub tag: GridTag,
    pub topology: Topology,
    /// This rank's place in it; `None` when the rank is outside the grid's window.
    pub view: Option<RankView>,
    /// This rank's RNG streams of this grid, seeded from its coordinates in it (when the grid
    /// asked for seeds and the rank is in it).
    pub rng: Option<Arc<Mutex<RankRng>>>,
    /// Its kinds whose groups are an earlier kind's (see [`aliased_kinds`]).
    pub(crate) aliases: Vec<(GroupKind, GroupKind)>,
    /// MindSpeed's groups on top of the layout, when asked for (created after its kinds).
    pub mindspeed: Option<MindSpeedLayout>,
}

/// What `view`'s rank creates of one layout (the job's only grid): its groups, every kind of the
/// layout in order, the layout's ranks as the world.
pub fn plan_for(topology: &Topology, view: &RankView) -> RankPlan {
    let first = topology.rank_offset();
    let mut plan = RankPlan {
        rank: view.rank,
        world: (first..first + topology.world_size()).collect(),
        kinds: Vec::new(),
        groups: Vec::new(),
    };
    add_layout(&mut plan, &None, topology, Some(view), &[]);
    plan
}

/// The plan's kinds of `grid` in creation order: its layout's, then MindSpeed's steps.
pub(crate) fn grid_kinds(grid: &Grid) -> Vec<PlanKind> {
    let megatron = grid.topology.kinds().into_iter().map(PlanKind::Group);
    let steps = grid.mindspeed.iter().flat_map(|m| m.steps()).map(|(k, copy)| PlanKind::MindSpeed(k, copy));
    megatron.chain(steps).collect()
}

/// What `rank` creates over every grid of the job, `world` being every rank of the job's layouts
/// (the split strategy's parent): each grid's kinds in its layout's order (its aliased kinds left
/// out, MindSpeed's after them), the grids in the job's order, and this rank's groups of them.
pub(crate) fn job_plan(grids: &[Grid], rank: u32, world: Vec<u32>) -> Result<RankPlan, TopologyError> {
    let mut plan = RankPlan { rank, world, kinds: Vec::new(), groups: Vec::new() };
    for g in grids {
        add_layout(&mut plan, &g.tag, &g.topology, g.view.as_ref(), &g.aliases);
        if let (Some(ms), Some(view)) = (&g.mindspeed, &g.view) {
            add_mindspeed(&mut plan, &g.tag, ms, view.rank)?;
        }
    }
    Ok(plan)
}

/// Append MindSpeed's steps (every rank the same sequence) and `rank`'s groups of them.
fn add_mindspeed(plan: &mut RankPlan, tag: &GridTag, ms: &MindSpeedLayout, rank: u32) -> Result<(), TopologyError> {
    plan.kinds.extend(ms.steps().into_iter().map(|(k, copy)| (tag.clone(), PlanKind::MindSpeed(k, copy))));
    for g in ms.rank_groups(rank)? {
        let mut members = g.ranks;
        members.sort_unstable();
        plan.groups.push(GroupPlan {
            grid: tag.clone(),
            kind: PlanKind::MindSpeed(g.kind, g.copy),
            index: g.index,
            members,
        });
    }
    Ok(())
}

/// Append one layout's kinds (less `aliases`) and `view`'s groups of them, tagged `tag`.
fn add_layout(
    plan: &mut RankPlan,
    tag: &GridTag,
    topology: &Topology,
    view: Option<&RankView>,
    aliases: &[(GroupKind, GroupKind)],
) {
    let kept = |k: GroupKind| !aliases.iter().any(|(a, _)| *a == k);
    plan.kinds.extend(topology.kinds().into_iter().filter(|&k| kept(k)).map(|k| (tag.clone(), PlanKind::Group(k))));
    for m in view.iter().flat_map(|v| v.groups.iter()).filter(|m| kept(m.kind())) {
        plan.groups.push(GroupPlan {
            grid: tag.clone(),
            kind: PlanKind::Group(m.kind()),
            index: m.group_index() as u32,
            members: m.members(),
        });
    }
}

/// Megatron-Core 0.19's kinds whose groups are exactly an earlier kind's with the same
/// communicator options (e.g. every one of them at gtp = egtp = 1), with that kind: they get no
/// creation step (no split collective, no communicator) and share its communicators.
pub(crate) fn aliased_kinds(topology: &Topology, config: &CommConfig) -> Vec<(GroupKind, GroupKind)> {
    topology
        .kinds()
        .into_iter()
        .filter_map(|k| topology.alias_of(k).map(|src| (k, src)))
        .filter(|(k, src)| config.options_for(*k) == config.options_for(*src))
        .collect()
}

/// This rank's groups of `grid`'s aliased kinds, sharing the communicators of their source kinds.
pub(crate) fn add_alias_groups(grid: &Grid, groups: &mut Vec<LiveGroup>) {
    let Some(view) = &grid.view else { return };
    for (kind, src) in &grid.aliases {
        let (Some(m), Some(shared)) =
            (view.get(*kind), groups.iter().find(|g| g.plan.is(&grid.tag, PlanKind::Group(*src))))
        else {
            continue;
        };
        let alias = LiveGroup {
            plan: GroupPlan {
                grid: grid.tag.clone(),
                kind: PlanKind::Group(*kind),
                index: m.group_index() as u32,
                members: m.members(),
            },
            group_rank: m.rank,
            comm_name: shared.comm_name.clone(),
            comm: shared.comm.clone(),
            created_in: Duration::ZERO,
        };
        groups.push(alias);
    }
}

/// The twins this rank creates: its groups of every grid's twin kinds under their twin keys.
/// Every kind is listed for every rank (the plan is rank-independent); the twins get the default
/// communicator options.
pub(crate) fn all_gather_plan(grids: &[Grid], main: &RankPlan) -> RankPlan {
    let mut plan = RankPlan { rank: main.rank, world: main.world.clone(), kinds: Vec::new(), groups: Vec::new() };
    for g in grids {
        let kinds = g.topology.all_gather_twin_kinds();
        plan.kinds.extend(kinds.iter().map(|&k| (g.tag.clone(), PlanKind::AllGatherTwin(k))));
        let mine = kinds.iter().filter_map(|&k| g.view.as_ref().and_then(|v| v.get(k)));
        plan.groups.extend(mine.map(|m| GroupPlan {
            grid: g.tag.clone(),
            kind: PlanKind::AllGatherTwin(m.kind()),
            index: m.group_index() as u32,
            members: m.members(),
        }));
    }
    plan
}
