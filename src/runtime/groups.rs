//! Creating this rank's communicators from its group plan, and verifying them.
//!
//! Every group kind partitions the ranks it covers, so for a member set M the first kind (in
//! the plan's rank-independent kind order) whose group is M is the same on every member of M.
//! Kinds whose groups have identical members (Megatron aliases, e.g. `data_parallel` and
//! `data_parallel_with_cp` when cp = 1) therefore share one communicator, named after that kind.

use super::comm::{CommFactory, Communicator};
use crate::backend::GroupInfo;
use crate::store::Store;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One group of this rank, as the topology lays it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    /// Group-kind key (DESIGN.md), e.g. `tensor_model_parallel`.
    pub kind: String,
    /// Index of the group among the groups of its kind (rank-independent).
    pub index: u32,
    /// Members in communicator order (ascending).
    pub members: Vec<u32>,
}

/// A communicator shared by every kind whose group has the same members.
pub type SharedComm = Arc<Mutex<Box<dyn Communicator>>>;

/// A created group of this rank.
pub struct LiveGroup {
    pub plan: GroupPlan,
    pub group_rank: u32,
    /// Name of the communicator (`<kind>/<index>` of the first kind with these members).
    pub comm_name: String,
    pub comm: SharedComm,
}

/// Why creating or verifying a group failed; names the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupError {
    pub group: String,
    pub members: Vec<u32>,
    pub message: String,
}

impl std::fmt::Display for GroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "group {} (ranks {}): {}",
            self.group,
            super::checkin::format_ranks(&self.members),
            self.message
        )
    }
}

impl std::error::Error for GroupError {}

/// Create the communicators of `plan` on `rank`. `store_for(name)` gives the store private to
/// the communicator called `name`.
pub fn create_groups(
    plan: &[GroupPlan],
    rank: u32,
    factory: &dyn CommFactory,
    store_for: &dyn Fn(&str) -> Arc<dyn Store>,
    timeout: Duration,
) -> Result<Vec<LiveGroup>, GroupError> {
    let mut by_members: HashMap<&[u32], (String, SharedComm)> = HashMap::new();
    let mut live = Vec::with_capacity(plan.len());
    for p in plan {
        let name = format!("{}/{}", p.kind, p.index);
        let fail = |message: String| GroupError { group: name.clone(), members: p.members.clone(), message };
        let info = GroupInfo::new(name.clone(), p.members.clone(), rank, timeout).map_err(|e| fail(e.to_string()))?;
        let group_rank = info.group_rank;
        let (comm_name, comm) = match by_members.get(p.members.as_slice()) {
            Some(shared) => shared.clone(),
            None => {
                let comm = factory.create_group(&info, store_for(&name)).map_err(&fail)?;
                let shared = (name.clone(), Arc::new(Mutex::new(comm)));
                by_members.insert(p.members.as_slice(), shared.clone());
                shared
            }
        };
        live.push(LiveGroup { plan: p.clone(), group_rank, comm_name, comm });
    }
    Ok(live)
}

/// Verify one group's communicator with an all-reduce of `[global rank, 1]`, whose result the
/// plan predicts: `[sum of members, number of members]`. Errors name the group (`<kind>/<index>`).
pub fn verify_group(g: &LiveGroup, rank: u32) -> Result<(), GroupError> {
    let fail = |message: String| GroupError {
        group: format!("{}/{}", g.plan.kind, g.plan.index),
        members: g.plan.members.clone(),
        message,
    };
    let mut values = [rank as i64, 1];
    let mut comm = g.comm.lock().map_err(|_| fail("communicator lock poisoned".into()))?;
    comm.allreduce_sum_i64(&mut values).map_err(|e| fail(format!("all-reduce failed: {e}")))?;
    let want = [g.plan.members.iter().map(|&m| m as i64).sum::<i64>(), g.plan.members.len() as i64];
    if values != want {
        return Err(fail(format!(
            "all-reduce of [rank, 1] gave {values:?}, the layout predicts {want:?}: the communicator's members differ from the plan"
        )));
    }
    Ok(())
}

/// Names of the distinct communicators among `groups` (aliased kinds share one), in plan order.
pub fn distinct_communicators(groups: &[LiveGroup]) -> Vec<&LiveGroup> {
    let mut seen: Vec<&str> = Vec::new();
    groups
        .iter()
        .filter(|g| {
            let new = !seen.contains(&g.comm_name.as_str());
            if new {
                seen.push(&g.comm_name);
            }
            new
        })
        .collect()
}

