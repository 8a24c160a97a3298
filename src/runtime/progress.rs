//! Progress marks, so that a communicator creation that fails can name the ranks that never came.
//!
//! Before each creation step (the world communicator, then each group kind in the layout's
//! order) a rank records the step it has reached in the rendezvous store, one key per rank,
//! overwritten as it moves on. A creation that fails or passes its deadline reads its members'
//! marks: a member whose mark is below the step never arrived, because it died, hangs earlier, or
//! was never started. This matters most for NCCL, whose own timeout cannot say who is missing.

use crate::store::Store;

/// The most members whose marks a failure reads (one store request each).
const MAX_CHECKED: usize = 65_536;

fn key(rank: u32) -> String {
    format!("progress/{rank}")
}

/// This rank has reached `step` (steps count from 1 and only grow).
pub fn mark(store: &dyn Store, rank: u32, step: u64) -> Result<(), String> {
    store.set(&key(rank), step.to_string().as_bytes()).map_err(|e| format!("recording progress in the store: {e}"))
}

/// The members (of the first `MAX_CHECKED`) whose mark is below `step`.
pub fn behind(store: &dyn Store, members: &[u32], step: u64) -> Vec<u32> {
    members
        .iter()
        .take(MAX_CHECKED)
        .copied()
        // `add 0` reads a counter without waiting (an absent key reads as 0).
        .filter(|&m| store.add(&key(m), 0).is_ok_and(|v| v < step as i64))
        .collect()
}

/// Up to this many members, a failure where every member arrived names each member's host.
const MAX_DESCRIBED: usize = 64;

/// `message`, plus the members that never reached `step` and their hosts, when there are any;
/// when all arrived (a backend that could not connect, say), the hosts of a small group's
/// members, so that an unreachable address can be matched with its rank and host.
pub fn explain(store: &dyn Store, members: &[u32], step: u64, message: String) -> String {
    let missing = behind(store, members, step);
    if missing.is_empty() {
        if members.len() <= MAX_DESCRIBED {
            let hosts = super::host::describe(store, members);
            if hosts.contains(" on host ") {
                return format!("{message}; the group's ranks are {hosts}");
            }
        }
        return message;
    }
    let scope = if members.len() > MAX_CHECKED { format!(" (of the first {MAX_CHECKED} checked)") } else { String::new() };
    format!("{message}; rank(s) {} never arrived at this group{scope}", super::host::describe(store, &missing))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use std::time::Duration;

    #[test]
    fn members_below_the_step_are_named() {
        let s = MemoryStore::new(Duration::from_secs(1));
        mark(&s, 0, 3).unwrap();
        mark(&s, 1, 2).unwrap();
        mark(&s, 2, 5).unwrap();
        // rank 3 never marked anything
        assert_eq!(behind(&s, &[0, 1, 2, 3], 3), vec![1, 3]);
        let text = explain(&s, &[0, 1, 2, 3], 3, "timed out".into());
        assert_eq!(text, "timed out; rank(s) 1, 3 never arrived at this group");
        assert_eq!(explain(&s, &[0, 2], 3, "failed".into()), "failed");
        // A member that published its host is named with it.
        let host = crate::runtime::host::HostInfo { hostname: "n1".into(), addr: "10.0.0.2".parse().unwrap(), why: String::new() };
        crate::runtime::host::publish(&s, 3, &host).unwrap();
        assert_eq!(explain(&s, &[1, 3], 3, "x".into()), "x; rank(s) 1; 3 on host 'n1' (10.0.0.2) never arrived at this group");
        // All arrived: the members' hosts are named.
        mark(&s, 3, 3).unwrap();
        assert_eq!(explain(&s, &[0, 3], 3, "y".into()), "y; the group's ranks are 0; 3 on host 'n1' (10.0.0.2)");
    }
}
