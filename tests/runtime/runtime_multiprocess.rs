//! The runtime with real processes on loopback over the Gloo plugin: worlds of 4, 8 and 16 in
//! several layouts, every group verified by a collective; and the failures: a rank that never
//! starts, a rank that dies after rendezvous, mismatched configs, a port in use, and leaks across
//! 20 destroy + re-init cycles; recovery of a job of two grids (colocated, side by side, refused). Needs `MCORE_GLOO_PLUGIN` (scripts/test.d/25-runtime.sh sets it);
//! without it every test says so and returns.

use crate::common;

use serde_json::Value;
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SELFTEST: &str = env!("CARGO_BIN_EXE_mcore-selftest");
const LAUNCH: &str = env!("CARGO_BIN_EXE_mcore-launch");

fn plugin() -> Option<String> {
    common::gloo_plugin("scripts/test.d/25-runtime.sh")
}

/// Run `mcore-launch --nproc n -- mcore-selftest <args>`; the JSON line of every rank.
fn launch(n: u32, args: &[&str], env: &[(&str, &str)]) -> (Output, Vec<Value>) {
    let plugin = plugin().unwrap();
    let mut cmd = Command::new(LAUNCH);
    cmd.args(["--nproc", &n.to_string(), "--timeout", "240", "--", SELFTEST, "--json", "--backend", &plugin])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = common::wait_bounded(cmd.spawn().unwrap(), Duration::from_secs(300));
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once("]: ").map(|(_, j)| j.to_string()))
        .filter_map(|j| serde_json::from_str::<Value>(&j).ok())
        .collect();
    (out, lines)
}

