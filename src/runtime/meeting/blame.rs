//! The liveness glue of an initialization: this rank's heartbeat, and failures explained by the
//! ranks (or the store host) that stopped answering.

use super::checkin::CheckinError;
use crate::backend::{CommError, CommErrorKind, CommFactory};
use crate::runtime::error::RuntimeError;
use crate::runtime::launch::env::LaunchEnv;
use crate::runtime::liveness::{Liveness, StartError};
use crate::store::tcp::auth::TokenCell;
use crate::store::StoreError;
use std::sync::Arc;
use std::time::Duration;

/// Start this rank's heartbeat (see [`crate::runtime::liveness`]) on a connection of its own to the store
/// at MASTER_ADDR:MASTER_PORT, within the time the init has left (`within`); none in a world of
/// one. A heartbeat that cannot start costs the init the naming of dead ranks (said once, on
/// stderr); one whose rank another client posed as fails it, naming that client.
pub(crate) fn start_liveness(
    env: &LaunchEnv,
    attempt: &str,
    within: Duration,
    token: TokenCell,
) -> Result<Option<Liveness>, RuntimeError> {
    if env.world_size <= 1 {
        return Ok(None);
    }
    match Liveness::start(env, attempt, within, token) {
        Ok(l) => Ok(Some(l)),
        Err(StartError::Unreachable(why)) => {
            eprintln!("mcore_init: rank {}: {why}", env.rank);
            Ok(None)
        }
        Err(StartError::Posed(why)) => Err(RuntimeError::Store(StoreError::Protocol(why))),
    }
}

/// From now on, a peer found dead ends this rank's calls blocked on the store (`abort_store`, the
/// store's busy-aborter) and every call of `backend` in flight (its interrupt: creating or
/// verifying any communicator, one in a group without the dead rank too), which then fail for a
/// peer. Undone by [`deaths_end_nothing`].
pub(crate) fn deaths_interrupt(
    l: &Liveness,
    abort_store: Option<Box<dyn Fn() + Send + Sync>>,
    backend: &Arc<dyn CommFactory>,
) {
    let backend = Arc::clone(backend);
    l.on_peer_death(Some(Box::new(move |_| {
        if let Some(abort) = &abort_store {
            abort();
        }
        backend.interrupt(true);
        crate::backend::pmix::interrupt_waits(true);
    })));
}

/// Undo [`deaths_interrupt`] once every call it could end has returned: a death ends nothing,
/// and `backend`'s calls run again.
pub(crate) fn deaths_end_nothing(l: Option<&Liveness>, backend: &dyn CommFactory) {
    if let Some(l) = l {
        l.on_peer_death(None);
    }
    backend.interrupt(false);
    crate::backend::pmix::interrupt_waits(false);
}

/// While it lives, deaths interrupt (see [`deaths_interrupt`]): a step after init that creates
/// or verifies communicators (recreate-mode resume).
pub(crate) struct DeathsInterrupt<'a> {
    liveness: Option<&'a Liveness>,
    backend: &'a Arc<dyn CommFactory>,
}

impl<'a> DeathsInterrupt<'a> {
    pub(crate) fn arm(
        liveness: Option<&'a Liveness>,
        abort_store: Option<Box<dyn Fn() + Send + Sync>>,
        backend: &'a Arc<dyn CommFactory>,
    ) -> Self {
        if let Some(l) = liveness {
            deaths_interrupt(l, abort_store, backend);
        }
        DeathsInterrupt { liveness, backend }
    }
}

impl Drop for DeathsInterrupt<'_> {
    fn drop(&mut self) {
        deaths_end_nothing(self.liveness, self.backend.as_ref());
    }
}

/// `e` with the peers that stopped answering named first, when it is a failure that a dead or
/// frozen peer can cause (a timeout, a lost peer, a store that went away).
pub(crate) fn blame_peers(e: RuntimeError, liveness: Option<&Liveness>, env: &LaunchEnv) -> RuntimeError {
    let Some(l) = liveness else { return e };
    let peerish = match &e {
        RuntimeError::Group(g) => {
            matches!(g.error.kind, CommErrorKind::Timeout | CommErrorKind::PeerFailed | CommErrorKind::Store)
        }
        RuntimeError::Store(_) | RuntimeError::StoreConnect { .. } | RuntimeError::Comm(_) => true,
        RuntimeError::Checkin(CheckinError::Store(_)) => true,
        _ => false,
    };
    if !peerish {
        return e;
    }
    match who_stopped(l, env) {
        Some(who) => RuntimeError::PeersGone { who, source: Box::new(e) },
        None => e,
    }
}

/// `e`, a failed collective, with the silent ranks named first when it timed out or lost a peer.
pub(crate) fn explain_with(liveness: Option<&Liveness>, env: &LaunchEnv, e: CommError) -> CommError {
    match (liveness, e.kind) {
        (Some(l), CommErrorKind::Timeout | CommErrorKind::PeerFailed) => match who_stopped(l, env) {
            Some(who) => CommError { message: format!("{who}; {}", e.message), ..e },
            None => e,
        },
        _ => e,
    }
}

/// Who of the whole world stopped answering: the world, not only a failed group's members, since a
/// member may be alive but stuck on a rank of another group.
fn who_stopped(l: &Liveness, env: &LaunchEnv) -> Option<String> {
    let everyone: Vec<u32> = (0..env.world_size).collect();
    l.blame(&everyone, env.rank)
}

/// Whether an initialization failed because a peer did not come or went away (a rank missing at
/// check-in, a group whose creation or verification timed out or lost a peer): recovery can
/// continue from it.
pub(crate) fn failed_for_a_peer(e: &RuntimeError) -> bool {
    use crate::backend::CommErrorKind as K;
    match e.cause() {
        RuntimeError::Checkin(CheckinError::Missing { .. }) => true,
        RuntimeError::Group(g) => matches!(g.error.kind, K::Timeout | K::PeerFailed),
        _ => false,
    }
}
