//! `mcore-topo` with several grids (`--grid NAME:key=value,...`): each grid's reports checked
//! against the engine, what the grids share (ranks, nodes), the picture, the error lines, and
//! `--rank R` at 16M ranks answered without visiting the world.

use mcore_init::topology::{Topology, TopologyConfig};
use serde_json::Value;
use std::process::{Command, Output};

fn topo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcore-topo")).args(args).output().expect("run mcore-topo")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn stdout_json(out: &Output) -> Value {
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn engine(tp: u32, pp: u32, offset: u32, local: Option<u32>, world: u32) -> Topology {
    let cfg = TopologyConfig { tp, pp, rank_offset: offset, local_world_size: local, ..Default::default() };
    Topology::new(cfg, world).unwrap()
}

/// Issue 26's two layouts of 16 ranks: train tp2 pp2 and rollout tp4, colocated on all 16, or
/// side by side (train on 0-7, rollout on 8-15). Every group of both grids equals the engine's.
#[test]
fn colocated_and_side_by_side_grids_match_the_engine() {
    let colocated = ["--grid", "train:tp=2,pp=2", "--grid", "rollout:tp=4"];
    let side =
        ["--grid", "train:tp=2,pp=2,local-world-size=8", "--grid", "rollout:tp=4,rank-offset=8,local_world_size=8"];
    let cases: [(&[&str], [Topology; 2]); 2] = [
        (&colocated, [engine(2, 2, 0, None, 16), engine(4, 1, 0, None, 16)]),
        (&side, [engine(2, 2, 0, Some(8), 16), engine(4, 1, 8, Some(8), 16)]),
    ];
    for (grids, want) in cases {
        let v = stdout_json(&topo(&[&["--world-size", "16", "--json", "--gpus-per-node", "8"], grids].concat()));
        assert_eq!(v["world_size"], 16);
        let got = v["grids"].as_array().unwrap();
        assert_eq!(got.len(), 2);
        for (g, (name, t)) in got.iter().zip(["train", "rollout"].iter().zip(&want)) {
            assert_eq!(g["name"], *name);
            assert_eq!(g["sizes"]["tp"], t.sizes().tp);
            assert_eq!(g["sizes"]["rank_offset"], t.rank_offset());
            for kind in t.kinds() {
                let ours: Vec<Vec<u32>> = t.groups(kind).map(|g| g.unwrap().members()).collect();
                assert_eq!(g["groups"][&*kind.key()], serde_json::json!(ours), "{name} {kind}");
            }
            assert!(g["nodes"]["kinds"].is_object(), "per-grid node placement");
        }
        let spans = &v["nodes"]["spans"];
        if grids == colocated {
            assert_eq!(
                v["shared_ranks"],
                serde_json::json!([{"grids": ["train", "rollout"], "first": 0, "last": 15, "count": 16}])
            );
            assert_eq!(
                spans,
                &serde_json::json!([{"first": 0, "last": 1, "grids": ["train", "rollout"], "shared": true}])
            );
        } else {
            assert_eq!(v["shared_ranks"], serde_json::json!([]));
            assert_eq!(
                spans,
                &serde_json::json!([{"first": 0, "last": 0, "grids": ["train"], "shared": false},
                                     {"first": 1, "last": 1, "grids": ["rollout"], "shared": false}])
            );
        }
        assert_eq!(v["ranks_in_no_grid"], serde_json::json!([]));
    }
}

