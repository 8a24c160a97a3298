//! Every seed vector of `megatron_rng_seeds.json` (Megatron-Core 0.16.1, and 0.19.2 in
//! `v0.19.2/`, run with a modelled CUDA generator) against the rng module, plus the PyTorch RFC's
//! sharded-seed tables. The 0.19.2 per-rank cases are also recomputed from the layout itself
//! (gtp-inclusive data-parallel rank, gtp/egtp ranks; ranks outside a local world have no seeds).

use crate::common;

use mcore_init::rng::{
    check_training_seed, megatron_tracker_seeds, seed_plan, sharded_index, stream_seeds, ForkFrame, GroupPosition,
    PhiloxState, RankCoordinates, RankRng, SeedPolicy, SeedRequest, Tracker,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;

const V016: &str = "megatron_rng_seeds.json";
const V019: &str = "v0.19.2/megatron_rng_seeds.json";

fn vectors() -> Value {
    common::read_conformance_json(V016)
}

/// Both releases' files (their RNG agrees wherever both have a feature).
fn both() -> [Value; 2] {
    [common::read_conformance_json(V016), common::read_conformance_json(V019)]
}

fn u32_of(v: &Value, key: &str) -> u32 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}")) as u32
}

fn state_map(v: &Value) -> BTreeMap<String, (u64, u64)> {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, s)| (k.clone(), (s["seed"].as_u64().unwrap(), s["offset"].as_u64().unwrap())))
        .collect()
}

fn tracker_map(t: &Tracker) -> BTreeMap<String, (u64, u64)> {
    t.get_states().into_iter().map(|(n, s)| (n, (s.seed, s.offset))).collect()
}

fn result_of(r: Result<(), impl ToString>) -> Value {
    match r {
        Ok(()) => json!("ok"),
        Err(e) => json!({ "msg": e.to_string() }),
    }
}

fn expected_result(v: &Value) -> Value {
    if v == "ok" {
        json!("ok")
    } else {
        json!({ "msg": v["error"]["msg"] })
    }
}

