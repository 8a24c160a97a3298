//! Waits that speak (issue 46, F2), with real mcore-selftest ranks over the Gloo plugin: a rank
//! that waits for a missing rank says so on stderr after 10 s (what it waits for, the ranks
//! missing with their hosts, the time left), and a rank stopped by SIGINT or SIGTERM during the
//! wait says what it waited for before it dies of the signal. Needs `MCORE_GLOO_PLUGIN`
//! (scripts/test.d/25-runtime.sh sets it).

use crate::common;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

const SELFTEST: &str = env!("CARGO_BIN_EXE_mcore-selftest");

fn plugin() -> Option<String> {
    common::gloo_plugin("scripts/test.d/25-runtime.sh")
}

/// Rank 0 of a world of 2 whose rank 1 never starts, init timeout `timeout` s.
fn lonely_rank_0(timeout: &str) -> std::process::Child {
    let plugin = plugin().unwrap();
    let port = common::free_port().to_string();
    common::rank_command(SELFTEST, 0, 2, &port)
        .args(["--json", "--backend", &plugin, "--timeout", timeout])
        .spawn()
        .unwrap()
}

#[test]
fn a_wait_of_more_than_10_s_names_the_missing_rank_and_the_time_left() {
    if plugin().is_none() {
        return;
    }
    let out = common::wait_bounded(lonely_rank_0("14"), Duration::from_secs(40));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.contains("still waiting for")).unwrap_or_else(|| panic!("no wait line: {err}"));
    assert!(line.starts_with("mcore_init: rank 0 still waiting for rank(s) 1"), "{line}");
    assert!(line.contains("at the check-in") && line.contains(" s so far, ") && line.ends_with(" s left"), "{line}");
    assert!(!out.status.success(), "rank 0 alone must fail at its deadline");
}

#[test]
fn a_rank_stopped_by_a_signal_during_a_wait_says_what_it_waited_for() {
    if plugin().is_none() {
        return;
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let child = lonely_rank_0("60");
        std::thread::sleep(Duration::from_secs(3));
        // SAFETY: kill(2) on a child of this process.
        unsafe { libc::kill(child.id() as i32, sig) };
        let out = common::wait_bounded(child, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), Some(sig), "it dies of the signal: {err}");
        assert!(
            err.contains("mcore_init: stopped by a signal; rank 0 still waiting for rank(s) 1")
                && err.contains("at the check-in"),
            "signal {sig}: {err}"
        );
    }
}
