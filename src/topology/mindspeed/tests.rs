//! Self-consistency of MindSpeed's groups: every rank's own view agrees with the walk of the
//! world, and the DKV formula agrees with MindSpeed's walk done step by step.

use super::*;
use crate::topology::TopologyConfig;

fn layout(w: u32, tp: u32, pp: u32, cp: u32, ep: u32, opts: &str) -> Result<MindSpeedLayout, TopologyError> {
    let cfg = TopologyConfig { tp, pp, cp, ep, ..Default::default() };
    let t = Topology::new(cfg, w)?;
    MindSpeedLayout::new(&t, MindSpeedOptions::parse(opts)?)
}

fn check_consistent(l: &MindSpeedLayout) -> usize {
    let seq = l.creation_sequence().unwrap();
    for r in 0..l.w {
        let mine = l.rank_groups(r).unwrap();
        let expected: Vec<&MindSpeedGroup> = seq.iter().filter(|g| g.ranks.contains(&r)).collect();
        assert_eq!(mine.len(), expected.len(), "rank {r}: {mine:?} vs {expected:?}");
        for (a, b) in mine.iter().zip(expected) {
            assert_eq!(a, b, "rank {r}");
        }
    }
    for kind in l.kinds() {
        let of_kind: Vec<_> = seq.iter().filter(|g| g.kind == kind).collect();
        for (i, g) in of_kind.iter().enumerate() {
            assert_eq!(g.index as usize, i, "{kind}: index out of creation order");
        }
    }
    seq.len()
}

/// MindSpeed's DKV walk done literally (a reference for the closed form in rank.rs).
fn dkv_by_walk(ring: &[u32], rank: u32, w: usize) -> Vec<u32> {
    let n_w = ring.len() / w;
    for s in 0..w {
        let (mut b, mut p) = (0, s);
        let mut list = Vec::new();
        loop {
            let r = ring[b * w + p];
            if list.contains(&r) {
                break;
            }
            list.push(r);
            b = (b + 1) % n_w;
            p = (p + 1) % w;
        }
        if list.contains(&rank) {
            return list;
        }
    }
    panic!("rank {rank} in no DKV walk");
}

#[test]
fn rank_views_agree_with_the_walk_of_the_world() {
    let mut checked = 0;
    let cases = [
        (16, 2, 2, 4, 1, "cp_window_size=2,use_cp_send_recv_overlap"),
        (24, 2, 3, 4, 1, "cp_window_size=2"),
        (32, 2, 2, 8, 1, "context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=4"),
        (64, 2, 1, 16, 1, "context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=2,cp_window_size=4,use_cp_send_recv_overlap"),
        (16, 1, 1, 16, 1, "context_parallel_algo=hybrid_adaptive_cp_algo,ulysses_degree_in_cp=4"),
        (32, 8, 2, 2, 1, "tp_2d,tp_x=4,tp_y=2,context_parallel_algo=ulysses_cp_algo,enable_overlap_ag_with_matmul,use_cp_send_recv_overlap"),
        (64, 8, 2, 4, 1, "tp_2d,tp_x=2,tp_y=4,use_flash_attn"),
        (16, 2, 1, 2, 4, "balanced_moe_experts,trans_hot_expert_group_num=5,balanced_moe_hot_expert_num=4"),
        (16, 2, 4, 1, 1, "optimize_send_recv_comm"),
        (8, 1, 1, 8, 1, "default"),
    ];
    for (w, tp, pp, cp, ep, opts) in cases {
        let l = layout(w, tp, pp, cp, ep, opts).unwrap_or_else(|e| panic!("{opts}: {e}"));
        assert!(check_consistent(&l) > 0, "{opts}: no group");
        checked += 1;
    }
    assert_eq!(checked, cases.len());
}

#[test]
fn dkv_closed_form_equals_the_walk() {
    let mut compared = 0;
    for n in 1..=24u32 {
        for w in (1..=n).filter(|w| n % w == 0) {
            let ring: Vec<u32> = (0..n).map(|i| 100 + 3 * i).collect();
            for pos in 0..n {
                let (_, dkv) = inter_window_lists_for_test(&ring, pos, w);
                assert_eq!(dkv, dkv_by_walk(&ring, ring[pos as usize], w as usize), "n {n} w {w} pos {pos}");
                compared += 1;
            }
        }
    }
    assert!(compared > 300);
}

fn inter_window_lists_for_test(ring: &[u32], pos: u32, w: u32) -> (Vec<u32>, Vec<u32>) {
    rank::inter_window_lists(ring, pos, w)
}

