//! Leaving the store: every rank announces it is done, the store's host waits (bounded) for the
//! others; the keys that end a job or request recovery; and the teardown of a live runtime.

use super::env::LaunchEnv;
use super::error::RuntimeError;
use super::init::{claim_runtime, DESTROYING};
use super::liveness::{Liveness, SILENT_AFTER};
use super::runtime_state::Runtime;
use crate::store::Store;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest time the store host waits for the other ranks to leave.
const LEAVE_WAIT: Duration = Duration::from_secs(10);
/// After a failed initialization, how long past the init deadline the store host waits for the
/// ranks that arrived to read the verdict and leave (they explain their failure within
/// `progress::RECORD_GRACE` + `liveness::SILENT_AFTER` of it): inside the deadline + 2 s bound.
pub(super) const LEAVE_GRACE: Duration = Duration::from_millis(1800);

/// Announce that this rank is done with the store; the rank hosting the store server waits (at
/// most `LEAVE_WAIT`, and at most `timeout`) until `expected` ranks have, so none loses the
/// server mid-request, or until the ranks that have not left stopped answering (`liveness`).
pub(super) fn leave(
    base: &Arc<dyn Store>,
    env: &LaunchEnv,
    expected: u32,
    timeout: Duration,
    liveness: Option<&Liveness>,
) {
    leave_unless(base, env, expected, timeout, None, liveness)
}

/// Above this many ranks the store host does not look for dead ranks while it waits for the
/// others to leave (one store request per rank each time).
const LEAVE_LIVENESS_MAX: u32 = 1024;
/// The longest a rank that does not host the store waits to have announced that it leaves.
const LEAVE_SEND: Duration = Duration::from_millis(500);

/// [`leave`], but the host also stops waiting once `stop_key` exists.
pub(super) fn leave_unless(
    base: &Arc<dyn Store>,
    env: &LaunchEnv,
    expected: u32,
    timeout: Duration,
    stop_key: Option<&str>,
    liveness: Option<&Liveness>,
) {
    if env.world_size <= 1 {
        return;
    }
    let _ = base.set(&format!("leave/{}", env.rank), b"1");
    if !env.hosts_store() {
        // The count's reply is not needed: a store host that froze must not hold this rank
        // (at most LEAVE_SEND; the request finishes or fails on its own thread).
        let b = Arc::clone(base);
        let (tx, rx) = std::sync::mpsc::channel();
        let sent = std::thread::Builder::new().name("mcore-leave".into()).spawn(move || {
            let _ = b.add("leave/count", 1);
            let _ = tx.send(());
        });
        if sent.is_ok() {
            let _ = rx.recv_timeout(LEAVE_SEND);
        }
        return;
    }
    if base.add("leave/count", 1).is_err() {
        return;
    }
    let start = Instant::now();
    let deadline = start + LEAVE_WAIT.min(timeout);
    let mut look_at = start;
    let watch = liveness.filter(|_| env.world_size <= LEAVE_LIVENESS_MAX);
    while Instant::now() < deadline {
        if stop_key.is_some_and(|k| base.check(&[k]).unwrap_or(false)) {
            return;
        }
        let left = match base.add("leave/count", 0) {
            Ok(n) if n < i64::from(expected) => n,
            _ => return,
        };
        std::thread::sleep(Duration::from_millis(2));
        let Some(l) = watch else { continue };
        // Those that have not left and stopped answering (found so by this rank's own failure,
        // or by asking now) never will.
        let known = l.recently_silent(LEAVE_GRACE);
        let now = Instant::now();
        if left + known.len() as i64 >= i64::from(expected) || now >= look_at {
            let missing: Vec<u32> =
                (0..env.world_size).filter(|r| !base.check(&[&format!("leave/{r}")]).unwrap_or(true)).collect();
            if missing.iter().all(|r| known.contains(r)) && !known.is_empty() {
                return;
            }
            if now >= look_at {
                if l.silent(&missing).map_or(true, |silent| silent.len() == missing.len()) {
                    return;
                }
                look_at = Instant::now() + SILENT_AFTER;
            }
        }
    }
}

/// The key a recovery writes first under its attempt's prefix (with the ranks it suspects), so
/// that the other ranks learn of it (`recovery::check_health`, a spare standing by, a store host
/// waiting for ranks to leave a failed init).
pub(super) const RECOVERY_REQUESTED_KEY: &str = "recovery/requested";

/// The key the layout's ranks write when they tear their runtime down: the job ends, and spares
/// standing by leave.
pub(super) const ENDED_KEY: &str = "ended";

/// Tear down what `initialize` brought up, or let go of what the runtime kept (see
/// [`super::destroy`]). `false` when there was nothing.
///
/// Every rank announces that it is done with the store; the rank hosting the store server waits
/// (at most `LEAVE_WAIT`) until all have, so no rank loses the server in the middle of a request.
/// Teardown itself never fails because a peer is gone.
pub(super) fn destroy() -> Result<bool, RuntimeError> {
    let (mut claim, state) = claim_runtime(DESTROYING)?;
    let Some((_, runtime)) = state else { return Ok(claim.take_kept().map(|kept| kept.release()).is_some()) };
    let Runtime { groups, world, base, store, env, timeout, liveness, member_groups, .. } = runtime;
    // Communicators first (groups made after init, the layout's groups, then the world they
    // were split from): their last collectives completed on every member before anyone
    // announces leaving.
    drop(member_groups);
    drop(groups);
    drop(world);
    let _ = base.set(ENDED_KEY, b"1");
    leave(&base, &env, env.world_size, timeout, liveness.as_ref());
    drop(liveness);
    drop(base);
    drop(store);
    Ok(true)
}
