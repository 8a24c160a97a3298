//! Safe handles over a registered backend and the communicators it creates.

use super::plugin::{RawComm, Vtable};
use super::{BackendError, GroupInfo};
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;

/// A registered backend. Cheap to clone; the plugin is finalized when the backend is
/// unregistered and its last [`Comm`] is gone.
#[derive(Clone)]
pub struct Backend {
    vt: Arc<Vtable>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend").field("name", &self.name()).finish()
    }
}

impl Backend {
    pub(crate) fn new(vt: Arc<Vtable>) -> Self {
        Backend { vt }
    }

    /// The backend's name (e.g. `gloo`).
    pub fn name(&self) -> &str {
        self.vt.name()
    }

    /// Whether it creates a group directly (per-group strategy, `create_group`).
    pub fn supports_create_group(&self) -> bool {
        self.vt.has_create_group()
    }

    /// Whether it splits groups off a world communicator (`create_world` + `split`).
    pub fn supports_split(&self) -> bool {
        self.vt.has_split()
    }

    /// Whether it asks for the per-group strategy under `auto` (`MCORE_BACKEND_FLAG_PREFER_PER_GROUP`).
    pub fn prefers_per_group(&self) -> bool {
        self.vt.prefers_per_group()
    }

    /// Whether `create_group` may run on several threads at once (`MCORE_BACKEND_FLAG_CONCURRENT_CREATE`).
    pub fn creates_concurrently(&self) -> bool {
        self.vt.creates_concurrently()
    }

    /// Whether it applies the per-kind options it is given (`MCORE_BACKEND_FLAG_TAKES_OPTIONS`).
    pub fn takes_options(&self) -> bool {
        self.vt.takes_options()
    }

    /// Whether it places communicators on the device it is given (`MCORE_BACKEND_FLAG_TAKES_DEVICE`).
    pub fn takes_device(&self) -> bool {
        self.vt.takes_device()
    }

    /// Whether its communicators can all-reduce (`allreduce_sum_i64`), which verification needs.
    pub fn supports_allreduce(&self) -> bool {
        self.vt.has_allreduce()
    }

    /// End (`on`) every call in flight of this backend and fail new ones until turned off (the
    /// `interrupt` slot; nothing without it).
    pub fn interrupt(&self, on: bool) {
        self.vt.interrupt(on)
    }

    fn wrap(&self, raw: RawComm, group: &GroupInfo) -> Comm {
        Comm::wrap(self.vt.clone(), raw, group)
    }

    /// This rank's communicator for `group` (per-group strategy). `store` must be a key space
    /// private to the group (a prefix store); every member calls this with an equal `group.name`.
    pub fn create_group(&self, group: &GroupInfo, store: Arc<dyn Store>) -> Result<Comm, BackendError> {
        let raw = self.vt.create_group(group, store)?;
        Ok(self.wrap(raw, group))
    }

    /// The world communicator (split strategy).
    pub fn create_world(&self, world: &GroupInfo, store: Arc<dyn Store>) -> Result<Comm, BackendError> {
        let raw = self.vt.create_world(world, store)?;
        Ok(self.wrap(raw, world))
    }

    /// Split `parent` (collective over all its ranks): `group` is this rank's group and `color`
    /// its index among the groups of that kind, or `None` when this rank joins no group of it.
    pub fn split(
        &self,
        parent: &mut Comm,
        color: u32,
        key: i32,
        group: Option<&GroupInfo>,
    ) -> Result<Option<Comm>, BackendError> {
        if !Arc::ptr_eq(&self.vt, &parent.vt) {
            return Err(BackendError::InvalidArgument(format!(
                "cannot split communicator of group '{}' with backend '{}': it belongs to backend '{}'",
                parent.group,
                self.name(),
                parent.vt.name()
            )));
        }
        parent.split(color, key, group)
    }
}

/// One communicator: the group it belongs to and this rank's place in it. Destroyed on drop
/// (errors ignored there; call [`Comm::destroy`] to see them).
pub struct Comm {
    vt: Arc<Vtable>,
    raw: Option<RawComm>,
    group: String,
    rank: u32,
    size: u32,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("backend", &self.vt.name())
            .field("group", &self.group)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

impl Comm {
    fn wrap(vt: Arc<Vtable>, raw: RawComm, group: &GroupInfo) -> Comm {
        Comm { vt, raw: Some(raw), group: group.name.clone(), rank: group.group_rank, size: group.size() }
    }

    fn raw_mut(&mut self) -> Result<&mut RawComm, BackendError> {
        let group = &self.group;
        self.raw
            .as_mut()
            .ok_or_else(|| BackendError::InvalidArgument(format!("communicator of group '{group}' was destroyed")))
    }

