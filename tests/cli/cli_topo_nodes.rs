//! `mcore-topo --gpus-per-node N [--strict]` and `--svg FILE`: node-aware warnings and the picture
//! (the real binary; the browser rendering check is scripts/test.d/65-topo-picture.sh).

use std::process::{Command, Output};

const TOPO: &str = env!("CARGO_BIN_EXE_mcore-topo");

fn topo(args: &[&str]) -> Output {
    Command::new(TOPO).args(args).output().expect("run mcore-topo")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const TP8: [&str; 6] = ["--world-size", "32", "--tp", "8", "--pp", "2"];

#[test]
fn tp_across_4_gpu_nodes_warns_and_names_a_layout_that_fits() {
    let mut a = TP8.to_vec();
    a.extend(["--gpus-per-node", "4"]);
    let o = topo(&a);
    assert!(o.status.success(), "warnings keep status 0: {}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("warning: tensor_model_parallel: 4 of 4 groups cross nodes"), "{err}");
    assert!(err.contains("--tp 4 --pp 4"), "{err}");
    let out = text(&o.stdout);
    assert!(out.contains("nodes: 8 of 4 GPUs"), "{out}");
    // --strict: the same finding is an error.
    a.push("--strict");
    let o = topo(&a);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("--strict: tensor_model_parallel"), "{}", text(&o.stderr));
    // The suggested layout passes --strict.
    let o = topo(&["--world-size", "32", "--tp", "4", "--pp", "4", "--gpus-per-node", "4", "--strict"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
}

#[test]
fn eight_gpu_nodes_do_not_warn() {
    let mut a = TP8.to_vec();
    a.extend(["--gpus-per-node", "8", "--strict", "--json"]);
    let o = topo(&a);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("warning"), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let n = &v["nodes"];
    assert_eq!(n["nodes"], 4);
    assert_eq!(n["kinds"]["tensor_model_parallel"]["local"], 4);
    assert_eq!(n["kinds"]["tensor_model_parallel"]["crossing"], 0);
    assert_eq!(n["kinds"]["pipeline_model_parallel"]["crossing"], 16);
    assert_eq!(n["warnings"].as_array().unwrap().len(), 0);
}

#[test]
fn a_strided_order_gets_an_order_in_json() {
    let o = topo(&["--world-size", "8", "--tp", "2", "--order", "dp-tp-cp-ep-pp", "--gpus-per-node", "4", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let w = &v["nodes"]["warnings"][0];
    assert_eq!(w["kind"], "tensor_model_parallel");
    let order = w["suggested_order"].as_str().expect("an order").to_string();
    let o = topo(&["--world-size", "8", "--tp", "2", "--order", &order, "--gpus-per-node", "4", "--strict"]);
    assert!(o.status.success(), "{order}: {}", text(&o.stderr));
}

#[test]
fn bad_node_flags_are_named() {
    for (args, want) in [
        (vec!["--world-size", "8", "--gpus-per-node", "0"], "--gpus-per-node: 0"),
        (vec!["--world-size", "8", "--strict"], "--strict needs --gpus-per-node"),
        (vec!["--world-size", "8", "--svg", "x.svg", "--color-by", "bogus"], "--color-by: unknown group kind 'bogus'"),
        (vec!["--world-size", "8", "--color-by", "data_parallel"], "--color-by needs --svg"),
        (vec!["--world-size", "8", "--svg", "/nonexistent-dir/x.svg"], "cannot write '/nonexistent-dir/x.svg'"),
        (vec!["--world-size", "8192", "--svg", "x.svg"], "at most 4096 ranks"),
        (
            vec!["--world-size", "8", "--tp", "2", "--svg", "x.svg", "--color-by", "expert_data_parallel_x"],
            "unknown group kind",
        ),
    ] {
        let o = topo(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(text(&o.stderr).contains(want), "{args:?}: {}", text(&o.stderr));
    }
}

#[test]
fn svg_file_has_every_rank_coloured_by_the_chosen_kind() {
    let dir = std::env::temp_dir().join(format!("mcore-topo-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out.svg");
    let p = path.to_str().unwrap();
    let o = topo(&[
        "--world-size",
        "16",
        "--tp",
        "2",
        "--pp",
        "2",
        "--gpus-per-node",
        "8",
        "--svg",
        p,
        "--color-by",
        "pipeline_model_parallel",
        "--rank",
        "3",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(svg.matches("<title>rank ").count(), 16);
    assert!(svg.contains("colour: pipeline_model_parallel group"));
    assert!(svg.contains("node 1</text>") && !svg.contains("node 2</text>"));
    // Eight pipeline groups: eight palette colours.
    let colours = mcore_init::topology::PALETTE.iter().filter(|c| svg.contains(&format!("fill=\"{c}\""))).count();
    assert_eq!(colours, 8);
}
