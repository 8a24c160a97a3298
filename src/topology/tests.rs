//! Self-consistency of the engine: enumeration and per-rank lookup agree for every kind.

use super::*;
use std::collections::HashSet;

fn cfg(tp: u32, pp: u32, cp: u32, ep: u32, etp: Option<u32>, nd: u32, order: &str) -> TopologyConfig {
    TopologyConfig { tp, pp, cp, ep, etp, dist_opt_instances: nd, order: order.into(), ..Default::default() }
}

fn check_consistent(topo: &Topology) {
    let w = topo.world_size();
    let off = topo.rank_offset();
    for kind in topo.kinds() {
        let mut seen = HashSet::new();
        let mut count = 0;
        for (i, g) in topo.groups(kind).enumerate() {
            let g = g.unwrap();
            assert_eq!(g.index(), i as u64);
            let m = g.members();
            assert!(m.windows(2).all(|p| p[0] < p[1]), "{kind} group {i} not ascending: {m:?}");
            assert_eq!(m.len() as u32, g.len());
            for (j, &r) in m.iter().enumerate() {
                assert!(r >= off && r < off + w);
                assert!(seen.insert(r), "{kind}: rank {r} in two groups");
                let mem = topo.membership(kind, r).unwrap().unwrap_or_else(|| panic!("{kind} {r}"));
                assert_eq!(mem.group, g, "{kind} rank {r}");
                assert_eq!(mem.rank, j as u32);
                assert_eq!(g.member(j as u32), Some(r));
            }
            count += 1;
        }
        assert_eq!(count, topo.group_count(kind));
        let partition = !matches!(kind, GroupKind::Embedding | GroupKind::PositionEmbedding);
        if partition {
            assert_eq!(seen.len() as u32, w, "{kind} does not cover the world");
        } else {
            for r in off..off + w {
                assert_eq!(topo.membership(kind, r).unwrap().is_some(), seen.contains(&r));
            }
        }
    }
}

