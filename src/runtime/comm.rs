//! The seam between the runtime and the communicator backends: a factory creates one
//! communicator per group (per-group strategy) or a world communicator that splits (split
//! strategy); a communicator can verify itself with a collective.

use super::comm_config::CommOptions;
use crate::backend::GroupInfo;
use crate::store::Store;
use std::ffi::c_void;
use std::sync::Arc;

/// A communicator of one group.
pub trait Communicator: Send {
    /// Sum `values` element-wise over the group, in place.
    fn allreduce_sum_i64(&mut self, values: &mut [i64]) -> Result<(), String>;
    /// Wait until every member arrives.
    fn barrier(&mut self) -> Result<(), String>;
    /// The backend's own handle (`ncclComm_t`, a Gloo context, ...), for users of the C API.
    fn raw_handle(&self) -> *mut c_void;
    /// Split strategy: a collective over every rank of this communicator. A member passes its
    /// group (ranks ordered as in `group`) and `color`, the group's index among its kind; a
    /// non-member passes `None` and gets `Ok(None)`.
    fn split(&mut self, color: u32, group: Option<&GroupInfo>, options: &CommOptions) -> Result<Option<Box<dyn Communicator>>, String> {
        let _ = (color, group, options);
        Err("this communicator cannot be split".into())
    }
    /// Wait until the communicator is usable: a backend that creates communicators together may
    /// hand them out still initializing (see [`CommFactory::create_groups_together`]); the error
    /// says why creation failed (the deadline is the backend's). A no-op for everyone else.
    fn wait_ready(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// A peer failed: release what can be released without talking to the peers; the
    /// communicator is not used again (recovery). Default: nothing here, dropping destroys it.
    fn abort(&mut self) {}
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
    /// Check `options` of the groups of `kind` before anything is created; the error names the
    /// bad value. Backends without communicator options refuse any.
    fn check_options(&self, kind: &str, options: &CommOptions) -> Result<(), String> {
        if options.is_default() {
            Ok(())
        } else {
            Err(format!(
                "backend '{}' takes no communicator options, but {kind} sets {options}: \
                 they are NCCL's (use the nccl backend, or drop them)",
                self.name()
            ))
        }
    }
    /// Per-group strategy: this rank's communicator of `group`.
    fn create_group(&self, group: &GroupInfo, options: &CommOptions, store: Arc<dyn Store>) -> Result<Box<dyn Communicator>, String>;
    /// Whether the per-group strategy creates all of a rank's groups at once
    /// ([`CommFactory::create_groups_together`]) instead of one by one ([`CommFactory::create_group`]).
    fn creates_together(&self) -> bool {
        false
    }
    /// Per-group strategy, all at once: this rank's communicators of `groups`, started together
    /// and returned possibly still initializing ([`Communicator::wait_ready`]), in order. An error
    /// comes with the index of the group it concerns.
    fn create_groups_together(&self, groups: &[GroupRequest<'_>]) -> Result<Vec<Box<dyn Communicator>>, (usize, String)> {
        let _ = groups;
        Err((0, format!("backend '{}' creates groups one by one", self.name())))
    }
    /// Split strategy: the world communicator, which the groups are split from.
    fn create_world(&self, world: &GroupInfo, options: &CommOptions, store: Arc<dyn Store>) -> Result<Box<dyn Communicator>, String> {
        let _ = (world, options, store);
        Err(self.split_unavailable().unwrap_or_else(|| format!("backend '{}' has no world communicator", self.name())))
    }
}
