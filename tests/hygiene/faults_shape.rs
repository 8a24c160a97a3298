//! The shape of failure handling (issue 42, docs/architecture.md "The route of a death"): the
//! interrupt's levers are pulled from `src/runtime/faults/` only, a meeting's `done` key is written
//! by the meeting only, every sentence that says ranks died, stopped answering or did not come
//! is built in the verdict (`faults/verdict.rs`) or the meeting (`meeting/meet.rs`), and the job's
//! events go through one bulletin (`faults/bulletin.rs`), the broadcast keys it replaced gone.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every line of `src/` (tests modules included) containing `needle`, as `file:line`, outside
/// the files whose path contains one of `allowed`.
fn found_outside(needle: &str, allowed: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    assert!(files.len() > 100, "src/ not found from {:?}", std::env::current_dir());
    let mut hits = Vec::new();
    for f in files {
        let shown = f.to_string_lossy().replace('\\', "/");
        if allowed.iter().any(|a| shown.contains(a)) {
            continue;
        }
        for (n, line) in std::fs::read_to_string(&f).unwrap().lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains(needle) {
                hits.push(format!("{shown}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    hits
}

#[test]
fn the_levers_are_pulled_from_the_faults_part_only() {
    for lever in ["busy_aborter()", "interrupt_waits", "on_store_gone(", "backend.interrupt(", ".on_death("] {
        let hits = found_outside(lever, &["src/runtime/faults/", "src/backend/", "src/runtime/launch/store_setup.rs"]);
        assert!(hits.is_empty(), "{lever} used outside src/runtime/faults/:\n{}", hits.join("\n"));
    }
}

#[test]
fn a_meetings_done_key_is_written_by_the_meeting_only() {
    let hits = found_outside("keys::done(", &["src/runtime/meeting/meet.rs", "src/runtime/meeting/keys.rs"]);
    assert!(hits.is_empty(), "a done key written outside the meeting:\n{}", hits.join("\n"));
}

#[test]
fn every_sentence_of_who_is_gone_is_built_in_the_verdict_or_the_meeting() {
    for words in ["} died", "} stopped answering", "} did not come", "died or stopped answering"] {
        let hits = found_outside(
            words,
            &["src/runtime/faults/verdict.rs", "src/runtime/meeting/meet.rs", "/tests.rs", "/tests/"],
        );
        assert!(hits.is_empty(), "'{words}' worded outside the verdict:\n{}", hits.join("\n"));
    }
}

#[test]
fn the_jobs_events_are_written_in_the_bulletin_only_and_the_old_broadcast_keys_are_gone() {
    for old in ["alive/closed", "CLOSED_KEY", "keys::WAKE", "keys::ENDED", "RECOVERY_REQUESTED", "recovery/requested"] {
        let hits = found_outside(old, &[]);
        assert!(hits.is_empty(), "{old}, replaced by the bulletin, is still named:\n{}", hits.join("\n"));
    }
    // The bulletin's keys, its posts (NOTICE) and its close notices (ON_CLOSE) are named in
    // bulletin.rs only (the store's client and server serve them, not knowing what they mean).
    for write in ["EVENTS_KEY", "alive/events", ".notice(", ".on_close("] {
        let hits = found_outside(write, &["src/runtime/faults/bulletin.rs", "src/store/tcp/"]);
        assert!(hits.is_empty(), "{write} outside the bulletin:\n{}", hits.join("\n"));
    }
}

#[test]
fn a_deadline_is_passed_as_one_type() {
    // `timeout::Deadline`, not a bare `Instant`: what is left of it is `left()` everywhere.
    for bare in ["deadline: Instant", "deadline: std::time::Instant"] {
        let hits = found_outside(bare, &[]);
        assert!(hits.is_empty(), "a deadline passed as a bare Instant:\n{}", hits.join("\n"));
    }
}