#[test]
fn every_kind_is_consistent_over_many_layouts() {
    let orders = ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-pp-dp", "pp-tp-dp", "cp-tp-ep-dp-pp"];
    let mut built = 0;
    for w in [1u32, 8, 16, 24, 48] {
        for tp in [1, 2, 3] {
            for pp in [1, 2, 4] {
                for cp in [1, 2] {
                    for ep in [1, 2, 4] {
                        for etp in [None, Some(1), Some(2)] {
                            for nd in [1, 2] {
                                for order in orders {
                                    let c = cfg(tp, pp, cp, ep, etp, nd, order);
                                    if let Ok(t) = Topology::new(c, w) {
                                        check_consistent(&t);
                                        built += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(built > 300, "{built}");
}

#[test]
fn hierarchical_and_offset_layouts() {
    let mut c = cfg(2, 2, 8, 1, None, 1, "tp-cp-ep-dp-pp");
    c.hierarchical_cp = vec![2, 2, 2];
    c.rank_offset = 100;
    let t = Topology::new(c, 64).unwrap();
    assert_eq!(t.hierarchical_cp_levels(), 3);
    check_consistent(&t);
    // Level 1 of cp group [100,102,...,114] pairs positions at stride 2.
    let g = t.group_of(GroupKind::HierarchicalContextParallel(1), 100).unwrap().unwrap();
    assert_eq!(g.members(), vec![100, 104]);
    assert!(t.rank_view(99).is_err());
    assert!(t.rank_view(164).is_err());
}

#[test]
fn custom_embedding_callback() {
    let mut c = cfg(1, 4, 1, 1, None, 1, "tp-cp-ep-dp-pp");
    c.embedding_ranks = Some(std::sync::Arc::new(|p: &[u32]| Ok(vec![p[1], p[0]])));
    let t = Topology::new(c.clone(), 8).unwrap();
    check_consistent(&t);
    assert_eq!(t.group_of(GroupKind::Embedding, 3).unwrap().unwrap().members(), vec![1, 3]);
    assert!(t.group_of(GroupKind::Embedding, 5).unwrap().is_none());
    c.embedding_ranks = Some(std::sync::Arc::new(|_: &[u32]| Ok(vec![7, 7])));
    let t = Topology::new(c.clone(), 8).unwrap();
    let e = t.group_of(GroupKind::Embedding, 0).unwrap_err();
    assert!(e.message.contains("twice"), "{e}");
    c.embedding_ranks = Some(std::sync::Arc::new(|_: &[u32]| Err("nope".into())));
    let t = Topology::new(c, 8).unwrap();
    assert!(t.rank_view(0).unwrap_err().message.contains("nope"));
}

#[test]
fn rejections_name_the_values() {
    let bad = |c: TopologyConfig, w: u32, needle: &str| {
        let e = Topology::new(c, w).unwrap_err();
        assert!(e.message.contains(needle), "'{}' lacks '{needle}'", e.message);
    };
    bad(cfg(0, 1, 1, 1, None, 1, "tp-cp-ep-dp-pp"), 4, "got 0");
    bad(cfg(1, 1, 1, 1, Some(0), 1, "tp-cp-ep-dp-pp"), 4, "etp");
    bad(cfg(4, 1, 1, 1, None, 1, "tp-cp-ep-dp-pp"), 6, "world size 6");
    bad(cfg(2, 1, 1, 1, None, 1, "tp-xx-dp-pp"), 4, "'xx'");
    bad(cfg(2, 1, 1, 1, None, 1, "tp-tp-dp-pp"), 4, "twice");
    bad(cfg(u32::MAX, u32::MAX, u32::MAX, 1, None, 1, "tp-cp-ep-dp-pp"), 4, "4294967295");
    bad(TopologyConfig { vpp: Some(0), pp: 2, ..Default::default() }, 4, "vpp");
    bad(TopologyConfig { vpp: Some(2), ..Default::default() }, 4, "pp = 1");
    bad(TopologyConfig { cp: 4, hierarchical_cp: vec![2, 0], ..Default::default() }, 4, "#1");
    bad(TopologyConfig { cp: 4, hierarchical_cp: vec![2, 3], ..Default::default() }, 4, "[2, 3]");
    bad(TopologyConfig { rank_offset: u32::MAX, ..Default::default() }, 2, "rank offset");
    bad(cfg(2, 2, 2, 1, None, 1, "tp-cp-ep-pp-dp"), 16, "expert dp");
}

#[test]
fn pipeline_queries() {
    let mut c = cfg(2, 4, 1, 1, None, 1, "tp-cp-ep-dp-pp");
    c.vpp = Some(2);
    let t = Topology::new(c, 16).unwrap();
    let p = t.pipeline(1).unwrap();
    assert_eq!((p.rank, p.size, p.first, p.last, p.next, p.prev), (0, 4, 1, 13, 5, 13));
    assert!(t.is_pipeline_first_stage(1, None).unwrap());
    assert!(t.is_pipeline_first_stage(1, Some(0)).unwrap());
    assert!(!t.is_pipeline_first_stage(1, Some(1)).unwrap());
    assert!(t.is_pipeline_last_stage(13, Some(1)).unwrap());
    assert!(!t.is_pipeline_last_stage(13, Some(0)).unwrap());
    assert!(t.is_pipeline_first_stage(1, Some(2)).is_err());
    assert!(t.is_rank_in_embedding_group(13, Some(1)).unwrap());
    assert!(!t.is_rank_in_embedding_group(13, Some(0)).unwrap());
    assert!(!t.is_rank_in_embedding_group(5, None).unwrap());
}

#[test]
fn gtp_layouts_are_consistent() {
    let mut built = 0;
    for w in [8u32, 16, 32] {
        for (tp, pp, cp, ep) in [(1, 1, 1, 1), (2, 2, 1, 1), (2, 1, 2, 2), (1, 2, 1, 4)] {
            for (gtp, egtp) in [(1, 1), (2, 1), (1, 2), (2, 2), (4, 2)] {
                for order in ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "dp-tp-pp"] {
                    let mut c = cfg(tp, pp, cp, ep, None, 1, order);
                    (c.gtp, c.egtp) = (gtp, egtp);
                    if let Ok(t) = Topology::new(c, w) {
                        check_consistent(&t);
                        built += 1;
                    }
                }
            }
        }
    }
    assert!(built > 40, "{built}");
    // W=16 tp=2 gtp=2 pp=2: gtp peers tp apart, model parallel spans tp·gtp·pp.
    let mut c = cfg(2, 2, 1, 1, None, 1, "tp-cp-ep-dp-pp");
    c.gtp = 2;
    let t = Topology::new(c.clone(), 16).unwrap();
    let m = |k, r| t.group_of(k, r).unwrap().unwrap().members();
    assert_eq!(m(GroupKind::GtpWeightRemat, 1), vec![1, 3]);
    assert_eq!(m(GroupKind::DataParallel, 1), vec![1, 5]);
    assert_eq!(m(GroupKind::DataParallelWithGtpRemat, 1), vec![1, 3, 5, 7]);
    assert_eq!(m(GroupKind::ModelParallel, 1), vec![0, 1, 2, 3, 8, 9, 10, 11]);
    assert_eq!(t.group_count(GroupKind::IntraDistributedOptimizerInstance), 1);
    assert_eq!(t.alias_of(GroupKind::GtpWeightRemat), None);
    assert_eq!(t.alias_of(GroupKind::ExpertGtpWeightRemat), Some(GroupKind::ContextParallel));
    assert_eq!(t.alias_of(GroupKind::ExpertDataParallelWithGtpRemat), Some(GroupKind::ExpertDataParallel));
    // At gtp = 1 every 0.19 kind aliases an older one (cp = 1 gives single-rank groups).
    let t1 = Topology::new(cfg(2, 2, 1, 1, None, 1, "tp-cp-ep-dp-pp"), 16).unwrap();
    for k in GroupKind::added_in_0_19() {
        let src = t1.alias_of(*k).unwrap_or_else(|| panic!("{k}"));
        let members = |k| t1.groups(k).map(|g| g.unwrap().members()).collect::<Vec<_>>();
        assert_eq!(members(*k), members(src), "{k} vs {src}");
    }
    assert_eq!(t1.alias_of(GroupKind::DataParallelWithGtpRemat), Some(GroupKind::DataParallel));
    assert_eq!(t1.alias_of(GroupKind::DataParallel), None, "only the 0.19 kinds alias");
    c.dist_opt_instances = 2;
    let e = Topology::new(c, 16).unwrap_err();
    assert!(e.message.contains("2 distributed-optimizer instances"), "{e}");
}

#[test]
fn local_world_leaves_other_ranks_in_no_group() {
    let mut c = cfg(2, 1, 1, 1, None, 1, "tp-cp-ep-dp-pp");
    c.gtp = 2;
    c.local_world_size = Some(8);
    c.rank_offset = 8;
    let t = Topology::new(c.clone(), 16).unwrap();
    assert_eq!((t.world_size(), t.total_world_size(), t.rank_offset()), (8, 16, 8));
    check_consistent(&t);
    assert!(!t.in_grid(3) && t.in_grid(8) && t.in_grid(15));
    for k in t.kinds() {
        assert_eq!(t.membership(k, 3).unwrap(), None, "{k}");
    }
    let e = t.rank_view(3).unwrap_err();
    assert!(e.message.contains("belongs to no group"), "{e}");
    assert!(t.pipeline(7).is_err());
    assert!(t.membership(GroupKind::TensorModelParallel, 16).is_err(), "rank outside the world");
    c.rank_offset = 9;
    let e = Topology::new(c, 16).unwrap_err();
    assert!(e.message.contains("exceeds the world size 16"), "{e}");
}

/// The largest pipeline (2^32 - 1 stages): the last stage's neighbours wrap without overflow
/// (found by tests/conformance/fuzz_parsers.rs).
#[test]
fn pipeline_neighbours_of_the_largest_pipeline() {
    let t = Topology::new(TopologyConfig { pp: u32::MAX, ..Default::default() }, u32::MAX).unwrap();
    let p = t.pipeline(u32::MAX - 1).unwrap();
    assert_eq!((p.rank, p.size, p.next, p.prev, p.first), (u32::MAX - 1, u32::MAX, 0, u32::MAX - 2, 0));
}