#[test]
fn refusals_name_the_rule() {
    let cases = [
        (
            16,
            1,
            1,
            16,
            1,
            "context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=4,cp_window_size=4",
            "hybrid_cp_algo window",
        ),
        (24, 1, 1, 24, 1, "context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=3", "hybrid_cp_algo heads"),
        (8, 1, 1, 8, 1, "context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=8", "ring degree"),
        (8, 1, 1, 8, 1, "context_parallel_algo=hybrid_cp_algo", "ulysses degree"),
        (8, 1, 1, 8, 1, "cp_window_size=3", "megatron_cp_algo window"),
        (8, 1, 1, 8, 1, "cp_window_size=8", "megatron_cp_algo window"),
        (8, 8, 1, 1, 1, "tp_2d,tp_x=2,tp_y=2", "tp_2d sizes"),
        (16, 4, 1, 1, 4, "tp_2d,tp_x=2,tp_y=2", "tp_2d without MoE"),
        (
            8,
            4,
            1,
            2,
            1,
            "tp_2d,tp_x=2,tp_y=2,context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=2",
            "tp_2d cp algorithm",
        ),
    ];
    for (w, tp, pp, cp, ep, opts, rule) in cases {
        let e = layout(w, tp, pp, cp, ep, opts).expect_err(opts);
        assert!(e.message.contains(rule), "{opts}: {e}");
    }
    // An order that places the ranks as the default order does is followed; another is refused.
    let with_order = |order: &str, pp: u32| {
        let cfg = TopologyConfig { cp: 2, tp: 2, pp, order: order.into(), ..Default::default() };
        MindSpeedLayout::new(&Topology::new(cfg, 16).unwrap(), MindSpeedOptions::default())
    };
    let same = with_order("tp-cp-ep-pp-dp", 1).unwrap();
    assert_eq!(same.creation_sequence().unwrap(), with_order(DEFAULT_ORDER, 1).unwrap().creation_sequence().unwrap());
    assert!(with_order("TP-CP-EP-DP-PP", 1).is_ok() && with_order("tp-cp-dp-pp", 2).is_ok());
    for (order, pp) in [("cp-tp-ep-dp-pp", 1), ("tp-dp-cp-pp", 1), ("tp-dp-cp-pp", 2)] {
        let e = with_order(order, pp).unwrap_err();
        assert!(e.message.contains("default order") && e.message.contains(order), "{order}: {e}");
    }
}

#[test]
fn options_parse_and_refuse_bad_text() {
    let o = MindSpeedOptions::parse("tp-2d,tp_x=2,tp_y=4,use_flash_attn=false,context_parallel_algo=ulysses_cp_algo")
        .unwrap();
    assert!(o.tp_2d && !o.use_flash_attn);
    assert_eq!((o.tp_x, o.tp_y, o.context_parallel_algo), (2, 4, CpAlgo::Ulysses));
    assert_eq!(MindSpeedOptions::parse("default").unwrap(), MindSpeedOptions::default());
    let o = MindSpeedOptions::parse("ulysses_degree_in_cp=None,num_attention_heads=null").unwrap();
    assert_eq!(o, MindSpeedOptions::default());
    for (bad, names) in [
        ("tp_x", "tp_x needs a value"),
        ("tp_x=-1", "'-1'"),
        ("tp_2d=maybe", "'maybe'"),
        ("nope=1", "'nope'"),
        ("tp_2d,tp_2d", "given twice"),
        ("context_parallel_algo=ring", "'ring'"),
    ] {
        let e = MindSpeedOptions::parse(bad).unwrap_err();
        assert!(e.message.contains(names), "{bad}: {e}");
    }
}

#[test]
fn out_of_range_rank_is_an_error() {
    let l = layout(8, 1, 1, 8, 1, "default").unwrap();
    assert!(l.rank_groups(8).is_err());
    assert_eq!(l.rank_groups(7).unwrap()[0].ranks, vec![7]);
}

#[test]
fn a_rank_view_of_a_huge_world_walks_no_world() {
    // 2^30 ranks: a walk of the world would take minutes; the rank's view is a few lists.
    let started = std::time::Instant::now();
    let hybrid = layout(1 << 30, 8, 4, 64, 1, "context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=4,cp_window_size=4,use_cp_send_recv_overlap,optimize_send_recv_comm").unwrap();
    let tp_2d =
        layout(1 << 30, 8, 4, 4, 1, "tp_2d,tp_x=2,tp_y=4,use_cp_send_recv_overlap,enable_overlap_ag_with_matmul")
            .unwrap();
    let moe = layout(1 << 30, 2, 1, 2, 1 << 10, "balanced_moe_experts").unwrap();
    for l in [&hybrid, &tp_2d, &moe] {
        for rank in [0, 12345, (1 << 30) - 1] {
            let groups = l.rank_groups(rank).unwrap();
            assert!(!groups.is_empty() && groups.iter().all(|g| g.ranks.contains(&rank)), "rank {rank}");
            l.rank_lists(rank).unwrap();
        }
    }
    assert_eq!(hybrid.rank_group(MindSpeedKind::PpNewStream, 5).unwrap().unwrap().ranks.len(), 4);
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
}
