//! Groups joined from unique-id bytes (docs/id-groups.md): a backend's unique id minted through
//! the loaded library, and a communicator joined from (backend, id bytes, world size, rank) with
//! no rendezvous store and no mcore_init runtime, in this process or on the other ranks. This is
//! how a trainer joins a rollout engine's weight-sync group (vLLM's UID mode: the trainer mints
//! the id, posts it in base64, and is rank 0 of the workers' communicator).
//!
//! Only NCCL has such ids here. The plugin ABI has no slot for them (a Gloo context is made from
//! a store, not an id; HCCL's root info could be, but vllm-ascend accepts only its TCP-store
//! mode, whose pickled root info is a Python-only contract): another backend is `Unsupported`,
//! naming why.
#![forbid(unsafe_code)]

use super::nccl::{JoinSpec, NcclComm, NcclLibrary};
use super::seam::{CommError, CommErrorKind};
use crate::lock::Unpoisoned;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The backend whose ids this module makes and joins.
pub const ID_BACKEND: &str = "nccl";

fn unsupported(backend: &str) -> CommError {
    CommError::new(
        CommErrorKind::Unsupported,
        format!(
            "backend {} has no unique ids to join a group from: only \"{ID_BACKEND}\" has (a plugin's vtable has no \
             slot for them; Gloo groups come from a store)",
            crate::quote::quoted(backend)
        ),
    )
}

/// A new unique id of `backend` (NCCL: 128 bytes, `ncclGetUniqueId`, which needs no GPU). The
/// process that mints it hosts the group's bootstrap root: it must live until every rank joined.
pub fn mint_unique_id(backend: &str) -> Result<Vec<u8>, CommError> {
    if backend != ID_BACKEND {
        return Err(unsupported(backend));
    }
    let lib = NcclLibrary::global()?;
    Ok(lib.unique_id()?.to_bytes().to_vec())
}

/// A group joined from an id: its communicator until destroyed, behind a lock (one collective at
/// a time, in the caller's thread).
pub struct IdGroup {
    name: String,
    size: u32,
    rank: u32,
    timeout: Duration,
    comm: Mutex<Option<NcclComm>>,
}

/// Join `backend`'s group from `spec` (see [`crate::backend::nccl::join::join`]): within
/// `spec.timeout`, init and warm-up together; on failure nothing is left behind.
pub fn join(backend: &str, spec: &JoinSpec) -> Result<IdGroup, CommError> {
    if backend != ID_BACKEND {
        return Err(unsupported(backend));
    }
    let lib = NcclLibrary::global()?;
    let comm = super::nccl::join::join(lib, spec)?;
    Ok(IdGroup {
        name: spec.name.clone(),
        size: spec.world_size,
        rank: spec.rank,
        timeout: spec.timeout,
        comm: Mutex::new(Some(comm)),
    })
}

impl IdGroup {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The deadline of each collective (the join's).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn live(&self) -> Result<MutexGuard<'_, Option<NcclComm>>, CommError> {
        let guard = self.comm.locked();
        if guard.is_none() {
            return Err(CommError::new(
                CommErrorKind::InvalidArgument,
                format!("group {} was destroyed (join it again with a new id)", self.name),
            ));
        }
        Ok(guard)
    }

    fn with<T>(&self, f: impl FnOnce(&mut NcclComm) -> Result<T, super::nccl::NcclError>) -> Result<T, CommError> {
        let mut guard = self.live()?;
        f(guard.as_mut().expect("checked by live")).map_err(CommError::from)
    }

    /// The `ncclComm_t`, owned by this group until [`IdGroup::destroy`].
    pub fn raw_handle(&self) -> Result<*mut c_void, CommError> {
        self.with(|c| Ok(c.raw_handle()))
    }

    /// Sum `values` over the group, in place, within the join's timeout.
    pub fn allreduce_sum_i64(&self, values: &mut [i64]) -> Result<(), CommError> {
        self.with(|c| c.allreduce_sum_i64(values, self.timeout))
    }

    /// Broadcast `data` from group rank `root`, in place, within the join's timeout.
    pub fn broadcast_bytes(&self, data: &mut [u8], root: u32) -> Result<(), CommError> {
        self.with(|c| c.broadcast_bytes(data, root, self.timeout))
    }

    /// Release the communicator (flush within the timeout and destroy; abort when it failed or
    /// any communicator of this process was aborted). Later calls say it was destroyed; a second
    /// destroy is a no-op.
    pub fn destroy(&self) -> Result<(), CommError> {
        let comm = self.comm.locked().take();
        match comm {
            Some(c) => c.destroy(self.timeout).map_err(CommError::from),
            None => Ok(()),
        }
    }
}
