//! NCCL as the runtime sees a backend: a [`CommFactory`] that creates a communicator (one group's,
//! or the world's for the split strategy) from a unique id shared through the group's store, and
//! [`Communicator`] for [`NcclComm`], which splits with `ncclCommSplit`. Per-kind options become
//! the `ncclConfig_t` of the kind's communicators.
#![forbid(unsafe_code)]

use super::comm::{Device, NcclComm};
use super::config::NcclConfig;
use super::error::NcclError;
use super::exchange::{share_unique_id, UNIQUE_ID_KEY};
use super::loader::nccl::NcclLibrary;
use super::version::Feature;
use crate::backend::GroupInfo;
use crate::runtime::comm::{CommFactory, Communicator};
use crate::runtime::comm_config::CommOptions;
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

    /// The process-wide library, default config, on `device` if given, else device `LOCAL_RANK`
    /// (0 when unset).
    pub fn from_env(device: Option<u32>) -> Result<Self, NcclError> {
        let ordinal = match (device, std::env::var("LOCAL_RANK")) {
            (Some(d), _) => i32::try_from(d).map_err(|_| NcclError::invalid(format!("device {d} is not a CUDA device ordinal")))?,
            (None, Ok(v)) => v.trim().parse::<i32>().map_err(|_| NcclError::invalid(format!("LOCAL_RANK={v:?} is not a device ordinal")))?,
            (None, Err(_)) => 0,
        };
        Ok(Self::new(NcclLibrary::global()?, Device::Ordinal(ordinal), NcclConfig::default()))
    }

    /// This rank's communicator of `group`: its rank 0 makes the unique id and publishes it in
    /// `store` (private to the group), every member initializes within `group.timeout`.
    pub fn create(&self, group: &GroupInfo, store: &dyn Store) -> Result<NcclComm, NcclError> {
        self.create_with(group, &self.config, store)
    }

    fn create_with(&self, group: &GroupInfo, config: &NcclConfig, store: &dyn Store) -> Result<NcclComm, NcclError> {
        let id = share_unique_id(self.lib, store, UNIQUE_ID_KEY, group.group_rank == 0, &group.name, group.timeout)?;
        let mut comm = NcclComm::init_rank(self.lib, &group.name, &id, group.size(), group.group_rank, self.device, config, group.timeout)?;
        comm.set_op_timeout(group.timeout);
        Ok(comm)
    }
}

/// `base` with the options a kind sets replacing its values.
pub fn with_options(base: &NcclConfig, o: &CommOptions) -> NcclConfig {
    NcclConfig {
        blocking: base.blocking,
        cga_cluster_size: o.cga_cluster_size.or(base.cga_cluster_size),
        min_ctas: o.min_ctas.or(base.min_ctas),
        max_ctas: o.max_ctas.or(base.max_ctas),
        net_name: o.net_name.clone().or_else(|| base.net_name.clone()),
        split_share: o.split_share.unwrap_or(base.split_share),
    }
}

impl CommFactory for NcclFactory {
    fn name(&self) -> &str {
        "nccl"
    }

    /// `ncclCommSplit` needs NCCL 2.18; the message names the loaded version.
    fn split_unavailable(&self) -> Option<String> {
        self.lib.require(Feature::CommSplit).err().map(|e| e.to_string())
    }

    fn check_options(&self, kind: &str, options: &CommOptions) -> Result<(), String> {
        with_options(&self.config, options).validate().map_err(|e| match e {
            NcclError::InvalidArgument(m) => format!("communicator options of {kind}: {m}"),
            other => format!("communicator options of {kind}: {other}"),
        })
    }

    fn create_group(&self, group: &GroupInfo, options: &CommOptions, store: Arc<dyn Store>) -> Result<Box<dyn Communicator>, String> {
        let config = with_options(&self.config, options);
        self.create_with(group, &config, store.as_ref()).map(|c| Box::new(c) as Box<dyn Communicator>).map_err(|e| e.to_string())
    }

    fn create_world(&self, world: &GroupInfo, options: &CommOptions, store: Arc<dyn Store>) -> Result<Box<dyn Communicator>, String> {
        self.create_group(world, options, store)
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

    /// `ncclCommSplit` with the member's group rank as key (so the child orders ranks as `group`
    /// does), non-members passing `NCCL_SPLIT_NOCOLOR`; the child's config is this one's with the
    /// kind's options.
    fn split(&mut self, color: u32, group: Option<&GroupInfo>, options: &CommOptions) -> Result<Option<Box<dyn Communicator>>, String> {
        let config = with_options(self.config(), options);
        let timeout = group.map_or(self.op_timeout(), |g| g.timeout);
        let name = group.map_or_else(|| format!("(no group of this kind, split of {})", self.group()), |g| g.name.clone());
        let child = NcclComm::split(self, &name, group.map(|_| color), group.map_or(0, |g| g.group_rank), Some(&config), timeout)
            .map_err(|e| e.to_string())?;
        if let (Some(c), Some(g)) = (&child, group) {
            if (c.size(), c.rank()) != (g.size(), g.group_rank) {
                return Err(format!(
                    "ncclCommSplit gave group {} {} ranks with this one at {}, the layout says {} at {}",
                    g.name, c.size(), c.rank(), g.size(), g.group_rank
                ));
            }
        }
        Ok(child.map(|c| Box::new(c) as Box<dyn Communicator>))
    }
}