/// Verify every distinct communicator once (see [`verify_group`]); how many were verified.
pub fn verify_groups(groups: &[LiveGroup], rank: u32) -> Result<usize, GroupError> {
    let distinct = distinct_communicators(groups);
    distinct.iter().try_for_each(|g| verify_group(g, rank))?;
    Ok(distinct.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use std::ffi::c_void;

    /// Unit-test double: an in-process "communicator" that reduces through the store, enough
    /// to test naming, sharing and verification logic (real backends are tested elsewhere).
    struct StoreComm {
        store: Arc<dyn Store>,
        group: GroupInfo,
        round: u32,
        bias: i64,
    }

    impl Communicator for StoreComm {
        fn allreduce_sum_i64(&mut self, values: &mut [i64]) -> Result<(), String> {
            self.round += 1;
            let key = |r: u32| format!("ar{}/{}", self.round, r);
            let enc: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.store.set(&key(self.group.group_rank), &enc).map_err(|e| e.to_string())?;
            values.iter_mut().for_each(|v| *v = 0);
            for r in 0..self.group.size() {
                let got = self.store.get(&key(r)).map_err(|e| e.to_string())?;
                for (v, chunk) in values.iter_mut().zip(got.chunks(8)) {
                    *v += i64::from_le_bytes(chunk.try_into().unwrap());
                }
            }
            values[0] += self.bias;
            Ok(())
        }
        fn barrier(&mut self) -> Result<(), String> {
            self.allreduce_sum_i64(&mut [0]).map(|_| ())
        }
        fn raw_handle(&self) -> *mut c_void {
            std::ptr::null_mut()
        }
    }

    struct Factory {
        created: Mutex<Vec<String>>,
        lie_about: Option<String>,
    }

    impl CommFactory for Factory {
        fn name(&self) -> &str {
            "store-double"
        }
        fn create_group(&self, group: &GroupInfo, store: Arc<dyn Store>) -> Result<Box<dyn Communicator>, String> {
            self.created.lock().unwrap().push(group.name.clone());
            // A "wrong" communicator: its sums include a foreign member of rank 99.
            let bias = if self.lie_about.as_deref() == Some(group.name.as_str()) { 99 } else { 0 };
            Ok(Box::new(StoreComm { store, group: group.clone(), round: 0, bias }))
        }
    }

    fn plan_for(rank: u32) -> Vec<GroupPlan> {
        // World of 4, tp=2: tp groups {0,1},{2,3}; dp groups {0,2},{1,3}; dp_with_cp = dp (cp=1).
        let tp = rank / 2;
        let dp = rank % 2;
        vec![
            // Aliases not adjacent: sharing must not depend on plan order.
            GroupPlan { kind: "data_parallel_with_cp".into(), index: dp, members: vec![dp, dp + 2] },
            GroupPlan { kind: "tensor_model_parallel".into(), index: tp, members: vec![2 * tp, 2 * tp + 1] },
            GroupPlan { kind: "data_parallel".into(), index: dp, members: vec![dp, dp + 2] },
        ]
    }

    /// Per rank: verification result, communicators created, communicator name per plan entry.
    type RankOutcome = (Result<usize, GroupError>, Vec<String>, Vec<String>);

    fn run(lie_about: Option<&str>) -> Vec<RankOutcome> {
        // One in-process store per communicator name, shared by the rank threads.
        let stores: Arc<Mutex<HashMap<String, Arc<dyn Store>>>> = Arc::default();
        let threads: Vec<_> = (0..4u32)
            .map(|rank| {
                let stores = stores.clone();
                let lie = lie_about.map(str::to_string);
                std::thread::spawn(move || {
                    let f = Factory { created: Mutex::new(vec![]), lie_about: lie };
                    let store_for = |name: &str| -> Arc<dyn Store> {
                        let mut m = stores.lock().unwrap();
                        m.entry(name.to_string())
                            .or_insert_with(|| Arc::new(MemoryStore::new(Duration::from_secs(10))))
                            .clone()
                    };
                    let groups = create_groups(&plan_for(rank), rank, &f, &store_for, Duration::from_secs(10)).unwrap();
                    let names = groups.iter().map(|g| g.comm_name.clone()).collect();
                    let verified = verify_groups(&groups, rank);
                    let created = f.created.lock().unwrap().clone();
                    (verified, created, names)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn aliases_share_one_communicator_and_all_verify() {
        for (rank, (verified, created, names)) in run(None).into_iter().enumerate() {
            assert_eq!(verified.unwrap(), 2, "rank {rank}");
            let dp = rank % 2;
            let tp = rank / 2;
            assert_eq!(created, vec![format!("data_parallel_with_cp/{dp}"), format!("tensor_model_parallel/{tp}")]);
            assert_eq!(names[2], format!("data_parallel_with_cp/{dp}"));
        }
    }

    #[test]
    fn a_communicator_with_wrong_members_fails_verification_naming_the_group() {
        let out = run(Some("tensor_model_parallel/0"));
        for rank in [0usize, 1] {
            let err = out[rank].0.as_ref().unwrap_err().to_string();
            assert!(err.contains("group tensor_model_parallel/0 (ranks 0-1)"), "{err}");
        }
    }
}
