//! The runtime's NCCL paths against a TEST DOUBLE of libnccl.so.2 (tests/support/libnccl_double.c,
//! built here with `cc`): real `mcore-selftest` processes under `mcore-launch`, both creation
//! strategies, concurrent and one by one, 1 to 8 ranks, every group verified by an all-reduce
//! the double carries out between the processes. The double reproduces what NCCL 2.28 did on a
//! GPU: a non-blocking split that returns `ncclSuccess` and writes the child ~20 ms later from
//! another thread, non-blocking inits, and (on request) inits or splits that never complete or
//! fail, and version numbers below the feature thresholds.
//!
//! It tests the runtime's logic only, not NCCL: the real library is exercised by nccl_cpu.rs
//! (no GPU) and scripts/gpu-tests.sh (GPU).
//!
//! `MCORE_NCCL_DOUBLE_ASAN=1` builds the double with AddressSanitizer and preloads libasan into the
//! processes, so a late write into freed heap memory is reported (scripts/test.d/32-nccl-double.sh
//! runs the bring-up test that way once).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// This build's binaries, or those in `MCORE_NCCL_DOUBLE_BIN_DIR` (to run these tests against
/// another build, e.g. the one before the split fix: they fail there).
fn bin(name: &str, built: &'static str) -> String {
    std::env::var("MCORE_NCCL_DOUBLE_BIN_DIR").map_or_else(|_| built.to_string(), |d| format!("{d}/{name}"))
}

fn selftest() -> String {
    bin("mcore-selftest", env!("CARGO_BIN_EXE_mcore-selftest"))
}

fn launcher() -> String {
    bin("mcore-launch", env!("CARGO_BIN_EXE_mcore-launch"))
}
const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/libnccl_double.c");

fn asan() -> bool {
    std::env::var("MCORE_NCCL_DOUBLE_ASAN").as_deref() == Ok("1")
}

/// The folder holding the built double as `libnccl_double.so` and `libcuda.so.1` (a link to it).
fn double_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| build_double(if asan() { "nccl-double-asan" } else { "nccl-double" }, &[]))
}

/// The double built with `-D<define>` (once per define and process): `MCORE_NCCL_DOUBLE_NO_SUSPEND`
/// (without ncclCommSuspend, ncclCommResume and ncclCommMemStats: a library that predates them,
/// whatever version it reports), `MCORE_NCCL_DOUBLE_NO_TLS` (NVIDIA's TLS-less 2.32.3 build),
/// `MCORE_NCCL_DOUBLE_NO_TLS_UNMARKED` (a TLS-less build without NCCL's message in its file).
fn double_variant_dir(define: &str) -> PathBuf {
    static DIRS: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut dirs = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, d)) = dirs.iter().find(|(k, _)| k == define) {
        return d.clone();
    }
    let short = define.trim_start_matches("MCORE_NCCL_DOUBLE_").to_lowercase().replace('_', "");
    let name = format!("nccl-double-{short}{}", if asan() { "-asan" } else { "" });
    let dir = build_double(&name, &[&format!("-D{define}")]);
    dirs.push((define.to_string(), dir.clone()));
    dir
}

/// Build the double into `target/tmp/<name>` with the extra compiler flags `defines`. The library
/// and its `libcuda.so.1` link are put in place by rename: a test process of this binary (or a
/// re-run of it under ASan) loading the double meanwhile sees the old file or the new one, never a
/// half-written one.
fn build_double(name: &str, defines: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libnccl_double.so");
    let tmp = dir.join(format!("libnccl_double.so.{}", std::process::id()));
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.args(defines);
    cc.args(["-shared", "-fPIC", "-O1", "-g", "-pthread", "-Wall", "-Wno-format-truncation", "-o"])
        .arg(&tmp)
        .arg(SOURCE);
    if asan() {
        cc.arg("-fsanitize=address");
    }
    let out = cc.output().unwrap_or_else(|e| panic!("cannot run cc to build the libnccl double: {e}"));
    assert!(out.status.success(), "building the libnccl double failed:\n{}", String::from_utf8_lossy(&out.stderr));
    std::fs::rename(&tmp, &lib).unwrap();
    let link = dir.join(format!("libcuda.so.1.{}", std::process::id()));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("libnccl_double.so", &link).unwrap();
    std::fs::rename(&link, dir.join("libcuda.so.1")).unwrap();
    dir
}

/// libasan's path, for LD_PRELOAD.
fn libasan() -> String {
    let out = Command::new("cc").arg("-print-file-name=libasan.so").output().expect("cc -print-file-name");
    let path = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(Path::new(&path).exists(), "libasan not found (cc says {path:?}); install gcc's libasan");
    path
}

/// A fresh rendezvous folder for one run, removed on drop.
pub(crate) struct Rendezvous(pub(crate) PathBuf);

