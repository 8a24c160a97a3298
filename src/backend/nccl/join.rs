//! Joining an NCCL communicator from a unique id minted elsewhere (by this process or another
//! program: a rollout engine's weight-sync group), with no rendezvous store: every rank enters
//! `ncclCommInitRankConfig` with the same 128 bytes, world size and its own rank. The join has
//! the deadline of our own groups (non-blocking init polled, aborted on expiry), an optional
//! warm-up all-reduce inside it, and NCCL's implicit launch order set where the library has it.
#![forbid(unsafe_code)]

use super::comm::{Device, NcclComm};
use super::config::{config_field, NcclConfig};
use super::error::NcclError;
use super::loader::nccl::NcclLibrary;
use super::unique_id::NcclUniqueId;
use crate::backend::options::OptionValue;
use std::time::{Duration, Instant};

/// `ncclConfig_t.launchOrderImplicit` for a joined group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LaunchOrder {
    /// On where the loaded NCCL has the per-communicator field (2.31+); older ones are left at
    /// their default (`NCCL_LAUNCH_ORDER_IMPLICIT`, 2.26+, still applies).
    #[default]
    Default,
    /// Asked for: set, or left out with a warning naming the version on an older NCCL.
    On,
    /// Set to 0 where the library has the field.
    Off,
}

/// What a rank needs to join: the group's name (messages, `commName`), the id, the world size,
/// this rank, the device, the deadline, the warm-up and the launch order.
#[derive(Debug, Clone)]
pub struct JoinSpec {
    pub name: String,
    pub id: NcclUniqueId,
    pub world_size: u32,
    pub rank: u32,
    pub device: Device,
    pub timeout: Duration,
    /// Run vLLM's warm-up right after the init: a one-element float32 all-reduce of 0.0, which
    /// every rank of its weight-sync group issues (a peer that skips it deadlocks the others).
    pub warmup: bool,
    pub launch_order: LaunchOrder,
}

/// The config of a joined group: non-blocking (the deadline), named, launch order as asked.
pub fn join_config(lib: &NcclLibrary, spec: &JoinSpec) -> NcclConfig {
    let mut config = NcclConfig { default_name: Some(spec.name.clone()), ..NcclConfig::default() };
    let since = config_field("launch_order_implicit").expect("in the field table").since;
    let value = match spec.launch_order {
        LaunchOrder::Default if lib.version() >= since => Some(1),
        LaunchOrder::Default => None,
        LaunchOrder::On => Some(1),
        LaunchOrder::Off => (lib.version() >= since).then_some(0),
    };
    if let Some(v) = value {
        config.more.insert("launch_order_implicit".into(), OptionValue::Int(v));
    }
    config
}

/// Join as `spec.rank` of `spec.world_size` within `spec.timeout` (init and warm-up together).
/// A rank that never comes ends the wait at the deadline with [`NcclError::Timeout`] naming the
/// group and its size (NCCL does not say which ranks arrived); the communicator is aborted on
/// any failure, so nothing stale is left and a new id can be joined at once.
pub fn join(lib: &'static NcclLibrary, spec: &JoinSpec) -> Result<NcclComm, NcclError> {
    let start = Instant::now();
    let config = join_config(lib, spec);
    let (n, r, name) = (spec.world_size, spec.rank, &spec.name);
    let mut comm =
        NcclComm::init_rank(lib, name, &spec.id, n, r, spec.device, &config, spec.timeout).map_err(|e| match e {
            NcclError::Timeout { deadline, .. } => NcclError::Timeout {
                what: format!(
                    "all {n} ranks of group {name} to enter ncclCommInitRank with its unique id (this process is \
                     rank {r}; NCCL does not report how many of them arrived; the communicator was aborted, and a \
                     new id can be joined)"
                ),
                deadline,
            },
            other => other,
        })?;
    comm.set_op_timeout(spec.timeout);
    if spec.warmup {
        let left = spec.timeout.saturating_sub(start.elapsed());
        if let Err(e) = comm.allreduce_sum_f32(&mut [0.0], left) {
            let _ = comm.abort();
            return Err(match e {
                NcclError::Timeout { .. } => NcclError::Timeout {
                    what: format!(
                        "the warm-up of group {name} (a one-element float all-reduce every rank issues right after \
                         joining) within the join's deadline (the communicator was aborted)"
                    ),
                    deadline: spec.timeout,
                },
                // Names the float all-reduce and the group already.
                other => other,
            });
        }
    }
    Ok(comm)
}
