//! `mcore-topo --seed` end to end against Megatron-Core: for every `set_random_seed` case of
//! tests/data/conformance/megatron_rng_seeds.json, the tool's per-rank streams (computed from the
//! layout it prints) equal the seeds Megatron's training initializer gave each rank; a rank where
//! Megatron raised (seed collision) makes the tool exit 2 naming that rank.

use crate::common;

use serde_json::Value;
use std::process::Command;

/// The layout flags of a vector's config (also used by `cli_topo_mindspeed`).
pub(crate) fn layout_args(cfg: &Value) -> Vec<String> {
    let mut args = vec!["--world-size".to_string(), cfg["world_size"].to_string()];
    for (flag, key) in
        [("--tp", "tp"), ("--pp", "pp"), ("--cp", "cp"), ("--ep", "ep"), ("--etp", "etp"), ("--vpp", "vpp")]
    {
        if let Some(v) = cfg[key].as_u64() {
            args.extend([flag.to_string(), v.to_string()]);
        }
    }
    if let Some(nd) = cfg["nd"].as_u64() {
        args.extend(["--dist-opt-instances".to_string(), nd.to_string()]);
    }
    if let Some(hcp) = cfg["hcp"].as_array() {
        let list: Vec<String> = hcp.iter().map(|v| v.to_string()).collect();
        args.extend(["--hcp".to_string(), list.join(",")]);
    }
    args.extend(["--order".to_string(), cfg["order"].as_str().unwrap().to_string()]);
    args
}

#[test]
fn per_rank_seeds_match_megatron_set_random_seed() {
    let vectors = common::read_conformance_json("megatron_rng_seeds.json");
    let (mut ranks_checked, mut errors_checked) = (0, 0);
    for case in vectors["set_random_seed"].as_array().unwrap() {
        let cfg = &case["config"];
        let mut args = layout_args(cfg);
        args.extend(["--seed".to_string(), case["seed"].to_string(), "--json".to_string()]);
        if case["data_parallel_random_init"] == true {
            args.push("--data-parallel-random-init".to_string());
        }
        let out = Command::new(env!("CARGO_BIN_EXE_mcore-topo")).args(&args).output().unwrap();
        let failing: Vec<&Value> = case["ranks"].as_array().unwrap().iter().filter(|r| r["result"] != "ok").collect();
        if let Some(bad) = failing.first() {
            assert_eq!(out.status.code(), Some(2), "{}: {args:?}", cfg["id"]);
            let err = String::from_utf8_lossy(&out.stderr);
            let msg = bad["result"]["error"]["msg"].as_str().unwrap();
            assert!(err.contains(&format!("rank {}", bad["rank"])) && err.contains(msg), "{}: {err}", cfg["id"]);
            errors_checked += 1;
            continue;
        }
        assert!(out.status.success(), "{}: {}", cfg["id"], String::from_utf8_lossy(&out.stderr));
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let rng = printed["rng"].as_array().unwrap();
        for want in case["ranks"].as_array().unwrap() {
            let r = want["rank"].as_u64().unwrap() as usize;
            let streams = &rng[r]["streams"];
            assert_eq!(rng[r]["rank"], r as u64);
            assert_eq!(streams["default"], want["cuda_default_state_after"]["seed"], "{} rank {r}", cfg["id"]);
            assert_eq!(streams["default"], want["cpu_seed_calls"][0][1], "{} rank {r}", cfg["id"]);
            for (name, state) in want["tracker"]["states"].as_object().unwrap() {
                assert_eq!(streams[name], state["seed"], "{} rank {r} stream {name}", cfg["id"]);
            }
            ranks_checked += 1;
        }
    }
    assert!(ranks_checked > 500, "only {ranks_checked} ranks compared");
    assert!(errors_checked >= 1, "the vectors' seed-collision cases were not exercised");
    println!("mcore-topo --seed: {ranks_checked} ranks match Megatron, {errors_checked} collision case(s) rejected");
}
