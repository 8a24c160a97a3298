//! `mcore-topo` end to end: the built binary, its table, its JSON (checked against the engine),
//! the one-rank view and the exit-2 error lines.

use mcore_init::topology::{GroupKind, Topology, TopologyConfig};
use serde_json::Value;
use std::process::{Command, Output};

fn topo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcore-topo")).args(args).output().expect("run mcore-topo")
}

fn stdout_json(out: &Output) -> Value {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn engine() -> Topology {
    let cfg = TopologyConfig { tp: 2, pp: 2, cp: 2, ep: 2, etp: Some(1), dist_opt_instances: 2, ..Default::default() };
    Topology::new(cfg, 32).unwrap()
}

const ARGS: [&str; 14] = [
    "--world-size",
    "32",
    "--tp",
    "2",
    "--pp",
    "2",
    "--cp",
    "2",
    "--ep",
    "2",
    "--etp",
    "1",
    "--dist-opt-instances",
    "2",
];

#[test]
fn json_layout_matches_the_engine() {
    let v = stdout_json(&topo(&[&ARGS[..], &["--json"]].concat()));
    let t = engine();
    assert_eq!(v["world_size"], 32);
    assert_eq!(v["sizes"]["dp"], 4);
    assert_eq!(v["sizes"]["expert_dp"], 8);
    let groups = v["groups"].as_object().unwrap();
    assert_eq!(groups.len(), t.kinds().len());
    for kind in t.kinds() {
        let ours: Vec<Vec<u32>> = t.groups(kind).map(|g| g.unwrap().members()).collect();
        let theirs: Vec<Vec<u32>> = serde_json::from_value(groups[&*kind.key()].clone()).unwrap();
        assert_eq!(ours, theirs, "{kind}");
    }
    assert!(groups.contains_key("inter_partial_expert_data_parallel"));
}

#[test]
fn json_rank_view_matches_the_engine() {
    let v = stdout_json(&topo(&[&ARGS[..], &["--rank", "13", "--json"]].concat()));
    let t = engine();
    assert_eq!(v["rank"], 13);
    let view = t.rank_view(13).unwrap();
    let groups = v["groups"].as_object().unwrap();
    assert_eq!(groups.len(), view.groups.len());
    for m in &view.groups {
        let g = &groups[&*m.kind().key()];
        assert_eq!(g["rank"], m.rank);
        assert_eq!(g["size"], m.size());
        assert_eq!(serde_json::from_value::<Vec<u32>>(g["ranks"].clone()).unwrap(), m.members());
    }
    let p = &v["pipeline"];
    assert_eq!((p["rank"].as_u64(), p["next"].as_u64()), (Some(0), Some(29)));
    assert_eq!((view.pipeline.rank, view.pipeline.next), (0, 29));
    assert_eq!(p["first"], view.pipeline.first);
}

/// At 4,096 ranks the table shows each kind by its first group, its pattern and where the groups
/// start: no line over 200 characters (every group listed made lines of 27,627).
#[test]
fn table_at_4096_ranks_has_short_lines() {
    let out = topo(&["--world-size", "4096", "--tp", "8", "--pp", "4", "--cp", "2", "--ep", "8"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let longest = text.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(longest <= 200, "a line of {longest} characters:\n{text}");
    let line = text.lines().find(|l| l.starts_with("data_parallel ")).expect("dp line");
    // dp = 4096 / (8*4*2) = 64 ranks a group, strided by tp*cp = 16; 64 groups, the last of the
    // last pipeline stage starting at 3072 + 15.
    assert!(line.contains("    64     64  [0,16,32,...,1008] = 0+16*i (i<64); starts [0,1,2,...,3087]"), "{line}");
    let line = text.lines().find(|l| l.starts_with("tensor_model_parallel ")).expect("tp line");
    assert!(line.contains("     512      8  [0,1,2,3,4,5,6,7]; starts [0,8,16,...,4088]"), "{line}");
}

#[test]
fn table_output_is_readable() {
    let out = topo(&["--world-size", "16", "--tp", "2", "--pp", "4"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("tp 2 pp 4"), "{text}");
    let line = text.lines().find(|l| l.starts_with("pipeline_model_parallel ")).expect("pp line");
    assert!(line.contains("[0,4,8,12] [1,5,9,13]"), "{line}");
    let out = topo(&["--world-size", "16", "--tp", "2", "--pp", "4", "--rank", "5"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("next 9"), "{text}");
    assert!(!text.lines().any(|l| l.starts_with("embedding ")), "middle stage in no embedding group: {text}");
    let line = text.lines().find(|l| l.starts_with("data_parallel ")).unwrap();
    assert!(line.ends_with("[5,7]"), "{line}");
    // hcp levels appear as keys.
    let v = stdout_json(&topo(&["--world-size", "8", "--cp", "4", "--hcp", "2,2", "--json"]));
    let key = GroupKind::HierarchicalContextParallel(1).key();
    assert_eq!(v["groups"][&*key][0], serde_json::json!([0, 2]));
}

#[test]
fn invalid_input_exits_2_with_one_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["--world-size", "6", "--tp", "4"], "world size 6"),
        (&["--world-size", "8", "--tp", "-3"], "-3"),
        (&["--world-size", "8", "--tp", "x"], "'x'"),
        (&["--world-size", "8", "--tp", "0"], "got 0"),
        (&["--world-size", "8", "--order", "tp-xx-dp-pp"], "'xx'"),
        (&["--world-size", "8", "--cp", "4", "--hcp", "2,,2"], "2,,2"),
        (&["--world-size", "8", "--cp", "4", "--hcp", "2,3"], "[2, 3]"),
        (&["--world-size", "8", "--rank", "8"], "rank 8"),
        (&["--world-size", "8", "--vpp", "2"], "pp = 1"),
        (&["--world-size", "8", "--bogus", "1"], "--bogus"),
        (&["--world-size"], "missing value"),
        (&["--tp", "2"], "--world-size"),
        (&["--world-size", "99999999999"], "99999999999"),
        (&["--world-size", "4294967295"], "use --rank"),
        (&["--world-size", "4294967295", "--rank", "7", "--all-members"], "output would list"),
    ];
    for (args, needle) in cases {
        let out = topo(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: '{err}' lacks '{needle}'");
    }
}

/// Megatron-Core 0.19's options: the six new kinds in the table and the JSON (checked against the
/// engine), the remat streams under `--seed`, and a clear line for a rank outside a local world.
#[test]
fn gtp_kinds_streams_and_local_world() {
    let args = ["--world-size", "16", "--tp", "2", "--gtp", "2", "--pp", "2"];
    let out = topo(&args);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.lines().find(|l| l.starts_with("gtp_weight_remat ")).expect("gtp row");
    assert!(line.contains("[0,2] [1,3]"), "{line}");
    for key in ["data_parallel_with_gtp_remat ", "expert_tensor_model_pipeline_parallel_with_egtp "] {
        assert!(text.lines().any(|l| l.starts_with(key)), "{key} missing:\n{text}");
    }
    let cfg = TopologyConfig { tp: 2, pp: 2, gtp: 2, ..Default::default() };
    let t = Topology::new(cfg, 16).unwrap();
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let v = stdout_json(&topo(&json_args));
    for kind in t.kinds() {
        let want: Vec<Vec<u32>> = t.groups(kind).map(|g| g.unwrap().members()).collect();
        assert_eq!(v["groups"][&*kind.key()], serde_json::json!(want), "{kind}");
    }
    assert_eq!(v["sizes"]["gtp"], 2);
    let mut seed_args = args.to_vec();
    seed_args.extend(["--seed", "1234", "--rank", "3"]);
    let text = String::from_utf8(topo(&seed_args).stdout).unwrap();
    // rank 3: tp 1, gtp 1, pp 0 -> model 1234+2718+1, gtp stream model + 2·65536
    assert!(text.contains(&format!("gtp-remat-rng={}", 1234 + 2718 + 1 + 2 * 65536)), "{text}");
    let local = ["--world-size", "16", "--tp", "2", "--local-world-size", "8", "--rank-offset", "8", "--rank", "3"];
    let out = topo(&local);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("rank 3 is outside the grid (ranks 8..15 of a world of 16)"));
    let out = topo(&["--world-size", "16", "--local-world-size", "8", "--rank-offset", "9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exceeds the world size 16"));
}
