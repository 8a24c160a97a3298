//! The one wording of who is gone and why: every sentence that says ranks died, stopped answering
//! or did not come, and that the store's host stopped answering, is built here (the procedures
//! that find who is meant are in `super` and in the meeting). A leaf: callers pass the ranks
//! already described (with their hosts, `crate::runtime::launch::host::describe`).

use super::interrupt::{Cause, Interrupt};
use std::time::Duration;

/// Ranks `who` found dead (`cause`).
pub fn died(who: &str, cause: &Cause) -> String {
    match cause {
        Cause::ConnectionClosed => {
            format!(
                "rank(s) {who} died: its connection to the rendezvous store closed (the process exited or was killed)"
            )
        }
        Cause::HeartbeatStill(d) => format!(
            "rank(s) {who} stopped answering: no heartbeat in the store for {:.0} s (the process died or is frozen)",
            d.as_secs_f64()
        ),
        Cause::Launcher(what) => format!("rank(s) {who} died: the launcher reported it ({what})"),
    }
}

/// Ranks `who` that did not answer a question: their heartbeat stood still for `after`.
pub fn silent(who: &str, after: Duration) -> String {
    format!(
        "rank(s) {who} stopped answering (no heartbeat in the store for {:.1} s: the process died or is frozen)",
        after.as_secs_f64()
    )
}

/// Ranks `ranks`, known dead to `interrupt`, in one sentence per way they were found, each
/// named by `who` (the ranks with their hosts).
pub fn died_among(interrupt: &Interrupt, ranks: &[u32], who: &dyn Fn(&[u32]) -> String) -> String {
    let mut by_cause: Vec<(Cause, Vec<u32>)> = Vec::new();
    for &r in ranks {
        let cause = interrupt.death(r).map_or(Cause::ConnectionClosed, |d| d.cause);
        match by_cause.iter_mut().find(|(c, _)| *c == cause) {
            Some((_, rs)) => rs.push(r),
            None => by_cause.push((cause, vec![r])),
        }
    }
    by_cause.iter().map(|(c, rs)| died(&who(rs), c)).collect::<Vec<_>>().join("; ")
}

/// Ranks `who`, silent too, that had failed waiting for the ranks just named, and went.
pub fn followed(who: &str) -> String {
    format!("rank(s) {who} failed waiting for it and went")
}

/// Ranks `who` whose processes the launcher started but that never started `mcore_init` (its
/// process table says they never connected to PMIx), missing at `what`.
pub fn never_started(who: &str, what: &str) -> String {
    format!(
        "rank(s) {who} did not come to {what}: the launcher's process table says its process runs but never \
         started mcore_init (never connected to PMIx)"
    )
}

/// What the launcher's process table says of a rank that ended (`how`: "died with signal 9").
pub fn ended_per_table(how: &str) -> String {
    format!("{how}, per its process table")
}

/// Ranks `who` that never came to `what`.
pub fn did_not_come(who: &str, what: &str) -> String {
    format!("rank(s) {who} did not come to {what}")
}

/// The store's host (`host`: "rank 0 at ADDR:PORT") answered nothing (`why`).
pub fn store_host_gone(host: &str, why: &str) -> String {
    format!("the rendezvous store's host, {host}, stopped answering ({why}): that process died or is frozen")
}

/// A wait a backend began after ranks `who` were found dead, not waited.
pub fn not_waiting(who: &str) -> String {
    format!("rank(s) {who} died or stopped answering: not waiting for keys any longer")
}

/// Rank `rank` has waited `waited` for `who` (ranks with their hosts, or the meeting's end) at
/// `what`, with `left` to go: a long wait's line.
pub fn still_waiting(rank: u32, who: &str, what: &str, waited: Duration, left: Duration) -> String {
    format!(
        "rank {rank} still waiting for {who} at {what}: {:.0} s so far, {:.0} s left",
        waited.as_secs_f64(),
        left.as_secs_f64()
    )
}
