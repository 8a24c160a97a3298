//! Vtable backends behind the seam: a `Backend` is a [`CommFactory`], a `Comm` a
//! [`Communicator`].

use super::seam::{CommError, CommErrorKind, CommFactory, CommMemory, Communicator, GroupRequest};
use super::{Backend, Comm, CommOptions, GroupInfo};
use crate::store::Store;
use std::ffi::c_void;
use std::sync::Arc;

impl CommFactory for Backend {
    fn name(&self) -> &str {
        Backend::name(self)
    }

    fn split_unavailable(&self) -> Option<String> {
        (!self.supports_split()).then(|| format!("backend '{}' fills no create_world and split slots", self.name()))
    }

    fn per_group_unavailable(&self) -> Option<String> {
        (!self.supports_create_group()).then(|| format!("backend '{}' fills no create_group slot", self.name()))
    }

    fn prefers_per_group(&self) -> bool {
        Backend::prefers_per_group(self)
    }

    fn verify_unavailable(&self) -> Option<String> {
        (!self.supports_allreduce()).then(|| format!("backend '{}' fills no allreduce_sum_i64 slot", self.name()))
    }

    /// A plugin that sets `MCORE_BACKEND_FLAG_TAKES_OPTIONS` takes any options: they reach it as
    /// `key=value` lines ([`GroupInfo::with_options`]) and it applies the keys it knows. Others
    /// refuse every option.
    fn check_options(&self, options: &CommOptions) -> Result<(), CommError> {
        if self.takes_options() || options.is_default() {
            return Ok(());
        }
        Err(CommError::new(
            CommErrorKind::InvalidArgument,
            format!(
                "backend '{}' takes no communicator options (its vtable sets no MCORE_BACKEND_FLAG_TAKES_OPTIONS),                  but {options} are set (use the nccl or hccl backend, or drop them)",
                self.name()
            ),
        ))
    }

    fn create_group(
        &self,
        group: &GroupInfo,
        options: &CommOptions,
        store: Arc<dyn Store>,
    ) -> Result<Box<dyn Communicator>, CommError> {
        Backend::create_group(self, &group.clone().with_options(options), store)
            .map(|c| Box::new(c) as Box<dyn Communicator>)
            .map_err(CommError::from)
    }

    /// The backend's `interrupt` slot.
    fn interrupt(&self, on: bool) {
        Backend::interrupt(self, on)
    }

    /// A backend whose `create_group` may run on several threads creates a rank's groups together.
    fn creates_together(&self) -> bool {
        self.creates_concurrently() && self.supports_create_group()
    }

    /// `MCORE_BACKEND_FLAG_CONCURRENT_CREATE`: `create_group` may run on any thread, several at once.
    fn creates_in_any_thread(&self) -> bool {
        self.creates_concurrently() && self.supports_create_group()
    }

    fn verifies_concurrently(&self) -> bool {
        self.creates_concurrently()
    }

    /// One thread per group, each calling `create_group`; the communicators come back ready.
    fn create_groups_together(
        &self,
        groups: &[GroupRequest<'_>],
    ) -> Result<Vec<Box<dyn Communicator>>, (usize, CommError)> {
        let results: Vec<_> = std::thread::scope(|s| {
            let threads: Vec<_> = groups
                .iter()
                .map(|(group, options, store)| {
                    s.spawn(move || CommFactory::create_group(self, group, options, store.clone()))
                })
                .collect();
            threads
                .into_iter()
                .map(|t| {
                    t.join().unwrap_or_else(|_| {
                        Err(CommError::new(CommErrorKind::Backend, "a communicator creation thread panicked"))
                    })
                })
                .collect()
        });
        // The first failure in plan order names its group; the communicators made are dropped.
        results.into_iter().enumerate().map(|(i, r)| r.map_err(|e| (i, e))).collect()
    }

    fn create_world(
        &self,
        world: &GroupInfo,
        options: &CommOptions,
        store: Arc<dyn Store>,
    ) -> Result<Box<dyn Communicator>, CommError> {
        Backend::create_world(self, &world.clone().with_options(options), store)
            .map(|c| Box::new(c) as Box<dyn Communicator>)
            .map_err(CommError::from)
    }
}

impl Communicator for Comm {
    fn allreduce_sum_i64(&mut self, values: &mut [i64]) -> Result<(), CommError> {
        Comm::allreduce_sum_i64(self, values).map_err(CommError::from)
    }

    fn barrier(&mut self) -> Result<(), CommError> {
        Comm::barrier(self).map_err(CommError::from)
    }

    fn raw_handle(&self) -> *mut c_void {
        Comm::raw_handle(self)
    }

    fn abort(&mut self) {
        let _ = Comm::abort(self);
    }

    /// The backend's `suspend` slot (NULL: `Unsupported`, the runtime then recreates).
    fn suspend(&mut self) -> Result<(), CommError> {
        Comm::suspend(self).map_err(CommError::from)
    }

    fn resume(&mut self) -> Result<(), CommError> {
        Comm::resume(self).map_err(CommError::from)
    }

    /// The backend's `mem_stat` slot, `MCORE_BACKEND_MEM_*` in NCCL's numbering.
    fn memory(&self) -> Option<Result<CommMemory, CommError>> {
        Comm::memory(self).map(|r| r.map(CommMemory::from_stats).map_err(CommError::from))
    }

    /// The backend's `shrink` slot (NULL: `Unsupported`, recovery then creates a new world).
    fn shrink(
        &mut self,
        exclude: &[u32],
        _: &CommOptions,
        abort_parent: bool,
        timeout: std::time::Duration,
    ) -> Result<Box<dyn Communicator>, CommError> {
        Comm::shrink(self, exclude, abort_parent, timeout)
            .map(|c| Box::new(c) as Box<dyn Communicator>)
            .map_err(CommError::from)
    }

    /// The key is the member's group rank, so the child orders ranks as `group` does.
    fn split(
        &mut self,
        color: u32,
        group: Option<&GroupInfo>,
        options: &CommOptions,
    ) -> Result<Option<Box<dyn Communicator>>, CommError> {
        let key = group.map_or(0, |g| g.group_rank as i32);
        let group = group.map(|g| g.clone().with_options(options));
        Comm::split(self, color, key, group.as_ref())
            .map(|c| c.map(|c| Box::new(c) as Box<dyn Communicator>))
            .map_err(CommError::from)
    }
}
