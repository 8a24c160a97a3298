//! The live state of an initialized process ([`Runtime`]) and its getters, and the durations of
//! an initialization's phases ([`InitTimings`]).

use super::init_args::InitArgs;
use crate::backend::CommErrorKind;
use crate::backend::{CommError, CommFactory};
use crate::rng::RankRng;
use crate::runtime::creation::comm_config::CommStrategy;
use crate::runtime::creation::groups::{LiveGroup, PlanKind, SharedComm};
use crate::runtime::creation::member_registry::MemberGroups;
use crate::runtime::creation::plan::Grid;
use crate::runtime::error::RuntimeError;
use crate::runtime::faults::Faults;
use crate::runtime::launch::env::LaunchEnv;
use crate::runtime::launch::host::HostInfo;
use crate::runtime::launch::store_setup::StoreHandles;
use crate::runtime::meeting::keys::KeySpaces;
use crate::runtime::meeting::meet::{MeetError, Meeting};
use crate::store::Store;
use crate::timeout::Deadline;
use crate::topology::{GroupKind, MindSpeedKind, RankView, Topology};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Durations of the phases of one initialization.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct InitTimings {
    pub store: Duration,
    pub checkin: Duration,
    /// Creating every communicator (the world's included, for the split strategy).
    pub groups: Duration,
    /// Of `groups`: creating the split strategy's world communicator.
    pub world: Duration,
    pub verify: Duration,
    pub total: Duration,
}

/// The live state of an initialized process.
pub struct Runtime {
    pub env: LaunchEnv,
    /// The job's grids as this rank sees them; the first is the default grid that
    /// [`Runtime::topology`], [`Runtime::group`] and the Megatron-style getters answer.
    pub grids: Vec<Grid>,
    /// This rank's groups of every grid (each's plan names its grid).
    pub groups: Vec<LiveGroup>,
    pub backend_name: String,
    /// The strategy used (`Auto` resolved).
    pub strategy: CommStrategy,
    pub timings: InitTimings,
    /// Distinct communicators created (aliased kinds share one).
    pub communicators: usize,
    /// This rank's host and the address it advertises to peers (see [`crate::runtime::launch::host`]).
    pub host: HostInfo,
    /// The split strategy's world communicator, released after the groups.
    pub(crate) world: Option<SharedComm>,
    /// This initialization's private view of the store.
    pub(crate) base: Arc<dyn Store>,
    pub(crate) timeout: Duration,
    pub(crate) store: StoreHandles,
    /// What was asked for, and the store prefix of this attempt (recovery re-forms from them).
    pub(crate) args: InitArgs,
    pub(crate) attempt: String,
    /// Who is gone: this rank's liveness, the one dead list and interrupt, the verdict.
    pub(crate) faults: Faults,
    /// Fresh key spaces of the meetings this runtime holds (health checks, resumes).
    pub(crate) key_spaces: KeySpaces,
    /// The backend, which makes the groups made after init (see [`crate::runtime::creation::member_groups`]).
    pub(crate) backend: Arc<dyn CommFactory>,
    /// This rank's groups made after init.
    pub(crate) member_groups: MemberGroups,
}

impl Runtime {
    /// A barrier of every rank of the world named `name` (a fresh meeting each time this rank
    /// calls it with that name), at most `within`: one SET, one ADD and one parked WAIT per
    /// rank. A failure names the ranks that did not come, with their hosts.
    pub fn barrier(&self, name: &str, within: Duration) -> Result<(), RuntimeError> {
        let space = self.key_spaces.next(&format!("barrier/{name}"));
        let what = format!("the barrier {}", crate::quote::quoted(name));
        let members = (0..self.env.world_size).collect();
        let m = Meeting::new(self.base.as_ref(), &space, &what, members, self.env.rank, Deadline::after(within))
            .watching(self.faults.interrupt());
        m.barrier().map_err(|e| match e {
            MeetError::Store(e) => RuntimeError::Store(e),
            MeetError::Missing(m) => {
                let kind = if m.died.is_some() { CommErrorKind::PeerFailed } else { CommErrorKind::Timeout };
                RuntimeError::Comm(CommError::new(kind, m.to_string()))
            }
        })
    }

