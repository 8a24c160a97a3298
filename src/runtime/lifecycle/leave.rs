//! Leaving the store: a [`Meeting`] of every rank of the world (`keys::LEAVE`), counted; the
//! store's host waits (bounded) until the count is complete, the ranks still missing are dead,
//! or a recovery was requested (it ends the meeting); and the teardown of a live runtime.

use super::runtime_state::Runtime;
use crate::runtime::faults::bulletin::Event;
use crate::runtime::faults::Faults;
use crate::runtime::launch::env::LaunchEnv;
use crate::runtime::launch::store_setup::StoreHandles;
use crate::runtime::meeting::keys;
use crate::runtime::meeting::meet::{MeetError, Meeting};
use crate::store::{PrefixStore, Store};
use crate::timeout::Deadline;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest time the store host waits for the other ranks to leave.
const LEAVE_WAIT: Duration = Duration::from_secs(10);
/// After a failed initialization, how long past the init deadline the store host waits for the
/// ranks that arrived to read the verdict and leave (they explain their failure within
/// `explain::RECORD_GRACE` + `liveness::SILENT_AFTER` of it): inside the deadline + 2 s bound.
pub(crate) const LEAVE_GRACE: Duration = Duration::from_millis(1800);
/// How often the store's host looks whether every member has left (see [`await_left`]).
const LEAVE_LOOK: Duration = Duration::from_secs(1);
/// The longest a rank that does not host the store waits to have announced that it leaves.
const LEAVE_SEND: Duration = Duration::from_millis(500);
/// What the leave meeting's members are waited for.
const WHAT: &str = "leaving the store";

/// The leave meeting of a world of `world` in `base` as `rank` sees it, over by `deadline`.
fn meeting(base: &dyn Store, world: u32, rank: u32, deadline: Deadline) -> Meeting<'_> {
    Meeting::new(base, keys::LEAVE, WHAT, (0..world).collect(), rank, deadline)
}

/// Announce that this rank leaves, without waiting for anyone (a spare, a failed check-in).
pub(crate) fn announce(base: &dyn Store, env: &LaunchEnv) {
    let _ = meeting(base, env.world_size, env.rank, Deadline::after(LEAVE_SEND)).arrive_counted();
}

/// End the leave meeting at once (a recovery was requested: the store's host is needed there).
pub(crate) fn end_for_recovery(base: &dyn Store) {
    let _ = Meeting::from_outside(base, keys::LEAVE).end(b"recovery");
}

/// How the store's host learns of deaths while it waits for the others to leave: the attempt's
/// faults, and the store with the attempt's prefix (`attempt`), whose blocked calls a death ends.
pub(crate) struct Watch<'a> {
    pub faults: &'a Faults,
    pub store: &'a StoreHandles,
    pub attempt: &'a str,
}

/// Announce that this rank is done with the store; the rank hosting the store server waits (at
/// most `LEAVE_WAIT`, and at most `timeout`) until every rank of the world has, those in `gone`
/// not waited for, so none loses the server mid-request; or until the ranks that have not left
/// are dead (the heartbeat's death notices end the wait, see [`Meeting::watching`]), or a
/// recovery was requested.
pub(crate) fn leave(base: &Arc<dyn Store>, env: &LaunchEnv, gone: &[u32], timeout: Duration, watch: Watch) {
    if env.world_size <= 1 {
        return;
    }
    if !env.hosts_store() {
        // The count's reply is not needed: a store host that froze must not hold this rank
        // (at most LEAVE_SEND; the request finishes or fails on its own thread).
        let (b, env) = (Arc::clone(base), env.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let sent = std::thread::Builder::new().name("mcore-leave".into()).spawn(move || {
            announce(b.as_ref(), &env);
            let _ = tx.send(());
        });
        if sent.is_ok() {
            let _ = rx.recv_timeout(LEAVE_SEND);
        }
        return;
    }
    // The host meets on the store without the liveness guard (a store host found gone is
    // itself: nothing to guard against), and the others still leave after a death.
    let view: Arc<dyn Store> = Arc::new(PrefixStore::new(watch.attempt, watch.store.client()));
    let view = view.as_ref();
    // Ranks missing from the start, or already known dead or silent, never leave: each counted
    // once (a rank counted twice would end the meeting with a rank still reading its verdict),
    // all in three requests.
    let mut never: Vec<u32> = gone.iter().copied().chain(watch.faults.recently_silent(LEAVE_GRACE)).collect();
    never.sort_unstable();
    never.dedup();
    let deadline = Deadline::after(LEAVE_WAIT.min(timeout));
    let m = meeting(view, env.world_size, env.rank, deadline).watching(watch.faults.interrupt());
    let _ = m.count_gone(&never);
    if m.arrive_counted().is_err() {
        return;
    }
    // A death ends the wait (the faults' levers), and the dead are counted as left.
    let _armed = watch.faults.arm();
    while let Err(MeetError::Missing(missing)) = await_left(&m) {
        if missing.died.is_none() || deadline.passed() {
            break;
        }
        let _ = m.count_gone(&missing.ranks);
    }
}

/// Wait for the leave meeting's end, looking every [`LEAVE_LOOK`] whether every member is here
/// (then it ends it). A member leaves with a compare-and-set and an ADD within [`LEAVE_SEND`], so
/// a store host paused meanwhile (SIGSTOP for 2.5 s) gets the members' marks once it resumes,
/// but not the counts of those that exited waiting for the first reply: it waited its whole
/// [`LEAVE_WAIT`] for them (issue 42).
fn await_left(m: &Meeting) -> Result<(), MeetError> {
    loop {
        let look = Deadline::at(m.deadline().instant().min(Instant::now() + LEAVE_LOOK));
        match m.await_end_by(look)? {
            Some(_) => return Ok(()),
            None if m.deadline().passed() => return Err(m.missing_error()),
            None if m.missing().is_empty() => {
                let _ = m.decide(b"1");
                return Ok(());
            }
            None => {}
        }
    }
}

/// Tear down a live runtime (see [`crate::runtime::destroy`]): every rank announces that it is done
/// with the store; the rank hosting the store server waits (at most `LEAVE_WAIT`) until all have,
/// so no rank loses the server in the middle of a request. Never fails because a peer is gone.
pub(crate) fn teardown(runtime: Runtime) {
    let Runtime { groups, world, base, store, env, timeout, faults, member_groups, attempt, .. } = runtime;
    // Communicators first (groups made after init, the layout's groups, then the world they
    // were split from): their last collectives completed on every member before anyone
    // announces leaving.
    member_groups.close();
    drop(groups);
    drop(world);
    // The job ends: spares standing by wake up and leave.
    if let Some(bulletin) = faults.bulletin() {
        let _ = bulletin.post(&Event::Ended);
    }
    leave(&base, &env, &[], timeout, Watch { faults: &faults, store: &store, attempt: &attempt });
    drop(faults);
    drop(base);
    drop(store);
}