/// Start `mcore-selftest` directly as rank `rank` of `world` (no launcher), rendezvousing on `port`.
fn spawn_rank(plugin: &str, rank: u32, world: u32, port: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut cmd = common::rank_command(SELFTEST, rank, world, port);
    cmd.args(["--json", "--backend", plugin]).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_all_ok(n: u32, args: &[&str]) -> Vec<Value> {
    let (out, lines) = launch(n, args, &[]);
    assert!(out.status.success(), "{args:?}: {}\n{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(lines.len(), n as usize, "{args:?}: one JSON line per rank:\n{}", text(&out.stdout));
    let mut ranks: Vec<u64> = lines.iter().map(|l| l["rank"].as_u64().unwrap()).collect();
    ranks.sort();
    assert_eq!(ranks, (0..n as u64).collect::<Vec<_>>());
    for l in &lines {
        assert_eq!(l["ok"], true, "{l}");
        assert!(l["groups"].as_u64().unwrap() >= 8, "{l}");
    }
    lines
}

#[test]
fn worlds_of_4_8_16_in_several_layouts_verify_every_group() {
    if plugin().is_none() {
        return;
    }
    let layouts: &[(u32, &[&str])] = &[
        (4, &["--tp", "2"]),
        (8, &["--tp", "2", "--pp", "2", "--cp", "2"]),
        (8, &["--tp", "2", "--pp", "2", "--ep", "2", "--etp", "1"]),
        (8, &["--pp", "4", "--vpp", "2"]),
        (8, &["--tp", "2", "--cp", "4", "--hcp", "2,2"]),
        (8, &["--tp", "2", "--cp", "2", "--dist-opt-instances", "2"]),
        (16, &["--tp", "2", "--pp", "2", "--cp", "2", "--ep", "2", "--dist-opt-instances", "2"]),
        (16, &["--tp", "2", "--pp", "2", "--order", "tp-cp-ep-pp-dp"]),
        (8, &["--tp", "2", "--pp", "2", "--seed", "1234", "--data-parallel-random-init"]),
        (
            8,
            &[
                "--tp",
                "2",
                "--pp",
                "2",
                "--seed",
                "7",
                "--seed-policy",
                "sharded:pipeline_model_parallel,tensor_model_parallel",
            ],
        ),
        // The per-group strategy: one full mesh per communicator, created together.
        (8, &["--tp", "2", "--pp", "2", "--cp", "2", "--comm-strategy", "per-group"]),
        // pp=4: the middle stages are in no embedding group and join those splits without a color.
        (8, &["--pp", "4", "--vpp", "2", "--seed", "5", "--comm-strategy", "split"]),
        (
            16,
            &[
                "--tp",
                "2",
                "--pp",
                "2",
                "--cp",
                "2",
                "--ep",
                "2",
                "--dist-opt-instances",
                "2",
                "--comm-strategy",
                "per-group",
            ],
        ),
        // Megatron-Core 0.19's weight-rematerialization groups, real (gtp/egtp > 1) and aliased.
        (8, &["--tp", "2", "--gtp", "2", "--ep", "2", "--egtp", "2"]),
        (8, &["--tp", "2", "--gtp", "2", "--pp", "2", "--comm-strategy", "split"]),
    ];
    for (n, args) in layouts {
        let lines = assert_all_ok(*n, args);
        // `auto` splits on Gloo (children derived from the world's mesh).
        let strategy = if args.contains(&"per-group") { "per-group" } else { "split" };
        assert!(lines.iter().all(|l| l["strategy"] == strategy), "{args:?}: {lines:?}");
        let kinds = lines[0]["kinds"].as_array().unwrap();
        if args.contains(&"--hcp") {
            assert!(kinds.iter().any(|k| k == "hierarchical_context_parallel_1"), "{kinds:?}");
        }
        if args.contains(&"--seed") {
            // Every group checked the members' seeds against the policy's prediction.
            let streams = if args.contains(&"--seed-policy") { 1 } else { 2 };
            assert!(lines.iter().all(|l| l["rng_streams_verified"] == streams), "{lines:?}");
        }
        // The 0.19 kinds are present (as aliases sharing older communicators when their axis is 1).
        for k in ["gtp_weight_remat", "data_parallel_with_gtp_remat", "expert_data_parallel_with_gtp_remat"] {
            assert!(kinds.iter().any(|x| x == k), "{args:?}: {k} missing from {kinds:?}");
        }
        if args.contains(&"--dist-opt-instances") {
            assert!(kinds.iter().any(|k| k == "inter_partial_expert_data_parallel"), "{kinds:?}");
        }
    }
}

#[test]
fn a_rank_that_never_starts_is_named_by_every_other_rank() {
    let Some(plugin) = plugin() else { return };
    let port = common::free_port().to_string();
    let children: Vec<Child> =
        [0u32, 1, 3].iter().map(|&r| spawn_rank(&plugin, r, 4, &port, &["--tp", "2", "--timeout", "3"], &[])).collect();
    for child in children {
        let out = common::wait_bounded(child, Duration::from_secs(60));
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains("rank(s) 2 did not come to the check-in"), "{err}");
    }
}

#[test]
fn a_rank_that_dies_after_rendezvous_makes_the_others_fail_not_hang() {
    if plugin().is_none() {
        return;
    }
    let (out, lines) = launch(4, &["--tp", "2", "--timeout", "5"], &[("MCORE_SELFTEST_EXIT_AFTER_INIT", "1")]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("exiting right after init"), "{err}");
    // mcore-launch stops the others when rank 1 exits; any rank that reported did not pass.
    assert!(lines.iter().all(|l| l["ok"] != true || l["rank"] == 1), "{lines:?}");
}

#[test]
fn a_rank_that_dies_is_reported_by_its_peers_within_the_timeout() {
    // Without mcore-launch stopping anyone: ranks 0, 2, 3 must end with an error on their own.
    let Some(plugin) = plugin() else { return };
    let port = common::free_port().to_string();
    let children: Vec<(u32, Child)> = (0u32..4)
        .map(|r| {
            let args = ["--tp", "2", "--timeout", "5"];
            (r, spawn_rank(&plugin, r, 4, &port, &args, &[("MCORE_SELFTEST_EXIT_AFTER_INIT", "1")]))
        })
        .collect();
    for (r, child) in children {
        let out = common::wait_bounded(child, Duration::from_secs(90));
        assert!(out.status.code().is_some(), "rank {r} hung and was killed");
        if r == 1 {
            assert_eq!(out.status.code(), Some(3));
        } else if r == 0 || text(&out.stdout).contains("\"ok\":false") {
            // Rank 1's tp peer (rank 0) must fail; others may finish their own groups first.
            assert_eq!(out.status.code(), Some(1), "rank {r}: {}", text(&out.stderr));
        }
    }
}

/// Start 4 ranks, rank `odd` with `odd_args` and the others with `args` (all with a 20 s
/// timeout); every rank must exit 1: their stderr.
fn four_ranks_one_differing(plugin: &str, odd: u32, args: &[&str], odd_args: &[&str]) -> Vec<String> {
    let port = common::free_port().to_string();
    let children: Vec<Child> = (0u32..4)
        .map(|r| {
            let mut a = if r == odd { odd_args.to_vec() } else { args.to_vec() };
            a.extend(["--timeout", "20"]);
            spawn_rank(plugin, r, 4, &port, &a, &[])
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let out = common::wait_bounded(child, Duration::from_secs(60));
            assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
            text(&out.stderr)
        })
        .collect()
}

#[test]
fn mismatched_configs_are_an_error_naming_the_ranks() {
    let Some(plugin) = plugin() else { return };
    for err in four_ranks_one_differing(&plugin, 3, &["--tp", "2"], &["--tp", "4"]) {
        assert!(
            err.contains("different configurations")
                && err.contains("rank(s) 3 on host '")
                && err.contains("(127.0.0.1) differ from rank 0 in tp: 2 -> 4")
                && !err.contains("tp=4"),
            "{err}"
        );
    }
}

/// This rank's groups in its JSON report: kind key (`<grid>:<kind>` with several grids) →
/// members.
fn members_of(line: &Value) -> std::collections::BTreeMap<String, Vec<u32>> {
    line["members"]
        .as_object()
        .unwrap_or_else(|| panic!("no members in {line}"))
        .iter()
        .map(|(k, v)| (k.clone(), v.as_array().unwrap().iter().map(|r| r.as_u64().unwrap() as u32).collect()))
        .collect()
}

/// Megatron-Core 0.19.2's groups of the conformance config `id`: our kind key → its groups.
fn megatron_groups(id: &str) -> std::collections::BTreeMap<String, Vec<Vec<u32>>> {
    let file = common::read_conformance_json("v0.19.2/megatron_groups.json.gz");
    let entry = file["configs"].as_array().unwrap().iter().find(|c| c["config"]["id"] == id).unwrap().clone();
    let mut out = std::collections::BTreeMap::new();
    for (global, v) in entry["groups_by_global"].as_object().unwrap() {
        // Module globals name our kinds (`_TENSOR_MODEL_PARALLEL_GROUP` is tensor_model_parallel);
        // Gloo and all-gather twins and the gtp-remat aliases are not compared here.
        if global.contains("GLOO") || global.ends_with("_AG") || global.contains("GTP") || global.contains('[') {
            continue;
        }
        let key = global.trim_start_matches('_').replacen("_GROUP", "", 1).to_lowercase();
        let groups = v["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_array().unwrap().iter().map(|r| r.as_u64().unwrap() as u32).collect())
            .collect();
        out.insert(key, groups);
    }
    out
}

/// The weight-sync group {0, 8, 12} was made after init and verified by its three members; every
/// other rank made nothing.
fn assert_weight_sync(line: &Value, rank: u32) {
    let made = line["after_init_groups"].as_array().unwrap_or_else(|| panic!("no after_init_groups: {line}"));
    if [0, 8, 12].contains(&rank) {
        assert_eq!(made.len(), 1, "{line}");
        assert_eq!((made[0]["name"].as_str(), made[0]["ranks"].clone()), (Some("ws"), serde_json::json!([0, 8, 12])));
    } else {
        assert!(made.is_empty(), "rank {rank} is no member of ws: {line}");
    }
}

#[test]
fn two_grids_colocated_on_16_ranks_verify_every_group_and_share_communicators() {
    if plugin().is_none() {
        return;
    }
    // An RL job's layout: the trainer tp2 pp2 and the rollout engine tp4 on the same 16 ranks.
    let args = ["--tp", "2", "--pp", "2", "--grid", "rollout:tp=4", "--seed", "1234", "--group", "ws:0,8,12"];
    let lines = assert_all_ok(16, &args);
    for l in &lines {
        let rank = l["rank"].as_u64().unwrap() as u32;
        let m = members_of(l);
        assert_weight_sync(l, rank);
        assert_eq!(l["grids"], serde_json::json!(["default", "rollout"]), "{l}");
        // Megatron's order tp-cp-ep-dp-pp: tp blocks of 2 and 4; pp strides of 8 (train only).
        assert_eq!(m["default:tensor_model_parallel"], vec![rank / 2 * 2, rank / 2 * 2 + 1], "{l}");
        assert_eq!(m["rollout:tensor_model_parallel"], (rank / 4 * 4..rank / 4 * 4 + 4).collect::<Vec<_>>(), "{l}");
        assert_eq!(m["default:pipeline_model_parallel"], vec![rank % 8, rank % 8 + 8], "{l}");
        assert_eq!(m["rollout:data_parallel"], (0..4).map(|i| rank % 4 + 4 * i).collect::<Vec<_>>(), "{l}");
        // Both grids' seeds verified (the model-parallel and default streams of each).
        assert_eq!(l["rng_streams_verified"], 4, "{l}");
        // Groups with the same members and options share one communicator across grids
        // (e.g. the rollout's one-rank pipeline group and the trainer's context group).
        let reused: Vec<&str> = l["reused_kinds"].as_array().unwrap().iter().filter_map(|k| k.as_str()).collect();
        assert!(reused.contains(&"rollout:pipeline_model_parallel"), "{l}");
    }
}

#[test]
fn two_grids_side_by_side_match_megatron_for_their_windows() {
    if plugin().is_none() {
        return;
    }
    // Megatron-Core 0.19.2's vectors v192x0022 (tp2 pp2 on ranks 0-7 of 16) and cfg0347 (tp2 pp2
    // on ranks 8-15 of 16): one job holds both as two grids.
    let args = ["--tp", "2", "--pp", "2", "--local-world-size", "8"];
    let rollout = "rollout:tp=2,pp=2,rank-offset=8,local-world-size=8";
    let lines = assert_all_ok(16, &[&args[..], &["--grid", rollout, "--seed", "7"]].concat());
    let (train, roll) = (megatron_groups("v192x0022"), megatron_groups("cfg0347"));
    let mut compared = 0;
    for l in &lines {
        let rank = l["rank"].as_u64().unwrap() as u32;
        let m = members_of(l);
        let (grid, want, other) = if rank < 8 { ("default", &train, "rollout") } else { ("rollout", &roll, "default") };
        for (key, groups) in want {
            let ours = m.get(&format!("{grid}:{key}"));
            assert_eq!(ours, groups.iter().find(|g| g.contains(&rank)), "rank {rank} {grid}:{key}");
            compared += 1;
        }
        assert!(!m.keys().any(|k| k.starts_with(&format!("{other}:"))), "rank {rank} is outside {other}: {l}");
    }
    assert!(compared > 16 * 15, "{compared} groups compared");
    // The issue's own layout: the rollout engine tp4 on ranks 8-15, and the weight-sync group.
    let rollout = "rollout:tp=4,rank-offset=8,local-world-size=8";
    for l in assert_all_ok(16, &[&args[..], &["--grid", rollout, "--group", "ws:0,8,12"]].concat()) {
        let rank = l["rank"].as_u64().unwrap() as u32;
        let m = members_of(&l);
        assert_weight_sync(&l, rank);
        if rank >= 8 {
            assert_eq!(m["rollout:tensor_model_parallel"], (rank / 4 * 4..rank / 4 * 4 + 4).collect::<Vec<_>>());
        } else {
            assert_eq!(m["default:tensor_model_parallel"], vec![rank / 2 * 2, rank / 2 * 2 + 1]);
        }
    }
}

#[test]
fn grids_that_differ_between_ranks_are_named_with_the_field() {
    let Some(plugin) = plugin() else { return };
    let base = ["--tp", "2", "--grid", "rollout:tp=4"];
    for err in four_ranks_one_differing(&plugin, 3, &base, &["--tp", "2", "--grid", "rollout:tp=2"]) {
        assert!(err.contains("rank(s) 3 on host '") && err.contains("grid[rollout].tp: 4 -> 2"), "{err}");
    }
}

#[test]
fn ranks_in_no_grid_are_named_before_any_rendezvous() {
    let Some(plugin) = plugin() else { return };
    // The default grid covers ranks 0-1, the rollout rank 2: rank 3 would belong to no group.
    let args = ["--local-world-size", "2", "--grid", "rollout:rank-offset=2,local-world-size=1"];
    for err in four_ranks_one_differing(&plugin, 0, &args, &args) {
        assert!(err.contains("rank(s) 3 of the world of 4 are in none of the grids default, rollout"), "{err}");
    }
}

#[test]
fn grids_breaking_the_disjoint_or_identical_rule_are_refused_before_any_rendezvous() {
    let Some(plugin) = plugin() else { return };
    // Default on ranks 0-3, rollout on 2-3: they overlap without being identical.
    let args = ["--grids-disjoint-or-identical", "--tp", "2", "--grid", "rollout:rank-offset=2,local-world-size=2"];
    for err in four_ranks_one_differing(&plugin, 0, &args, &args) {
        assert!(
            err.contains("grids 'default' (ranks 0..3) and 'rollout' (ranks 2..3) overlap without being identical"),
            "{err}"
        );
    }
}

/// The JSON lines of a recovery by old rank: (survivors' lines, ranks that left), after checking
/// that every line reports `failed` and `dropped` as given and that the killed ranks printed none.
fn recovery_lines(
    lines: &[Value],
    killed: &[u32],
    dropped: &[u32],
) -> (std::collections::BTreeMap<u32, Value>, Vec<u32>) {
    let (mut recovered, mut left) = (std::collections::BTreeMap::new(), Vec::new());
    for l in lines {
        let old = l["old_rank"].as_u64().unwrap_or_else(|| panic!("no old_rank: {l}")) as u32;
        assert!(!killed.contains(&old), "a killed rank printed: {l}");
        assert_eq!(l["ok"], true, "{l}");
        assert_eq!(l["failed"], serde_json::json!(killed), "{l}");
        assert_eq!(l["dropped"], serde_json::json!(dropped), "{l}");
        if l["left"] == true {
            left.push(old);
        } else {
            assert_eq!(l["recovered"], true, "{l}");
            recovered.insert(old, l.clone());
        }
    }
    left.sort_unstable();
    (recovered, left)
}

#[test]
fn recovery_of_two_colocated_grids_re_forms_both_over_the_fixpoint_survivors() {
    if plugin().is_none() {
        return;
    }
    // 16 ranks, train tp2 pp2 (dp 4) and rollout tp4 (dp 4) on the same ranks; rank 5 is killed.
    // By hand: train's replica of 5 is {4,5,12,13}; the rollout's replicas of 4, 5, 12, 13 are
    // {4..7} and {12..15}; train's replicas of 6, 7, 14, 15 ({6,7,14,15}) add nothing new: the
    // fixpoint removes {4..7, 12..15}, and both grids are re-formed over old ranks 0-3 and 8-11
    // (new 0-7), train tp2 pp2 dp2 and rollout tp4 dp2.
    let args = ["--tp", "2", "--pp", "2", "--grid", "rollout:tp=4", "--seed", "1234", "--fail-rank", "5"];
    let (out, lines) = launch(16, &args, &[]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let (recovered, left) = recovery_lines(&lines, &[5], &[4, 5, 6, 7, 12, 13, 14, 15]);
    assert_eq!(left, vec![4, 6, 7, 12, 13, 14, 15], "{}", text(&out.stdout));
    assert_eq!(recovered.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8, 9, 10, 11]);
    for (&old, l) in &recovered {
        let rank = l["rank"].as_u64().unwrap() as u32;
        assert_eq!(rank, if old < 8 { old } else { old - 4 }, "{l}");
        assert_eq!(l["world_size"], 8, "{l}");
        assert_eq!(l["grids"], serde_json::json!(["default", "rollout"]), "{l}");
        // Every group of both grids verified by a collective, and both grids' seeds.
        let kinds = l["kinds"].as_array().unwrap();
        assert_eq!(l["groups"].as_u64().unwrap() as usize, kinds.len(), "{l}");
        assert!(kinds.iter().any(|k| k.as_str().unwrap().starts_with("rollout:")), "{l}");
        assert_eq!(l["rng_streams_verified"], 4, "{l}");
        // With several grids no communicator is kept: every kind is made anew.
        assert_eq!(l["kept_kinds"], serde_json::json!([]), "{l}");
        let m = members_of(l);
        assert_eq!(m["default:tensor_model_parallel"], vec![rank / 2 * 2, rank / 2 * 2 + 1], "{l}");
        assert_eq!(m["default:pipeline_model_parallel"], vec![rank % 4, rank % 4 + 4], "{l}");
        assert_eq!(m["default:data_parallel"], vec![rank % 2 + rank / 4 * 4, rank % 2 + rank / 4 * 4 + 2], "{l}");
        assert_eq!(m["rollout:tensor_model_parallel"], (rank / 4 * 4..rank / 4 * 4 + 4).collect::<Vec<_>>(), "{l}");
        assert_eq!(m["rollout:data_parallel"], vec![rank % 4, rank % 4 + 4], "{l}");
    }
}

#[test]
fn recovery_of_side_by_side_grids_drops_a_rollout_replica_and_keeps_the_trainer() {
    if plugin().is_none() {
        return;
    }
    // Train tp2 pp2 on ranks 0-7, rollout tp4 (dp 2) on ranks 8-15; rank 9 is killed: the rollout
    // loses its replica {8..11}, the trainer loses nothing and keeps its layout (tp2 pp2 dp2 on
    // 0-7); the rollout becomes tp4 dp1 on new ranks 8-11 (old 12-15), a world of 12.
    let args = ["--tp", "2", "--pp", "2", "--local-world-size", "8"];
    let grid = ["--grid", "rollout:tp=4,rank-offset=8,local-world-size=8", "--fail-rank", "9"];
    let (out, lines) = launch(16, &[&args[..], &grid].concat(), &[]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let (recovered, left) = recovery_lines(&lines, &[9], &[8, 9, 10, 11]);
    assert_eq!(left, vec![8, 10, 11], "{}", text(&out.stdout));
    assert_eq!(
        recovered.keys().copied().collect::<Vec<_>>(),
        [(0..8).collect::<Vec<u32>>(), vec![12, 13, 14, 15]].concat()
    );
    for (&old, l) in &recovered {
        let rank = l["rank"].as_u64().unwrap() as u32;
        assert_eq!((rank, &l["world_size"]), (if old < 8 { old } else { old - 4 }, &serde_json::json!(12)), "{l}");
        let kinds = l["kinds"].as_array().unwrap();
        assert_eq!(l["groups"].as_u64().unwrap() as usize, kinds.len(), "{l}");
        let m = members_of(l);
        if old < 8 {
            // The trainer's groups are those it had: same ranks, same numbers.
            assert_eq!(m["default:tensor_model_parallel"], vec![rank / 2 * 2, rank / 2 * 2 + 1], "{l}");
            assert_eq!(m["default:pipeline_model_parallel"], vec![rank % 4, rank % 4 + 4], "{l}");
            assert_eq!(m["default:data_parallel"], vec![rank % 2 + rank / 4 * 4, rank % 2 + rank / 4 * 4 + 2], "{l}");
            assert!(!m.keys().any(|k| k.starts_with("rollout:")), "{l}");
        } else {
            assert_eq!(m["rollout:tensor_model_parallel"], vec![8, 9, 10, 11], "{l}");
            assert_eq!(m["rollout:data_parallel"], vec![rank], "{l}");
            assert!(!m.keys().any(|k| k.starts_with("default:")), "{l}");
        }
    }
    // Rank 1 killed instead: the trainer loses its replica {0,1,4,5} (rank 0, the store's host,
    // leaves and keeps the store up), becoming tp2 pp2 dp1 on new ranks 0-3; the rollout keeps
    // its layout, its window moved down to new ranks 4-11.
    let grid = ["--grid", "rollout:tp=4,rank-offset=8,local-world-size=8", "--fail-rank", "1"];
    let (out, lines) = launch(16, &[&args[..], &grid].concat(), &[]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let (recovered, left) = recovery_lines(&lines, &[1], &[0, 1, 4, 5]);
    assert_eq!(left, vec![0, 4, 5], "{}", text(&out.stdout));
    assert_eq!(recovered.len(), 12, "{}", text(&out.stdout));
    for (&old, l) in &recovered {
        let rank = l["rank"].as_u64().unwrap() as u32;
        assert_eq!(rank, if old < 4 { old - 2 } else { old - 4 }, "{l}");
        let m = members_of(l);
        if old < 8 {
            assert_eq!(m["default:tensor_model_parallel"], vec![rank / 2 * 2, rank / 2 * 2 + 1], "{l}");
            assert_eq!(m["default:pipeline_model_parallel"], vec![rank % 2, rank % 2 + 2], "{l}");
            assert_eq!(m["default:data_parallel"], vec![rank], "{l}");
        } else {
            assert_eq!(m["rollout:tensor_model_parallel"], (rank / 4 * 4..rank / 4 * 4 + 4).collect::<Vec<_>>(), "{l}");
            assert_eq!(m["rollout:data_parallel"], vec![(rank - 4) % 4 + 4, (rank - 4) % 4 + 8], "{l}");
        }
    }
}

#[test]
fn recovery_of_a_grid_that_cannot_be_re_formed_is_refused_naming_it() {
    if plugin().is_none() {
        return;
    }
    // The rollout tp8 over 8 ranks has one replica: losing rank 5 leaves nothing of it, though
    // the trainer (tp2, dp4) alone could go on.
    let args = ["--tp", "2", "--grid", "rollout:tp=8", "--fail-rank", "5", "--timeout", "20"];
    let (out, lines) = launch(8, &args, &[]);
    assert!(!out.status.success());
    // The launcher stops the others at the first error exit: every line printed is the refusal.
    assert!(!lines.is_empty(), "{}", text(&out.stdout));
    for l in &lines {
        let e = l["error"].as_str().unwrap_or_else(|| panic!("expected the refusal: {l}"));
        assert!(e.contains("grid 'rollout' (ranks 0..7) cannot be re-formed after the failure of ranks [5]"), "{e}");
        assert!(e.contains("ranks [4, 5] of it are removed"), "{e}");
    }
    // Spares stay refused with several grids, by every rank before any rendezvous.
    let (out, lines) = launch(5, &["--tp", "2", "--grid", "rollout:tp=4", "--spares", "1", "--timeout", "20"], &[]);
    assert!(!out.status.success());
    assert!(!lines.is_empty(), "{}", text(&out.stdout));
    for l in &lines {
        let e = l["error"].as_str().unwrap_or_else(|| panic!("expected the refusal: {l}"));
        assert!(e.contains("spares (1) with several grids"), "{e}");
    }
}

#[test]
fn ranks_asking_for_different_strategies_are_a_config_mismatch() {
    let Some(plugin) = plugin() else { return };
    let base = ["--tp", "2", "--comm-strategy", "per-group"];
    for err in four_ranks_one_differing(&plugin, 2, &base, &["--tp", "2", "--comm-strategy", "split"]) {
        assert!(
            err.contains("rank(s) 2 on host '")
                && err.contains("(127.0.0.1) have")
                && err.contains("comm_strategy=split"),
            "{err}"
        );
    }
}

#[test]
fn port_in_use_is_a_clear_error() {
    let Some(plugin) = plugin() else { return };
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port().to_string();
    let child = spawn_rank(&plugin, 0, 2, &port, &["--timeout", "5"], &[]);
    let out = common::wait_bounded(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("MASTER_PORT={port}")) && err.contains("in use"), "{err}");
}

/// MCORE_INIT_STORE_BIND=127.0.0.2 while MASTER_ADDR is 127.0.0.1: rank 0 used to bind 127.0.0.2
/// and wait its whole timeout (60 s here) to reach its own store; now an error at once naming both.
#[test]
fn a_store_bind_that_misses_master_addr_is_an_error_at_once() {
    let Some(plugin) = plugin() else { return };
    let port = common::free_port().to_string();
    let start = Instant::now();
    let child = spawn_rank(&plugin, 0, 2, &port, &["--timeout", "60"], &[("MCORE_INIT_STORE_BIND", "127.0.0.2")]);
    let out = common::wait_bounded(child, Duration::from_secs(30));
    let err = text(&out.stderr);
    assert!(start.elapsed() < Duration::from_secs(15), "took {:?}: {err}", start.elapsed());
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("MCORE_INIT_STORE_BIND='127.0.0.2'") && err.contains("MASTER_ADDR='127.0.0.1'"), "{err}");
}

#[test]
fn twenty_destroy_reinit_cycles_leak_no_fds_or_threads() {
    if plugin().is_none() {
        return;
    }
    let (out, lines) = launch(4, &["--tp", "2", "--cycles", "20"], &[]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(lines.len(), 4);
    for l in &lines {
        assert_eq!(l["cycles"], 20);
        let (fds, threads) = (l["fds"].as_array().unwrap(), l["threads"].as_array().unwrap());
        assert!(fds[1].as_u64() <= fds[0].as_u64(), "{l}");
        assert!(threads[1].as_u64() <= threads[0].as_u64(), "{l}");
    }
}

#[test]
fn timeouts_of_2_pow_63_ms_and_more_mean_no_limit_even_in_gloo() {
    if plugin().is_none() {
        return;
    }
    // 2^63 ms became a negative std::chrono count inside the Gloo plugin; 1e20 s panicked in
    // Duration::from_secs_f64. Both mean no limit now (clamped to 2^31 s).
    assert_all_ok(2, &["--tp", "2", "--timeout", "9223372036854775.808"]);
    let (out, lines) = launch(2, &["--tp", "2"], &[("MCORE_INIT_TIMEOUT", "1e20")]);
    assert!(out.status.success() && lines.len() == 2, "{}\n{}", text(&out.stdout), text(&out.stderr));
    let (out, lines) = launch(2, &["--tp", "2", "--comm-strategy", "split"], &[("MCORE_INIT_TIMEOUT", "none")]);
    assert!(out.status.success() && lines.len() == 2, "{}\n{}", text(&out.stdout), text(&out.stderr));
}

/// Without `--json` each rank prints one readable line (under 200 characters, its host,
/// coordinates, communicators and times) and rank 0 a per-kind creation table: the whole output of 8 ranks
/// fits on one screen.
#[test]
fn human_output_of_8_ranks_fits_one_screen() {
    let Some(plugin) = plugin() else { return };
    let mut cmd = Command::new(LAUNCH);
    cmd.args(["--nproc", "8", "--timeout", "240", "--", SELFTEST, "--backend", &plugin])
        .args(["--tp", "2", "--pp", "2", "--cp", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = common::wait_bounded(cmd.spawn().unwrap(), Duration::from_secs(300));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.len() <= 24, "{} lines:\n{stdout}", lines.len());
    for l in &lines {
        assert!(l.chars().count() < 200, "{} characters: {l}", l.chars().count());
        assert!(!l.contains('{'), "JSON without --json: {l}");
    }
    for r in 0..8 {
        // Each rank names its host (`@name/address`); here every rank is on loopback.
        let mine: Vec<&&str> = lines
            .iter()
            .filter(|l| l.contains(&format!("]: rank {r}/8 @")) && l.contains("/127.0.0.1 ok tp "))
            .collect();
        assert_eq!(mine.len(), 1, "rank {r}:\n{stdout}");
        assert!(mine[0].contains(" comms | init ") && mine[0].contains("store trips"), "{}", mine[0]);
    }
    // Coordinates of size-1 axes (dp, ep here) are left out.
    assert!(stdout.contains("/127.0.0.1 ok tp 1/2 pp 1/2 cp 0/2 | "), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.contains("]: rank 5/8 @") && l.contains(" ok tp 1/2 pp 1/2 cp 0/2 | ")),
        "{stdout}"
    );
    // Rank 0's creation time per kind: only when a time reads more than 0.0 ms (created together,
    // every kind takes microseconds: the table said nothing, issue 46 F10).
    if let Some(at) = stdout.find("communicator creation per kind (rank 0") {
        let table: Vec<&str> = stdout[at..].lines().skip(1).take_while(|l| l.contains("]:   ")).collect();
        assert!(table.iter().any(|l| l.contains("tensor_model_parallel")), "{stdout}");
        assert!(
            table.iter().any(|l| l.split_whitespace().any(|w| w.parse::<f64>().is_ok_and(|v| v > 0.0))),
            "a table of zeros: {stdout}"
        );
    }
}

/// Rank 0 of a large world prints a live progress line on stderr (the threshold lowered to 4
/// here): with ranks 1..3 started late, it reports rank 0 alone checked in, then the world.
#[test]
fn rank_0_prints_live_progress_while_others_are_missing() {
    let Some(plugin) = plugin() else { return };
    let port = common::free_port().to_string();
    let env = [("MCORE_SELFTEST_PROGRESS_MIN", "4")];
    let first = spawn_rank(&plugin, 0, 4, &port, &["--timeout", "60"], &env);
    std::thread::sleep(Duration::from_millis(2500));
    let rest: Vec<Child> = (1..4).map(|r| spawn_rank(&plugin, r, 4, &port, &["--timeout", "60"], &env)).collect();
    let out0 = common::wait_bounded(first, Duration::from_secs(90));
    for c in rest {
        let o = common::wait_bounded(c, Duration::from_secs(90));
        assert!(o.status.success(), "{}", text(&o.stderr));
        assert!(!text(&o.stderr).contains("ranks checked in"), "only rank 0 reports progress");
    }
    assert!(out0.status.success(), "{}", text(&out0.stderr));
    let err = text(&out0.stderr);
    assert!(err.contains(": 1/4 ranks checked in"), "{err}");
}

/// Wait until something accepts connections on 127.0.0.1:`port` (a store came up), at most 30 s.
fn wait_for_listener(port: &str) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).is_err() {
        assert!(start.elapsed() < Duration::from_secs(30), "no store came up on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two 4-rank jobs, job ids `job-A` and `job-B`, on one MASTER_PORT. Job A's ranks 0-2 start
/// (rank 0 hosts the store and waits for rank 3); job B's four ranks then start on that port:
/// each fails long before the 60 s timeout naming both job ids (rank 0 finds the port taken by
/// job A's store, ranks 1-3 find job A's id in it). Then job A's rank 3 starts and job A comes
/// up whole: job B wrote nothing in its store.
#[test]
fn a_second_job_on_the_same_port_fails_at_once_naming_both_job_ids() {
    let Some(plugin) = plugin() else { return };
    let port = common::free_port().to_string();
    let args = ["--timeout", "60"];
    let job_a: Vec<Child> =
        (0..3).map(|r| spawn_rank(&plugin, r, 4, &port, &args, &[("MCORE_JOB_ID", "job-A")])).collect();
    wait_for_listener(&port);
    let start = Instant::now();
    let job_b: Vec<Child> =
        (0..4).map(|r| spawn_rank(&plugin, r, 4, &port, &args, &[("MCORE_JOB_ID", "job-B")])).collect();
    let mut slowest = Duration::ZERO;
    for (r, child) in job_b.into_iter().enumerate() {
        let out = common::wait_bounded(child, Duration::from_secs(40));
        slowest = slowest.max(start.elapsed());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "job B rank {r}: {err}");
        assert!(err.contains("'job-A'") && err.contains("'job-B' (from MCORE_JOB_ID)"), "job B rank {r}: {err}");
        eprintln!("job B rank {r} after {:.2} s: {}", start.elapsed().as_secs_f64(), err.trim());
    }
    // Functional bound: well before the 60 s timeout (the target is 5 s; printed below).
    assert!(slowest < Duration::from_secs(20), "job B's ranks took {slowest:?}");
    eprintln!("job B's 4 ranks all failed within {:.2} s", slowest.as_secs_f64());
    let mut job_a = job_a;
    job_a.push(spawn_rank(&plugin, 3, 4, &port, &args, &[("MCORE_JOB_ID", "job-A")]));
    for (r, child) in job_a.into_iter().enumerate() {
        let out = common::wait_bounded(child, Duration::from_secs(90));
        assert!(out.status.success(), "job A rank {r}: {}\n{}", text(&out.stdout), text(&out.stderr));
        let line: Value = serde_json::from_str(text(&out.stdout).lines().last().unwrap_or("")).unwrap_or(Value::Null);
        assert_eq!(line["ok"], true, "job A rank {r}: {}", text(&out.stdout));
    }
}

/// With MCORE_STORE_TOKEN on every rank a world comes up (every store connection, liveness and
/// pools included, proves the token); a rank without it is refused at once and rank 0's store
/// logs the refusal naming the client's address.
#[test]
fn a_job_with_a_store_token_comes_up_and_a_rank_without_it_is_refused() {
    let Some(_) = plugin() else { return };
    let tok = [("MCORE_STORE_TOKEN", "tok-0123")];
    let (out, lines) = launch(4, &[], &tok);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(lines.len(), 4, "{}", text(&out.stdout));
    assert!(lines.iter().all(|l| l["ok"] == true), "{lines:?}");
    // No connection of the job (pools, heartbeats, rank 0's progress reader) went without it.
    assert!(!text(&out.stderr).contains("refused client"), "{}", text(&out.stderr));

    let plugin = plugin().unwrap();
    let port = common::free_port().to_string();
    let rank0 = spawn_rank(&plugin, 0, 2, &port, &["--timeout", "10"], &tok);
    wait_for_listener(&port);
    let start = Instant::now();
    let rank1 =
        common::wait_bounded(spawn_rank(&plugin, 1, 2, &port, &["--timeout", "60"], &[]), Duration::from_secs(40));
    let err = text(&rank1.stderr);
    assert!(start.elapsed() < Duration::from_secs(20), "took {:?}: {err}", start.elapsed());
    assert_eq!(rank1.status.code(), Some(1), "{err}");
    assert!(err.contains("requires a token") && err.contains("MCORE_STORE_TOKEN"), "{err}");
    let out0 = common::wait_bounded(rank0, Duration::from_secs(40));
    let err0 = text(&out0.stderr);
    assert!(!out0.status.success(), "rank 0 came up without rank 1: {err0}");
    assert!(err0.contains("refused client 127.0.0.1:"), "rank 0's store did not log the refusal: {err0}");
}

/// Recreate mode (the Gloo plugin fills no suspend slot): every kind of a 16-rank world
/// suspended, each suspended group refusing an all-reduce naming its kind, then resumed (the
/// communicators created again through the store) and every group verified again.
#[test]
fn suspend_all_kinds_of_16_ranks_then_resume_verifies_every_group() {
    if plugin().is_none() {
        return;
    }
    for strategy in ["split", "per-group"] {
        let args = [
            "--tp",
            "2",
            "--pp",
            "2",
            "--cp",
            "2",
            "--ep",
            "2",
            "--comm-strategy",
            strategy,
            "--suspend-resume",
            "all",
        ];
        let lines = assert_all_ok(16, &args);
        for l in &lines {
            let sr = &l["suspend_resume"];
            let groups = l["groups"].as_u64().unwrap();
            let comms = sr["communicators"].as_array().unwrap();
            // Aliased kinds share a communicator: suspended and resumed once.
            assert_eq!(comms.len() as u64, l["communicators"].as_u64().unwrap(), "{strategy}: {l}");
            assert!(comms.iter().all(|c| c["mode"] == "recreate"), "{strategy}: {sr}");
            assert_eq!(sr["refused_while_suspended"].as_u64().unwrap(), groups, "{strategy}: {sr}");
            assert_eq!(sr["verified_after_resume"].as_u64().unwrap(), comms.len() as u64, "{strategy}: {sr}");
            assert_eq!(sr["groups_verified_after"].as_u64().unwrap(), groups, "{strategy}: {sr}");
        }
    }
}

/// Only the named kinds are suspended (with the kinds sharing their communicators); an unknown
/// kind is an error naming it on every rank.
#[test]
fn suspend_of_chosen_kinds_touches_only_them_and_an_unknown_kind_is_named() {
    let Some(plugin) = plugin() else { return };
    let lines =
        assert_all_ok(8, &["--tp", "2", "--pp", "2", "--suspend-resume", "tensor_model_parallel,data_parallel"]);
    for l in &lines {
        let comms = l["suspend_resume"]["communicators"].as_array().unwrap();
        assert_eq!(comms.len(), 2, "{l}");
        let kinds: Vec<&str> = comms.iter().map(|c| c["kinds"].as_str().unwrap()).collect();
        assert!(kinds[0].contains("tensor_model_parallel") && kinds[1].contains("data_parallel"), "{kinds:?}");
        assert!(comms.iter().all(|c| !c["kinds"].as_str().unwrap().contains("pipeline_model_parallel")), "{l}");
    }
    let port = common::free_port().to_string();
    let children: Vec<Child> = (0..2)
        .map(|r| spawn_rank(&plugin, r, 2, &port, &["--tp", "2", "--suspend-resume", "no_such_kind"], &[]))
        .collect();
    for c in children {
        let out = common::wait_bounded(c, Duration::from_secs(60));
        assert!(!out.status.success());
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(all.contains("'no_such_kind' is not a kind of this layout"), "{all}");
    }
}

/// A member that never comes to a recreate-mode resume: the others' resume ends within its
/// timeout (the init timeout, 5 s), the error naming the group and that member.
#[test]
fn a_member_missing_from_a_resume_is_named_within_the_timeout() {
    let Some(plugin) = plugin() else { return };
    let port = common::free_port().to_string();
    let args = ["--tp", "2", "--timeout", "5", "--suspend-resume", "all"];
    let start = Instant::now();
    let children: Vec<Child> =
        (0..4).map(|r| spawn_rank(&plugin, r, 4, &port, &args, &[("MCORE_SELFTEST_SKIP_RESUME", "3")])).collect();
    let outs: Vec<Output> = children.into_iter().map(|c| common::wait_bounded(c, Duration::from_secs(60))).collect();
    // Ranks 2 (tensor group {2, 3}) and 1 (data-parallel group {1, 3}) wait for rank 3.
    for r in [1usize, 2] {
        let all = format!("{}{}", text(&outs[r].stdout), text(&outs[r].stderr));
        assert!(!outs[r].status.success(), "rank {r}: {all}");
        assert!(all.contains("re-creating the communicator of kind"), "rank {r}: {all}");
        assert!(
            all.contains("rank(s) 3 on host ") && all.contains(" did not come to this resume of communicator"),
            "rank {r}: {all}"
        );
    }
    // Rank 3 sleeps 20 s before exiting; the others are bounded by the 5 s resume timeout.
    assert!(start.elapsed() < Duration::from_secs(40), "took {:?}", start.elapsed());
}

/// Suspend by grid: every kind of the rollout grid of an RL-style job (trainer tp2 pp2, rollout
/// tp2 pp4 on the same 8 ranks). Only what the rollout alone uses is suspended (its pipeline and
/// embedding groups): a communicator the trainer shares with it (equal members: tensor, the
/// world-wide ones) stays up and is reported as kept; while the rollout is suspended every
/// trainer group all-reduces right (the selftest verifies each group that was not suspended, and
/// fails otherwise); everything is verified after resume.
#[test]
fn suspending_a_grid_leaves_the_communicators_a_running_grid_shares_up() {
    if plugin().is_none() {
        return;
    }
    let lines =
        assert_all_ok(8, &["--tp", "2", "--pp", "2", "--grid", "rollout:tp=2,pp=4", "--suspend-resume", "rollout:all"]);
    for l in &lines {
        let sr = &l["suspend_resume"];
        let comms = sr["communicators"].as_array().unwrap();
        assert!(!comms.is_empty(), "{l}");
        for c in comms {
            let kinds = c["kinds"].as_str().unwrap();
            assert!(kinds.contains("rollout:") && !kinds.contains("default:"), "only the rollout's own: {c}");
            assert_eq!(c["mode"], "recreate", "{c}");
        }
        assert!(comms.iter().any(|c| c["kinds"].as_str().unwrap().contains("rollout:pipeline_model_parallel")), "{sr}");
        let kept = sr["kept_shared"].as_array().unwrap();
        assert!(!kept.is_empty(), "{sr}");
        for k in kept {
            assert!(k["kinds"].as_str().unwrap().contains("default:"), "{k}");
            assert_eq!(k["running_grids"], serde_json::json!(["default"]), "{k}");
        }
        let groups = l["groups"].as_u64().unwrap();
        let (refused, usable) =
            (sr["refused_while_suspended"].as_u64().unwrap(), sr["usable_while_suspended"].as_u64().unwrap());
        assert!(usable > 0 && refused > 0 && refused + usable == groups, "{sr}");
        assert_eq!(sr["groups_verified_after"], l["groups"], "{sr}");
    }
    // An unknown grid is named, with the grids there are.
    let plugin = plugin().unwrap();
    let port = common::free_port().to_string();
    let children: Vec<Child> = (0..2)
        .map(|r| spawn_rank(&plugin, r, 2, &port, &["--tp", "2", "--suspend-resume", "nosuch:all"], &[]))
        .collect();
    for c in children {
        let out = common::wait_bounded(c, Duration::from_secs(60));
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(!out.status.success() && all.contains("no grid named 'nosuch' (this job's grids: default)"), "{all}");
    }
}

/// One rank of a job started as its launcher starts it: `vars` are the launcher's variables
/// (no RANK, MASTER_ADDR or MASTER_PORT: the library derives them), `MCORE_LOG=debug` so that it
/// says where it met the others.
fn spawn_launched(plugin: &str, vars: &[(String, String)]) -> Child {
    let mut cmd = Command::new(SELFTEST);
    cmd.args(["--json", "--backend", plugin, "--timeout", "60"]).stdout(Stdio::piped()).stderr(Stdio::piped());
    for v in ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "MCORE_JOB_ID"] {
        cmd.env_remove(v);
    }
    cmd.envs(vars.iter().map(|(k, v)| (k, v))).env("MCORE_LOG", "debug");
    cmd.spawn().unwrap()
}

/// Two 4-rank jobs started together whose derived ports collide: each rank's JSON says ok (its
/// groups verified by collectives over its own 4 ranks) and the two jobs met on different ports.
fn both_jobs_come_up_apart(plugin: &str, jobs: [Vec<Vec<(String, String)>>; 2]) {
    let children: Vec<Vec<Child>> =
        jobs.iter().map(|ranks| ranks.iter().map(|vars| spawn_launched(plugin, vars)).collect()).collect();
    let mut ports = Vec::new();
    for (j, ranks) in children.into_iter().enumerate() {
        let mut job_ports = std::collections::BTreeSet::new();
        for (r, child) in ranks.into_iter().enumerate() {
            let out = common::wait_bounded(child, Duration::from_secs(90));
            let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
            assert!(out.status.success(), "job {j} rank {r}:\n{stdout}\n{stderr}");
            let line: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or(Value::Null);
            assert_eq!((line["ok"].clone(), line["world_size"].clone()), (Value::Bool(true), 4.into()), "{stdout}");
            let port = stderr
                .lines()
                .find_map(|l| l.split_once("meets the others at 127.0.0.1:"))
                .and_then(|(_, rest)| rest.split(' ').next().map(str::to_string))
                .unwrap_or_else(|| panic!("job {j} rank {r} did not say where it met: {stderr}"));
            job_ports.insert(port);
        }
        assert_eq!(job_ports.len(), 1, "job {j}'s ranks met on several ports: {job_ports:?}");
        ports.extend(job_ports);
    }
    assert_ne!(ports[0], ports[1], "both jobs on one port");
    eprintln!("two colliding jobs came up 4 of 4 each, on ports {} and {}", ports[0], ports[1]);
}

fn vars(pairs: &[(&str, String)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// Issue 34.1: two mpirun jobs of 4 ranks (environment as OpenMPI 4/5 sets it) whose
/// namespaces hash to one port (`prterun-vm-4242@1`, `prterun-vm-15301@1`) used to make one
/// mixed world; now each comes up 4 of 4, the second on its next candidate port.
#[test]
fn two_mpirun_jobs_whose_namespaces_collide_both_come_up_apart() {
    let Some(plugin) = plugin() else { return };
    let job = |ns: &str| -> Vec<Vec<(String, String)>> {
        (0..4)
            .map(|r: u32| {
                vars(&[
                    ("OMPI_COMM_WORLD_RANK", r.to_string()),
                    ("OMPI_COMM_WORLD_SIZE", "4".into()),
                    ("OMPI_COMM_WORLD_LOCAL_RANK", r.to_string()),
                    ("OMPI_COMM_WORLD_LOCAL_SIZE", "4".into()),
                    ("OMPI_COMM_WORLD_NODE_RANK", r.to_string()),
                    ("PMIX_NAMESPACE", ns.into()),
                    ("PMIX_RANK", r.to_string()),
                    ("OMPI_MCA_ess_base_jobid", "1".into()),
                ])
            })
            .collect()
    };
    both_jobs_come_up_apart(&plugin, [job("prterun-vm-4242@1"), job("prterun-vm-15301@1")]);
}

/// Issue 34.1: steps 0 and 16 of one Slurm job on one node derive the same port (both used to
/// end 0 of 4); now both come up 4 of 4.
#[test]
fn two_slurm_steps_whose_ports_collide_both_come_up_apart() {
    let Some(plugin) = plugin() else { return };
    let step = |s: &str| -> Vec<Vec<(String, String)>> {
        (0..4)
            .map(|r: u32| {
                vars(&[
                    ("SLURM_PROCID", r.to_string()),
                    ("SLURM_NTASKS", "4".into()),
                    ("SLURM_LOCALID", r.to_string()),
                    ("SLURM_NODEID", "0".into()),
                    ("SLURM_STEP_TASKS_PER_NODE", "4".into()),
                    ("SLURM_STEP_NODELIST", "vm".into()),
                    ("SLURM_JOB_ID", "4321".into()),
                    ("SLURM_STEP_ID", s.into()),
                ])
            })
            .collect()
    };
    both_jobs_come_up_apart(&plugin, [step("0"), step("16")]);
}

/// Issue 34 item 2, default mode (no token): after init the store serves only the job's ranks,
/// whoever was there during init. Three outsiders of the init: a connection opened during it,
/// one that read every key it could (LIST_KEYS, then GET of each) and tries each value read as
/// the secret afterwards, and a fresh one after it: all refused, while the ranks go on (their
/// after-init group forms once the store is closed).
#[test]
fn after_init_the_store_refuses_every_outsider_whoever_was_there_during_init() {
    use mcore_init::store::tcp::wire::{Decoder, Encoder, Query, VALIDATE_MAGIC};
    use mcore_init::store::{Store, StoreToken, TcpStore};
    use std::io::Write;
    let Some(plugin) = plugin() else { return };
    let port_s = common::free_port().to_string();
    let port: u16 = port_s.parse().unwrap();
    let args = ["--timeout", "60", "--group", "ws:0,1"];
    let hold = [("MCORE_SELFTEST_HOLD_S", "6")];
    let rank0 = spawn_rank(&plugin, 0, 2, &port_s, &args, &hold);
    // During init (rank 1 not started yet): an ordinary client and a reader of everything.
    let t = Duration::from_secs(30);
    let early = TcpStore::connect("127.0.0.1", port, t).unwrap();
    early.wait(&["mcore_init/job"], t).unwrap();
    early.set("outsider/early", b"1").unwrap();
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(&Encoder::query(Query::Validate).u32(VALIDATE_MAGIC).finish()).unwrap();
    raw.write_all(&Encoder::query(Query::ListKeys).finish()).unwrap();
    let n = Decoder::new(&raw).i64().unwrap();
    let keys: Vec<Vec<u8>> = (0..n).map(|_| Decoder::new(&raw).value().unwrap()).collect();
    assert!(keys.iter().any(|k| k.ends_with(b"mcore_init/job")), "{keys:?}");
    let mut values = Vec::new();
    for k in &keys {
        raw.write_all(&Encoder::query(Query::Get).bytes(k).finish()).unwrap();
        values.push(Decoder::new(&raw).value().unwrap());
    }
    let rank1 = spawn_rank(&plugin, 1, 2, &port_s, &args, &hold);
    // Init over: a fresh client is refused (naming the job) rather than served.
    let deadline = Instant::now() + Duration::from_secs(90);
    let refused = loop {
        match TcpStore::connect("127.0.0.1", port, Duration::from_secs(2)) {
            Err(e) => break e.to_string(),
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(_) => panic!("a fresh client is still served 90 s after the ranks started"),
        }
    };
    assert!(refused.contains("serves only the ranks of job"), "{refused}");
    // The connection opened during init is closed: its requests fail.
    assert!(early.get("outsider/early").is_err(), "a connection of the init is still served after it");
    // The reader's connection is closed too (end of stream, or a reset) ...
    raw.write_all(&Encoder::query(Query::ListKeys).finish()).ok();
    assert!(Decoder::new(&raw).i64().is_err(), "the reader's connection is still served after init");
    // ... and nothing it read opens the store.
    for (k, v) in keys.iter().zip(&values) {
        let Some(tok) = StoreToken::new(v) else { continue };
        let got = TcpStore::connect_with_token("127.0.0.1", port, Duration::from_secs(2), Some(&tok));
        assert!(
            got.is_err(),
            "the value of {:?} read during init opens the store after it",
            String::from_utf8_lossy(k)
        );
    }
    for (r, child) in [rank0, rank1].into_iter().enumerate() {
        let out = common::wait_bounded(child, Duration::from_secs(120));
        assert!(out.status.success(), "rank {r}: {}\n{}", text(&out.stdout), text(&out.stderr));
        let line: Value = text(&out.stdout).lines().find_map(|l| serde_json::from_str(l).ok()).unwrap();
        assert_eq!(line["ok"], true, "{line}");
        let made = line["after_init_groups"].as_array().unwrap_or_else(|| panic!("{line}"));
        assert_eq!(made.len(), 1, "rank {r}'s after-init group: {line}");
    }
}