    /// `e`, a failed collective, with the ranks gone named first (the verdict,
    /// [`crate::runtime::faults`]) when it timed out or lost a peer. The whole world is asked: a
    /// member of the group may be alive but stuck on a rank of another group.
    pub fn explain_collective(&self, e: CommError) -> CommError {
        self.faults.explain(e)
    }

    /// After a recovery: `before[r]` is rank r's number before it.
    pub(crate) fn number_as_before(&self, before: Vec<u32>) {
        self.faults.number_as_before(before);
    }

    /// The default grid's layout.
    pub fn topology(&self) -> &Topology {
        &self.grids[0].topology
    }

    /// This rank's place in the default grid (`None`: the rank is outside its window).
    pub fn view(&self) -> Option<&RankView> {
        self.grids[0].view.as_ref()
    }

    /// This rank's RNG streams of the default grid (when it was seeded).
    pub fn rng(&self) -> Option<&Arc<Mutex<RankRng>>> {
        self.grids[0].rng.as_ref()
    }

    /// The grid called `name`.
    pub fn grid(&self, name: &str) -> Option<&Grid> {
        self.grids.iter().find(|g| g.name == name)
    }

    /// The grid called `name` (`None`: the default grid); an unknown name is an error naming the
    /// job's grids.
    pub fn grid_named(&self, name: Option<&str>) -> Result<&Grid, RuntimeError> {
        let Some(name) = name else { return Ok(&self.grids[0]) };
        self.grid(name).ok_or_else(|| {
            let names: Vec<&str> = self.grids.iter().map(|g| g.name.as_str()).collect();
            RuntimeError::InvalidArgument(format!(
                "no grid named {} (this job's grids: {})",
                crate::quote::quoted(name),
                names.join(", ")
            ))
        })
    }

    /// This rank's group of `kind` in the default grid, if it is a member.
    pub fn group(&self, kind: GroupKind) -> Option<&LiveGroup> {
        self.grid_group(&self.grids[0], kind)
    }

    /// This rank's group of `kind` in `grid`, if it is a member.
    pub fn grid_group(&self, grid: &Grid, kind: GroupKind) -> Option<&LiveGroup> {
        self.groups.iter().find(|g| g.plan.is(&grid.tag, PlanKind::Group(kind)))
    }

    /// This rank's all-gather twin of `kind` (`data_parallel_with_cp` or `expert_data_parallel`)
    /// in the default grid, when initialized with `create_all_gather_groups` and the layout has
    /// that twin.
    pub fn all_gather_group(&self, kind: GroupKind) -> Option<&LiveGroup> {
        self.groups.iter().find(|g| g.plan.is(&self.grids[0].tag, PlanKind::AllGatherTwin(kind)))
    }

    /// This rank's MindSpeed group of `kind` and `copy` (0 but for the hot-expert groups) in the
    /// default grid, when initialized with MindSpeed's options that create it.
    pub fn mindspeed_group(&self, kind: MindSpeedKind, copy: u32) -> Option<&LiveGroup> {
        self.groups.iter().find(|g| g.plan.is(&self.grids[0].tag, PlanKind::MindSpeed(kind, copy)))
    }

    /// This initialization's view of the rendezvous store (keys under its attempt's prefix).
    pub fn store(&self) -> Arc<dyn Store> {
        self.base.clone()
    }

    /// Store requests this process has sent so far (request/response exchanges).
    pub fn store_round_trips(&self) -> u64 {
        self.store.round_trips()
    }

    /// Requests the store server this process hosts (rank 0's) has served so far, from every
    /// rank; None where this process hosts none.
    pub fn store_requests_served(&self) -> Option<u64> {
        self.store.requests_served()
    }
}
