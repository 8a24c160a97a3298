//! The one map from the library's typed errors to `mcore_status`: every error that leaves
//! through the C ABI becomes an [`FfiError`] here, and nowhere else. (Store failures have the
//! statuses the plugin ABI's store callbacks report: `store_error_status`, used below.)

use super::error::FfiError;
use crate::abi::{mcore_status, SizedStructError};
use crate::backend::plugin::store_error_status;
use crate::backend::{BackendError, CommError, CommErrorKind};
use crate::rng::RngError;
use crate::runtime::checkin::CheckinError;
use crate::runtime::RuntimeError;
use crate::store::StoreError;
use crate::topology::{TopologyError, TopologyErrorKind};

fn topology_status(kind: TopologyErrorKind) -> mcore_status {
    match kind {
        TopologyErrorKind::InvalidConfig | TopologyErrorKind::Callback => mcore_status::InvalidConfig,
        TopologyErrorKind::OutOfRange => mcore_status::OutOfRange,
        TopologyErrorKind::UnknownKind => mcore_status::NotFound,
    }
}

fn rng_status(e: &RngError) -> mcore_status {
    match e {
        RngError::BadSeed(_) | RngError::ForkOrder { .. } | RngError::Invalid(_) => mcore_status::InvalidArgument,
        RngError::SeedExists(_) | RngError::NameExists(_) => mcore_status::AlreadyExists,
        RngError::NotAdded(_) => mcore_status::NotFound,
        RngError::Overflow(_) => mcore_status::OutOfRange,
        RngError::Corrupt(_) => mcore_status::Corrupt,
        RngError::WrongRank { .. } | RngError::LayoutChanged(_) => mcore_status::WrongRank,
    }
}

fn backend_status(e: &BackendError) -> mcore_status {
    match e {
        BackendError::Load { .. } => mcore_status::LibraryLoad,
        BackendError::Abi(_) => mcore_status::Unsupported,
        BackendError::StructSize { .. } | BackendError::InvalidVtable(_) | BackendError::InvalidArgument(_) => {
            mcore_status::InvalidArgument
        }
        BackendError::AlreadyExists(_) => mcore_status::AlreadyExists,
        BackendError::NotFound { .. } => mcore_status::NotFound,
        BackendError::Unsupported { .. } => mcore_status::Unsupported,
        BackendError::NotMember { .. } => mcore_status::NotMember,
        BackendError::Plugin { status, .. } => *status,
    }
}

fn comm_status(kind: CommErrorKind) -> mcore_status {
    match kind {
        CommErrorKind::InvalidArgument => mcore_status::InvalidArgument,
        CommErrorKind::Unsupported => mcore_status::Unsupported,
        CommErrorKind::Timeout => mcore_status::Timeout,
        CommErrorKind::PeerFailed => mcore_status::PeerFailed,
        CommErrorKind::Store => mcore_status::Io,
        CommErrorKind::LibraryLoad => mcore_status::LibraryLoad,
        CommErrorKind::VersionTooOld => mcore_status::VersionTooOld,
        CommErrorKind::NotMember => mcore_status::NotMember,
        CommErrorKind::Backend => mcore_status::Backend,
        CommErrorKind::Suspended => mcore_status::Suspended,
        CommErrorKind::Mismatch => mcore_status::ConfigMismatch,
    }
}

/// A plugin's own status passes through unchanged; any other failure's follows its kind.
fn comm_error_status(e: &CommError) -> mcore_status {
    e.plugin_status.unwrap_or_else(|| comm_status(e.kind))
}