    /// Split this communicator with its own backend (collective over all its ranks): `group`
    /// is this rank's group and `color` its index among the groups of that kind, or `None`
    /// (color -1) when this rank joins no group of it.
    pub fn split(&mut self, color: u32, key: i32, group: Option<&GroupInfo>) -> Result<Option<Comm>, BackendError> {
        let vt = self.vt.clone();
        let parent_name = self.group.clone();
        let out = vt.split(self.raw_mut()?, &parent_name, color, key, group)?;
        Ok(match (out, group) {
            (Some(raw), Some(g)) => Some(Comm::wrap(vt, raw, g)),
            (Some(raw), None) => {
                // A backend that returns a communicator for a non-member: release it.
                let _ = vt.destroy_comm(raw, &parent_name);
                None
            }
            (None, _) => None,
        })
    }

    /// The group's unique name.
    pub fn group_name(&self) -> &str {
        &self.group
    }

    /// This rank's index in the group.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks in the group.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The backend's own communicator handle (what its `create_*` slot returned), or NULL once
    /// destroyed. Valid until [`Comm::destroy`] or drop.
    pub fn raw_handle(&self) -> *mut std::ffi::c_void {
        self.raw.as_ref().map_or(std::ptr::null_mut(), RawComm::as_ptr)
    }

    /// The backend's name.
    pub fn backend_name(&self) -> &str {
        self.vt.name()
    }

    /// In-place sum of `data` over the group's ranks.
    pub fn allreduce_sum_i64(&mut self, data: &mut [i64]) -> Result<(), BackendError> {
        let vt = self.vt.clone();
        let group = self.group.clone();
        vt.allreduce_sum_i64(self.raw_mut()?, &group, data)
    }

    /// Block until every rank of the group arrives.
    pub fn barrier(&mut self) -> Result<(), BackendError> {
        let vt = self.vt.clone();
        let group = self.group.clone();
        vt.barrier(self.raw_mut()?, &group)
    }

    /// A new communicator of this one's ranks but `exclude` (ranks of this communicator; they do
    /// not call it), collective over the others: the backend's `shrink` (`Unsupported` without
    /// one). The remaining ranks are renumbered in ascending order; the new communicator keeps
    /// this one's name and takes over its store. `abort_parent`: a peer failed (abort this one
    /// afterwards).
    pub fn shrink(&mut self, exclude: &[u32], abort_parent: bool, timeout: Duration) -> Result<Comm, BackendError> {
        let mut excluded = exclude.to_vec();
        excluded.sort_unstable();
        excluded.dedup();
        if let Some(&r) = excluded.iter().find(|&&r| r >= self.size || r == self.rank) {
            return Err(BackendError::InvalidArgument(format!(
                "shrink of group '{}': excluded rank {r} is {} (this rank is {} of {})",
                self.group,
                if r == self.rank { "this rank, which must not call shrink" } else { "not a rank of the group" },
                self.rank,
                self.size
            )));
        }
        let size = self.size - excluded.len() as u32;
        let rank = self.rank - excluded.partition_point(|&r| r < self.rank) as u32;
        let group = GroupInfo::new(&self.group, (0..size).collect(), rank, timeout)?;
        let vt = self.vt.clone();
        let name = self.group.clone();
        let raw = vt.shrink(self.raw_mut()?, &name, &excluded, abort_parent, &group)?;
        Ok(Comm::wrap(vt, raw, &group))
    }

    /// Release the device memory, keeping the communicator (the backend's `suspend`;
    /// `Unsupported` without one).
    pub fn suspend(&mut self) -> Result<(), BackendError> {
        let vt = self.vt.clone();
        let group = self.group.clone();
        vt.suspend(self.raw_mut()?, &group)
    }

    /// Take back what [`Comm::suspend`] released (the backend's `resume`).
    pub fn resume(&mut self) -> Result<(), BackendError> {
        let vt = self.vt.clone();
        let group = self.group.clone();
        vt.resume(self.raw_mut()?, &group)
    }

    /// `[suspendable, suspended, persistent, total]` through the backend's `mem_stat`; `None`
    /// without one (or once released).
    pub fn memory(&self) -> Option<Result<[u64; 4], BackendError>> {
        let raw = self.raw.as_ref()?;
        let mut out = [0u64; 4];
        for (i, slot) in out.iter_mut().enumerate() {
            match self.vt.mem_stat(raw, &self.group, i as i32)? {
                Ok(v) => *slot = v,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(out))
    }

    /// Release the communicator after a peer failed (the backend's `abort_comm`, else its
    /// `destroy_comm`); the communicator is unusable afterwards.
    pub fn abort(&mut self) -> Result<(), BackendError> {
        match self.raw.take() {
            Some(raw) => self.vt.abort_comm(raw, &self.group),
            None => Ok(()),
        }
    }

    /// Release the communicator, reporting the backend's error if any.
    pub fn destroy(mut self) -> Result<(), BackendError> {
        match self.raw.take() {
            Some(raw) => self.vt.destroy_comm(raw, &self.group),
            None => Ok(()),
        }
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            let _ = self.vt.destroy_comm(raw, &self.group);
        }
    }
}
