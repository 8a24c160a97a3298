//! The one error type of the runtime, and its mapping to C status codes.

use super::checkin::CheckinError;
use super::env::EnvError;
use super::groups::GroupError;
use crate::backend::nccl::NcclError;
use crate::backend::BackendError;
use crate::ffi::store::store_status;
use crate::ffi::{mcore_status, FfiError};
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
    /// The built-in NCCL backend could not be loaded or used.
    Nccl(NcclError),
    /// Creating or verifying one group failed.
    Group(GroupError),
    /// Seeding the RNG streams failed (bad seed, seed collision).
    Rng(RngError),
    /// Initialized already with other settings; the differences.
    AlreadyInitialized(Vec<String>),
    /// A getter or destroy needs an initialized runtime.
    NotInitialized,
    /// A bad argument, named.
    InvalidArgument(String),
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
            RuntimeError::Nccl(e) => write!(f, "{e}"),
            RuntimeError::Group(e) => write!(f, "{e}"),
            RuntimeError::Rng(e) => write!(f, "{e}"),
            RuntimeError::AlreadyInitialized(diff) => write!(
                f,
                "already initialized with different settings ({}); call destroy first",
                diff.join(", ")
            ),
            RuntimeError::NotInitialized => f.write_str("not initialized: call initialize first"),
            RuntimeError::InvalidArgument(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for RuntimeError {}

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
            BackendError => Backend, NcclError => Nccl, GroupError => Group, RngError => Rng);


impl RuntimeError {
    pub fn status(&self) -> mcore_status {
        match self {
            RuntimeError::Env(_) | RuntimeError::InvalidArgument(_) => mcore_status::InvalidArgument,
            RuntimeError::Topology(e) => FfiError::from(e.clone()).status,
            RuntimeError::Store(e) | RuntimeError::StoreConnect { source: e, .. } => store_status(e),
            RuntimeError::Checkin(CheckinError::Missing { .. }) => mcore_status::Timeout,
            RuntimeError::Checkin(CheckinError::Mismatch(_)) => mcore_status::ConfigMismatch,
            RuntimeError::Checkin(CheckinError::Store(e)) => store_status(e),
            RuntimeError::Backend(e) => e.status(),
            RuntimeError::Nccl(e) => FfiError::from(e.clone()).status,
            RuntimeError::Group(g) if g.message.contains("timed out") => mcore_status::Timeout,
            RuntimeError::Group(_) => mcore_status::Backend,
            RuntimeError::Rng(e) => FfiError::from(e.clone()).status,
            RuntimeError::AlreadyInitialized(_) => mcore_status::AlreadyInitialized,
            RuntimeError::NotInitialized => mcore_status::NotInitialized,
        }
    }
}

impl From<RuntimeError> for FfiError {
    fn from(e: RuntimeError) -> Self {
        FfiError::new(e.status(), e.to_string())
    }
}
