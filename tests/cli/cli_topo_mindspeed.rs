//! `mcore-topo --mindspeed ... --json` end to end against MindSpeed's vectors
//! (tests/data/conformance/mindspeed/): the tool's "mindspeed_groups" equal MindSpeed's groups by
//! kind (creation order), `--rank R` gives each simulated rank's groups and stored lists, a
//! refused configuration exits 2 naming the rule, and bad option text is refused.

use crate::common;
use serde_json::Value;
use std::process::{Command, Output};

const FILES: [&str; 2] = [
    "mindspeed/mindspeed_groups_ms-master+mcore-0.12.1.json.gz",
    "mindspeed/mindspeed_groups_ms-core_r0.16.0+mcore-0.16.1.json.gz",
];

fn topo(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcore-topo")).args(args).output().unwrap()
}

/// The vector's layout flags and `--mindspeed` text (a true flag as its key alone).
fn args_of(cfg: &Value) -> Vec<String> {
    let mut args = crate::cli_topo_seeds::layout_args(cfg);
    let mut items: Vec<String> = Vec::new();
    let flash = ("use_flash_attn".to_string(), cfg["use_flash_attn"].clone());
    for (k, v) in cfg["mindspeed_options"].as_object().unwrap().clone().into_iter().chain([flash]) {
        match v {
            Value::Bool(true) => items.push(k),
            Value::String(s) => items.push(format!("{k}={s}")),
            Value::Null => {}
            v => items.push(format!("{k}={v}")),
        }
    }
    args.extend(["--mindspeed".to_string(), items.join(","), "--json".to_string()]);
    args
}

/// MindSpeed's groups by kind, keyed by our kind names (the hot-expert key carries its
/// description after a '/').
fn expected_by_kind(entry: &Value) -> serde_json::Map<String, Value> {
    let by_kind = entry["mindspeed_groups_by_kind"].as_object().unwrap();
    by_kind.iter().map(|(k, v)| (k.split('/').next().unwrap().to_string(), v.clone())).collect()
}

fn check_rank(id: &str, args: &[String], r: &Value) -> usize {
    let rank = r["rank"].to_string();
    let mut a = args.to_vec();
    a.extend(["--rank".to_string(), rank.clone()]);
    let out = topo(&a);
    assert!(out.status.success(), "{id} rank {rank}: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours = v["mindspeed_groups"].as_object().unwrap();
    let mut theirs: Vec<Vec<u64>> = r["groups"]
        .as_object()
        .unwrap()
        .values()
        .map(|g| g.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect())
        .collect();
    let mut mine: Vec<Vec<u64>> = Vec::new();
    for g in ours.values() {
        let ranks: Vec<u64> = g["ranks"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        mine.extend(std::iter::repeat(ranks).take(g["copies"].as_u64().unwrap() as usize));
    }
    for l in theirs.iter_mut().chain(mine.iter_mut()) {
        l.sort_unstable();
    }
    theirs.sort();
    mine.sort();
    assert_eq!(mine, theirs, "{id} rank {rank}: groups");
    let lists = v["mindspeed_rank_lists"].as_object().unwrap();
    for (key, want) in r["rank_lists"].as_object().unwrap() {
        let ours = match key.as_str() {
            "cp:_CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV" => &lists["ring_inter_window_kv"],
            "cp:_CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV" => &lists["ring_inter_window_dkv"],
            "tp2d:_TP_X_PARALLEL_RING_RANKS" => &lists["tp_x_ring"],
            "tp2d:_TP_Y_PARALLEL_RING_RANKS" => &lists["tp_y_ring"],
            "TensorParallelYUnionCP.global_ranks" => &lists["tp_y_cp"],
            "balanced_moe:_EXPERT_MODEL_PARALLEL_GLOBAL_RANKS" => &lists["expert_model_parallel"],
            _ => continue, // the `_RANKS_` twins of groups, compared above
        };
        assert_eq!(ours, want, "{id} rank {rank}: {key}");
    }
    1
}

#[test]
fn mindspeed_groups_match_the_vectors() {
    let (mut layouts, mut refused, mut ranks) = (0, 0, 0);
    for file in FILES {
        let data = common::read_conformance_json(file);
        for entry in data["configs"].as_array().unwrap() {
            let id = format!("{file} {}", entry["config"]["id"]);
            let args = args_of(&entry["config"]);
            let out = topo(&args);
            if entry["outcome"] == "error" && entry["error"]["stage"] != "initialize_model_parallel" {
                let err = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(2), "{id}: accepted");
                if entry["error"]["stage"] == "validate_args" {
                    assert!(err.contains("MindSpeed rule"), "{id}: {err}");
                }
                refused += 1;
                continue;
            }
            assert!(out.status.success(), "{id}: {}", String::from_utf8_lossy(&out.stderr));
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(v["groups"].is_object(), "{id}: the Megatron report is still there");
            if entry["outcome"] != "ok" {
                continue; // a wrapper crash: conformance_mindspeed checks what is built
            }
            assert_eq!(v["mindspeed_groups"], Value::Object(expected_by_kind(entry)), "{id}");
            assert_eq!(v["mindspeed"]["context_parallel_algo"], entry["context_parallel_algo_after_validate"], "{id}");
            layouts += 1;
            // First, middle and last simulated ranks.
            let per_rank = entry["per_rank"].as_array().unwrap();
            for i in [0, per_rank.len() / 2, per_rank.len() - 1] {
                ranks += check_rank(&id, &args, &per_rank[i]);
            }
        }
    }
    assert!(layouts >= 28 && refused >= 4, "{layouts} layouts, {refused} refused");
    assert_eq!(ranks, 3 * layouts);
}

#[test]
fn bad_mindspeed_input_is_refused_with_its_name() {
    for (opts, world, extra, says) in [
        ("tp_x=abc", "8", "", "'abc'"),
        ("nonsense", "8", "", "'nonsense'"),
        ("cp_window_size=3", "8", "--cp 8", "megatron_cp_algo window"),
        ("default", "8", "--cp 2 --tp 2 --order cp-tp-ep-dp-pp", "default order"),
        ("default", "8", "--cp 2 --grid b:cp=2,rank-offset=4,local-world-size=4", "not with --grid"),
    ] {
        let mut args: Vec<String> =
            ["--world-size", world, "--mindspeed", opts].iter().map(|s| s.to_string()).collect();
        args.extend(extra.split_whitespace().map(String::from));
        let out = topo(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // `default` is MindSpeed's defaults: cp > 1 gives every rank a one-rank ring window.
    let out = topo(&["--world-size", "4", "--cp", "4", "--mindspeed", "default", "--json"].map(String::from));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mindspeed_groups"], serde_json::json!({"cp_ring_intra": [[0], [1], [2], [3]]}));
}
