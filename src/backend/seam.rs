//! The seam every communicator backend satisfies and the runtime drives: a factory creates one
//! communicator per group (per-group strategy) or a world communicator that splits (split
//! strategy); a communicator can verify itself with a collective. Errors cross it typed
//! ([`CommError`]: a kind and a message), so the runtime never reads a status out of a text.

use super::{BackendError, CommOptions, GroupInfo};
use crate::backend::nccl::NcclError;
use crate::store::{Store, StoreError};
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What kind of failure a [`CommError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommErrorKind {
    /// A bad argument or option value, named in the message.
    InvalidArgument,
    /// The backend cannot do what was asked (a NULL slot, no split, no options).
    Unsupported,
    /// A deadline passed; the message names what was waited for.
    Timeout,
    /// A peer failed or went away.
    PeerFailed,
    /// The rendezvous store failed (I/O, protocol).
    Store,
    /// A library could not be loaded or lacks a symbol.
    LibraryLoad,
    /// A loaded library is too old for a feature; the message names the versions.
    VersionTooOld,
    /// This rank is not in the group it asked for.
    NotMember,
    /// The backend reported any other failure.
    Backend,
    /// The communicator is suspended (the message names its kinds): resume it first.
    Suspended,
    /// The members asked for different groups (members or options), named in the message.
    Mismatch,
}

/// A failure of a backend operation: its kind and the message naming the group and values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommError {
    pub kind: CommErrorKind,
    pub message: String,
    /// The status a plugin returned, when the failure is a plugin's: the C layer reports it
    /// unchanged (`kind` is what the runtime reasons with).
    pub plugin_status: Option<crate::abi::mcore_status>,
}

impl CommError {
    pub fn new(kind: CommErrorKind, message: impl Into<String>) -> Self {
        CommError { kind, message: message.into(), plugin_status: None }
    }

    /// The same error with `context` (e.g. the group) put before its message.
    pub fn context(self, context: impl fmt::Display) -> Self {
        CommError { message: format!("{context}: {}", self.message), ..self }
    }
}

impl fmt::Display for CommError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CommError {}

impl From<BackendError> for CommError {
    fn from(e: BackendError) -> Self {
        use crate::abi::mcore_status as S;
        let kind = match &e {
            BackendError::Load { .. } => CommErrorKind::LibraryLoad,
            BackendError::Abi(_) | BackendError::Unsupported { .. } => CommErrorKind::Unsupported,
            BackendError::StructSize { .. } | BackendError::InvalidVtable(_) | BackendError::InvalidArgument(_) => {
                CommErrorKind::InvalidArgument
            }
            BackendError::AlreadyExists(_) | BackendError::NotFound { .. } => CommErrorKind::InvalidArgument,
            BackendError::NotMember { .. } => CommErrorKind::NotMember,
            // A plugin's own status says what kind of failure it was.
            BackendError::Plugin { status, .. } => match status {
                S::Timeout => CommErrorKind::Timeout,
                S::PeerFailed => CommErrorKind::PeerFailed,
                S::Io | S::Protocol => CommErrorKind::Store,
                S::InvalidArgument | S::InvalidConfig | S::OutOfRange => CommErrorKind::InvalidArgument,
                S::Unsupported => CommErrorKind::Unsupported,
                S::LibraryLoad => CommErrorKind::LibraryLoad,
                S::VersionTooOld => CommErrorKind::VersionTooOld,
                S::NotMember => CommErrorKind::NotMember,
                _ => CommErrorKind::Backend,
            },
        };
        let plugin_status = match &e {
            BackendError::Plugin { status, .. } => Some(*status),
            _ => None,
        };
        CommError { plugin_status, ..CommError::new(kind, e.to_string()) }
    }
}

impl From<NcclError> for CommError {
    fn from(e: NcclError) -> Self {
        let kind = match &e {
            NcclError::LibraryNotFound { .. } | NcclError::MissingSymbol { .. } => CommErrorKind::LibraryLoad,
            NcclError::VersionTooOld { .. } => CommErrorKind::VersionTooOld,
            NcclError::Call { .. } => CommErrorKind::Backend,
            NcclError::Timeout { .. } | NcclError::Store { error: StoreError::Timeout { .. }, .. } => {
                CommErrorKind::Timeout
            }
            NcclError::InvalidArgument(_) => CommErrorKind::InvalidArgument,
            NcclError::Store { .. } => CommErrorKind::Store,
            NcclError::Interrupted { .. } => CommErrorKind::PeerFailed,
        };
        CommError::new(kind, e.to_string())
    }
}

/// Device memory a communicator holds, as its backend reports it (NCCL's `ncclCommMemStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommMemory {
    /// Bytes a suspend releases.
    pub suspendable: u64,
    /// Bytes it keeps while suspended.
    pub persistent: u64,
    /// Every byte the backend tracks for it.
    pub total: u64,
    /// Whether the suspendable bytes are released now.
    pub suspended: bool,
}

impl CommMemory {
    /// From NCCL's `ncclCommMemStat_t` numbering (and the plugin ABI's `MCORE_BACKEND_MEM_*`):
    /// suspendable, suspended (0 or not), persistent, total.
    pub fn from_stats([suspendable, suspended, persistent, total]: [u64; 4]) -> Self {
        CommMemory { suspendable, persistent, total, suspended: suspended != 0 }
    }
}

/// What stands in a group's communicator slot while it is suspended: every use is an error
/// naming its kinds ([`CommErrorKind::Suspended`]). `native` holds the communicator its backend
/// suspended (resumed in place); `None` means it was released (recreate mode: a new one is
/// created on resume).
pub struct SuspendedComm {
    /// The kinds sharing the communicator, e.g. `data_parallel, data_parallel_with_cp`.
    pub kinds: String,
    pub native: Option<Box<dyn Communicator>>,
    /// The memory it held before the suspend, when the backend reports it.
    pub memory_before: Option<CommMemory>,
}

impl SuspendedComm {
    fn refused(&self, what: &str) -> CommError {
        CommError::new(
            CommErrorKind::Suspended,
            format!("cannot {what}: the communicator of kind {} is suspended (resume it first)", self.kinds),
        )
    }
}

impl Communicator for SuspendedComm {
    fn allreduce_sum_i64(&mut self, _values: &mut [i64]) -> Result<(), CommError> {
        Err(self.refused("all-reduce"))
    }
    fn barrier(&mut self) -> Result<(), CommError> {
        Err(self.refused("run a barrier"))
    }
    fn raw_handle(&self) -> *mut c_void {
        std::ptr::null_mut()
    }
    fn check_usable(&self) -> Result<(), CommError> {
        Err(self.refused("hand out the handle"))
    }
    fn split(
        &mut self,
        _color: u32,
        _group: Option<&GroupInfo>,
        _options: &CommOptions,
    ) -> Result<Option<Box<dyn Communicator>>, CommError> {
        Err(self.refused("split"))
    }
    fn memory(&self) -> Option<Result<CommMemory, CommError>> {
        self.native.as_ref().and_then(|c| c.memory())
    }
    fn suspension(&mut self) -> Option<&mut SuspendedComm> {
        Some(self)
    }
    fn abort(&mut self) {
        if let Some(c) = self.native.as_mut() {
            c.abort();
        }
    }
}

/// A communicator of one group.
pub trait Communicator: Send {
    /// Sum `values` element-wise over the group, in place.
    fn allreduce_sum_i64(&mut self, values: &mut [i64]) -> Result<(), CommError>;
    /// Wait until every member arrives.
    fn barrier(&mut self) -> Result<(), CommError>;
    /// The backend's own handle (`ncclComm_t`, a Gloo context, ...), for users of the C API.
    fn raw_handle(&self) -> *mut c_void;
    /// Split strategy: a collective over every rank of this communicator. A member passes its
    /// group (ranks ordered as in `group`) and `color`, the group's index among its kind; a
    /// non-member passes `None` and gets `Ok(None)`.
    fn split(
        &mut self,
        color: u32,
        group: Option<&GroupInfo>,
        options: &CommOptions,
    ) -> Result<Option<Box<dyn Communicator>>, CommError> {
        let _ = (color, group, options);
        Err(CommError::new(CommErrorKind::Unsupported, "this communicator cannot be split"))
    }
    /// Recovery: a new communicator of this one's ranks but `exclude` (ranks of this
    /// communicator, which do not call it), collective over the others, within `timeout`. Its
    /// ranks are the remaining ones renumbered in ascending order of their rank here (NCCL's
    /// `ncclCommShrink` rule). `abort_parent`: a peer failed, end this communicator's operations
    /// in flight first (it is aborted afterwards, not used again). `Unsupported` or
    /// `VersionTooOld` (the default): the caller creates a new communicator instead.
    fn shrink(
        &mut self,
        exclude: &[u32],
        options: &CommOptions,
        abort_parent: bool,
        timeout: Duration,
    ) -> Result<Box<dyn Communicator>, CommError> {
        let _ = (exclude, options, abort_parent, timeout);
        Err(CommError::new(CommErrorKind::Unsupported, "this communicator cannot be shrunk"))
    }
    /// Wait until the communicator is usable: a backend that creates communicators together may
    /// hand them out still initializing (see [`CommFactory::create_groups_together`]); the error
    /// says why creation failed (the deadline is the backend's). A no-op for everyone else.
    fn wait_ready(&mut self) -> Result<(), CommError> {
        Ok(())
    }
    /// A peer failed: release what can be released without talking to the peers; the
    /// communicator is not used again (recovery). Default: nothing here, dropping destroys it.
    fn abort(&mut self) {}
    /// Release the communicator's device memory, keeping the communicator (collective over its
    /// members). `Unsupported` or `VersionTooOld` (the default): the runtime releases it and
    /// creates the same one again on resume (recreate mode).
    fn suspend(&mut self) -> Result<(), CommError> {
        Err(CommError::new(CommErrorKind::Unsupported, "this communicator cannot suspend itself"))
    }
    /// This member's vote on how to suspend the communicator, where that depends on this
    /// process's own settings and so could differ between members (suspend is collective: they
    /// must agree): `Ok` native, `Err(why)` its backend would refuse, so recreate. `None` (the
    /// default): the same on every member, no vote needed (the runtime calls
    /// [`Communicator::suspend`] and recreates on `Unsupported`).
    fn suspend_vote(&self) -> Option<Result<(), String>> {
        None
    }
    /// Take back what [`Communicator::suspend`] released (collective over its members).
    fn resume(&mut self) -> Result<(), CommError> {
        Err(CommError::new(CommErrorKind::Unsupported, "this communicator cannot resume itself"))
    }
    /// The device memory it holds, when the backend reports it (`None`: unknown).
    fn memory(&self) -> Option<Result<CommMemory, CommError>> {
        None
    }
    /// `Err` when the communicator must not be used now (suspended), naming why.
    fn check_usable(&self) -> Result<(), CommError> {
        Ok(())
    }
    /// The suspended state, when this is the stand-in of a suspended communicator.
    fn suspension(&mut self) -> Option<&mut SuspendedComm> {
        None
    }
}

/// One group of [`CommFactory::create_groups_together`]: its description, the options of its
/// kind, and its private store.
pub type GroupRequest<'a> = (&'a GroupInfo, &'a CommOptions, Arc<dyn Store>);

/// Creates communicators. `store` is private to the group (already prefixed).
pub trait CommFactory: Send + Sync {
    /// Backend name for messages and the config fingerprint ("gloo", "nccl", ...).
    fn name(&self) -> &str;
    /// Why the split strategy is unavailable (`None`: [`CommFactory::create_world`] and
    /// [`Communicator::split`] work).
    fn split_unavailable(&self) -> Option<String> {
        Some(format!("backend '{}' does not split communicators", self.name()))
    }
    /// Why the per-group strategy is unavailable (`None`: [`CommFactory::create_group`] works).
    fn per_group_unavailable(&self) -> Option<String> {
        None
    }
    /// Whether `auto` should create groups one by one even though the backend can split (its
    /// split costs no less than a group's own creation).
    fn prefers_per_group(&self) -> bool {
        false
    }
    /// Whether a rank's communicators may run a collective each on several threads at once
    /// (independent of each other, as Gloo contexts are; NCCL's on one device are not), so
    /// verification all-reduces them concurrently.
    fn verifies_concurrently(&self) -> bool {
        false
    }
    /// Why the communicators cannot verify themselves with an all-reduce (`None`: they can).
    fn verify_unavailable(&self) -> Option<String> {
        None
    }
    /// Check communicator options before anything is created; the error names the bad value
    /// (the runtime names the kind). Backends without communicator options refuse any.
    fn check_options(&self, options: &CommOptions) -> Result<(), CommError> {
        if options.is_default() {
            Ok(())
        } else {
            Err(CommError::new(
                CommErrorKind::InvalidArgument,
                format!(
                    "backend '{}' takes no communicator options, but {options} are set: they are NCCL's \
                     (use the nccl backend, or drop them)",
                    self.name()
                ),
            ))
        }
    }
    /// Per-group strategy: this rank's communicator of `group`.
    fn create_group(
        &self,
        group: &GroupInfo,
        options: &CommOptions,
        store: Arc<dyn Store>,
    ) -> Result<Box<dyn Communicator>, CommError>;
    /// A peer failed while this process creates or verifies communicators: `on` ends every
    /// blocking call of this backend in flight (creations, collectives, on any thread) with
    /// [`CommErrorKind::PeerFailed`] and fails new ones at once, until it is turned off. Called
    /// from another thread than the calls it ends. Default: nothing (calls run to their deadline).
    fn interrupt(&self, on: bool) {
        let _ = on;
    }
    /// Whether the per-group strategy creates all of a rank's groups at once
    /// ([`CommFactory::create_groups_together`]) instead of one by one ([`CommFactory::create_group`]).
    fn creates_together(&self) -> bool {
        false
    }
    /// Whether [`CommFactory::create_group`] may run on any thread, several at once (each group's
    /// rendezvous independent of the others'): groups made after init are then created in
    /// background threads. Otherwise they are created in the caller's thread, in one global
    /// order (see `runtime::member_groups`). Default false.
    fn creates_in_any_thread(&self) -> bool {
        false
    }
    /// Per-group strategy, all at once: this rank's communicators of `groups`, started together
    /// and returned possibly still initializing ([`Communicator::wait_ready`]), in order. An error
    /// comes with the index of the group it concerns.
    fn create_groups_together(
        &self,
        groups: &[GroupRequest<'_>],
    ) -> Result<Vec<Box<dyn Communicator>>, (usize, CommError)> {
        let _ = groups;
        Err((
            0,
            CommError::new(CommErrorKind::Unsupported, format!("backend '{}' creates groups one by one", self.name())),
        ))
    }
    /// Split strategy: the world communicator, which the groups are split from.
    fn create_world(
        &self,
        world: &GroupInfo,
        options: &CommOptions,
        store: Arc<dyn Store>,
    ) -> Result<Box<dyn Communicator>, CommError> {
        let _ = (world, options, store);
        let why =
            self.split_unavailable().unwrap_or_else(|| format!("backend '{}' has no world communicator", self.name()));
        Err(CommError::new(CommErrorKind::Unsupported, why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An NCCL wait the runtime interrupted (a peer died) is a peer failure, which recovery can
    /// continue from, and says what it waited for.
    #[test]
    fn an_interrupted_nccl_wait_is_a_peer_failure() {
        let e = CommError::from(NcclError::Interrupted { what: "allreduce on group tp/0".into() });
        assert_eq!(e.kind, CommErrorKind::PeerFailed);
        assert!(e.message.contains("a peer failed") && e.message.contains("allreduce on group tp/0"), "{}", e.message);
    }
}
