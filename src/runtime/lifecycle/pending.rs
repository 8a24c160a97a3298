//! What a transition of the runtime leaves behind when it does not end up ([`Kept`]): the
//! initialization recovery continues from ([`Pending`]: one that failed for a peer, or a spare's,
//! checked in and standing by), or a leaving store host's server ([`Lingering`]). It is held by
//! the runtime's one lifecycle slot (see `super::init`), never beside it.

use super::init_args::InitArgs;
use super::leave::{announce, LEAVE_GRACE};
use super::runtime_state::Runtime;
use super::settings::Claim;
use crate::runtime::error::RuntimeError;
use crate::runtime::faults::liveness::{claim_counter, posed};
use crate::runtime::launch::env::LaunchEnv;
use crate::runtime::launch::store_setup::{open_attempt, StoreHandles};
use crate::runtime::meeting::checkin::{check_in_from, CheckinError};
use crate::runtime::meeting::keys;
use crate::runtime::meeting::meet::Meeting;
use crate::store::{PrefixStore, Store, StoreError};
use crate::timeout::Deadline;
use crate::topology::Topology;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An initialization that `recovery::reinitialize` continues from: one that failed for a peer
/// ([`failed_for_a_peer`](crate::runtime::meeting::blame::failed_for_a_peer); `suspected` are the ranks the
/// failure named), or a spare's, checked in and standing by. It keeps the layout, the store (a
/// host keeps serving until this is dropped) and the attempt's prefix.
pub(crate) struct Pending {
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

/// The store of a rank that left a recovered world and hosts the rendezvous server: kept up
/// until the survivors have left their new layout (see [`Kept::release`]).
pub(crate) struct Lingering {
    pub store: StoreHandles,
    /// The survivors' key prefix and their number.
    pub survivors: Arc<dyn Store>,
    pub expected: u32,
    pub timeout: Duration,
}

/// The right to run one transition of the runtime (see [`Claim`]).
pub(crate) type RuntimeClaim = Claim<'static, Runtime, Kept>;

/// What the runtime's slot keeps when it is not up.
pub(crate) enum Kept {
    Attempt(Box<Pending>),
    Lingering(Box<Lingering>),
}

impl Kept {
    /// A spare standing by.
    pub fn is_spare(&self) -> bool {
        matches!(self, Kept::Attempt(p) if p.spare)
    }

    /// Let go of it (`destroy`, or a new initialization). A kept attempt's store host stops
    /// serving; a spare tells the layout's ranks it left. A lingering store host waits (at most
    /// its init timeout) until the survivors have destroyed their runtime, then stops the server.
    pub fn release(self) {
        match self {
            Kept::Attempt(p) => {
                if p.spare {
                    // The layout's ranks wait for every rank of the world, spares included, to leave.
                    announce(p.base.as_ref(), &p.env);
                }
            }
            Kept::Lingering(l) => {
                // Not a member: it waits for the survivors' leave meeting to end.
                let members = (0..l.expected).collect();
                let what = "leaving the recovered world";
                let _ = Meeting::new(
                    l.survivors.as_ref(),
                    keys::LEAVE,
                    what,
                    members,
                    u32::MAX,
                    Deadline::after(l.timeout),
                )
                .await_end();
                // The server stops.
                drop(l.store);
            }
        }
    }
}

/// A spare's initialization: it checks in with the whole world (so the layout's ranks know it
/// is there); the caller keeps it, standing by, for `recovery::reinitialize`.
pub(crate) fn check_in_spare(
    args: &InitArgs,
    env: LaunchEnv,
    fingerprint: &[u8],
    reuse: Option<(StoreHandles, String)>,
) -> Result<Pending, RuntimeError> {
    let start = Instant::now();
    if args.timeout.is_zero() {
        return Err(RuntimeError::InvalidArgument("init timeout must be > 0".into()));
    }
    let topology = Topology::new(args.topology.clone(), args.layout_world(env.world_size)?)?;
    let standing_by_again = reuse.is_some();
    let (store, attempt) = open_attempt(&env, args.timeout, reuse)?;
    let env = store.resolved(&env);
    // A spare starts no liveness while it stands by: it claims its counter on its first
    // connection to learn the job's secret (default mode), which keeps that connection, and lets
    // its later ones in, once the store serves only the job's ranks. A spare left standing by
    // after a recovery knows the secret already, and its first connection holds that claim (the
    // server closes a connection that claims a second counter).
    if let Some(first) = store.first_connection().filter(|_| !env.use_agent_store && !standing_by_again) {
        if let Err(holder) = claim_counter(&first, &attempt, env.rank, &store.token())? {
            let at = format!("rank 0 at {}:{}", env.master_addr, env.master_port);
            return Err(RuntimeError::Store(StoreError::Protocol(posed(env.rank, &at, &holder))));
        }
    }
    let base: Arc<dyn Store> = Arc::new(PrefixStore::new(&attempt, store.client()));
    let host = store.host();
    // A rank missing at check-in does not end a spare's part: it stands by for the recovery that
    // follows, suspecting the missing ranks.
    let suspected = match check_in_from(
        base.as_ref(),
        env.rank,
        env.world_size,
        env.local_world_size,
        fingerprint,
        Some(&host),
        args.timeout,
        None,
    ) {
        Ok(_) => vec![],
        Err(CheckinError::Missing { ranks, .. }) => {
            // As a failed init's ranks do, so the store's host need not wait for this one.
            announce(base.as_ref(), &env);
            ranks
        }
        Err(e) => return Err(e.into()),
    };
    let (args, settled_by) = (args.clone(), start + args.timeout + LEAVE_GRACE);
    Ok(Pending { env, topology, args, store, base, attempt, suspected, spare: true, settled_by })
}
