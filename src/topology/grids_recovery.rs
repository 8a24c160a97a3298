//! Recovery planning for a job of several grids (docs/recovery.md, "Several grids"). Pure, as
//! [`plan_recovery`]: every survivor computes the same plan from the same failed set.
//!
//! One set of ranks leaves the whole world. It starts as the failed ranks and grows to a fixpoint:
//! each grid plans its own recovery (its window taken as a layout of its own) with every removed
//! rank inside its window as failed, and the ranks that plan drops join the removed set, until no
//! grid adds any. The survivors are then renumbered in ascending old order, and every grid's new
//! layout is its plan over its surviving window: its `rank_offset` moves down by the removed ranks
//! before it, its `local_world_size` (when it has one) shrinks by those it lost. A grid that cannot
//! be re-formed (its plan is refused, e.g. nothing of it remains) refuses the whole recovery,
//! naming the grid.

use super::error::TopologyError;
use super::kind::GroupKind;
use super::layout::Topology;
use super::recovery::{plan_recovery, ranks_text, RecoveryPlan};
use super::TopologyConfig;
use std::collections::BTreeSet;

/// One grid after a recovery of several grids.
#[derive(Debug, Clone)]
pub struct GridRecovery {
    /// The grid's name.
    pub name: String,
    /// Its layout over the new world (window shifted and shrunk).
    pub topology: Topology,
    /// The old ranks of its window that leave (failed, or removed with a replica of any grid).
    pub dropped: Vec<u32>,
    /// Its kinds with a group whose processes differ from before (none when it lost no rank).
    pub changed_kinds: Vec<GroupKind>,
    /// Its data-parallel size before and after.
    pub dp_before: u32,
    pub dp_after: u32,
}

/// The next layout of every grid of a job after a failure.
#[derive(Debug, Clone)]
pub struct GridsRecoveryPlan {
    /// The failed ranks, ascending, duplicates removed.
    pub failed: Vec<u32>,
    /// Every old rank that is not in the new world, ascending.
    pub dropped: Vec<u32>,
    /// Healthy ranks that leave (`dropped` minus `failed`), ascending.
    pub leaving: Vec<u32>,
    /// Old rank -> new rank for every survivor, ascending (the survivors in their old order).
    pub rank_map: Vec<(u32, u32)>,
    pub world_before: u32,
    pub world_after: u32,
    /// Every grid, in the job's order.
    pub grids: Vec<GridRecovery>,
    /// Passes over the grids until the removed set stopped growing (the last pass adds nothing).
    pub rounds: u32,
}

impl GridsRecoveryPlan {
    /// The new rank of an old rank, `None` when it leaves.
    pub fn new_rank(&self, old: u32) -> Option<u32> {
        self.rank_map.binary_search_by_key(&old, |&(o, _)| o).ok().map(|i| self.rank_map[i].1)
    }
}

/// A grid's window as a layout of its own, which [`plan_recovery`] takes: its ranks numbered
/// from 0, no offset, no local world size.
fn own_layout(topo: &Topology) -> Result<Topology, TopologyError> {
    let cfg = TopologyConfig { rank_offset: 0, local_world_size: None, ..topo.config().clone() };
    Topology::new(cfg, topo.world_size())
}