impl Rendezvous {
    pub(crate) fn new(name: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mcore-nccl-double-{}-{name}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Rendezvous(dir)
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Run {
    out: Output,
    lines: Vec<Value>,
    elapsed: Duration,
}

impl Run {
    fn text(&self) -> String {
        format!("{}\n{}", String::from_utf8_lossy(&self.out.stdout), String::from_utf8_lossy(&self.out.stderr))
    }
}

/// `program args` with the double as NCCL and CUDA, a fresh rendezvous folder, and `env`.
pub(crate) fn command(program: &str, args: &[&str], rv: &Rendezvous, env: &[(&str, &str)]) -> Command {
    // A test's pseudo-variable (not passed on) picks a variant build of the double.
    let dir = env
        .iter()
        .find(|(k, _)| *k == VARIANT)
        .map_or_else(|| double_dir().to_path_buf(), |(_, define)| double_variant_dir(define));
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("MCORE_NCCL_LIBRARY", dir.join("libnccl_double.so"))
        .env("LD_LIBRARY_PATH", &dir)
        .env("MCORE_NCCL_DOUBLE_DIR", &rv.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if asan() {
        cmd.env("LD_PRELOAD", libasan()).env("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1");
    }
    for (k, v) in env.iter().filter(|(k, _)| *k != VARIANT) {
        cmd.env(k, v);
    }
    cmd
}

/// In a test's `env`, `(VARIANT, define)`: run against [`double_variant_dir`]`(define)` (not an
/// environment variable).
const VARIANT: &str = "<double built with>";

/// Wait for `child` at most 150 s (killed past that); its output.
pub(crate) fn finish(mut child: Child) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(150) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

fn json_lines(stdout: &[u8]) -> impl Iterator<Item = Value> + '_ {
    std::str::from_utf8(stdout)
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.find('{').and_then(|i| serde_json::from_str::<Value>(&l[i..]).ok()))
}

/// `mcore-launch --nproc n -- mcore-selftest --json --backend nccl <args>` (which stops every rank once
/// one fails).
fn launch(n: u32, args: &[&str], env: &[(&str, &str)]) -> Run {
    launch_via(n, &[], args, env)
}

/// [`launch`] with `pre` in front of `mcore-selftest` on each rank's command line (a wrapper).
fn launch_via(n: u32, pre: &[&str], args: &[&str], env: &[(&str, &str)]) -> Run {
    let rv = Rendezvous::new("launch");
    let mut all = vec!["--nproc".to_string(), n.to_string(), "--timeout".into(), "120".into(), "--".into()];
    all.extend(pre.iter().map(|a| a.to_string()));
    all.extend([selftest(), "--json".into(), "--backend".into(), "nccl".into()]);
    all.extend(args.iter().map(|a| a.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let start = Instant::now();
    let out = finish(command(&launcher(), &all, &rv, env).spawn().unwrap());
    let lines = json_lines(&out.stdout).collect();
    Run { out, lines, elapsed: start.elapsed() }
}

/// `n` ranks of `mcore-selftest --json --backend nccl <args>` started directly, so that each ends on its
/// own; the outputs concatenated.
fn spawn_world(n: u32, args: &[&str], env: &[(&str, &str)]) -> Run {
    let rv = Rendezvous::new("world");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let mut all = vec!["--json", "--backend", "nccl"];
    all.extend(args);
    let start = Instant::now();
    let children: Vec<Child> = (0..n)
        .map(|r| {
            let mut cmd = command(&selftest(), &all, &rv, env);
            let r = r.to_string();
            cmd.env("RANK", &r)
                .env("LOCAL_RANK", &r)
                .env("WORLD_SIZE", n.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port);
            cmd.spawn().unwrap()
        })
        .collect();
    let outs: Vec<Output> = children.into_iter().map(finish).collect();
    let elapsed = start.elapsed();
    let lines = outs.iter().flat_map(|o| json_lines(&o.stdout)).collect();
    let out = outs
        .into_iter()
        .reduce(|mut a, b| {
            a.stdout.extend(b.stdout);
            a.stderr.extend(b.stderr);
            if !b.status.success() {
                a.status = b.status;
            }
            a
        })
        .unwrap();
    Run { out, lines, elapsed }
}

fn layout(n: u32) -> Vec<&'static str> {
    match n {
        1 => vec![],
        2 => vec!["--tp", "2"],
        4 => vec!["--tp", "2", "--pp", "2"],
        _ => vec!["--tp", "2", "--pp", "2", "--cp", "2"],
    }
}

/// Every rank reported ok with `strategy`, verified every kind, and no AddressSanitizer report.
fn assert_all_verified(n: u32, strategy: &str, env: &[(&str, &str)]) -> Vec<Value> {
    let mut args = layout(n);
    args.extend(["--comm-strategy", strategy, "--timeout", "60"]);
    let run = launch(n, &args, env);
    let text = run.text();
    assert!(!text.contains("AddressSanitizer"), "{strategy}, {n} ranks: ASan report:\n{text}");
    assert!(run.out.status.success(), "{strategy}, {n} ranks, {env:?}: {text}");
    assert_eq!(run.lines.len(), n as usize, "{text}");
    for l in &run.lines {
        assert_eq!(l["ok"], true, "{l}");
        assert_eq!(l["strategy"], strategy, "{l}");
        let kinds = l["kinds"].as_array().unwrap().len();
        assert!(kinds >= 10, "{l}");
        assert_eq!(l["groups"].as_u64().unwrap() as usize, kinds, "every kind verified: {l}");
    }
    eprintln!("{strategy} {n} ranks {env:?}: {:.2} s", run.elapsed.as_secs_f64());
    run.lines
}

#[test]
fn both_strategies_bring_up_1_2_4_8_ranks_and_verify_every_group() {
    for strategy in ["split", "per-group"] {
        for n in [1, 2, 4, 8] {
            let lines = assert_all_verified(n, strategy, &[]);
            // tp2 pp2 cp2: Megatron's aliases leave 7 distinct communicators per rank.
            if n == 8 {
                assert!(lines.iter().all(|l| l["communicators"] == 7), "{lines:?}");
            }
        }
    }
}

#[test]
fn one_by_one_creation_still_works() {
    for strategy in ["split", "per-group"] {
        assert_all_verified(4, strategy, &[("MCORE_NCCL_CONCURRENT", "0")]);
    }
}

#[test]
fn init_writing_its_handle_late_is_handled_too() {
    // Real NCCL writes an init's handle before returning; the runtime must not rely on it.
    assert_all_verified(2, "per-group", &[("MCORE_NCCL_DOUBLE_LATE_INIT", "1")]);
}

/// NCCL's version code as `major.minor.patch`.
fn dotted(code: &str) -> String {
    let c: u32 = code.parse().unwrap();
    format!("{}.{}.{}", c / 10000, c / 100 % 100, c % 100)
}

#[test]
fn auto_chooses_split_from_2_18_and_per_group_below() {
    for (code, want) in [("21800", "split"), ("22803", "split"), ("21709", "per-group")] {
        let run = launch(2, &["--tp", "2", "--timeout", "60"], &[("MCORE_NCCL_DOUBLE_VERSION", code)]);
        assert!(run.out.status.success(), "version {code}: {}", run.text());
        assert!(run.lines.iter().all(|l| l["strategy"] == want), "version {code}: {:?}", run.lines);
        // --json says which libnccl the rank used: the double (MCORE_NCCL_LIBRARY), its version,
        // opened by mcore_init itself (nothing had loaded it before).
        for l in &run.lines {
            let nccl = &l["nccl_library"];
            assert!(nccl["path"].as_str().is_some_and(|p| p.ends_with("/libnccl_double.so")), "{l}");
            assert_eq!(
                (nccl["shared"].as_bool(), nccl["version"].as_str()),
                (Some(false), Some(&*dotted(code))),
                "{l}"
            );
        }
    }
    // Explicit split on 2.17: refused with the versions named.
    let run = launch(1, &["--comm-strategy", "split", "--timeout", "30"], &[("MCORE_NCCL_DOUBLE_VERSION", "21709")]);
    let text = run.text();
    assert!(!run.out.status.success(), "{text}");
    assert!(text.contains("ncclCommSplit needs NCCL 2.18") && text.contains("2.17.9"), "{text}");
    // Below 2.14 there is no non-blocking init at all.
    let run = launch(1, &["--timeout", "30"], &[("MCORE_NCCL_DOUBLE_VERSION", "21304")]);
    let text = run.text();
    assert!(!run.out.status.success(), "{text}");
    assert!(text.contains("needs NCCL 2.14") && text.contains("2.13.4"), "{text}");
}

/// Every rank's error line, by rank, of a run that must have failed within a minute, with errors.
fn errors(run: &Run) -> Vec<(u64, String)> {
    let text = run.text();
    assert!(!run.out.status.success(), "{text}");
    assert!(run.elapsed < Duration::from_secs(60), "took {:?}", run.elapsed);
    let mut e: Vec<(u64, String)> = run
        .lines
        .iter()
        .filter(|l| l["ok"] == false)
        .map(|l| (l["rank"].as_u64().unwrap_or(u64::MAX), l["error"].as_str().unwrap_or("").to_string()))
        .collect();
    e.sort();
    assert!(!e.is_empty(), "no rank reported an error: {text}");
    e
}

#[test]
fn a_failed_split_names_the_group_and_its_ranks() {
    let run = launch(
        2,
        &["--tp", "2", "--comm-strategy", "split", "--timeout", "30"],
        &[("MCORE_NCCL_DOUBLE_SPLIT", "fail")],
    );
    let errs = errors(&run);
    for (rank, e) in errs {
        assert!(e.starts_with("group tensor_model_parallel/0 (ranks 0-1): "), "rank {rank}: {e}");
        assert!(
            e.contains("ncclCommSplit") && e.contains("ncclSystemError") && e.contains("failed as asked"),
            "rank {rank}: {e}"
        );
    }
}

#[test]
fn a_split_that_never_completes_ends_at_the_deadline_naming_the_group() {
    let run =
        launch(2, &["--tp", "2", "--comm-strategy", "split", "--timeout", "3"], &[("MCORE_NCCL_DOUBLE_SPLIT", "hang")]);
    let errs = errors(&run);
    for (rank, e) in errs {
        assert!(e.starts_with("group tensor_model_parallel/0 (ranks 0-1): timed out after "), "rank {rank}: {e}");
        assert_waited_at_most(&e, 3.0);
        assert!(e.contains("ncclCommSplit"), "rank {rank}: {e}");
    }
}

#[test]
fn an_init_that_never_completes_ends_at_the_deadline_naming_the_missing_ranks() {
    // One by one, rank 3's first init (tensor group {2, 3}) never completes: rank 2 times out in
    // that group, rank 1 in its data-parallel group {1, 3}, which rank 3 never reached.
    let env =
        [("MCORE_NCCL_CONCURRENT", "0"), ("MCORE_NCCL_DOUBLE_INIT", "hang"), ("MCORE_NCCL_DOUBLE_HANG_RANKS", "3")];
    let run = spawn_world(4, &["--tp", "2", "--comm-strategy", "per-group", "--timeout", "3"], &env);
    let text = run.text();
    let errs = errors(&run);
    let of = |r: u64| errs.iter().find(|(rank, _)| *rank == r).map(|(_, e)| e.clone());
    let e2 = of(2).unwrap_or_else(|| panic!("rank 2 reported no error: {text}"));
    assert!(e2.starts_with("group tensor_model_parallel/1 (ranks 2-3): timed out after "), "{e2}");
    assert_waited_at_most(&e2, 3.0);
    assert!(e2.contains("ncclCommInitRankConfig") && e2.contains("aborted"), "{e2}");
    let e1 = of(1).unwrap_or_else(|| panic!("rank 1 reported no error: {text}"));
    assert!(e1.starts_with("group data_parallel/1 (ranks 1, 3): timed out"), "{e1}");
    // Rank 3 is named with its host (it published one before check-in). It is alive, stuck in
    // its own hung init until the deadline, and records that failure: so it is reported as
    // failed at an earlier group rather than as never arrived.
    assert!(e1.contains("rank(s) 3 on host ") && e1.ends_with(" failed at an earlier group"), "{e1}");
}

#[test]
fn concurrent_inits_that_never_complete_end_at_the_deadline() {
    let env = [("MCORE_NCCL_DOUBLE_INIT", "hang")];
    let run = launch(2, &["--tp", "2", "--comm-strategy", "per-group", "--timeout", "3"], &env);
    let errs = errors(&run);
    for (rank, e) in errs {
        assert!(e.contains("ncclCommInitRankConfig"), "rank {rank}: {e}");
        assert_waited_at_most(&e, 3.0);
        assert!(e.starts_with("group tensor_model_parallel/0 (ranks 0-1)"), "rank {rank}: {e}");
    }
}

/// The error says how long its wait lasted ("timed out after S s"): the group's share of the one
/// init deadline, so positive and at most the whole `timeout`.
fn assert_waited_at_most(e: &str, timeout: f64) {
    let waited: f64 = e
        .split("timed out after ")
        .nth(1)
        .and_then(|t| t.split(" s").next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no 'timed out after S s' in: {e}"));
    assert!(waited > 0.0 && waited <= timeout, "waited {waited} s, timeout {timeout} s: {e}");
}

/// Recovery on the NCCL path (docs/recovery.md): 8 ranks tp 2 pp 2 under `mcore-launch`, rank 3
/// SIGKILLed after init, with `env`. The survivors agree on the failure and bring the 4-rank
/// layout up, every group verified by an all-reduce through the double; ranks 2, 6 and 7 leave
/// with rank 3's replica. Returns the run and the recovered ranks' lines.
fn recover_8_without_rank_3(env: &[(&str, &str)]) -> (Run, Vec<Value>) {
    let mut all_env = vec![("MCORE_NCCL_DOUBLE_TRACE", "1")];
    all_env.extend_from_slice(env);
    let run = launch(8, &["--tp", "2", "--pp", "2", "--fail-rank", "3", "--timeout", "60"], &all_env);
    let text = run.text();
    assert!(!text.contains("AddressSanitizer"), "ASan report:\n{text}");
    assert!(run.out.status.success(), "{text}");
    let mut recovered: Vec<(u64, u64)> = Vec::new();
    let mut left: Vec<u64> = Vec::new();
    let mut lines = Vec::new();
    for l in &run.lines {
        assert_eq!(l["ok"], true, "{l}");
        assert_eq!(l["failed"], serde_json::json!([3]), "{l}");
        assert_eq!(l["world_size"], 4, "{l}");
        if l["left"] == true {
            left.push(l["old_rank"].as_u64().unwrap());
            assert_eq!(l["world_from"], "none", "a leaving rank makes no world: {l}");
        } else {
            assert_eq!(l["recovered"], true, "{l}");
            assert_eq!(l["strategy"], "split", "{l}");
            // Dropping a replica leaves the tensor, pipeline, context and model-parallel groups
            // as they were: their communicators are kept (and verified again), not split anew.
            let kept: Vec<&str> = l["kept_kinds"].as_array().unwrap().iter().filter_map(|k| k.as_str()).collect();
            assert_eq!(
                kept,
                ["tensor_model_parallel", "pipeline_model_parallel", "context_parallel", "model_parallel"],
                "{l}"
            );
            assert!(l["groups"].as_u64().unwrap() > 0, "{l}");
            recovered.push((l["old_rank"].as_u64().unwrap(), l["rank"].as_u64().unwrap()));
            lines.push(l.clone());
        }
    }
    recovered.sort_unstable();
    left.sort_unstable();
    assert_eq!(recovered, vec![(0, 0), (1, 1), (4, 2), (5, 3)], "{text}");
    assert_eq!(left, vec![2, 6, 7], "{text}");
    (run, lines)
}

/// The double's trace lines of `ncclCommShrink` calls, sorted.
fn shrink_calls(run: &Run) -> Vec<String> {
    let mut calls: Vec<String> =
        run.text().lines().filter_map(|l| l.find("ncclCommShrink rank ").map(|i| l[i..].to_string())).collect();
    calls.sort();
    calls
}

/// With NCCL >= 2.27 the survivors shrink the old world (`ncclCommShrink` excluding the four
/// dropped ranks, `NCCL_SHRINK_ABORT`, each renumbered as the plan says) and split the new
/// layout's groups from it: no new world through the store.
#[test]
fn a_killed_rank_is_recovered_by_shrinking_the_world() {
    let (run, lines) = recover_8_without_rank_3(&[]);
    for l in &lines {
        assert_eq!(l["world_from"], "shrink", "{l}");
    }
    let want: Vec<String> = [(0, 0), (1, 1), (4, 2), (5, 3)]
        .iter()
        .map(|(old, new)| format!("ncclCommShrink rank {old} of 8 excluding 4 rank(s) flags 1 -> rank {new} of 4"))
        .collect();
    assert_eq!(shrink_calls(&run), want, "{}", run.text());
}

/// A library older than 2.27 has no `ncclCommShrink`: the survivors fall back to a new world
/// created through the store (the double refuses a shrink call at that version, so a call would
/// fail the recovery), and still recover.
#[test]
fn without_shrink_2_26_recovers_on_a_new_world() {
    let (run, lines) = recover_8_without_rank_3(&[("MCORE_NCCL_DOUBLE_VERSION", "22605")]);
    for l in &lines {
        assert_eq!(l["world_from"], "new", "{l}");
    }
    assert!(shrink_calls(&run).is_empty(), "{}", run.text());
}

/// A shrink that fails for another reason than its absence is the recovery's error, named (no
/// silent fallback: the survivors could not agree on one), within the deadline.
#[test]
fn a_failed_shrink_fails_the_recovery_naming_the_excluded_ranks() {
    let env = [("MCORE_NCCL_DOUBLE_SHRINK", "fail")];
    let run = launch(8, &["--tp", "2", "--pp", "2", "--fail-rank", "3", "--timeout", "30"], &env);
    let errs = errors(&run);
    // Survivors fail (mcore-launch stops the others once the first did, so not always all four).
    assert!(errs.iter().all(|(r, _)| [0, 1, 4, 5].contains(r)), "{}", run.text());
    for (rank, e) in errs {
        assert!(
            e.contains("recovery: shrinking the world communicator without rank(s) [2, 3, 6, 7]")
                && e.contains("ncclCommShrink")
                && e.contains("ncclSystemError"),
            "rank {rank}: {e}"
        );
    }
}

/// A shrink that never completes ends at the recovery's deadline, naming the call and the group.
#[test]
fn a_shrink_that_never_completes_ends_at_the_deadline() {
    let env = [("MCORE_NCCL_DOUBLE_SHRINK", "hang")];
    let run = launch(8, &["--tp", "2", "--pp", "2", "--fail-rank", "3", "--timeout", "6"], &env);
    let errs = errors(&run);
    // Survivors fail (mcore-launch stops the others once the first did, so not always all four).
    assert!(errs.iter().all(|(r, _)| [0, 1, 4, 5].contains(r)), "{}", run.text());
    for (rank, e) in errs {
        assert!(e.contains("ncclCommShrink to hand out the communicator of group world"), "rank {rank}: {e}");
        assert_waited_at_most(&e, 6.0);
    }
}

/// Suspend then resume of chosen kinds at 8 ranks (tp 2 pp 2 cp 2), in `env`: every rank ok,
/// each suspended group refused an all-reduce naming its kind, every communicator verified after
/// the resume, and no ASan report; the per-communicator entries (with `rank` added).
fn suspend_resume_8(kinds: &str, strategy: &str, env: &[(&str, &str)]) -> (Run, Vec<Value>) {
    suspend_resume_8_via(&[], kinds, strategy, &[], env)
}

/// [`suspend_resume_8`] with a wrapper `pre` in front of each rank's `mcore-selftest`, and more
/// selftest arguments `extra`.
fn suspend_resume_8_via(
    pre: &[&str],
    kinds: &str,
    strategy: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Run, Vec<Value>) {
    let mut all_env = vec![("MCORE_NCCL_DOUBLE_TRACE", "1")];
    all_env.extend_from_slice(env);
    let mut args = layout(8);
    args.extend(["--comm-strategy", strategy, "--timeout", "60", "--suspend-resume", kinds]);
    args.extend(extra);
    let run = launch_via(8, pre, &args, &all_env);
    let text = run.text();
    assert!(!text.contains("AddressSanitizer"), "{kinds}, {env:?}: ASan report:\n{text}");
    assert!(run.out.status.success(), "{kinds}, {strategy}, {env:?}: {text}");
    assert_eq!(run.lines.len(), 8, "{text}");
    let mut comms = Vec::new();
    for l in &run.lines {
        let sr = &l["suspend_resume"];
        let mine = sr["communicators"].as_array().unwrap();
        assert!(!mine.is_empty(), "{l}");
        assert_eq!(sr["verified_after_resume"].as_u64().unwrap(), mine.len() as u64, "{sr}");
        assert_eq!(sr["groups_verified_after"], l["groups"], "every kind verified again: {l}");
        assert!(sr["refused_while_suspended"].as_u64().unwrap() >= mine.len() as u64, "{sr}");
        comms.extend(mine.iter().cloned().map(|mut c| {
            c["rank"] = l["rank"].clone();
            c
        }));
    }
    (run, comms)
}

fn trace_count(run: &Run, call: &str) -> usize {
    run.text().lines().filter(|l| l.contains(&format!("libnccl double: {call} rank "))).count()
}

/// NCCL 2.29.7+ (the double at 2.29.7): the chosen kinds are suspended in place through
/// `ncclCommSuspend(NCCL_SUSPEND_MEM)` and resumed with `ncclCommResume`, once per shared
/// communicator; `ncclCommMemStats` gives each one's memory before (4 MiB + 64 KiB) and while
/// suspended (64 KiB kept). Both strategies; all kinds, then three of them.
#[test]
fn suspend_then_resume_of_chosen_kinds_at_8_ranks_is_native_with_memory() {
    let env = [("MCORE_NCCL_DOUBLE_VERSION", "22907")];
    for strategy in ["split", "per-group"] {
        let (run, comms) = suspend_resume_8("all", strategy, &env);
        // tp2 pp2 cp2: 7 distinct communicators per rank (aliases share), each suspended once.
        assert_eq!(comms.len(), 8 * 7, "{comms:?}");
        assert_eq!(trace_count(&run, "ncclCommSuspend"), 8 * 7, "{}", run.text());
        assert_eq!(trace_count(&run, "ncclCommResume"), 8 * 7, "{}", run.text());
        for c in &comms {
            assert_eq!(c["mode"], "native", "{c}");
            assert_eq!(c["memory"]["total"], (4u64 << 20) + (64 << 10), "{c}");
            assert_eq!(c["memory"]["suspended"], false, "{c}");
            assert_eq!(c["memory_suspended"]["total"], 64u64 << 10, "{c}");
            assert_eq!(c["memory_suspended"]["suspended"], true, "{c}");
        }
    }
    let (run, comms) = suspend_resume_8("tensor_model_parallel,data_parallel,context_parallel", "split", &env);
    assert_eq!(comms.len(), 8 * 3, "{comms:?}");
    assert_eq!(trace_count(&run, "ncclCommSuspend"), 8 * 3, "{}", run.text());
    // A communicator is named after the first kind sharing it (context_parallel's is
    // data_parallel_with_cp's at dp = 1): each one suspended holds one of the chosen kinds.
    for c in &comms {
        let kinds = c["kinds"].as_str().unwrap();
        assert!(
            ["tensor_model_parallel", "data_parallel", "context_parallel"]
                .iter()
                .any(|k| kinds.split(", ").any(|x| x == *k)),
            "{c}"
        );
        assert!(!kinds.contains("pipeline_model_parallel"), "{c}");
    }
}

/// Below 2.29.7, and with a library that lacks the three symbols, suspend falls back to the
/// recreate mode: the communicators are released and created again through the store on resume
/// (never an `ncclCommSuspend` call), and verified.
#[test]
fn without_suspend_in_the_library_resume_recreates() {
    for env in [
        vec![("MCORE_NCCL_DOUBLE_VERSION", "22906")],
        vec![("MCORE_NCCL_DOUBLE_VERSION", "22907"), (VARIANT, "MCORE_NCCL_DOUBLE_NO_SUSPEND")],
    ] {
        let (run, comms) = suspend_resume_8("tensor_model_parallel,pipeline_model_parallel", "split", &env);
        assert_eq!(comms.len(), 8 * 2, "{env:?}: {comms:?}");
        assert!(comms.iter().all(|c| c["mode"] == "recreate" && c["memory"].is_null()), "{env:?}: {comms:?}");
        assert_eq!(trace_count(&run, "ncclCommSuspend"), 0, "{env:?}: {}", run.text());
    }
}

/// Issue 36: NCCL refuses `ncclCommSuspend` (ncclInvalidUsage; the double does too) for a
/// communicator sharing resources with its parent or children and for every one under
/// `NCCL_DISABLE_MEM_MANAGER=1`. Exactly those fall back to recreate, on every member, with the
/// reason reported; the others stay native with the bytes freed reported; NCCL is never asked to
/// suspend one it refuses. `NCCL_CUMEM_ENABLE=0` warns once per process.
#[test]
fn communicators_nccl_refuses_to_suspend_are_recreated_by_every_member() {
    let v = ("MCORE_NCCL_DOUBLE_VERSION", "22907");
    let refused = |run: &Run| trace_count(run, "ncclCommSuspend refused");
    // split_share on tp only, split strategy: tp's children (and their parent, the world, which
    // is not suspended) share; every other kind is suspended natively.
    let share_tp = ConfigFile::new("share-tp", "tp: {split_share: true}\n");
    let (run, comms) = suspend_resume_8_via(&[], "all", "split", &["--comm-config", share_tp.path()], &[v]);
    assert_eq!(refused(&run), 0, "{}", run.text());
    // tp's options now differ from its aliases' (the world's): 8 distinct communicators a rank.
    assert_eq!(comms.len(), 8 * 8, "{comms:?}");
    for c in &comms {
        if c["kinds"].as_str().unwrap().split(", ").any(|k| k == "tensor_model_parallel") {
            assert_eq!(c["mode"], "recreate", "{c}");
            let why = c["reason"].as_str().unwrap();
            assert!(why.contains("shares resources with its parent or a child (split_share"), "{c}");
            assert_eq!(c["freed_bytes"], (4u64 << 20) + (64 << 10), "all it held: {c}");
        } else {
            assert_eq!(c["mode"], "native", "{c}");
            assert!(c["reason"].is_null(), "{c}");
            assert_eq!(c["freed_bytes"], 4u64 << 20, "the suspendable bytes: {c}");
        }
    }
    // NCCL_COMM_SPLIT_SHARE_RESOURCES=1: every split child shares (split strategy), no
    // communicator has a parent per group.
    let env = [v, ("NCCL_COMM_SPLIT_SHARE_RESOURCES", "1")];
    let (run, comms) = suspend_resume_8("all", "split", &env);
    assert_eq!(refused(&run), 0, "{}", run.text());
    assert!(comms.iter().all(|c| c["mode"] == "recreate"), "{comms:?}");
    assert!(comms.iter().all(|c| c["reason"].as_str().unwrap().contains("NCCL_COMM_SPLIT_SHARE_RESOURCES=1")));
    let (_, comms) = suspend_resume_8("all", "per-group", &env);
    assert!(comms.iter().all(|c| c["mode"] == "native"), "{comms:?}");
    // NCCL_DISABLE_MEM_MANAGER=1 on every rank, and MCORE_NCCL_SUSPEND_MODE=recreate
    // (cuda-checkpoint's destroy-and-recreate, although NCCL could suspend them): all recreate.
    for (var, value, why) in [
        ("NCCL_DISABLE_MEM_MANAGER", "1", "NCCL_DISABLE_MEM_MANAGER=1 is set"),
        ("MCORE_NCCL_SUSPEND_MODE", "recreate", "MCORE_NCCL_SUSPEND_MODE=recreate is set"),
    ] {
        let (run, comms) = suspend_resume_8("all", "per-group", &[v, (var, value)]);
        assert_eq!(trace_count(&run, "ncclCommSuspend") + refused(&run), 0, "{}", run.text());
        assert!(
            comms.iter().all(|c| c["mode"] == "recreate" && c["reason"].as_str().unwrap().ends_with(why)),
            "{comms:?}"
        );
    }
    // ... on rank 3 only: the members of rank 3's communicators agree on recreate (naming rank
    // 3), the others stay native; NCCL_CUMEM_ENABLE=0 warns once per process.
    let pre = ["sh", "-c", "[ \"$RANK\" = 3 ] && export NCCL_DISABLE_MEM_MANAGER=1; exec \"$@\"", "sh"];
    let (run, comms) = suspend_resume_8_via(&pre, "all", "split", &[], &[v, ("NCCL_CUMEM_ENABLE", "0")]);
    let text = run.text();
    assert_eq!(refused(&run), 0, "{text}");
    // Once per process that suspends natively: every rank but 3, whose communicators all recreate.
    assert_eq!(text.matches("NCCL_CUMEM_ENABLE=0: NCCL's buffers are not cuMem allocations").count(), 7, "{text}");
    for c in &comms {
        let rank = c["rank"].as_u64().unwrap();
        match c["mode"].as_str().unwrap() {
            "recreate" => {
                let who = if rank == 3 { "this rank" } else { "rank 3" };
                assert_eq!(c["reason"].as_str().unwrap(), format!("{who}: NCCL_DISABLE_MEM_MANAGER=1 is set"), "{c}");
            }
            _ => assert_ne!(rank, 3, "{c}"),
        }
    }
    // tp 2 at 8 ranks: rank 2's tp partner is rank 3; rank 4's is rank 5.
    let mode = |rank: u64| {
        comms
            .iter()
            .find(|c| {
                c["rank"] == rank && c["kinds"].as_str().unwrap().split(", ").any(|k| k == "tensor_model_parallel")
            })
            .map(|c| c["mode"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!((mode(2), mode(3), mode(4)), ("recreate".into(), "recreate".into(), "native".into()));
}

/// `mcore-selftest --suspend-each-kind` (the per-kind device-memory report run on a GPU): every
/// kind suspended in turn, the ranks meeting through the store between steps, rank 0 reading the
/// device's free memory (the double's `cuMemGetInfo` reports a constant, so 0 bytes freed), then
/// every communicator resumed and every kind verified again.
#[test]
fn suspending_each_kind_in_turn_then_resuming_all_verifies_every_kind() {
    let mut args = layout(8);
    args.extend(["--timeout", "60", "--device", "0", "--suspend-each-kind"]);
    let run = launch(8, &args, &[("MCORE_NCCL_DOUBLE_VERSION", "22907")]);
    let text = run.text();
    assert!(!text.contains("AddressSanitizer"), "ASan report:\n{text}");
    assert!(run.out.status.success(), "{text}");
    assert_eq!(run.lines.len(), 8, "{text}");
    for l in &run.lines {
        let each = &l["suspend_each"];
        let steps = each["steps"].as_array().unwrap();
        let suspended: usize = steps.iter().map(|s| s["communicators"].as_array().unwrap().len()).sum();
        assert_eq!(suspended as u64, l["communicators"].as_u64().unwrap(), "each communicator once: {each}");
        assert_eq!(each["resumed"].as_u64().unwrap() as usize, suspended, "{each}");
        assert_eq!(each["groups_verified_after"], l["groups"], "{each}");
        let freed: Vec<&Value> = steps.iter().map(|s| &s["device_freed_bytes"]).collect();
        if l["rank"] == 0 {
            assert!(freed.iter().all(|f| f.as_i64() == Some(0)), "{freed:?}");
        } else {
            assert!(freed.iter().all(|f| f.is_null()), "only rank 0 reads the device: {freed:?}");
        }
    }
}

/// Groups made after init on the NCCL path, which creates them in the caller's thread at the
/// first wait: four ranks start a = {0, 1, 2}, b = {1, 2, 3}, c = {0, 3} in orders shuffled per
/// rank, wait for them in name order (mcore-selftest's default) and verify each; a rank that
/// never calls is named within the group deadline.
#[test]
fn groups_made_after_init_are_created_in_name_order_and_a_missing_member_is_named() {
    let groups = ["--group", "a:0-2", "--group", "b:1-3", "--group", "c:0,3", "--group-order", "shuffled:2026"];
    let mut args = vec!["--tp", "2", "--timeout", "60"];
    args.extend(groups);
    let run = launch(4, &args, &[]);
    let text = run.text();
    assert!(run.out.status.success(), "{text}");
    assert_eq!(run.lines.len(), 4, "{text}");
    for l in &run.lines {
        let rank = l["rank"].as_u64().unwrap();
        let mut names: Vec<&str> =
            l["after_init_groups"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
        names.sort();
        let want: Vec<&str> = [("a", [0, 1, 2].as_slice()), ("b", &[1, 2, 3]), ("c", &[0, 3])]
            .into_iter()
            .filter(|(_, m)| m.contains(&rank))
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, want, "{l}");
    }
    let mut args = vec!["--tp", "2", "--timeout", "60", "--group-timeout", "3", "--group-absent", "3"];
    args.extend(groups);
    let run = spawn_world(4, &args, &[]);
    let text = run.text();
    for l in run.lines.iter().filter(|l| l["rank"] != 3) {
        let e = l["error"].as_str().unwrap_or_else(|| panic!("rank must fail: {l}"));
        // Ranks 1 and 2 may meet rank 3 missing at b, or fail at a when a peer gave up first.
        assert!(e.contains("did not come to create_group") || e.contains("creating its communicator"), "{e}");
    }
    let named = run.lines.iter().filter(|l| {
        l["error"].as_str().is_some_and(|e| e.contains("rank(s) 3 ") && e.contains("did not come to create_group"))
    });
    assert!(named.count() >= 2, "rank 3 named by its peers: {text}");
    assert!(run.elapsed < Duration::from_secs(30), "{:?}: {text}", run.elapsed);
}

// ---- ncclConfig_t by version, commName, encryption, scalable world init (issue 27) ----

/// A YAML communicator config file for one run, removed on drop.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(name: &str, text: &str) -> Self {
        let path = std::env::temp_dir().join(format!("mcore-nccl-double-{}-{name}.yaml", std::process::id()));
        std::fs::write(&path, text).unwrap();
        ConfigFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_config_field_newer_than_the_loaded_nccl_warns_and_strict_refuses_it() {
    let loose = ConfigFile::new("loose", "tp: {max_p2p_peers: 4, max_ctas: 2}\n");
    let args = ["--tp", "2", "--timeout", "60", "--comm-config", loose.path()];
    // 2.28.3 has no maxP2pPeers (2.30): a warning naming both versions, the rest applied.
    let run = launch(2, &args, &[("MCORE_NCCL_DOUBLE_VERSION", "22803")]);
    let text = run.text();
    assert!(run.out.status.success(), "{text}");
    assert!(
        text.contains("max_p2p_peers (ncclConfig_t.maxP2pPeers) needs NCCL 2.30, the loaded NCCL is 2.28.3"),
        "{text}"
    );
    assert!(run.lines.iter().all(|l| l["ok"] == true), "{text}");
    // 2.30.7 knows it: no warning, and the double accepted 2.30.7's struct (size 96, version
    // 23007; it refuses any other layout).
    let run = launch(2, &args, &[("MCORE_NCCL_DOUBLE_VERSION", "23007"), ("MCORE_NCCL_DOUBLE_TRACE", "1")]);
    let text = run.text();
    assert!(run.out.status.success(), "{text}");
    assert!(!text.contains("needs NCCL"), "{text}");
    assert!(text.contains("size=96 version=23007"), "{text}");
    // Strict (in the YAML, or MCORE_NCCL_STRICT_CONFIG=1): an error before any communicator.
    let strict = ConfigFile::new("strict", "tp: {max_p2p_peers: 4, strict: true}\n");
    for (file, env) in [(strict.path(), None), (loose.path(), Some(("MCORE_NCCL_STRICT_CONFIG", "1")))] {
        let args = ["--tp", "2", "--timeout", "30", "--comm-config", file];
        let mut e = vec![("MCORE_NCCL_DOUBLE_VERSION", "22803")];
        e.extend(env);
        let run = launch(2, &args, &e);
        let text = run.text();
        assert!(!run.out.status.success(), "{text}");
        assert!(text.contains("maxP2pPeers") && text.contains("needs NCCL 2.30") && text.contains("strict"), "{text}");
    }
}

#[test]
fn every_release_gets_its_own_config_layout_and_comm_name_defaults_to_the_group() {
    // The double refuses a config whose size/version is not the reported release's initializer's.
    for (code, size) in [("21805", "48"), ("22603", "48"), ("22703", "72"), ("22905", "88"), ("23203", "120")] {
        for strategy in ["split", "per-group"] {
            let run = launch(
                2,
                &["--tp", "2", "--timeout", "60", "--comm-strategy", strategy],
                &[("MCORE_NCCL_DOUBLE_VERSION", code), ("MCORE_NCCL_DOUBLE_TRACE", "1")],
            );
            let text = run.text();
            assert!(run.out.status.success(), "{code} {strategy}: {text}");
            assert!(text.contains(&format!("size={size} version={code}")), "{code} {strategy}: {text}");
            if code >= "22703" {
                // commName (2.27+) is the group's name unless the config sets one.
                assert!(text.contains("commName=tensor_model_parallel/0"), "{code} {strategy}: {text}");
            } else {
                assert!(!text.contains("commName=tensor"), "{code}: {text}");
            }
        }
    }
    let named = ConfigFile::new("named", "tp: {comm_name: grads}\n");
    let run = launch(
        2,
        &["--tp", "2", "--timeout", "60", "--comm-config", named.path()],
        &[("MCORE_NCCL_DOUBLE_VERSION", "23007"), ("MCORE_NCCL_DOUBLE_TRACE", "1"), ("MCORE_LOG", "debug")],
    );
    let text = run.text();
    assert!(run.out.status.success(), "{text}");
    assert!(text.contains("commName=grads"), "{text}");
    // MCORE_LOG=debug: the settings, and NCCL's own parameters (2.30.7's parameter API).
    assert!(
        text.contains("commName=grads") && text.contains("reports its parameters: NCCL_DOUBLE_VERSION=23007"),
        "{text}"
    );
}

#[test]
fn encryption_is_set_before_the_first_unique_id_and_refused_below_2_32_3() {
    let key = ConfigFile::new("psk", "0123456789abcdef0123456789abcdef-test-only\n");
    let env =
        |v| [("MCORE_NCCL_DOUBLE_VERSION", v), ("MCORE_NCCL_PSK_FILE", key.path()), ("MCORE_NCCL_DOUBLE_TRACE", "1")];
    let run = launch(2, &["--tp", "2", "--timeout", "60"], &env("23203"));
    let text = run.text();
    assert!(run.out.status.success(), "{text}");
    let set = text.find("ncclSetEncryption mode 1 key of 42 bytes").unwrap_or_else(|| panic!("{text}"));
    let first_id = text.find("ncclGetUniqueId").unwrap_or_else(|| panic!("{text}"));
    assert!(set < first_id || !text[..first_id].contains("encrypted=0"), "{text}");
    assert!(text.contains("ncclGetUniqueId encrypted=1") && !text.contains("encrypted=0"), "{text}");
    let run = launch(1, &["--timeout", "30"], &env("23100"));
    let text = run.text();
    assert!(!run.out.status.success(), "{text}");
    assert!(
        text.contains("ncclSetEncryption") && text.contains("needs NCCL 2.32.3") && text.contains("2.31.0"),
        "{text}"
    );
}

/// Issue 36: a key shorter than NCCL's 32 bytes is refused naming the rule; NVIDIA's TLS-less
/// build (the double built with -DMCORE_NCCL_DOUBLE_NO_TLS, which carries NCCL's message in its
/// file as the PyPI library does) is refused before any unique id or communicator, naming the fix;
/// a TLS-less build that does not carry the message fails at the first communicator, and that
/// failure is named the same way. Without a key the TLS-less build brings up every group.
#[test]
fn a_short_key_and_a_tls_less_nccl_are_refused_naming_the_fix() {
    let short = ConfigFile::new("psk-short", "0123456789abcdef0123456789abcde\n");
    let run = launch(
        1,
        &["--timeout", "30"],
        &[("MCORE_NCCL_DOUBLE_VERSION", "23203"), ("MCORE_NCCL_PSK_FILE", short.path())],
    );
    let text = run.text();
    assert!(!run.out.status.success(), "{text}");
    assert!(text.contains("is 31 bytes; NCCL requires a pre-shared key of at least 32 bytes"), "{text}");

    let key = ConfigFile::new("psk-notls", "0123456789abcdef0123456789abcdef-test-only\n");
    let env = |define| {
        [
            ("MCORE_NCCL_DOUBLE_VERSION", "23203"),
            ("MCORE_NCCL_PSK_FILE", key.path()),
            ("MCORE_NCCL_DOUBLE_TRACE", "1"),
            (VARIANT, define),
        ]
    };
    let run = launch(2, &["--tp", "2", "--timeout", "30"], &env("MCORE_NCCL_DOUBLE_NO_TLS"));
    let errs = errors(&run);
    let text = run.text();
    // (mcore-launch stops the other rank once one failed: at least one reports.)
    for (rank, e) in &errs {
        assert!(
            e.contains("this NCCL was built without TLS") && e.contains("unset MCORE_NCCL_PSK_FILE"),
            "rank {rank}: {e}"
        );
    }
    // Found before the key was handed to NCCL and before any unique id or communicator.
    assert!(!text.contains("ncclSetEncryption mode") && !text.contains("ncclGetUniqueId"), "{text}");
    assert!(!text.contains("ncclCommInitRankConfig") && !text.contains("ncclCommSplit"), "{text}");

    let run = launch(2, &["--tp", "2", "--timeout", "30"], &env("MCORE_NCCL_DOUBLE_NO_TLS_UNMARKED"));
    let errs = errors(&run);
    let text = run.text();
    assert!(text.contains("ncclSetEncryption mode 1 key of 42 bytes"), "not recognised ahead: {text}");
    for (rank, e) in &errs {
        assert!(
            e.contains("this NCCL was built without TLS, and a pre-shared key is configured")
                && e.contains("NCCL was built without TLS support but a pre-shared key was configured")
                && e.contains("unset MCORE_NCCL_PSK_FILE"),
            "rank {rank}: {e}"
        );
    }

    assert_all_verified(2, "split", &[("MCORE_NCCL_DOUBLE_VERSION", "23203"), (VARIANT, "MCORE_NCCL_DOUBLE_NO_TLS")]);
}

/// tests/support/nccl_interpose.c built into `target/tmp/nccl-interpose` (once per process).
fn interpose_shim() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nccl-interpose");
        std::fs::create_dir_all(&dir).unwrap();
        let lib = dir.join("libnccl_interpose.so");
        let tmp = dir.join(format!("libnccl_interpose.so.{}", std::process::id()));
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/nccl_interpose.c");
        let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-o"])
            .arg(&tmp)
            .arg(src)
            .arg("-ldl")
            .output()
            .expect("cc");
        assert!(
            out.status.success(),
            "building the interposing shim failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, &lib).unwrap();
        lib
    })
}

/// Issue 36 (cuda-checkpoint): an `LD_PRELOAD`ed shim that defines NCCL's calls and forwards
/// them (tests/support/nccl_interpose.c, standing in for NVIDIA's nccl_checkpoint) sees the
/// runtime's calls with `MCORE_NCCL_GLOBAL_SYMBOLS=1`, and none without (NCCL opened privately);
/// either way every group comes up verified through it.
#[test]
fn a_preloaded_shim_sees_nccls_calls_only_with_global_symbols() {
    let shim = interpose_shim().display().to_string();
    let preload = if asan() { format!("{} {shim}", libasan()) } else { shim };
    let args = ["--tp", "2", "--comm-strategy", "split", "--timeout", "60"];
    let count = |text: &str, call: &str| text.matches(&format!("nccl interpose: {call} #")).count();
    let run = launch(2, &args, &[("LD_PRELOAD", &preload), ("MCORE_NCCL_GLOBAL_SYMBOLS", "1")]);
    let text = run.text();
    assert!(run.out.status.success(), "{text}");
    assert!(run.lines.iter().all(|l| l["ok"] == true && l["groups"].as_u64() > Some(0)), "{text}");
    assert!(count(&text, "ncclGetUniqueId") >= 1, "{text}");
    assert_eq!(count(&text, "ncclCommInitRankConfig"), 2, "one world per rank: {text}");
    let kinds = run.lines[0]["kinds"].as_array().unwrap().len();
    assert!(count(&text, "ncclCommSplit") >= 2 * kinds.min(2), "{text}");
    assert!(count(&text, "ncclCommAbort") + count(&text, "ncclCommDestroy") >= 2, "released through it: {text}");
    let run = launch(2, &args, &[("LD_PRELOAD", &preload)]);
    let text = run.text();
    assert!(run.out.status.success(), "{text}");
    assert!(!text.contains("nccl interpose:"), "a private dlopen bypasses the shim: {text}");
}

mod in_process {
    //! Scalable world init with 256 threads of this process against the double (loaded here,
    //! not in child processes), one in-memory store, each thread one rank.
    use super::*;
    use mcore_init::backend::nccl::factory::root_id_key;
    use mcore_init::backend::nccl::{Device, InitSpec, LibrarySearch, NcclComm, NcclConfig, NcclFactory, NcclLibrary};
    use mcore_init::backend::{CommFactory, CommOptions, GroupInfo};
    use mcore_init::store::{MemoryStore, Store, StoreError};
    use std::sync::{Arc, Mutex};

    /// One rank's view of the shared store, recording which rank set which key.
    struct Recording {
        inner: Arc<MemoryStore>,
        rank: u32,
        sets: Arc<Mutex<Vec<(u32, String)>>>,
    }

    impl Store for Recording {
        fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
            self.sets.lock().unwrap().push((self.rank, key.to_string()));
            self.inner.set(key, value)
        }
        fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
            self.inner.get(key)
        }
        fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
            self.inner.add(key, delta)
        }
        fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError> {
            self.inner.compare_set(key, expected, desired)
        }
        fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
            self.inner.check(keys)
        }
        fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
            self.inner.wait(keys, timeout)
        }
        fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
            self.inner.delete_key(key)
        }
        fn num_keys(&self) -> Result<i64, StoreError> {
            self.inner.num_keys()
        }
        fn timeout(&self) -> Duration {
            self.inner.timeout()
        }
    }

    /// The double, loaded once into this process (default version 2.28.3, so creation is
    /// serialized per process), with a rendezvous folder of its own. Only these tests set the
    /// folder variable here; child processes of other tests get theirs explicitly.
    fn library() -> &'static NcclLibrary {
        static LIB: OnceLock<&'static NcclLibrary> = OnceLock::new();
        LIB.get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("mcore-nccl-double-{}-inproc", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::env::set_var("MCORE_NCCL_DOUBLE_DIR", &dir);
            NcclLibrary::load(&LibrarySearch::explicit(double_dir().join("libnccl_double.so"))).unwrap()
        })
    }

    /// A world of `n` threads created with `per_root` ranks per root: who set which key.
    fn world(n: u32, per_root: u32) -> Vec<(u32, String)> {
        let lib = library();
        let factory =
            Arc::new(NcclFactory::new(lib, Device::Current, NcclConfig::default()).with_ranks_per_root(per_root));
        let inner = Arc::new(MemoryStore::new(Duration::from_secs(60)));
        let sets = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let threads: Vec<_> = (0..n)
            .map(|rank| {
                let (factory, inner, sets) = (factory.clone(), inner.clone(), sets.clone());
                std::thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn(move || {
                        let info = GroupInfo::new("world", (0..n).collect(), rank, Duration::from_secs(60)).unwrap();
                        let store: Arc<dyn Store> = Arc::new(Recording { inner, rank, sets });
                        let mut comm = factory.create_world(&info, &CommOptions::default(), store)?;
                        comm.wait_ready()?;
                        comm.abort();
                        Ok::<_, mcore_init::backend::CommError>(())
                    })
                    .unwrap()
            })
            .collect();
        for (rank, t) in threads.into_iter().enumerate() {
            t.join().unwrap().unwrap_or_else(|e| panic!("rank {rank} of {n} ({per_root} per root): {e}"));
        }
        eprintln!("world of {n} threads, {per_root} ranks per root: {:.2} s", start.elapsed().as_secs_f64());
        let mut v = sets.lock().unwrap().clone();
        v.sort();
        v
    }

    static SERIAL: Mutex<()> = Mutex::new(());

    /// Under `MCORE_NCCL_DOUBLE_ASAN=1` the double is built with AddressSanitizer, whose runtime
    /// must be loaded first: the test runs again in a child of this binary with libasan
    /// preloaded (true: done here, the child passed).
    fn rerun_under_asan(name: &str) -> bool {
        if !asan() || std::env::var_os("MCORE_NCCL_DOUBLE_INPROC_CHILD").is_some() {
            return false;
        }
        let out = Command::new(std::env::current_exe().unwrap())
            .args([&crate::common::test_name(module_path!(), name), "--exact", "--nocapture", "--test-threads=1"])
            .env("LD_PRELOAD", libasan())
            .env("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
            .env("MCORE_NCCL_DOUBLE_INPROC_CHILD", "1")
            .output()
            .unwrap();
        let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"), "{name} under ASan:\n{text}");
        assert!(!text.contains("AddressSanitizer"), "{name}: ASan report:\n{text}");
        true
    }

    #[test]
    fn scalable_init_of_256_ranks_publishes_one_id_per_root_from_the_documented_roots() {
        if rerun_under_asan("scalable_init_of_256_ranks_publishes_one_id_per_root_from_the_documented_roots") {
            return;
        }
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        // Default 128 per root: roots 0 and 128; 100 per root: 0, 100, 200 (a short last block).
        for (per_root, roots) in [(128, vec![0, 128]), (100, vec![0, 100, 200])] {
            let sets = world(256, per_root);
            let want: Vec<(u32, String)> = roots.iter().enumerate().map(|(i, &r)| (r, root_id_key(i as u32))).collect();
            assert_eq!(sets, want, "{per_root} per root");
            assert_eq!(mcore_init::backend::nccl::factory::scalable_roots(256, per_root), roots);
        }
        // Not above the threshold: one unique id from rank 0, as before.
        assert_eq!(world(256, 256), vec![(0, "nccl_unique_id".to_string())]);
    }

    #[test]
    fn after_a_peer_aborted_a_communicator_it_is_released_with_abort_not_destroy() {
        if rerun_under_asan("after_a_peer_aborted_a_communicator_it_is_released_with_abort_not_destroy") {
            return;
        }
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let lib = library();
        let id = lib.unique_id().unwrap();
        let comms: Vec<NcclComm> = (0..2u32)
            .map(|rank| {
                std::thread::spawn(move || {
                    let cfg = NcclConfig::default();
                    NcclComm::init_rank(lib, "pair/0", &id, 2, rank, Device::Current, &cfg, Duration::from_secs(30))
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap().unwrap())
            .collect();
        let mut comms = comms.into_iter();
        let (mut first, second) = (comms.next().unwrap(), comms.next().unwrap());
        first.abort().unwrap();
        // The double refuses ncclCommDestroy of a communicator a rank aborted: destroy() must
        // release it with ncclCommAbort instead.
        assert!(lib.any_aborted());
        second.destroy(Duration::from_secs(5)).unwrap_or_else(|e| panic!("destroy after a peer's abort: {e}"));
    }

    #[test]
    fn ranks_given_different_root_ids_fail_the_scalable_init() {
        if rerun_under_asan("ranks_given_different_root_ids_fail_the_scalable_init") {
            return;
        }
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let lib = library();
        let (a, b, c) = (lib.unique_id().unwrap(), lib.unique_id().unwrap(), lib.unique_id().unwrap());
        let threads: Vec<_> = (0..2u32)
            .map(|rank| {
                let ids = if rank == 0 { vec![a, b] } else { vec![a, c] };
                std::thread::spawn(move || {
                    let spec = InitSpec {
                        group: "world".into(),
                        id: ids[0],
                        root_ids: ids,
                        nranks: 2,
                        rank,
                        config: NcclConfig::default(),
                        timeout: Duration::from_secs(30),
                    };
                    let mut comms = NcclComm::init_together(lib, &[spec], Device::Current).map_err(|(_, e)| e)?;
                    comms[0].wait_ready()
                })
            })
            .collect();
        // Same first root, different second: they meet, compare, and both fail at once.
        let start = Instant::now();
        for t in threads {
            let e = t.join().unwrap().unwrap_err().to_string();
            assert!(e.contains("ncclCommInitRankScalable") && e.contains("other root ids"), "{e}");
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{:?}", start.elapsed());
    }
}
