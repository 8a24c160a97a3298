//! `mcore-launch` with real processes: torchrun's environment, rank-prefixed output, failure
//! propagation (the others are stopped, their children too), timeout naming the ranks, bad input.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn launch(args: &[&str]) -> (Output, Duration) {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_mcore-launch")).args(args).output().expect("run mcore-launch");
    (out, start.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn sets_torchrun_environment_and_prefixes_output() {
    let (out, _) = launch(&[
        "--nproc",
        "4",
        "--master-port",
        "29777",
        "--",
        "sh",
        "-c",
        "echo env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT; echo oops >&2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for r in 0..4 {
        let want = format!("[rank {r}]: env {r} {r} 4 4 127.0.0.1 29777");
        assert!(stdout.lines().any(|l| l == want), "missing '{want}' in:\n{stdout}");
        assert!(text(&out.stderr).contains(&format!("[rank {r}]: oops")));
    }
    assert_eq!(stdout.lines().count(), 4);
}

#[test]
fn node_rank_sets_the_multi_node_environment_as_torchrun_static_rendezvous() {
    let (out, _) = launch(&[
        "--nnodes", "3", "--node-rank", "1", "--nproc", "2", "--master-addr", "10.77.0.9", "--",
        "sh", "-c",
        "echo env $RANK $LOCAL_RANK $GROUP_RANK $ROLE_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $TORCHELASTIC_RUN_ID",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for local in 0..2 {
        let r = 2 + local;
        // Every node derives the same run id (store keys carry it); the port defaults to torch's.
        let want = format!("[rank {r}]: env {r} {local} 1 {r} 6 2 3 10.77.0.9 29500 mcore-launch-29500-3x2");
        assert!(stdout.lines().any(|l| l == want), "missing '{want}' in:\n{stdout}");
    }
    assert_eq!(stdout.lines().count(), 2);
}

#[test]
fn one_failing_rank_stops_the_others_and_sets_the_exit_status() {
    // Ranks other than 2 would sleep for 10 minutes (in a child of sh): they must be stopped.
    let (out, took) = launch(&["--nproc", "3", "--", "sh", "-c", "if [ $RANK = 2 ]; then exit 7; fi; sleep 600"]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("rank 2 failed"), "{}", text(&out.stderr));
    assert!(took < Duration::from_secs(120), "the other ranks were not stopped");
}

#[test]
fn timeout_names_the_ranks_still_running() {
    let (out, _) =
        launch(&["--nproc", "2", "--timeout", "0.3", "--", "sh", "-c", "if [ $RANK = 0 ]; then exit 0; fi; sleep 600"]);
    assert_eq!(out.status.code(), Some(124));
    let err = text(&out.stderr);
    assert!(err.contains("rank(s) still running: 1; finished: 0 (exit status: 0); stopping them"), "{err}");
}

/// `--timeout T` gives each rank an init deadline below T (a fifth less, 3-30 s), and keeps a
/// shorter one the user set; `--help` says so.
#[test]
fn timeout_passes_a_shorter_init_deadline_to_the_ranks() {
    let show = ["--", "sh", "-c", "echo t=$MCORE_INIT_TIMEOUT"];
    let run = |timeout: &str, own: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_mcore-launch"));
        c.args(["--nproc", "1", "--timeout", timeout]).args(show).env_remove("MCORE_INIT_TIMEOUT");
        if let Some(own) = own {
            c.env("MCORE_INIT_TIMEOUT", own);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    assert_eq!(run("20", None), "[rank 0]: t=16.000");
    assert_eq!(run("600", None), "[rank 0]: t=570.000");
    assert_eq!(run("4", None), "[rank 0]: t=2.000");
    assert_eq!(run("600", Some("5")), "[rank 0]: t=5", "a shorter deadline of the user's is kept");
    assert_eq!(run("none", None), "[rank 0]: t=");
    let (help, _) = launch(&["--help"]);
    assert!(text(&help.stdout).contains("rank gets MCORE_INIT_TIMEOUT below it"), "{}", text(&help.stdout));
}

#[test]
fn bad_arguments_exit_2_with_the_value_named() {
    for (args, needle) in [
        (vec!["--nproc", "zero", "--", "true"], "'zero'"),
        (vec!["--nproc", "2", "--master-port", "70000", "--", "true"], "'70000'"),
        (vec!["--nproc", "2", "true"], "missing '--'"),
        (vec!["--nproc", "2", "--bogus", "1", "--", "true"], "'--bogus'"),
        (vec!["--", "true"], "--nproc is required"),
        (vec!["--nproc", "2", "--nnodes", "2", "--", "true"], "--node-rank is required"),
        (vec!["--nproc", "2", "--nnodes", "2", "--node-rank", "2", "--", "true"], "--node-rank 2 is out of range"),
        (vec!["--nproc", "2", "--nnodes", "0", "--", "true"], "'0'"),
        // One launcher starts at most 4096 ranks (it used to spawn until threads ran out, then panic).
        (
            vec!["--nproc", "4294967295", "--", "true"],
            "--nproc 4294967295 is more ranks than one launcher starts (at most 4096)",
        ),
        (vec!["--nproc", "4097", "--", "true"], "--nproc 4097 is more ranks than one launcher starts (at most 4096)"),
        (vec!["--nproc", "4294967296", "--", "true"], "'4294967296'"),
        (vec!["--nproc", "4096", "--nnodes", "4294967295", "--node-rank", "0", "--", "true"], "is too many"),
        (vec!["--nproc", "2", "--nnodes", "2", "--node-rank", "4294967296", "--", "true"], "'4294967296'"),
        (vec!["--nproc", "2", "--nnodes", "4294967296", "--", "true"], "'4294967296'"),
        (
            vec!["--nproc", "2", "--grace", "-1", "--", "true"],
            "--grace must be a number of seconds from 0 to 3600, got '-1'",
        ),
        (vec!["--nproc", "2", "--grace", "3601", "--", "true"], "'3601'"),
        (vec!["--nproc", "2", "--grace", "nan", "--", "true"], "'nan'"),
        (vec!["--nproc", "2", "--grace", "inf", "--", "true"], "'inf'"),
    ] {
        let (out, _) = launch(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains(needle), "{args:?}: {}", text(&out.stderr));
    }
    let (out, _) = launch(&["--nproc", "1", "--", "/nonexistent/program"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("/nonexistent/program"));
}
