//! MindSpeed's extra groups against the vectors its own code produced (master with Megatron
//! 0.12.1, core_r0.16.0 with Megatron 0.16.1; docs/conformance.md, "MindSpeed"): every group by
//! kind in creation order, the global creation sequence, every simulated rank's groups and stored
//! rank lists, and every refusal.

use crate::common;
use mcore_init::topology::{MindSpeedKind, MindSpeedLayout, MindSpeedOptions, Topology, TopologyConfig};
use serde_json::Value;
use std::collections::BTreeMap;

const MASTER: &str = "mindspeed/mindspeed_groups_ms-master+mcore-0.12.1.json.gz";
const CORE_R0_16: &str = "mindspeed/mindspeed_groups_ms-core_r0.16.0+mcore-0.16.1.json.gz";

fn u32_of(v: &Value) -> u32 {
    v.as_u64().expect("a number") as u32
}

fn ranks(v: &Value) -> Vec<u32> {
    v.as_array().expect("a rank list").iter().map(u32_of).collect()
}

/// The vector's layout and MindSpeed options.
fn build(c: &Value) -> Result<MindSpeedLayout, String> {
    let cfg = TopologyConfig {
        tp: u32_of(&c["tp"]),
        pp: u32_of(&c["pp"]),
        cp: u32_of(&c["cp"]),
        ep: u32_of(&c["ep"]),
        etp: c["etp"].as_u64().map(|v| v as u32),
        vpp: c["vpp"].as_u64().map(|v| v as u32),
        order: c["order"].as_str().expect("order").into(),
        ..Default::default()
    };
    let topology = Topology::new(cfg, u32_of(&c["world_size"])).map_err(|e| format!("megatron: {e}"))?;
    let mut options = MindSpeedOptions::default();
    let given = c["mindspeed_options"].as_object().expect("mindspeed_options");
    let flash = c["use_flash_attn"].clone();
    for (key, value) in given.iter().chain([(&"use_flash_attn".to_string(), &flash)]) {
        let text = match value {
            Value::String(s) => s.clone(),
            Value::Null => continue,
            v => v.to_string(),
        };
        options.set(key, Some(&text)).map_err(|e| format!("option: {e}"))?;
    }
    MindSpeedLayout::new(&topology, options).map_err(|e| e.to_string())
}

/// The vector's key of a kind (`exp` is recorded with its group description).
fn kind_of_vector_key(key: &str) -> MindSpeedKind {
    let name = key.split('/').next().unwrap();
    MindSpeedKind::from_name(name).unwrap_or_else(|e| panic!("vector kind {key}: {e}"))
}

/// The group of a per-rank `groups` key: kind and copy.
fn kind_of_global(key: &str) -> (MindSpeedKind, u32) {
    use MindSpeedKind::*;
    if let Some(i) = key.strip_prefix("balanced_moe:_HOT_EXPERT_GROUP_LIST[") {
        return (Exp, i.trim_end_matches(']').parse().expect("copy"));
    }
    let kind = match key {
        "cp:_CONTEXT_PARALLEL_GROUP_FOR_SEND_RECV_OVERLAP" => Cp2,
        "cp:_CONTEXT_PARALLEL_GROUP_FOR_HYBRID_ULYSSES" => CpUlysses,
        "cp:_CONTEXT_PARALLEL_GROUP_FOR_HYBRID_RING" => CpRing,
        "cp:_CONTEXT_PARALLEL_GROUP_FOR_RING_INTRA_WINDOW" => CpRingIntra,
        "cp:_CONTEXT_PARALLEL_GROUP_FOR_RING_INTRA_WINDOW_SEND_RECV_OVERLAP" => CpRingIntraOverlap,
        "tp2d:_TENSOR_MODEL_PARALLEL_GROUP_FOR_ND1_DIM1" => Nd1Dim1,
        "tp2d:_TENSOR_MODEL_PARALLEL_GROUP_FOR_ND1_DIM2" => Nd1Dim2,
        "tp2d:_TENSOR_MODEL_PARALLEL_GROUP_FOR_ND2_DIM1" => Nd2Dim1,
        "tp2d:_TENSOR_MODEL_PARALLEL_GROUP_FOR_ND2_DIM2" => Nd2Dim2,
        "tp2d:_TP_X_SD_RCV_OVERLAP_GROUP" => AgXSdRcvOverlap,
        "tp2d:_TP_Y_SD_RCV_OVERLAP_GROUP" => AgYSdRcvOverlap,
        "TensorParallelYUnionCP.group" => TpYCp,
        "TensorParallelYUnionCP.overlap_group" => TpYCpOverlap,
        "pp:_PIPELINE_MODEL_PARALLEL_GROUP_FOR_NEW_STREAM" => PpNewStream,
        other => panic!("per-rank group global {other} has no kind here"),
    };
    (kind, 0)
}

