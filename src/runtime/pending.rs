//! The kept initialization that recovery continues from ([`Pending`]): one that failed for a peer,
//! or a spare's, checked in and standing by.

use super::checkin::{check_in, CheckinError};
use super::env::LaunchEnv;
use super::error::RuntimeError;
use super::host;
use super::init_args::InitArgs;
use super::leave::LEAVE_GRACE;
use super::store_setup::{open_attempt, StoreHandles};
use crate::store::{PrefixStore, Store};
use crate::topology::Topology;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// An initialization that `recovery::reinitialize` continues from: one that failed for a peer
/// ([`failed_for_a_peer`](super::blame::failed_for_a_peer); `suspected` are the ranks the
/// failure named), or a spare's, checked in and standing by. It keeps the layout, the store (a
/// host keeps serving until this is dropped) and the attempt's prefix.
pub(super) struct Pending {
    pub env: LaunchEnv,
    pub topology: Topology,
    pub args: InitArgs,
    pub store: StoreHandles,
    pub base: Arc<dyn Store>,
    pub attempt: String,
    pub suspected: Vec<u32>,
    pub spare: bool,
    /// When every other rank of that initialization has reached its own end (its deadline, a
    /// little past for ranks that started later): a recovery's agreement waits for the ranks
    /// still alive until then, as a rank stuck in a collective with a dead peer fails only at its
    /// deadline.
    pub settled_by: Instant,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

/// Take the kept initialization out (recovery continues from it).
pub(super) fn take_pending() -> Option<Pending> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// Keep an initialization for recovery (again, when recovery was called with bad arguments).
pub(super) fn keep_pending(pending: Pending) {
    *PENDING.lock().unwrap_or_else(|p| p.into_inner()) = Some(pending);
}

/// Drop a kept initialization (a store host stops serving; a spare leaves). `false` when there
/// was none.
pub(super) fn discard_pending() -> bool {
    let Some(p) = take_pending() else { return false };
    if p.spare {
        // The layout's ranks wait for every rank of the world, spares included, to leave.
        let _ = p.base.add("leave/count", 1);
    }
    true
}

/// Whether a spare is standing by in this process (see [`InitArgs::spares`]).
pub fn is_spare() -> bool {
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).as_ref().is_some_and(|p| p.spare)
}

/// A spare's initialization: it checks in with the whole world (so the layout's ranks know it
/// is there) and is kept, standing by, for `recovery::reinitialize`.
pub(super) fn check_in_spare(
    args: &InitArgs,
    env: LaunchEnv,
    fingerprint: &[u8],
    reuse: Option<(StoreHandles, String)>,
) -> Result<(), RuntimeError> {
    let start = Instant::now();
    if args.timeout.is_zero() {
        return Err(RuntimeError::InvalidArgument("init timeout must be > 0".into()));
    }
    let topology = Topology::new(args.topology.clone(), args.layout_world(env.world_size)?)?;
    let (store, attempt) = open_attempt(&env, args.timeout, reuse)?;
    let base: Arc<dyn Store> = Arc::new(PrefixStore::new(&attempt, store.client()));
    host::publish(base.as_ref(), env.rank, &store.host())?;
    // A rank missing at check-in does not end a spare's part: it stands by for the recovery that
    // follows, suspecting the missing ranks.
    let suspected =
        match check_in(base.as_ref(), env.rank, env.world_size, env.local_world_size, fingerprint, args.timeout) {
            Ok(_) => vec![],
            Err(CheckinError::Missing { ranks, .. }) => {
                // As a failed init's ranks do, so the store's host need not wait for this one.
                let _ = base.add("leave/count", 1);
                ranks
            }
            Err(e) => return Err(e.into()),
        };
    let (args, settled_by) = (args.clone(), start + args.timeout + LEAVE_GRACE);
    keep_pending(Pending { env, topology, args, store, base, attempt, suspected, spare: true, settled_by });
    Ok(())
}