#[test]
fn text_report_per_grid_with_sharing_and_nodes() {
    // default (tp 2 over 0..15) from the plain flags, plus rollout on 8..23 of 32.
    let args = [
        "--world-size",
        "32",
        "--tp",
        "2",
        "--local-world-size",
        "16",
        "--grid",
        "rollout:tp=4,rank-offset=8,local-world-size=16",
        "--gpus-per-node",
        "8",
    ];
    let out = topo(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = text(&out.stdout);
    assert!(t.starts_with("world size 32: 2 grids (default, rollout)\n"), "{t}");
    assert!(t.contains("\n== grid default: world size 16 (ranks 0..15 of a world of 32)"), "{t}");
    assert!(t.contains("\n== grid rollout: world size 16 (ranks 8..23 of a world of 32)"), "{t}");
    assert!(t.contains("  default & rollout: ranks 8..15 (8 ranks on the same GPUs)\n"), "{t}");
    assert!(t.contains("ranks in no grid: 24..31\n"), "{t}");
    for line in [
        "  node 0: default\n",
        "  node 1: default, rollout (GPUs shared)\n",
        "  node 2: rollout\n",
        "  node 3: no grid\n",
    ] {
        assert!(t.contains(line), "{line:?} missing:\n{t}");
    }
    // The rollout grid's tensor-parallel groups, as the engine has them.
    let rollout = t.split("== grid rollout").nth(1).unwrap();
    let line = rollout.lines().find(|l| l.starts_with("tensor_model_parallel ")).unwrap();
    assert!(line.ends_with("[8,9,10,11] [12,13,14,15] [16,17,18,19] [20,21,22,23]"), "{line}");
    // One rank: its view in each grid holding it, and its node.
    let out = topo(&[&args[..], &["--rank", "20", "--seed", "7"]].concat());
    let t = text(&out.stdout);
    assert!(t.contains("rank 20 is outside the grid (ranks 0..15 of a world of 32)"), "{t}");
    let rollout = t.split("== grid rollout").nth(1).unwrap();
    let line = rollout.lines().find(|l| l.starts_with("tensor_model_parallel ")).unwrap();
    assert!(line.ends_with("0/4  [20,21,22,23]"), "{line}");
    assert!(rollout.contains("RNG seeds (policy megatron):\n  rank     20: default=7 "), "{rollout}");
    assert!(
        t.contains("rank 20 is in: rollout\n") && t.contains("rank 20 is on node 2, whose GPUs belong to: rollout"),
        "{t}"
    );
}

#[test]
fn grid_errors_name_the_grid_the_key_and_the_value() {
    let cases: &[(&[&str], &str)] = &[
        (&["--world-size", "16", "--grid", "rollout:tp=x"], "--grid rollout: tp: 'x' is not an integer"),
        (&["--world-size", "16", "--grid", "rollout:tq=4"], "--grid rollout: unknown key 'tq'"),
        (&["--world-size", "16", "--grid", "rollout"], "--grid 'rollout': expected NAME:key=value"),
        (&["--world-size", "16", "--grid", "a:tp=2", "--grid", "a:tp=4"], "--grid a: a grid of that name"),
        (&["--world-size", "16", "--tp", "2", "--grid", "default:tp=4"], "already describe grid 'default'"),
        (&["--world-size", "16", "--grid", "rollout:tp=3"], "grid rollout: "),
        (&["--world-size", "16", "--grid", "rollout:tp=4,rank-offset=8"], "grid rollout: covers ranks 8..23"),
        (&["--world-size", "16", "--grid", "r:tp=4,rank-offset=8,local-world-size=16"], "grid r: "),
        (&["--world-size", "16", "--grid", "r:tp=4", "--without-ranks", "3"], "not with --grid"),
        (&["--world-size", "16", "--grid", "r:tp=4", "--rank", "16"], "--rank 16"),
        (&["--world-size", "16", "--all-members"], "--all-members needs --rank"),
    ];
    for (args, needle) in cases {
        let out = topo(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: '{err}' lacks '{needle}'");
    }
}

#[test]
fn picture_of_two_grids() {
    let dir = std::env::temp_dir().join(format!("mcore-topo-grids-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("grids.svg");
    let out = topo(&[
        "--world-size",
        "16",
        "--grid",
        "train:tp=2,pp=2,local-world-size=8",
        "--grid",
        "rollout:tp=4,rank-offset=8,local-world-size=8",
        "--gpus-per-node",
        "4",
        "--svg",
        path.to_str().unwrap(),
        "--rank",
        "9",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(svg.contains(">grid train: ranks 0..7, tp 2 pp 2 ") && svg.contains(">grid rollout: ranks 8..15, tp 4 "));
    // Both panels draw the same 16 GPUs; 8 of each are outside the panel's grid.
    assert_eq!(svg.matches("<title>rank ").count(), 32);
    assert_eq!(svg.matches(": not in grid rollout</title>").count(), 8);
    assert!(svg.contains(">nodes 0-1: train</text>") && svg.contains(">nodes 2-3: rollout</text>"), "{svg}");
    assert!(svg.contains(">rank 9 is not in grid train</text>"));
}

/// `--rank R` does no work proportional to the world: at 16M ranks (tp 8, pp 8: data-parallel
/// groups of 262,144 ranks, a distributed-optimizer group of all 16M) the tool runs under a
/// 256 MiB address-space limit, which listing the world's ranks (64 MiB per 16M-rank list,
/// about 190 MB of text before this change) or building it would exceed. The groups are
/// described exactly by their patterns.
#[test]
fn one_rank_at_16m_ranks_without_the_world() {
    let bin = env!("CARGO_BIN_EXE_mcore-topo");
    let run = |args: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v 262144 && exec '{bin}' {args}"))
            .output()
            .expect("run mcore-topo under ulimit");
        assert!(out.status.success(), "{args}: {}", text(&out.stderr));
        assert!(out.stdout.len() < 64 * 1024, "{args}: {} bytes of output", out.stdout.len());
        out.stdout
    };
    let t = text(&run("--world-size 16777216 --tp 8 --pp 8 --rank 5 --gpus-per-node 8"));
    let line = |key: &str| t.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("{key}: {t}")).to_string();
    assert!(line("data_parallel ").ends_with("0/262144  [5,13,21,...,2097149] = 5+8*i (i<262144)"));
    assert!(line("intra_distributed_optimizer_instance ")
        .ends_with("5/16777216  [0,1,2,...,16777215] = 0+i+8*j+2097152*k (i<8, j<262144, k<8)"));
    assert!(
        line("pipeline_model_parallel ").ends_with("[5,2097157,4194309,6291461,8388613,10485765,12582917,14680069]")
    );
    assert!(t.contains("rank 5 is on node 0"), "{t}");
    // Several grids, JSON: the same patterns, and the rank's node's grids.
    let v: Value = serde_json::from_slice(&run(
        "--world-size 16777216 --grid train:tp=8,pp=8 --grid rollout:tp=4,rank-offset=8388608,local-world-size=8388608 \
         --rank 8388613 --gpus-per-node 8 --json",
    ))
    .unwrap();
    let rollout = &v["grids"][1];
    assert_eq!(rollout["name"], "rollout");
    let dp = &rollout["groups"]["data_parallel"];
    assert_eq!(
        (dp["size"].as_u64(), dp["rank"].as_u64(), dp["first"].as_u64()),
        (Some(2097152), Some(1), Some(8388609))
    );
    assert_eq!(dp["boxes"], serde_json::json!([{"base": 8388609, "axes": [[4, 2097152]]}]));
    assert!(dp.get("ranks").is_none(), "a 2M-rank list was written");
    assert_eq!(
        rollout["groups"]["tensor_model_parallel"]["ranks"],
        serde_json::json!([8388612, 8388613, 8388614, 8388615])
    );
    assert_eq!(v["rank_grids"], serde_json::json!(["train", "rollout"]));
    assert_eq!(v["nodes"]["rank_node"], serde_json::json!({"node": 1048576, "grids": ["train", "rollout"]}));
    // The check of the test itself: listing every member is refused at that size.
    let out = topo(&["--world-size", "4294967295", "--rank", "7", "--all-members"]);
    assert!(text(&out.stderr).contains("output would list"), "{}", text(&out.stderr));
}

/// `--grids-disjoint-or-identical` (Megatron-Core 0.20's rule): colocated or side-by-side grids
/// pass; grids that overlap without being identical, or leave ranks out, are refused naming them.
#[test]
fn the_disjoint_or_identical_rule_names_the_offending_pair() {
    let rule = "--grids-disjoint-or-identical";
    let ok = |grids: &[&str]| stdout_json(&topo(&[&["--world-size", "16", "--json", rule], grids].concat()));
    ok(&["--grid", "train:tp=2,pp=2", "--grid", "rollout:tp=4"]);
    ok(&["--grid", "train:tp=2,local-world-size=8", "--grid", "rollout:tp=4,rank-offset=8,local-world-size=8"]);
    let refused = |grids: &[&str]| {
        let out = topo(&[&["--world-size", "16", rule], grids].concat());
        assert!(!out.status.success());
        text(&out.stderr)
    };
    let overlap =
        ["--grid", "train:tp=2,local-world-size=12", "--grid", "rollout:tp=4,rank-offset=8,local-world-size=8"];
    let e = refused(&overlap);
    assert!(
        e.contains("grids 'train' (ranks 0..11) and 'rollout' (ranks 8..15) overlap without being identical"),
        "{e}"
    );
    // Without the rule the same grids are reported (they share ranks 8..11).
    assert!(topo(&[&["--world-size", "16"], &overlap[..]].concat()).status.success());
    let e = refused(&[
        "--grid",
        "train:tp=2,local-world-size=8",
        "--grid",
        "rollout:tp=4,rank-offset=8,local-world-size=4",
    ]);
    assert!(e.contains("grids train, rollout cover 12 of the world's 16 ranks"), "{e}");
}
