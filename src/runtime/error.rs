//! The one error type of the runtime (its C status is decided by the C layer's status map,
//! src/ffi/status_map.rs).

use super::creation::groups::GroupError;
use super::launch::env::EnvError;
use super::meeting::checkin::CheckinError;
use crate::backend::{BackendError, CommError};
use crate::rng::RngError;
use crate::store::StoreError;
use crate::topology::TopologyError;
use std::fmt;

/// Why initialize / destroy / a getter failed. Every variant names what it is about.
#[derive(Debug, Clone)]
pub enum RuntimeError {
    /// The launcher environment is missing or malformed.
    Env(EnvError),
    /// The layout is invalid for this world size.
    Topology(TopologyError),
    /// Setting up or using the rendezvous store failed.
    Store(StoreError),
    /// The store could not be reached; `what` names whose store at which address.
    StoreConnect { what: String, source: StoreError },
    /// Ranks did not all arrive, or arrived with different configurations.
    Checkin(CheckinError),
    /// The backend could not be resolved or loaded.
    Backend(BackendError),
    /// A backend operation outside one group failed (loading NCCL, checking options).
    Comm(CommError),
    /// Creating or verifying one group failed.
    Group(GroupError),
    /// Seeding the RNG streams failed (bad seed, seed collision).
    Rng(RngError),
    /// Initialized already with other settings; the differences.
    AlreadyInitialized(Vec<String>),
    /// A getter or destroy needs an initialized runtime.
    NotInitialized,
    /// Another thread is between states (an initialize or destroy in progress); what it is doing.
    Busy(String),
    /// A bad argument, named.
    InvalidArgument(String),
    /// `source`, which ranks that stopped answering (or the store's host) caused: `who` names
    /// them (see `runtime::faults::liveness`); the status is `source`'s.
    PeersGone { who: String, source: Box<RuntimeError> },
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::Env(e) => write!(f, "{e}"),
            RuntimeError::Topology(e) => write!(f, "{e}"),
            RuntimeError::Store(e) => write!(f, "{e}"),
            RuntimeError::StoreConnect { what, source } => write!(f, "cannot reach {what}: {source}"),
            RuntimeError::Checkin(e) => write!(f, "{e}"),
            RuntimeError::Backend(e) => write!(f, "{e}"),
            RuntimeError::Comm(e) => write!(f, "{e}"),
            RuntimeError::Group(e) => write!(f, "{e}"),
            RuntimeError::Rng(e) => write!(f, "{e}"),
            RuntimeError::AlreadyInitialized(diff) => {
                write!(f, "already initialized with different settings ({}); call destroy first", diff.join(", "))
            }
            RuntimeError::NotInitialized => f.write_str("not initialized: call initialize first"),
            RuntimeError::Busy(what) => {
                write!(f, "refused at once: {what} on another thread; call again once it returned")
            }
            RuntimeError::InvalidArgument(m) => f.write_str(m),
            RuntimeError::PeersGone { who, source } => write!(f, "{who}; {source}"),
        }
    }
}

impl std::error::Error for RuntimeError {}

impl RuntimeError {
    /// The error itself, or for [`RuntimeError::PeersGone`] the error it explains.
    pub fn cause(&self) -> &RuntimeError {
        match self {
            RuntimeError::PeersGone { source, .. } => source.cause(),
            other => other,
        }
    }
}

macro_rules! from_error {
    ($($t:ty => $v:ident),* $(,)?) => {
        $(impl From<$t> for RuntimeError {
            fn from(e: $t) -> Self {
                RuntimeError::$v(e)
            }
        })*
    };
}
from_error!(EnvError => Env, TopologyError => Topology, StoreError => Store, CheckinError => Checkin,
            BackendError => Backend, CommError => Comm, GroupError => Group, RngError => Rng);
