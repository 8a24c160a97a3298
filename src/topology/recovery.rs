//! Recovery planning: from a layout and a set of failed ranks to the next valid layout on the
//! survivors. Pure: no I/O, no clock, deterministic (every survivor computes the same plan).
//!
//! Policy (docs/recovery.md):
//! - A failed rank takes its whole data-parallel replica with it (every rank with the same dense
//!   data-parallel coordinate), and its whole expert-data-parallel replica; the dropped set is
//!   closed under both relations, so the survivors keep every tensor, pipeline, context, expert
//!   and expert-tensor coordinate, and their relative order (new ranks are the survivors in
//!   ascending old rank order).
//! - When the layout on the survivors is still invalid (e.g. the expert data-parallel size no
//!   longer divides by the distributed-optimizer instances), further whole replicas are dropped,
//!   highest ranks first, as few as possible.
//! - Spare ranks (ranks of the job outside the layout: `world_size..`) take a failed rank's place,
//!   coordinates included. A replica is repaired by spares only when spares suffice for all of its
//!   failed ranks; replicas with the fewest failures are repaired first.
//! - When no replica would remain, the plan is refused with a message naming the failed ranks.

use super::error::TopologyError;
use super::kind::GroupKind;
use super::layout::Topology;
use std::collections::{BTreeMap, BTreeSet};

/// The next layout after a failure, and how the old ranks map onto it.
#[derive(Debug, Clone)]
pub struct RecoveryPlan {
    /// The layout on the survivors (same sizes and order but dp / expert dp).
    pub topology: Topology,
    /// The failed ranks, ascending, duplicates removed (failed spares excluded).
    pub failed: Vec<u32>,
    /// Every layout rank that is not in the new layout: the failed ranks not replaced by a spare,
    /// and the healthy ranks that leave with their replica. Ascending.
    pub dropped: Vec<u32>,
    /// Healthy layout ranks that leave (`dropped` minus `failed`). Ascending.
    pub leaving: Vec<u32>,
    /// Old rank (or spare rank) -> new rank, for every process of the new layout, ascending by
    /// old rank.
    pub rank_map: Vec<(u32, u32)>,
    /// (spare rank, failed rank whose place it takes), ascending by failed rank.
    pub spares_used: Vec<(u32, u32)>,
    /// Spare ranks left unused (failed spares excluded), ascending.
    pub spares_left: Vec<u32>,
    /// Kinds with at least one group whose processes differ from before (their communicators
    /// must be made anew); the other kinds keep exactly their groups under the rank map.
    pub changed_kinds: Vec<GroupKind>,
    /// Data-parallel size before and after.
    pub dp_before: u32,
    pub dp_after: u32,
}

impl RecoveryPlan {
    /// The new rank of an old rank (or spare), `None` when it is not in the new layout.
    pub fn new_rank(&self, old: u32) -> Option<u32> {
        self.rank_map.binary_search_by_key(&old, |&(o, _)| o).ok().map(|i| self.rank_map[i].1)
    }

    /// Whether nothing changes (no failed rank).
    pub fn is_identity(&self) -> bool {
        self.failed.is_empty()
    }
}

