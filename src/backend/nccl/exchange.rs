//! Handing a group's unique id to its members through the rendezvous store: the group's rank 0
//! makes it and publishes the 128 bytes; the others wait for the key and parse it.
#![forbid(unsafe_code)]

use super::error::NcclError;
use super::loader::nccl::NcclLibrary;
use super::unique_id::NcclUniqueId;
use crate::store::Store;
use std::time::Duration;

/// The store key of a group's unique id (the store is already private to the group).
pub const UNIQUE_ID_KEY: &str = "nccl_unique_id";

/// The id of group `group`: made and published under `key` when `is_root`, else awaited (up to
/// `timeout`) and read. The root process must stay alive until every member has initialized.
pub fn share_unique_id(
    lib: &NcclLibrary,
    store: &dyn Store,
    key: &str,
    is_root: bool,
    group: &str,
    timeout: Duration,
) -> Result<NcclUniqueId, NcclError> {
    if is_root {
        let id = lib.unique_id()?;
        store.set(key, id.as_bytes()).map_err(|error| NcclError::Store {
            what: format!("publishing the NCCL unique id of group {group} under '{key}'"),
            error,
        })?;
        return Ok(id);
    }
    let what = || format!("waiting for the NCCL unique id of group {group} under '{key}' from its rank 0");
    store.wait(&[key], timeout).map_err(|error| NcclError::Store { what: what(), error })?;
    let bytes = store.get(key).map_err(|error| NcclError::Store { what: what(), error })?;
    NcclUniqueId::from_bytes(&bytes).map_err(|e| NcclError::invalid(format!("group {group}, key '{key}': {e}")))
}
