//! The tools under hostile input: non-UTF-8 arguments, absurd timeouts, huge `--hcp` lists.
//! Each run must end with a clean exit (0, or 2 with one line naming the value), never a panic
//! (exit 101) or a signal.

use crate::common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output, Stdio};

fn run(bin: &str, args: &[&OsStr], env: &[(&str, &OsStr)]) -> Output {
    let mut c = Command::new(bin);
    c.args(args).stdin(Stdio::null());
    // No launcher environment leaks in from the test runner.
    for v in ["RANK", "WORLD_SIZE", "MCORE_INIT_TIMEOUT", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"] {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("start the tool")
}

fn s(text: &str) -> &OsStr {
    OsStr::new(text)
}

/// Exit status `code`, no panic message, and (for failures) one stderr line containing `needle`.
#[track_caller]
fn assert_clean(out: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "panic: {err}");
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "expected '{needle}' in: {err}");
}

const TOPO: &str = env!("CARGO_BIN_EXE_mcore-topo");
const SELFTEST: &str = env!("CARGO_BIN_EXE_mcore-selftest");
const LAUNCH: &str = env!("CARGO_BIN_EXE_mcore-launch");

#[test]
fn non_utf8_arguments_are_named_not_a_panic() {
    let bad = OsStr::from_bytes(b"--tp=\xff2");
    let probe = common::backend_probe();
    for bin in [TOPO, SELFTEST, LAUNCH, probe.to_str().expect("UTF-8 target path")] {
        let out = run(bin, &[bad, s("--world-size"), s("4")], &[]);
        assert_clean(&out, 2, "argument 1 ('--tp=\u{fffd}2') is not valid UTF-8");
    }
    let out =
        run(LAUNCH, &[s("--nproc"), s("2"), s("--master-addr"), OsStr::from_bytes(b"\xfe"), s("--"), s("true")], &[]);
    assert_clean(&out, 2, "argument 4 ('\u{fffd}') is not valid UTF-8");
    // A launcher variable that is not UTF-8 is named, not taken for unset.
    let out = run(SELFTEST, &[], &[("RANK", OsStr::from_bytes(b"\xff")), ("WORLD_SIZE", s("2"))]);
    assert_clean(&out, 1, "RANK='\u{fffd}' is not a non-negative integer");
    // mcore-launch passes its program's arguments on as they are: they need not be UTF-8.
    let out = run(
        LAUNCH,
        &[
            s("--nproc"),
            s("1"),
            s("--"),
            s("/bin/sh"),
            s("-c"),
            s("test \"$0\" = \"$(printf 'a\\377')\""),
            OsStr::from_bytes(b"a\xff"),
        ],
        &[],
    );
    assert_clean(&out, 0, "");
}

#[test]
fn huge_and_unlimited_timeouts_are_accepted_bad_ones_named() {
    for t in ["1e300", "none", "inf", "1e20"] {
        let out = run(LAUNCH, &[s("--nproc"), s("1"), s("--timeout"), s(t), s("--"), s("true")], &[]);
        assert_clean(&out, 0, "");
    }
    for t in ["0", "-1", "nan", "soon"] {
        let out = run(LAUNCH, &[s("--nproc"), s("1"), s("--timeout"), s(t), s("--"), s("true")], &[]);
        assert_clean(&out, 2, &format!("--timeout: '{t}' is not a positive number of seconds"));
    }
    // mcore-selftest reads MCORE_INIT_TIMEOUT first; without a launcher environment it then
    // fails cleanly on that, which shows the timeout was accepted.
    for t in ["1e20", "none"] {
        let out = run(SELFTEST, &[], &[("MCORE_INIT_TIMEOUT", s(t))]);
        assert_clean(&out, 1, "no launcher environment");
        let out = run(SELFTEST, &[s("--timeout"), s("1e300")], &[("MCORE_INIT_TIMEOUT", s(t))]);
        assert_clean(&out, 1, "no launcher environment");
    }
    let out = run(SELFTEST, &[], &[("MCORE_INIT_TIMEOUT", s("-5"))]);
    assert_clean(&out, 2, "MCORE_INIT_TIMEOUT: '-5' is not a positive number of seconds");
    // One line, not the whole usage text (issue 46 F10).
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1, "{}", String::from_utf8_lossy(&out.stderr));
    // A misspelt variable and an unknown log level: one warning each at init (issue 46 F3).
    let typo = [("MCORE_INIT_TIMEOT", s("5")), ("MCORE_LOG", s("verbose")), ("LOCAL_RANK", s("0"))];
    let out = run(SELFTEST, &[], &typo);
    assert_clean(&out, 1, "no launcher environment");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("did you mean MCORE_INIT_TIMEOUT?").count(), 1, "{err}");
    assert_eq!(err.matches("MCORE_LOG='verbose' is not a level (known: info, debug)").count(), 1, "{err}");
    let out = run(SELFTEST, &[], &[("MCORE_INIT_TIMEOT", s("5")), ("LOCAL_RANK", s("1"))]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("did you mean"), "only a node's first rank warns");
    let out = run(SELFTEST, &[], &[("MCORE_INIT_TIMEOUT", OsStr::from_bytes(b"3\xff"))]);
    assert_clean(&out, 2, "MCORE_INIT_TIMEOUT: '3\u{fffd}'");
}

/// Hierarchical context-parallel levels are capped at `GroupKind::MAX_HCP_LEVELS` (64: their C
/// kind numbers are 1000-1063, so that any other number is an unknown kind, issue 34). The most
/// levels work; 60,000 (the most one argument of 128 KiB holds, which once took about 10 s when
/// the tool was quadratic in the levels) are refused at once with exit status 2, naming the
/// count and the cap, never a hang or a panic.
#[test]
fn the_most_hcp_levels_work_and_tens_of_thousands_are_refused() {
    let levels = 64;
    let most = format!("2{}", ",1".repeat(levels - 1));
    let many = format!("2{}", ",1".repeat(60_000 - 1));
    for extra in [&[][..], &["--rank", "1"][..], &["--json"][..]] {
        fn topo_args<'a>(hcp: &'a str, extra: &[&'a str]) -> Vec<&'a std::ffi::OsStr> {
            let mut a = vec![s("5"), s(TOPO), s("--world-size"), s("2"), s("--cp"), s("2"), s("--hcp"), s(hcp)];
            a.extend(extra.iter().map(|x| s(x)));
            a
        }
        let args = |hcp| topo_args(hcp, extra);
        // coreutils' timeout stops it (exit 124) should it run away.
        let out = run("timeout", &args(&most), &[]);
        assert_clean(&out, 0, "");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&format!("hierarchical_context_parallel_{}", levels - 1)), "{extra:?}");
        let out = run("timeout", &args(&many), &[]);
        assert_clean(&out, 2, "60000 hierarchical context-parallel levels: at most 64 are supported");
    }
}