/// The tracker part of a vector: states, seed set, flag, current name.
fn check_tracker(t: &Tracker, want: &Value, ctx: &str) {
    assert_eq!(tracker_map(t), state_map(&want["states"]), "{ctx}: states");
    let seeds: Vec<u64> = want["seeds"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect();
    assert_eq!(t.seeds().collect::<Vec<_>>(), seeds, "{ctx}: seeds");
    assert_eq!(t.is_initialized(), want["is_initialized"].as_bool().unwrap(), "{ctx}: is_initialized");
    assert_eq!(t.current_state_name(), want["current_state_name"].as_str().unwrap(), "{ctx}: current name");
}

/// `cuda_manual_seed_calls`: the default stream, then one per successful add, in add order.
fn manual_seed_calls(t: &Tracker) -> Vec<u64> {
    let mut calls = vec![t.generator().seed.expect("default generator seeded")];
    calls.extend(t.get_states().iter().map(|(_, s)| s.seed));
    calls
}

fn check_default_after(t: &Tracker, want: &Value, ctx: &str) {
    let g = t.generator();
    assert_eq!(g.seed, want["seed"].as_u64(), "{ctx}: default generator seed");
    assert_eq!(g.offset, want["offset"].as_u64().unwrap(), "{ctx}: default generator offset");
}

#[test]
fn tracker_names_match() {
    use mcore_init::rng::tracker::*;
    for v in both() {
        assert_eq!(v["tracker_names"]["model"], MODEL_PARALLEL_RNG);
        assert_eq!(v["tracker_names"]["expert"], EXPERT_PARALLEL_RNG);
        assert_eq!(v["tracker_names"]["data"], DATA_PARALLEL_RNG);
    }
    let v = common::read_conformance_json(V019);
    assert_eq!(v["tracker_names"]["gtp_remat"], GTP_REMAT_RNG);
    assert_eq!(v["tracker_names"]["egtp_remat"], EGTP_REMAT_RNG);
}

#[test]
fn set_random_seed_every_rank() {
    set_random_seed_cases(&vectors(), 18, 1000, 4);
}

#[test]
fn set_random_seed_every_rank_0_19_2() {
    let v = common::read_conformance_json(V019);
    let from_layout = set_random_seed_cases(&v, 32, 1000, 4);
    assert!(from_layout > 1000, "{from_layout} ranks recomputed from the layout");
}

fn u32_or(v: &Value, key: &str, default: u32) -> u32 {
    v[key].as_u64().map_or(default, |x| x as u32)
}

/// The topology of a seed case's config (0.19.2 fields included).
fn topology_of(c: &Value) -> mcore_init::topology::Topology {
    let world = u32_of(c, "world_size");
    let cfg = mcore_init::topology::TopologyConfig {
        tp: u32_of(c, "tp"),
        pp: u32_of(c, "pp"),
        cp: u32_of(c, "cp"),
        ep: u32_of(c, "ep"),
        etp: c["etp"].as_u64().map(|v| v as u32),
        vpp: c["vpp"].as_u64().map(|v| v as u32),
        order: c["order"].as_str().unwrap_or(mcore_init::topology::DEFAULT_ORDER).to_string(),
        gtp: u32_or(c, "gtp", 1),
        egtp: u32_or(c, "egtp", 1),
        rank_offset: u32_or(c, "rank_offset", 0),
        local_world_size: Some(u32_or(c, "local_world_size", world)),
        ..Default::default()
    };
    mcore_init::topology::Topology::new(cfg, world).unwrap_or_else(|e| panic!("{c}: {e}"))
}

/// Check every rank of every case; returns how many ranks were also recomputed from the layout.
fn set_random_seed_cases(v: &Value, min_cases: usize, min_ranks: usize, min_errors: usize) -> usize {
    let cases = v["set_random_seed"].as_array().unwrap();
    assert!(cases.len() >= min_cases);
    let (mut ranks, mut errors, mut from_layout) = (0, 0, 0);
    for case in cases {
        let id = case["config"]["id"].as_str().unwrap();
        let req = SeedRequest {
            policy: SeedPolicy::Megatron,
            seed: case["seed"].as_i64().unwrap(),
            data_parallel_random_init: case["data_parallel_random_init"].as_bool().unwrap(),
            positions: vec![],
        };
        let world = case["config"]["world_size"].as_u64().unwrap() as u32;
        let layout = (v["megatron_tree"] != "v0.16.1").then(|| topology_of(&case["config"]));
        for r in case["ranks"].as_array().unwrap() {
            if r["pp_rank"].is_object() {
                // Outside the local world: Megatron fails at the first getter; so do we.
                let t = layout.as_ref().expect("only 0.19.2 has local worlds");
                let e = mcore_init::rng::layout::coordinates(t, u32_of(r, "rank")).unwrap_err();
                assert!(e.to_string().contains("belongs to no group"), "{id}: {e}");
                assert!(r["result"]["error"].is_object(), "{id}");
                errors += 1;
                continue;
            }
            let coords = RankCoordinates {
                world_size: world,
                rank: u32_of(r, "rank"),
                pp_rank: u32_of(r, "pp_rank"),
                dp_rank: u32_of(r, "dp_rank"),
                tp_rank: u32_of(r, "tp_rank"),
                cp_rank: u32_of(r, "cp_rank"),
                ep_rank: u32_of(r, "ep_rank"),
                etp_rank: u32_of(r, "etp_rank"),
                layout_fingerprint: 0,
                gtp_rank: u32_or(r, "gtp_rank", 0),
                gtp_size: u32_or(r, "gtp_world", 1),
                egtp_rank: u32_or(r, "egtp_rank", 0),
                egtp_size: u32_or(r, "egtp_world", 1),
            };
            let ctx = format!("{id} seed {} dpri {} rank {}", req.seed, req.data_parallel_random_init, coords.rank);
            if let Some(t) = &layout {
                let ours = mcore_init::rng::layout::coordinates(t, coords.rank).unwrap();
                let ours = RankCoordinates { layout_fingerprint: 0, world_size: world, ..ours };
                assert_eq!(ours, coords, "{ctx}: coordinates from the layout");
                from_layout += 1;
            }
            let plan = seed_plan(&req, &coords).unwrap();
            for call in r["cpu_seed_calls"].as_array().unwrap() {
                assert_eq!(call[1].as_u64().unwrap(), plan.cpu, "{ctx}: {}", call[0]);
            }
            let mut rr = RankRng::new(coords);
            let got = result_of(rr.seed(&req));
            assert_eq!(got, expected_result(&r["result"]), "{ctx}: result");
            let t = rr.tracker();
            let want_calls: Vec<u64> =
                r["cuda_manual_seed_calls"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect();
            assert_eq!(manual_seed_calls(t), want_calls, "{ctx}: cuda_manual_seed calls");
            check_default_after(t, &r["cuda_default_state_after"], &ctx);
            check_tracker(t, &r["tracker"], &ctx);
            // the named seed list the CLI prints: default first, then Megatron's add order
            match stream_seeds(&req, &coords) {
                Ok(list) => {
                    let names: Vec<&str> = list.iter().map(|(n, _)| n.as_str()).collect();
                    let mut want = vec!["default", "data-parallel-rng", "model-parallel-rng", "expert-parallel-rng"];
                    if coords.gtp_size > 1 {
                        want.push("gtp-remat-rng");
                    }
                    if coords.egtp_size > 1 {
                        want.push("egtp-remat-rng");
                    }
                    assert_eq!(names, want, "{ctx}");
                    assert_eq!(&list[1..].iter().map(|(_, s)| *s).collect::<Vec<_>>(), &want_calls[1..], "{ctx}");
                }
                Err(e) => {
                    assert_eq!(json!({ "msg": e.to_string() }), expected_result(&r["result"]), "{ctx}");
                    errors += 1;
                }
            }
            ranks += 1;
        }
    }
    assert!(ranks > min_ranks, "{ranks} ranks checked");
    assert!(errors >= min_errors, "the rng0009 collisions ({errors})");
    from_layout
}

#[test]
fn bad_seeds_rejected_like_the_training_wrapper() {
    for v in both() {
        bad_seed_cases(&v);
    }
}

fn bad_seed_cases(v: &Value) {
    for case in v["set_random_seed_bad_seed"].as_array().unwrap() {
        let seed = case["seed"].as_i64();
        let err = check_training_seed(seed).unwrap_err();
        assert_eq!(err.to_string(), case["result"]["error"]["msg"].as_str().unwrap());
        if let Some(s) = seed {
            let req = SeedRequest {
                policy: SeedPolicy::Megatron,
                seed: s,
                data_parallel_random_init: false,
                positions: vec![],
            };
            assert_eq!(stream_seeds(&req, &RankCoordinates::default()).unwrap_err(), err);
        }
    }
}

#[test]
fn model_parallel_cuda_manual_seed_direct() {
    for v in both() {
        direct_cases(&v);
    }
}

fn direct_cases(v: &Value) {
    let cases = v["model_parallel_cuda_manual_seed_direct"].as_array().unwrap();
    assert!(cases.len() > 100);
    for case in cases {
        let k = &case["kwargs"];
        let ctx = k.to_string();
        let seed = k["seed"].as_u64().unwrap();
        let mut t = Tracker::new();
        t.manual_seed(seed);
        let mut res = Ok(());
        for (name, s) in
            megatron_tracker_seeds(seed, u32_of(k, "tp_rank"), u32_of(k, "ep_rank"), u32_of(k, "etp_rank")).unwrap()
        {
            res = t.add(name, s);
            if res.is_err() {
                break;
            }
        }
        assert_eq!(result_of(res), expected_result(&case["result"]), "{ctx}");
        let want_calls: Vec<u64> =
            case["cuda_manual_seed_calls"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect();
        assert_eq!(manual_seed_calls(&t), want_calls, "{ctx}");
        check_default_after(&t, &case["cuda_default_state_after"], &ctx);
        check_tracker(&t, &case["tracker"], &ctx);
    }
}

#[test]
fn tracker_scenarios_step_by_step() {
    for v in both() {
        tracker_scenarios(&v);
    }
}

fn tracker_scenarios(v: &Value) {
    let scenarios = v["tracker_scenarios"].as_array().unwrap();
    assert!(scenarios.len() >= 13);
    let mut steps_checked = 0;
    for sc in scenarios {
        let name = sc["name"].as_str().unwrap();
        let mut t = Tracker::new();
        let mut frames: Vec<ForkFrame> = Vec::new();
        for (i, step) in sc["steps"].as_array().unwrap().iter().enumerate() {
            let op = step["op"].as_array().unwrap();
            let ctx = format!("{name} step {i} {}", step["op"]);
            let mut returned = Value::Null;
            let res: Result<(), mcore_init::rng::RngError> = match op[0].as_str().unwrap() {
                "manual_seed" => {
                    t.manual_seed(op[1].as_u64().unwrap());
                    Ok(())
                }
                "add" => t.add(op[1].as_str().unwrap(), op[2].as_u64().unwrap()),
                "draw" => t.draw(op[1].as_u64().unwrap()),
                "fork_enter" => t.fork_enter(op.get(1).and_then(Value::as_str)).map(|f| frames.push(f)),
                "fork_exit" => t.fork_exit(frames.pop().expect("a frame")),
                "fork_exit_first" => t.fork_exit(frames.remove(0)),
                "reset" => {
                    t.reset();
                    Ok(())
                }
                "get_states" => {
                    returned = json!(t
                        .get_states()
                        .into_iter()
                        .map(|(n, s)| (n, json!({"seed": s.seed, "offset": s.offset})))
                        .collect::<serde_json::Map<_, _>>());
                    Ok(())
                }
                "set_states" => {
                    let states = op[1]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(n, s)| {
                            (n.clone(), PhiloxState { seed: s[0].as_u64().unwrap(), offset: s[1].as_u64().unwrap() })
                        })
                        .collect();
                    t.set_states(states);
                    Ok(())
                }
                "is_initialized" => {
                    returned = json!(t.is_initialized());
                    Ok(())
                }
                other => panic!("{ctx}: unknown op {other}"),
            };
            assert_eq!(result_of(res), expected_result(&step["result"]), "{ctx}: result");
            if let Some(want) = step.get("returned") {
                assert_eq!(&returned, want, "{ctx}: returned");
            }
            let after = &step["after"];
            check_default_after(&t, &after["cuda_current"], &ctx);
            check_tracker(&t, after, &ctx);
            steps_checked += 1;
        }
    }
    assert!(steps_checked > 60, "{steps_checked}");
}

/// PyTorch RFC (sharded seeds): dp=2, pp=2, tp=2, ranks ordered dp-pp-tp (outermost first).
#[test]
fn rfc_sharded_seed_tables() {
    let tables: [(&str, [u64; 8]); 2] = [
        ("sharded:pipeline_model_parallel,tensor_model_parallel", [0, 1, 2, 3, 0, 1, 2, 3]),
        ("sharded:tensor_model_parallel,pipeline_model_parallel", [0, 2, 1, 3, 0, 2, 1, 3]),
    ];
    for (policy, want) in tables {
        let policy: SeedPolicy = policy.parse().unwrap();
        let SeedPolicy::Sharded(keys) = &policy else { panic!() };
        for rank in 0..8u32 {
            let (pp, tp) = ((rank / 2) % 2, rank % 2);
            let positions: Vec<GroupPosition> = keys
                .iter()
                .map(|k| match k.as_str() {
                    "pipeline_model_parallel" => GroupPosition { rank: pp, size: 2 },
                    _ => GroupPosition { rank: tp, size: 2 },
                })
                .collect();
            assert_eq!(sharded_index(&positions).unwrap(), want[rank as usize]);
            let req = SeedRequest { policy: policy.clone(), seed: 1000, data_parallel_random_init: false, positions };
            let coords = RankCoordinates {
                world_size: 8,
                rank,
                pp_rank: pp,
                tp_rank: tp,
                dp_rank: rank / 4,
                ..Default::default()
            };
            let seeds = stream_seeds(&req, &coords).unwrap();
            assert_eq!(seeds, vec![("default".to_string(), 1000 + want[rank as usize])], "{policy} rank {rank}");
        }
    }
}

/// `inference_rng_tracker=True`: the inference tracker stays empty and uninitialised while the
/// default stream is still seeded; a tracker that already exists keeps its kind.
#[test]
fn inference_tracker() {
    let v = vectors();
    let cases = v["inference_tracker"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    let seeds = megatron_tracker_seeds(1234, 1, 0, 0).unwrap();

    let first = &cases[0];
    assert_eq!(first["tracker"]["class"], "InferenceCudaRNGStatesTracker");
    let mut t = Tracker::inference();
    t.manual_seed(1234);
    for (name, s) in &seeds {
        t.add(name, *s).unwrap();
    }
    check_tracker(&t, &first["tracker"], "inference");
    check_default_after(&t, &first["cuda_default_state_after"], "inference");

    // the regular tracker made by the first call is kept; the second call re-seeds it
    let second = &cases[1];
    assert_eq!(second["tracker"]["class"], "CudaRNGStatesTracker");
    let mut t = Tracker::new();
    for _ in 0..2 {
        t.reset();
        t.manual_seed(1234);
        for (name, s) in megatron_tracker_seeds(1234, 0, 0, 0).unwrap() {
            t.add(name, s).unwrap();
        }
    }
    assert!(!t.is_inference());
    check_tracker(&t, &second["tracker"], "kept regular tracker");
}

/// A vector file that is not there fails the test naming the file and where the copy lives,
/// not with a bare I/O panic.
#[test]
fn a_missing_vector_file_is_named() {
    let err = std::panic::catch_unwind(|| common::read_conformance_json("no_such_vectors.json")).unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("no_such_vectors.json") && msg.contains("tests/data/conformance"), "{msg}");
}
