//! The seam between the runtime and the communicator backends: a factory creates one
//! communicator per group; a communicator can verify itself with a collective.

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
}

/// Creates communicators. `store` is private to the group (already prefixed).
pub trait CommFactory: Send + Sync {
    /// Backend name for messages and the config fingerprint ("gloo", "nccl", ...).
    fn name(&self) -> &str;
    fn create_group(&self, group: &GroupInfo, store: Arc<dyn Store>) -> Result<Box<dyn Communicator>, String>;
}