fn sorted_unique(v: &[u32]) -> Vec<u32> {
    v.iter().copied().collect::<BTreeSet<_>>().into_iter().collect()
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

fn group_rank(topo: &Topology, kind: GroupKind, rank: u32) -> Result<u32, TopologyError> {
    Ok(topo
        .membership(kind, rank)?
        .ok_or_else(|| TopologyError::range(format!("rank {rank} has no {kind} group")))?
        .rank)
}

/// At most 16 ranks of `v` in brackets, and how many there are in all when it has more.
pub(super) fn ranks_text(v: &[u32]) -> String {
    const SHOWN: usize = 16;
    let mut s: Vec<String> = v.iter().take(SHOWN).map(u32::to_string).collect();
    if v.len() > SHOWN {
        s.push(format!("... ({} in all)", v.len()));
    }
    format!("[{}]", s.join(", "))
}

/// The recovery units of a layout: a partition of its ranks (as local indices) into the smallest
/// sets that are unions of dense data-parallel replicas and of expert data-parallel replicas.
/// Returns the unit of every local rank; units are numbered by their lowest rank.
fn units(topo: &Topology) -> Result<(Vec<usize>, usize), TopologyError> {
    let s = topo.sizes();
    let (dp, edp) = (s.dp as usize, s.expert_dp as usize);
    let mut parent: Vec<usize> = (0..dp + edp).collect();
    let world = topo.world_size();
    let off = topo.rank_offset();
    let mut dense = Vec::with_capacity(world as usize);
    for i in 0..world {
        let r = off + i;
        let d = group_rank(topo, GroupKind::DataParallel, r)? as usize;
        let e = group_rank(topo, GroupKind::ExpertDataParallel, r)? as usize;
        let (a, b) = (find(&mut parent, d), find(&mut parent, dp + e));
        if a != b {
            parent[a.max(b)] = a.min(b);
        }
        dense.push(d);
    }
    let mut number: BTreeMap<usize, usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(world as usize);
    for d in dense {
        let root = find(&mut parent, d);
        let n = number.len();
        out.push(*number.entry(root).or_insert(n));
    }
    Ok((out, number.len()))
}

/// Plan the next layout of `topo` without `failed` (global ranks of the layout, or spare ranks),
/// with `spares` (ranks `>= world_size`, not in the layout) taking failed ranks' places where they
/// repair a whole replica. See the module documentation for the policy.
pub fn plan_recovery(topo: &Topology, failed: &[u32], spares: &[u32]) -> Result<RecoveryPlan, TopologyError> {
    let cfg = topo.config();
    if cfg.local_world_size.is_some() {
        return Err(TopologyError::config(
            "recovery planning does not support a local world size (ranks outside the grid); plan on the \
             grid's own layout instead",
        ));
    }
    let world = topo.world_size();
    let off = topo.rank_offset();
    let end = u64::from(off) + u64::from(world);
    let spares = sorted_unique(spares);
    if let Some(&s) = spares.iter().find(|&&s| u64::from(s) < end) {
        return Err(TopologyError::range(format!(
            "spare rank {s} is inside the layout's ranks {off}..{}: spares are ranks from {end} on",
            end - 1
        )));
    }
    let failed_all = sorted_unique(failed);
    if let Some(&r) =
        failed_all.iter().find(|&&r| r < off || (u64::from(r) >= end && spares.binary_search(&r).is_err()))
    {
        return Err(TopologyError::range(format!(
            "failed rank {r} is neither in the layout's ranks {off}..{} nor a spare",
            end - 1
        )));
    }
    let (failed, failed_spares): (Vec<u32>, Vec<u32>) = failed_all.into_iter().partition(|&r| u64::from(r) < end);
    let mut spares: Vec<u32> = spares.into_iter().filter(|s| failed_spares.binary_search(s).is_err()).collect();

    let (unit_of, n_units) = units(topo)?;
    // Failures per unit.
    let mut hits: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for &r in &failed {
        hits.entry(unit_of[(r - off) as usize]).or_default().push(r);
    }
    // Repair units with spares, fewest failures first (ties: lowest unit).
    let mut order: Vec<(usize, usize)> = hits.iter().map(|(&u, v)| (v.len(), u)).collect();
    order.sort_unstable();
    let mut repaired: BTreeMap<u32, u32> = BTreeMap::new(); // failed rank -> spare
    let mut drop_units: BTreeSet<usize> = BTreeSet::new();
    for (count, u) in order {
        if count <= spares.len() {
            for (r, s) in hits[&u].iter().zip(spares.drain(..count)) {
                repaired.insert(*r, s);
            }
        } else {
            drop_units.insert(u);
        }
    }

    // Smallest valid layout: add whole units, highest first, until the rest validates.
    let refuse = |why: &str| {
        TopologyError::config(format!(
            "no valid layout remains after the failure of ranks {}: {why} (tp {}, pp {}, cp {}, ep {}, etp {}, dp {}, \
             expert dp {}, {} spare(s) given)",
            ranks_text(&failed),
            topo.sizes().tp,
            topo.sizes().pp,
            topo.sizes().cp,
            topo.sizes().ep,
            topo.sizes().etp,
            topo.sizes().dp,
            topo.sizes().expert_dp,
            spares.len() + repaired.len()
        ))
    };
    let mut extra: Vec<usize> = (0..n_units).rev().filter(|u| !drop_units.contains(u)).collect();
    let mut last_err = None;
    let new_topo = loop {
        let kept = unit_of.iter().filter(|u| !drop_units.contains(u)).count() as u32;
        if kept == 0 {
            return Err(match last_err {
                Some(e) => refuse(&format!("every data-parallel replica is lost or leaves an invalid layout ({e})")),
                None => refuse("every data-parallel replica holds a failed rank"),
            });
        }
        match Topology::new(cfg.clone(), kept) {
            Ok(t) => break t,
            Err(e) => {
                last_err = Some(e.message);
                match extra.first().copied() {
                    Some(u) => {
                        extra.remove(0);
                        drop_units.insert(u);
                    }
                    None => return Err(refuse("no smaller layout is valid")),
                }
            }
        }
    };

    // The rank map: survivors (and spares in their failed rank's place) in ascending old order.
    let mut rank_map = Vec::new();
    let mut dropped = Vec::new();
    let mut next = off;
    for i in 0..world {
        let r = off + i;
        if drop_units.contains(&unit_of[i as usize]) {
            dropped.push(r);
            continue;
        }
        let process = repaired.get(&r).copied().unwrap_or(r);
        rank_map.push((process, next));
        next += 1;
    }
    rank_map.sort_unstable();
    let leaving: Vec<u32> = dropped.iter().copied().filter(|r| failed.binary_search(r).is_err()).collect();
    let spares_used: Vec<(u32, u32)> = repaired.iter().map(|(&f, &s)| (s, f)).collect();

    // Which kinds' groups change: compare every new group's processes with the old group of its
    // first member.
    let mut old_of_new = vec![0u32; (next - off) as usize];
    for &(p, n) in &rank_map {
        old_of_new[(n - off) as usize] = p;
    }
    let failed_place: BTreeMap<u32, u32> = repaired.iter().map(|(&f, &s)| (s, f)).collect();
    let mut changed_kinds = Vec::new();
    for kind in new_topo.kinds() {
        let mut changed = false;
        for g in new_topo.groups(kind) {
            let members = g?.members();
            let procs: Vec<u32> = members.iter().map(|&n| old_of_new[(n - off) as usize]).collect();
            // A spare in a group changes it; otherwise compare with the old group of the first member.
            if procs.iter().any(|p| failed_place.contains_key(p)) {
                changed = true;
                break;
            }
            let old = topo.group_of(kind, procs[0])?.map(|g| g.members());
            if old.as_deref() != Some(&procs[..]) {
                changed = true;
                break;
            }
        }
        if changed {
            changed_kinds.push(kind);
        }
    }

    Ok(RecoveryPlan {
        dp_before: topo.sizes().dp,
        dp_after: new_topo.sizes().dp,
        topology: new_topo,
        failed,
        dropped,
        leaving,
        rank_map,
        spares_used,
        spares_left: spares,
        changed_kinds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyConfig;

    fn cfg(tp: u32, pp: u32, cp: u32, ep: u32, etp: Option<u32>, nd: u32, order: &str) -> TopologyConfig {
        TopologyConfig { tp, pp, cp, ep, etp, dist_opt_instances: nd, order: order.into(), ..Default::default() }
    }

    /// The kinds whose group rank is a coordinate the policy keeps.
    const KEPT: [GroupKind; 5] = [
        GroupKind::TensorModelParallel,
        GroupKind::PipelineModelParallel,
        GroupKind::ContextParallel,
        GroupKind::ExpertModelParallel,
        GroupKind::ExpertTensorParallel,
    ];

    /// Checks every property of a plan against its input; returns the number of dropped ranks.
    fn check_plan(topo: &Topology, failed: &[u32], spares: &[u32], plan: &RecoveryPlan) {
        let w = topo.world_size();
        let nt = &plan.topology;
        // Same layout but dp.
        let (a, b) = (topo.sizes(), nt.sizes());
        assert_eq!((a.tp, a.pp, a.cp, a.ep, a.etp), (b.tp, b.pp, b.cp, b.ep, b.etp));
        assert_eq!(nt.world_size() as usize, plan.rank_map.len());
        assert_eq!(w as usize, plan.rank_map.len() + plan.dropped.len());
        // Every failed layout rank is dropped or replaced.
        for &f in failed.iter().filter(|&&f| f < w) {
            let replaced = plan.spares_used.iter().any(|&(_, r)| r == f);
            assert!(replaced || plan.dropped.contains(&f), "failed {f} neither dropped nor replaced");
            assert!(plan.new_rank(f).is_none(), "failed {f} mapped");
        }
        // Dropped ranks form whole dp and expert-dp replicas (cannot cut a tp/pp/cp/ep group).
        let dropped: BTreeSet<u32> = plan.dropped.iter().copied().collect();
        for kind in KEPT.into_iter().chain([GroupKind::ModelParallel, GroupKind::ExpertTensorModelPipelineParallel]) {
            for g in topo.groups(kind) {
                let m = g.unwrap().members();
                let n = m.iter().filter(|r| dropped.contains(r)).count();
                assert!(n == 0 || n == m.len(), "{kind} group {m:?} cut by dropping {dropped:?}");
            }
        }
        // New ranks are 0..n, order preserved, coordinates kept.
        let news: Vec<u32> = plan.rank_map.iter().map(|&(_, n)| n).collect();
        let mut sorted = news.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..nt.world_size()).collect::<Vec<_>>());
        let spare_for: BTreeMap<u32, u32> = plan.spares_used.iter().copied().collect();
        let mut prev = None;
        for &(p, n) in &plan.rank_map {
            let old = spare_for.get(&p).copied().unwrap_or(p);
            assert!(!failed.contains(&p), "failed {p} mapped");
            if !spare_for.contains_key(&p) {
                if let Some((po, pn)) = prev {
                    assert!(po < old && pn < n, "order not kept: {po}->{pn}, {old}->{n}");
                }
                prev = Some((old, n));
            }
            for kind in KEPT {
                assert_eq!(
                    group_rank(topo, kind, old).unwrap(),
                    group_rank(nt, kind, n).unwrap(),
                    "{kind} coordinate of {old} -> {n} changed"
                );
            }
        }
        // Unchanged kinds keep exactly their groups (under the map).
        for kind in nt.kinds() {
            if plan.changed_kinds.contains(&kind) {
                continue;
            }
            for g in nt.groups(kind) {
                let procs: Vec<u32> = g
                    .unwrap()
                    .members()
                    .iter()
                    .map(|&n| {
                        let p = plan.rank_map.iter().find(|&&(_, m)| m == n).unwrap().0;
                        assert!(!spare_for.contains_key(&p));
                        p
                    })
                    .collect();
                assert_eq!(topo.group_of(kind, procs[0]).unwrap().unwrap().members(), procs, "{kind}");
            }
        }
        let _ = spares;
    }

    /// Brute force: the fewest ranks droppable under the policy (whole dense dp replicas
    /// containing every failed rank, forming whole expert dp replicas, leaving a valid layout).
    fn brute_min_drop(topo: &Topology, failed: &[u32]) -> Option<u32> {
        let dp = topo.sizes().dp;
        let w = topo.world_size();
        let dcoord: Vec<u32> = (0..w).map(|r| group_rank(topo, GroupKind::DataParallel, r).unwrap()).collect();
        let ecoord: Vec<u32> = (0..w).map(|r| group_rank(topo, GroupKind::ExpertDataParallel, r).unwrap()).collect();
        let mut best = None;
        for mask in 0u32..(1 << dp) {
            if failed.iter().any(|&f| mask & (1 << dcoord[f as usize]) == 0) {
                continue;
            }
            let dropped = |r: usize| mask & (1 << dcoord[r]) != 0;
            // Whole expert replicas.
            let ok = (0..w as usize)
                .all(|r| (0..w as usize).filter(|&q| ecoord[q] == ecoord[r]).all(|q| dropped(q) == dropped(r)));
            let n = (0..w as usize).filter(|&r| dropped(r)).count() as u32;
            if !ok || n == w || Topology::new(topo.config().clone(), w - n).is_err() {
                continue;
            }
            best = Some(best.map_or(n, |b: u32| b.min(n)));
        }
        best
    }

    fn layouts() -> Vec<(TopologyConfig, u32)> {
        let mut v = Vec::new();
        for order in ["tp-cp-ep-dp-pp", "tp-pp-dp", "tp-dp-pp", "dp-tp-pp"] {
            for tp in [1, 2] {
                for pp in [1, 2] {
                    for cp in [1, 2] {
                        for ep in [1, 2, 4] {
                            for etp in [None, Some(1)] {
                                for nd in [1, 2] {
                                    for dp in [1, 2, 3, 4, 6, 8] {
                                        let w = tp * pp * cp * dp;
                                        let c = cfg(tp, pp, cp, ep, etp, nd, order);
                                        if (ep > 1 || cp > 1) && !order.contains("ep") {
                                            continue;
                                        }
                                        if Topology::new(c.clone(), w).is_ok() {
                                            v.push((c, w));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        v
    }

    #[test]
    fn the_issue_example_drops_the_replica_of_rank_5() {
        let t = Topology::new(cfg(2, 2, 1, 1, None, 1, "tp-cp-ep-dp-pp"), 16).unwrap();
        let p = plan_recovery(&t, &[5], &[]).unwrap();
        // dp replica of rank 5 (tp 1, dp 2, pp 0): ranks 4, 5 on stage 0 and 12, 13 on stage 1.
        assert_eq!(p.dropped, vec![4, 5, 12, 13]);
        assert_eq!(p.leaving, vec![4, 12, 13]);
        assert_eq!(p.topology.world_size(), 12);
        assert_eq!((p.dp_before, p.dp_after), (4, 3));
        assert_eq!(p.new_rank(6), Some(4));
        assert_eq!(p.new_rank(14), Some(10));
        assert_eq!(p.new_rank(5), None);
        assert!(p.changed_kinds.contains(&GroupKind::DataParallel));
        assert!(!p.changed_kinds.contains(&GroupKind::TensorModelParallel));
        assert!(!p.changed_kinds.contains(&GroupKind::PipelineModelParallel));
        check_plan(&t, &[5], &[], &p);
    }

    #[test]
    fn every_replica_hit_is_refused_clearly() {
        let t = Topology::new(cfg(2, 2, 1, 1, None, 1, "tp-cp-ep-dp-pp"), 16).unwrap();
        let e = plan_recovery(&t, &[0, 2, 4, 6], &[]).unwrap_err();
        assert!(e.message.contains("no valid layout remains") && e.message.contains("[0, 2, 4, 6]"), "{e}");
        let e = plan_recovery(&t, &[16], &[]).unwrap_err();
        assert!(e.message.contains("failed rank 16"), "{e}");
        let e = plan_recovery(&t, &[1], &[3]).unwrap_err();
        assert!(e.message.contains("spare rank 3"), "{e}");
    }

    #[test]
    fn no_failure_is_the_identity() {
        let t = Topology::new(cfg(2, 2, 1, 1, None, 1, "tp-cp-ep-dp-pp"), 16).unwrap();
        let p = plan_recovery(&t, &[], &[]).unwrap();
        assert!(p.is_identity() && p.dropped.is_empty() && p.changed_kinds.is_empty());
        assert!(p.rank_map.iter().all(|&(o, n)| o == n));
    }

    #[test]
    fn spares_take_the_failed_ranks_place() {
        let t = Topology::new(cfg(2, 2, 1, 1, None, 1, "tp-cp-ep-dp-pp"), 16).unwrap();
        let p = plan_recovery(&t, &[5], &[16, 17]).unwrap();
        assert_eq!(p.topology.world_size(), 16);
        assert!(p.dropped.is_empty());
        assert_eq!(p.spares_used, vec![(16, 5)]);
        assert_eq!(p.spares_left, vec![17]);
        assert_eq!(p.new_rank(16), Some(5));
        assert!(p.changed_kinds.contains(&GroupKind::TensorModelParallel));
        check_plan(&t, &[5], &[16, 17], &p);
        // Two failures in two replicas, one spare: one replica repaired, one dropped.
        let p = plan_recovery(&t, &[5, 8], &[16]).unwrap();
        assert_eq!(p.topology.world_size(), 12);
        assert_eq!(p.spares_used.len(), 1);
        check_plan(&t, &[5, 8], &[16], &p);
        // A failed spare is not used.
        let p = plan_recovery(&t, &[5, 16], &[16]).unwrap();
        assert_eq!(p.topology.world_size(), 12);
        assert!(p.spares_used.is_empty() && p.spares_left.is_empty());
    }

    /// Exhaustive over many layouts: every single failure and pairs of failures give a valid plan
    /// with the fewest dropped ranks (brute force), or a refusal exactly when brute force finds
    /// nothing.
    #[test]
    fn plans_are_valid_and_minimal_over_many_layouts() {
        let mut checked = 0;
        for (c, w) in layouts() {
            let t = Topology::new(c.clone(), w).unwrap();
            let mut cases: Vec<Vec<u32>> = (0..w).map(|r| vec![r]).collect();
            for a in (0..w).step_by(3) {
                for b in (a + 1..w).step_by(5) {
                    cases.push(vec![a, b]);
                }
            }
            for failed in cases {
                let want = brute_min_drop(&t, &failed);
                match plan_recovery(&t, &failed, &[]) {
                    Ok(p) => {
                        check_plan(&t, &failed, &[], &p);
                        assert_eq!(Some(p.dropped.len() as u32), want, "{c:?} w {w} failed {failed:?}");
                    }
                    Err(e) => {
                        assert_eq!(want, None, "{c:?} w {w} failed {failed:?}: refused: {e}");
                        assert!(e.message.contains("no valid layout remains"), "{e}");
                    }
                }
                checked += 1;
            }
        }
        assert!(checked > 1000, "only {checked} cases");
    }
}