fn runtime_status(e: &RuntimeError) -> mcore_status {
    match e {
        RuntimeError::Env(_) | RuntimeError::InvalidArgument(_) => mcore_status::InvalidArgument,
        RuntimeError::Topology(e) => topology_status(e.kind),
        RuntimeError::Store(e) | RuntimeError::StoreConnect { source: e, .. } => store_error_status(e),
        RuntimeError::Checkin(CheckinError::Missing { .. }) => mcore_status::Timeout,
        RuntimeError::Checkin(CheckinError::Mismatch(_) | CheckinError::OtherJob(_)) => mcore_status::ConfigMismatch,
        RuntimeError::Checkin(CheckinError::Store(e)) => store_error_status(e),
        RuntimeError::Backend(e) => backend_status(e),
        RuntimeError::Comm(e) => comm_error_status(e),
        RuntimeError::Group(g) => comm_error_status(&g.error),
        RuntimeError::Rng(e) => rng_status(e),
        RuntimeError::AlreadyInitialized(_) => mcore_status::AlreadyInitialized,
        RuntimeError::NotInitialized => mcore_status::NotInitialized,
        RuntimeError::Busy(_) => mcore_status::Busy,
        RuntimeError::PeersGone { source, .. } => runtime_status(source),
    }
}

macro_rules! to_ffi_error {
    ($($t:ty => |$e:ident| $status:expr),* $(,)?) => {
        $(impl From<$t> for FfiError {
            fn from($e: $t) -> Self {
                FfiError::new($status, $e.to_string())
            }
        })*
    };
}

to_ffi_error! {
    TopologyError => |e| topology_status(e.kind),
    RngError => |e| rng_status(&e),
    StoreError => |e| store_error_status(&e),
    BackendError => |e| backend_status(&e),
    CommError => |e| comm_error_status(&e),
    SizedStructError => |e| mcore_status::InvalidArgument,
    RuntimeError => |e| runtime_status(&e),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::groups::GroupError;

    #[test]
    fn group_failures_take_their_status_from_the_backend_error_kind_not_the_text() {
        let group = |kind, message: &str| {
            RuntimeError::Group(GroupError {
                group: "tensor_model_parallel/0".into(),
                members: vec![0, 1],
                error: CommError::new(kind, message),
            })
        };
        // A timeout worded without "timed out", and a failure that mentions it.
        assert_eq!(FfiError::from(group(CommErrorKind::Timeout, "deadline passed")).status, mcore_status::Timeout);
        assert_eq!(
            FfiError::from(group(CommErrorKind::Backend, "peer timed out earlier")).status,
            mcore_status::Backend
        );
        assert_eq!(
            FfiError::from(group(CommErrorKind::VersionTooOld, "needs NCCL 2.18")).status,
            mcore_status::VersionTooOld
        );
        // Members of a group made after init that asked for different members or options.
        assert_eq!(
            FfiError::from(group(CommErrorKind::Mismatch, "rank 2 asked for members 0,2")).status,
            mcore_status::ConfigMismatch
        );
    }

    #[test]
    fn a_plugins_own_status_passes_through_unchanged() {
        // PROTOCOL and CORRUPT have no communicator kind of their own (they were reported as IO
        // and BACKEND); every status a plugin can return reaches the caller as it was.
        for status in [mcore_status::Protocol, mcore_status::Corrupt, mcore_status::Io, mcore_status::WrongRank] {
            let plugin = BackendError::Plugin {
                backend: "test".into(),
                op: "create",
                group: "data_parallel/0".into(),
                status,
                message: "the plugin's words".into(),
            };
            let comm = CommError::from(plugin);
            let group = RuntimeError::Group(GroupError {
                group: "data_parallel/0".into(),
                members: vec![0, 1],
                error: comm.clone(),
            });
            assert_eq!(FfiError::from(group).status, status);
            assert_eq!(FfiError::from(RuntimeError::Comm(comm.context("creating"))).status, status);
        }
    }

    #[test]
    fn topology_messages_pass_through_unchanged() {
        let e = FfiError::from(TopologyError::unknown_kind("unknown group kind 'x'"));
        assert_eq!((e.status, e.message.as_str()), (mcore_status::NotFound, "unknown group kind 'x'"));
    }
}
