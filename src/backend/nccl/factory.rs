//! NCCL as the runtime sees a backend: a [`CommFactory`] that creates each group's communicator
//! from a unique id shared through the group's store, and [`Communicator`] for [`NcclComm`].
#![forbid(unsafe_code)]

use super::comm::{Device, NcclComm};
use super::config::NcclConfig;
use super::error::NcclError;
use super::exchange::{share_unique_id, UNIQUE_ID_KEY};
use super::loader::nccl::NcclLibrary;
use crate::backend::GroupInfo;
use crate::runtime::comm::{CommFactory, Communicator};
use crate::store::Store;
use std::ffi::c_void;
use std::sync::Arc;

/// Creates NCCL communicators on one device with one config.
pub struct NcclFactory {
    lib: &'static NcclLibrary,
    device: Device,
    config: NcclConfig,
}

impl NcclFactory {
    pub fn new(lib: &'static NcclLibrary, device: Device, config: NcclConfig) -> Self {
        NcclFactory { lib, device, config }
    }

    /// The process-wide library, device `LOCAL_RANK` (0 when unset), default config.
    pub fn from_env() -> Result<Self, NcclError> {
        let local_rank = match std::env::var("LOCAL_RANK") {
            Ok(v) => v.trim().parse::<i32>().map_err(|_| NcclError::invalid(format!("LOCAL_RANK={v:?} is not a device ordinal")))?,
            Err(_) => 0,
        };
        Ok(Self::new(NcclLibrary::global()?, Device::Ordinal(local_rank), NcclConfig::default()))
    }

    /// This rank's communicator of `group`: its rank 0 makes the unique id and publishes it in
    /// `store` (private to the group), every member initializes within `group.timeout`.
    pub fn create(&self, group: &GroupInfo, store: &dyn Store) -> Result<NcclComm, NcclError> {
        let id = share_unique_id(self.lib, store, UNIQUE_ID_KEY, group.group_rank == 0, &group.name, group.timeout)?;
        let mut comm = NcclComm::init_rank(self.lib, &group.name, &id, group.size(), group.group_rank, self.device, &self.config, group.timeout)?;
        comm.set_op_timeout(group.timeout);
        Ok(comm)
    }
}

impl CommFactory for NcclFactory {
    fn name(&self) -> &str {
        "nccl"
    }

    fn create_group(&self, group: &GroupInfo, store: Arc<dyn Store>) -> Result<Box<dyn Communicator>, String> {
        self.create(group, store.as_ref()).map(|c| Box::new(c) as Box<dyn Communicator>).map_err(|e| e.to_string())
    }
}

impl Communicator for NcclComm {
    fn allreduce_sum_i64(&mut self, values: &mut [i64]) -> Result<(), String> {
        let t = self.op_timeout();
        NcclComm::allreduce_sum_i64(self, values, t).map_err(|e| e.to_string())
    }

    /// NCCL has no barrier: a one-element allreduce.
    fn barrier(&mut self) -> Result<(), String> {
        let t = self.op_timeout();
        NcclComm::allreduce_sum_i64(self, &mut [0], t).map_err(|e| e.to_string())
    }

    fn raw_handle(&self) -> *mut c_void {
        NcclComm::raw_handle(self)
    }
}
