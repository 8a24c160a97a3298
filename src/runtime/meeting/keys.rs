//! Every family of store keys the runtime writes, named in one place, and the one allocator of
//! fresh key spaces ([`KeySpaces`]).
//!
//! All of them live under an initialization attempt's prefix (`store_setup::open_attempt`). A
//! rendezvous ([`super::meet::Meeting`]) owns a *space*: its keys are `<space>/here/<rank>`,
//! `<space>/count` and `<space>/done`, and nothing else writes there. The liveness keys
//! (`alive/<rank>`) are named by `crate::runtime::faults::liveness`, the job's bulletin
//! (`alive/events/...`: deaths, questions, recovery requests, the job's end) by
//! `crate::runtime::faults::bulletin`.

use crate::lock::Unpoisoned;
use std::collections::HashMap;
use std::sync::Mutex;

/// The check-in's meeting (every rank's settings fingerprint; rank 0's verdict is its end).
pub const CHECKIN: &str = "checkin";
/// Leaving the store: every rank arrives, the store's host waits for them.
pub const LEAVE: &str = "leave";
/// A recovery's agreement: who is present (with whom it suspects); the verdict below.
pub const RECOVERY_PRESENT: &str = "recovery/present";
/// The agreed verdict of a recovery (compare-and-set: the first proposal wins).
pub const RECOVERY_VERDICT: &str = "recovery/verdict";
/// The meeting of the ranks that read a recovery's verdict (the store's host waits for it).
pub const RECOVERY_READ: &str = "recovery/read";
/// Health checks: each one a fresh space under this family ([`KeySpaces::next`]).
pub const HEALTH: &str = "health";
/// The number of the latest health check a rank began (so that a recovery request can end it).
pub const HEALTH_LATEST: &str = "health/latest";
/// A recreate-mode resume of one communicator: a fresh space per resume of that name.
pub fn resume(comm_name: &str) -> String {
    format!("resume/{comm_name}")
}
/// The members' vote on how to suspend one communicator (native or recreate): a fresh space per
/// suspend of that name.
pub fn suspend(comm_name: &str) -> String {
    format!("suspend/{comm_name}")
}
/// A group made after init: its own keys.
pub fn after_init(name: &str, generation: u64) -> String {
    format!("after_init/{name}/{generation}")
}
/// The key space a backend creating group `name` at init gets.
pub fn group(name: &str) -> String {
    format!("group/{name}")
}
/// Where `rank` published its host (`crate::runtime::launch::host`).
pub fn host(rank: u32) -> String {
    format!("host/{rank}")
}
/// The creation step `rank` has reached at init (`super::progress`).
pub fn progress(rank: u32) -> String {
    format!("progress/{rank}")
}
/// The one blame record: the ranks `rank` waited for when it failed (`super::explain`). It lives
/// under the rank's claimed liveness counter (`alive/<rank>`), so that our store lets only the
/// rank's own liveness connection write it, and a claim clears what others wrote there before.
pub fn blame(rank: u32) -> String {
    format!("alive/{rank}/blame")
}

/// A meeting's arrival key for `rank` in `space`.
pub fn here(space: &str, rank: u32) -> String {
    format!("{space}/here/{rank}")
}
/// A meeting's arrival counter in `space`.
pub fn count(space: &str) -> String {
    format!("{space}/count")
}
/// A meeting's end in `space`: set by the last arrival (or the one who decides), waited on by all.
pub fn done(space: &str) -> String {
    format!("{space}/done")
}

/// Fresh key spaces: the `n`-th call for a family returns `<family>/<n>`. Every rank calls it
/// for the same families in the same order (a health check, a resume of a communicator), so
/// they meet in the same space; the one counter per family replaces a counter per protocol.
#[derive(Debug, Default)]
pub struct KeySpaces {
    next: Mutex<HashMap<String, u64>>,
}

impl KeySpaces {
    /// The next fresh space of `family`.
    pub fn next(&self, family: &str) -> String {
        let mut map = self.next.locked();
        let n = map.entry(family.to_string()).or_insert(0);
        let space = format!("{family}/{n}");
        *n += 1;
        space
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_counts_on_its_own() {
        let spaces = KeySpaces::default();
        assert_eq!(spaces.next(HEALTH), "health/0");
        assert_eq!(spaces.next(&resume("tp")), "resume/tp/0");
        assert_eq!(spaces.next(HEALTH), "health/1");
        assert_eq!(spaces.next(&resume("tp")), "resume/tp/1");
        assert_eq!(here("health/1", 3), "health/1/here/3");
    }
}