/// Our answer for a per-rank stored list.
fn stored_list(l: &MindSpeedLayout, rank: u32, key: &str) -> Vec<u32> {
    use MindSpeedKind::*;
    let group = |k| l.rank_group(k, rank).unwrap().map(|g| g.ranks).unwrap_or_default();
    let lists = l.rank_lists(rank).unwrap();
    match key {
        "cp:_CONTEXT_PARALLEL_RANKS_FOR_HYBRID_ULYSSES" => group(CpUlysses),
        "cp:_CONTEXT_PARALLEL_RANKS_FOR_HYBRID_RING" => group(CpRing),
        "cp:_CONTEXT_PARALLEL_RANKS_FOR_RING_INTRA_WINDOW" => group(CpRingIntra),
        "cp:_CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV" => lists.ring_inter_window_kv,
        "cp:_CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV" => lists.ring_inter_window_dkv,
        "tp2d:_TP_X_PARALLEL_RING_RANKS" => lists.tp_x_ring,
        "tp2d:_TP_Y_PARALLEL_RING_RANKS" => lists.tp_y_ring,
        "TensorParallelYUnionCP.global_ranks" => lists.tp_y_cp,
        "balanced_moe:_EXPERT_MODEL_PARALLEL_GLOBAL_RANKS" => lists.expert_model_parallel,
        other => panic!("per-rank stored list {other} has no counterpart here"),
    }
}

#[derive(Default, Debug)]
struct Counts {
    ok: usize,
    refused: usize,
    crashes_built: usize,
    groups: usize,
    calls: usize,
    rank_answers: usize,
}

/// A config MindSpeed accepts: groups by kind, the creation sequence, every simulated rank.
fn check_ok(id: &str, entry: &Value, l: &MindSpeedLayout, n: &mut Counts) {
    assert_eq!(entry["context_parallel_algo_after_validate"], l.algo().name(), "{id}: validated algorithm");
    let seq = l.creation_sequence().unwrap();
    let mut ours: BTreeMap<MindSpeedKind, Vec<Vec<u32>>> = BTreeMap::new();
    for g in &seq {
        ours.entry(g.kind).or_default().push(g.ranks.clone());
    }
    let by_kind = entry["mindspeed_groups_by_kind"].as_object().unwrap();
    assert_eq!(by_kind.len(), ours.len(), "{id}: kinds {:?} vs ours {:?}", by_kind.keys(), ours.keys());
    for (key, lists) in by_kind {
        let theirs: Vec<Vec<u32>> = lists.as_array().unwrap().iter().map(ranks).collect();
        assert_eq!(ours.get(&kind_of_vector_key(key)), Some(&theirs), "{id}: kind {key}");
        n.groups += theirs.len();
    }
    // The global sequence: MindSpeed's (the longest rank's where tp-y-cp stops early) is ours.
    let calls: Vec<(MindSpeedKind, Vec<u32>)> = entry["mindspeed_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (kind_of_vector_key(c["kind"].as_str().unwrap()), ranks(&c["ranks"])))
        .collect();
    let our_calls: Vec<(MindSpeedKind, Vec<u32>)> = seq.iter().map(|g| (g.kind, g.ranks.clone())).collect();
    assert_eq!(our_calls, calls, "{id}: creation sequence");
    n.calls += calls.len();
    if let Some(per_rank) = entry["mindspeed_calls_per_rank"].as_array() {
        // MindSpeed's early return: a rank makes at most our calls of a kind, all of them but
        // tp-y-cp's (ours are the same on every rank).
        for r in per_rank {
            for (key, count) in r.as_object().unwrap().iter().filter(|(k, _)| *k != "rank") {
                let kind = kind_of_vector_key(key);
                let all = seq.iter().filter(|g| g.kind == kind).count() as u64;
                let theirs = count.as_u64().unwrap();
                let early = matches!(kind, MindSpeedKind::TpYCp | MindSpeedKind::TpYCpOverlap);
                assert!(theirs == all || (early && theirs < all), "{id} rank {}: {key} {theirs} of {all}", r["rank"]);
            }
        }
    }
    check_cp_lists(id, entry, l);
    check_ranks(id, entry, l, n);
    n.ok += 1;
}

/// MindSpeed's CP lists are Megatron's context-parallel groups under the default order.
fn check_cp_lists(id: &str, entry: &Value, l: &MindSpeedLayout) {
    let Some(cp) = entry["megatron_groups_by_kind"]["CONTEXT_PARALLEL_GROUP"].as_array() else { return };
    if !l.has_kind(MindSpeedKind::Cp2) {
        return;
    }
    let cp2: Vec<Vec<u32>> =
        l.creation_sequence().unwrap().into_iter().filter(|g| g.kind == MindSpeedKind::Cp2).map(|g| g.ranks).collect();
    assert_eq!(cp2, cp.iter().map(ranks).collect::<Vec<_>>(), "{id}: cp2 = Megatron's context-parallel groups");
}

fn check_ranks(id: &str, entry: &Value, l: &MindSpeedLayout, n: &mut Counts) {
    for r in entry["per_rank"].as_array().unwrap() {
        let rank = u32_of(&r["rank"]);
        let mine = l.rank_groups(rank).unwrap();
        let groups = r["groups"].as_object().unwrap();
        assert_eq!(groups.len(), mine.len(), "{id} rank {rank}: {:?} vs {mine:?}", groups.keys());
        for (key, members) in groups {
            let (kind, copy) = kind_of_global(key);
            let g =
                mine.iter().find(|g| g.kind == kind && g.copy == copy).unwrap_or_else(|| panic!("{id} {rank} {key}"));
            // torch sorts a group's ranks; MindSpeed's lists are compared as sets here.
            let (mut a, mut b) = (g.ranks.clone(), ranks(members));
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "{id} rank {rank}: {key}");
            n.rank_answers += 1;
        }
        for (key, list) in r["rank_lists"].as_object().unwrap() {
            assert_eq!(stored_list(l, rank, key), ranks(list), "{id} rank {rank}: {key}");
            n.rank_answers += 1;
        }
    }
}