/// Plan the recovery of a job whose grids are `grids` (name and layout over the world of `world`
/// ranks, every rank in at least one grid) after the failure of `failed`. No spares. See the
/// module documentation for the policy.
pub fn plan_grids_recovery(
    grids: &[(&str, &Topology)],
    world: u32,
    failed: &[u32],
) -> Result<GridsRecoveryPlan, TopologyError> {
    if grids.is_empty() {
        return Err(TopologyError::config("recovery of several grids: the job has no grid"));
    }
    let failed: Vec<u32> = failed.iter().copied().collect::<BTreeSet<_>>().into_iter().collect();
    if let Some(&r) = failed.iter().find(|&&r| r >= world) {
        return Err(TopologyError::range(format!("failed rank {r} is not a rank of the world of {world}")));
    }
    let mut own = Vec::with_capacity(grids.len());
    for &(name, topo) in grids {
        let end = u64::from(topo.rank_offset()) + u64::from(topo.world_size());
        if end > u64::from(world) {
            return Err(TopologyError::range(format!(
                "grid '{name}' covers ranks {}..{}, beyond the world of {world}",
                topo.rank_offset(),
                end - 1
            )));
        }
        own.push(own_layout(topo).map_err(|e| {
            TopologyError::config(format!("recovery: grid '{name}' as a layout of its own: {}", e.message))
        })?);
    }
    // The fixpoint: each grid's plan with every removed rank of its window as failed.
    let mut removed: BTreeSet<u32> = failed.iter().copied().collect();
    let mut rounds = 0;
    let plans: Vec<Option<RecoveryPlan>> = loop {
        rounds += 1;
        let mut plans = Vec::with_capacity(grids.len());
        let mut grown = false;
        for (&(name, topo), own) in grids.iter().zip(&own) {
            let (off, size) = (topo.rank_offset(), topo.world_size());
            let local: Vec<u32> = removed.range(off..off + size).map(|r| r - off).collect();
            if local.is_empty() {
                plans.push(None);
                continue;
            }
            let plan = plan_recovery(own, &local, &[]).map_err(|e| {
                let lost: Vec<u32> = local.iter().map(|r| r + off).collect();
                let numbering =
                    if off == 0 { String::new() } else { format!(" (its ranks numbered from 0 at rank {off})") };
                TopologyError::config(format!(
                    "recovery refused: grid '{name}' (ranks {off}..{}) cannot be re-formed after the failure of \
                     ranks {}: ranks {} of it are removed (failed, or leaving with a replica of a grid), and its \
                     own plan{numbering} says: {}",
                    off + size - 1,
                    ranks_text(&failed),
                    ranks_text(&lost),
                    e.message
                ))
            })?;
            for &d in &plan.dropped {
                grown |= removed.insert(d + off);
            }
            plans.push(Some(plan));
        }
        if !grown {
            break plans;
        }
    };
    let dropped: Vec<u32> = removed.iter().copied().collect();
    let leaving: Vec<u32> = dropped.iter().copied().filter(|r| failed.binary_search(r).is_err()).collect();
    let rank_map: Vec<(u32, u32)> = (0..world).filter(|r| !removed.contains(r)).zip(0..).collect();
    let world_after = rank_map.len() as u32;
    let mut out = Vec::with_capacity(grids.len());
    for ((&(name, topo), plan), own) in grids.iter().zip(plans).zip(&own) {
        let (off, size) = (topo.rank_offset(), topo.world_size());
        let lost: Vec<u32> = removed.range(off..off + size).copied().collect();
        let before = removed.range(..off).count() as u32;
        let mut cfg = topo.config().clone();
        cfg.rank_offset = off - before;
        if cfg.local_world_size.is_some() {
            cfg.local_world_size = Some(size - lost.len() as u32);
        }
        let refused = |why: String| {
            TopologyError::config(format!(
                "recovery refused: grid '{name}' (ranks {off}..{}) cannot be re-formed after the failure of ranks {}: \
                 {why}",
                off + size - 1,
                ranks_text(&failed)
            ))
        };
        let new = Topology::new(cfg, world_after).map_err(|e| refused(e.message))?;
        let want = plan.as_ref().map_or(own.sizes().dp, |p| p.topology.sizes().dp);
        if new.world_size() != size - lost.len() as u32 || new.sizes().dp != want {
            return Err(refused(format!(
                "its layout over the survivors has {} ranks and dp {}, its plan {} ranks and dp {want}",
                new.world_size(),
                new.sizes().dp,
                size - lost.len() as u32
            )));
        }
        out.push(GridRecovery {
            name: name.to_string(),
            dp_before: topo.sizes().dp,
            dp_after: new.sizes().dp,
            topology: new,
            dropped: lost,
            changed_kinds: plan.map(|p| p.changed_kinds).unwrap_or_default(),
        });
    }
    Ok(GridsRecoveryPlan { failed, dropped, leaving, rank_map, world_before: world, world_after, grids: out, rounds })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(tp: u32, pp: u32, offset: u32, lws: Option<u32>, world: u32) -> Topology {
        let cfg = TopologyConfig { tp, pp, rank_offset: offset, local_world_size: lws, ..Default::default() };
        Topology::new(cfg, world).unwrap()
    }

    #[test]
    fn colocated_grids_grow_the_removed_set_to_a_fixpoint() {
        // train tp2 pp2 and rollout tp4 over the same 16 ranks; rank 5 fails. Pass 1: train
        // drops its replica {4,5,12,13}; rollout, seeing those removed, {4..7} and {12..15};
        // pass 2: train's replicas of 6, 7, 14, 15 ({6,7,14,15}) are removed already: the
        // fixpoint. Both grids keep 8 ranks: old 0-3 and 8-11.
        let (train, rollout) = (topo(2, 2, 0, None, 16), topo(4, 1, 0, None, 16));
        let plan = plan_grids_recovery(&[("train", &train), ("rollout", &rollout)], 16, &[5]).unwrap();
        assert_eq!(plan.dropped, vec![4, 5, 6, 7, 12, 13, 14, 15]);
        assert_eq!(plan.leaving, vec![4, 6, 7, 12, 13, 14, 15]);
        assert_eq!(plan.rounds, 2);
        assert_eq!(plan.world_after, 8);
        assert_eq!(plan.new_rank(8), Some(4));
        assert_eq!(plan.new_rank(12), None);
        let (t, r) = (&plan.grids[0], &plan.grids[1]);
        assert_eq!((t.dp_before, t.dp_after, r.dp_before, r.dp_after), (4, 2, 4, 2));
        assert_eq!((t.topology.world_size(), r.topology.world_size()), (8, 8));
        // Old rank 8 (pipeline stage 1, tensor rank 0) keeps its coordinates as new rank 4.
        let tp = t.topology.group_of(GroupKind::TensorModelParallel, 4).unwrap().unwrap().members();
        let pp = t.topology.group_of(GroupKind::PipelineModelParallel, 4).unwrap().unwrap().members();
        assert_eq!((tp, pp), (vec![4, 5], vec![0, 4]));
        assert!(t.changed_kinds.contains(&GroupKind::DataParallel));
        assert!(!t.changed_kinds.contains(&GroupKind::TensorModelParallel));
    }

    #[test]
    fn side_by_side_grids_keep_the_untouched_grid_and_shift_the_later_window() {
        // train tp2 pp2 on 0-7, rollout tp4 on 8-15; rank 9 fails: rollout loses {8..11}.
        let (train, rollout) = (topo(2, 2, 0, Some(8), 16), topo(4, 1, 8, Some(8), 16));
        let plan = plan_grids_recovery(&[("train", &train), ("rollout", &rollout)], 16, &[9]).unwrap();
        assert_eq!((plan.dropped.clone(), plan.rounds, plan.world_after), (vec![8, 9, 10, 11], 2, 12));
        let (t, r) = (&plan.grids[0], &plan.grids[1]);
        assert_eq!((t.topology.rank_offset(), t.topology.world_size(), t.dp_after), (0, 8, 2));
        assert!(t.dropped.is_empty() && t.changed_kinds.is_empty());
        assert_eq!((r.topology.rank_offset(), r.topology.world_size(), r.dp_after), (8, 4, 1));
        assert_eq!(r.topology.config().local_world_size, Some(4));
        assert_eq!(r.dropped, vec![8, 9, 10, 11]);
        // The rollout's old ranks 12-15 are its new ranks 8-11, one tensor group.
        assert_eq!((plan.new_rank(12), plan.new_rank(15)), (Some(8), Some(11)));
        let g = r.topology.group_of(GroupKind::TensorModelParallel, 9).unwrap().unwrap().members();
        assert_eq!(g, vec![8, 9, 10, 11]);
        // A failure in the earlier window shifts the later one down.
        let plan = plan_grids_recovery(&[("train", &train), ("rollout", &rollout)], 16, &[1]).unwrap();
        assert_eq!(plan.dropped, vec![0, 1, 4, 5]);
        assert_eq!(plan.grids[1].topology.rank_offset(), 4);
        assert_eq!(plan.grids[1].topology.world_size(), 8);
    }

    #[test]
    fn a_grid_that_cannot_be_re_formed_refuses_naming_it() {
        // rollout tp8 has one replica: losing rank 5 leaves nothing of it.
        let (train, rollout) = (topo(2, 1, 0, None, 8), topo(8, 1, 0, None, 8));
        let e = plan_grids_recovery(&[("train", &train), ("rollout", &rollout)], 8, &[5]).unwrap_err();
        assert!(e.message.contains("grid 'rollout' (ranks 0..7) cannot be re-formed"), "{}", e.message);
        assert!(e.message.contains("failure of ranks [5]"), "{}", e.message);
        // A windowed grid that loses its only replica, while the other grid would survive.
        let (train, rollout) = (topo(2, 1, 0, Some(4), 8), topo(4, 1, 4, Some(4), 8));
        let e = plan_grids_recovery(&[("train", &train), ("rollout", &rollout)], 8, &[6]).unwrap_err();
        assert!(e.message.contains("grid 'rollout' (ranks 4..7)"), "{}", e.message);
        // The removed ranks are named in the job's numbering; the grid's own plan says which
        // numbering it uses.
        assert!(e.message.contains("ranks [6] of it are removed"), "{}", e.message);
        assert!(e.message.contains("its ranks numbered from 0 at rank 4"), "{}", e.message);
        // Bad input is named.
        let e = plan_grids_recovery(&[("train", &train)], 8, &[8]).unwrap_err();
        assert!(e.message.contains("failed rank 8"), "{}", e.message);
    }

    #[test]
    fn no_failure_changes_nothing() {
        let (train, rollout) = (topo(2, 2, 0, None, 16), topo(4, 1, 0, None, 16));
        let plan = plan_grids_recovery(&[("train", &train), ("rollout", &rollout)], 16, &[]).unwrap();
        assert!(plan.dropped.is_empty());
        assert_eq!(plan.world_after, 16);
        assert!(plan.grids.iter().all(|g| g.changed_kinds.is_empty() && g.dp_after == g.dp_before));
    }
}
