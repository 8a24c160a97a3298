//! `mcore-topo --without-ranks`: the recovery plan printed by the built binary, checked against
//! the engine's `plan_recovery` and against the layout it prints.

use mcore_init::topology::{plan_recovery, Topology, TopologyConfig};
use serde_json::Value;
use std::process::{Command, Output};

fn topo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcore-topo")).args(args).output().expect("run mcore-topo")
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn the_issue_command_drops_the_replica_of_rank_5() {
    let v = json_of(&topo(&["--world-size", "16", "--tp", "2", "--pp", "2", "--without-ranks", "5", "--json"]));
    assert_eq!(v["world_size"], 12);
    assert_eq!(v["dropped_ranks"], serde_json::json!([4, 5, 12, 13]));
    assert_eq!(v["leaving_ranks"], serde_json::json!([4, 12, 13]));
    let map = v["rank_map"].as_object().unwrap();
    assert_eq!(map.len(), 12);
    assert_eq!(map["6"], 4);
    assert_eq!(map["15"], 11);
    assert!(!map.contains_key("5"));
    // The printed groups are the new layout's, and the tensor groups are the old ones renamed.
    assert_eq!(v["groups"]["tensor_model_parallel"][2], serde_json::json!([4, 5]));
    assert_eq!(v["groups"]["data_parallel"][0], serde_json::json!([0, 2, 4]));
    let kinds: Vec<&str> = v["changed_kinds"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert!(kinds.contains(&"data_parallel") && !kinds.contains(&"tensor_model_parallel"), "{kinds:?}");
}

#[test]
fn the_text_form_prints_the_plan_and_the_new_layout() {
    let out = topo(&["--world-size", "16", "--tp", "2", "--pp", "2", "--without-ranks", "5"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("world 16 -> 12, dp 4 -> 3"), "{text}");
    assert!(text.contains("dropped ranks [4,5,12,13]"), "{text}");
    assert!(text.contains("6->4") && text.contains("15->11"), "{text}");
    assert!(text.contains("world size 12"), "{text}");
}

#[test]
fn the_cli_agrees_with_the_engine_with_experts_and_spares() {
    let cfg = TopologyConfig { tp: 2, pp: 2, ep: 2, etp: Some(1), ..Default::default() };
    let t = Topology::new(cfg, 32).unwrap();
    let plan = plan_recovery(&t, &[9, 30], &[32]).unwrap();
    let v = json_of(&topo(&[
        "--world-size",
        "32",
        "--tp",
        "2",
        "--pp",
        "2",
        "--ep",
        "2",
        "--etp",
        "1",
        "--without-ranks",
        "9,30",
        "--spares",
        "32",
        "--json",
    ]));
    assert_eq!(v["world_size"], plan.topology.world_size());
    let dropped: Vec<u32> = serde_json::from_value(v["dropped_ranks"].clone()).unwrap();
    assert_eq!(dropped, plan.dropped);
    for (o, n) in &plan.rank_map {
        assert_eq!(v["rank_map"][o.to_string()], *n, "rank {o}");
    }
    assert_eq!(v["spares_used"].as_object().unwrap().len(), 1);
}

#[test]
fn bad_input_is_a_clear_error() {
    let cases: [(&[&str], &str); 5] = [
        (&["--world-size", "16", "--tp", "2", "--pp", "2", "--without-ranks", "0,2,4,6"], "no valid layout remains"),
        (&["--world-size", "16", "--tp", "2", "--without-ranks", "16"], "failed rank 16"),
        (&["--world-size", "16", "--without-ranks", "x"], "--without-ranks: 'x' is not an integer"),
        (&["--world-size", "16", "--without-ranks", ""], "--without-ranks: empty rank list"),
        (&["--world-size", "16", "--spares", "17"], "--spares needs --without-ranks"),
    ];
    for (args, want) in cases {
        let out = topo(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