/// The MindSpeed wrapper (in stacking order: CP, 2-D TP, PP new stream, hot expert) that
/// creates `kind`.
fn wrapper_of(kind: MindSpeedKind) -> u32 {
    use MindSpeedKind::*;
    match kind {
        Cp2 | CpUlysses | CpRing | CpRingIntra | CpRingIntraOverlap => 0,
        PpNewStream => 2,
        Exp => 3,
        _ => 1,
    }
}

/// A wrapper that crashed in MindSpeed (signature out of date): we build what the feature
/// intends, and the groups made before the crash are ours up to the end of an earlier wrapper's,
/// with groups of a later wrapper built past it.
fn check_crash(id: &str, entry: &Value, built: Result<MindSpeedLayout, String>, n: &mut Counts) {
    let e = &entry["error"];
    assert_eq!(e["type"], "TypeError", "{id}: only signature crashes are built past");
    let l = built.unwrap_or_else(|err| panic!("{id}: MindSpeed's wrapper crashed, we must build: {err}"));
    let before = e["mindspeed_groups_before_error"].as_u64().unwrap() as usize;
    let seq = l.creation_sequence().unwrap();
    let crashed = (0..4).find(|&w| seq.iter().filter(|g| wrapper_of(g.kind) < w).count() == before);
    let crashed = crashed.unwrap_or_else(|| panic!("{id}: {before} groups before the crash end no wrapper of ours"));
    assert!(seq.iter().any(|g| wrapper_of(g.kind) >= crashed), "{id}: the crashed wrapper's groups are built");
    n.crashes_built += 1;
}

/// Every config of `file` (counted: each is built, refused or built past a crash).
fn check_file(file: &str) -> Counts {
    let data = common::read_conformance_json(file);
    let mut n = Counts::default();
    for entry in data["configs"].as_array().unwrap() {
        let c = &entry["config"];
        let id = format!("{} {}", data["variant"].as_str().unwrap(), c["id"].as_str().unwrap());
        let built = build(c);
        match (entry["outcome"].as_str().unwrap(), entry["error"]["stage"].as_str()) {
            ("ok", _) => check_ok(&id, entry, &built.unwrap_or_else(|e| panic!("{id}: refused: {e}")), &mut n),
            ("error", Some("initialize_model_parallel")) => check_crash(&id, entry, built, &mut n),
            ("error", stage) => {
                let err = built.err().unwrap_or_else(|| panic!("{id}: accepted, MindSpeed refused at {stage:?}"));
                if stage == Some("validate_args") {
                    // MindSpeed's validation; Megatron's own refusals name Megatron's rule.
                    assert!(err.contains("MindSpeed rule"), "{id}: message names no rule: {err}");
                }
                n.refused += 1;
            }
            (other, _) => panic!("{id}: unknown outcome {other}"),
        }
    }
    assert_eq!(n.ok + n.refused + n.crashes_built, data["configs"].as_array().unwrap().len());
    n
}

#[test]
fn groups_match_mindspeed_master_with_megatron_0_12_1() {
    let n = check_file(MASTER);
    eprintln!("{MASTER}: {n:?}");
    assert!(n.ok >= 16 && n.refused >= 2, "{n:?}");
    assert!(n.groups > 1_000 && n.rank_answers > 6_000, "{n:?}");
}

#[test]
fn groups_match_mindspeed_core_r0_16_0_with_megatron_0_16_1() {
    let n = check_file(CORE_R0_16);
    eprintln!("{CORE_R0_16}: {n:?}");
    assert!(n.ok >= 12 && n.refused >= 2 && n.crashes_built >= 4, "{n:?}");
    assert!(n.groups > 500 && n.rank_answers > 3_000, "{n:?}");
}
