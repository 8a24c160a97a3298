//! Unit tests of creating and verifying a rank's communicators (test doubles of a backend over
//! in-process stores).

use super::*;

fn plan_kind(key: &str) -> PlanKind {
    PlanKind::Group(GroupKind::from_key(key).unwrap())
}

fn store_err(e: crate::store::StoreError) -> CommError {
    CommError::new(CommErrorKind::Store, e.to_string())
}
use crate::store::{MemoryStore, PrefixStore};
use std::ffi::c_void;

/// Split calls a world communicator saw: (color or None, options).
type SplitLog = Arc<Mutex<Vec<(Option<u32>, CommOptions)>>>;

/// Unit-test double: an in-process "communicator" that reduces through the store, enough
/// to test naming, sharing, split ordering and verification logic (real backends, Gloo and
/// NCCL, are tested with real processes elsewhere).
struct StoreComm {
    store: Arc<dyn Store>,
    group: GroupInfo,
    round: u32,
    bias: i64,
    splits: SplitLog,
    /// Names of the communicators `wait_ready` was called on.
    waited: Arc<Mutex<Vec<String>>>,
}

impl Communicator for StoreComm {
    fn allreduce_sum_i64(&mut self, values: &mut [i64]) -> Result<(), CommError> {
        self.round += 1;
        let key = |r: u32| format!("ar{}/{}", self.round, r);
        let enc: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.store.set(&key(self.group.group_rank), &enc).map_err(store_err)?;
        values.iter_mut().for_each(|v| *v = 0);
        for r in 0..self.group.size() {
            let got = self.store.get(&key(r)).map_err(store_err)?;
            for (v, chunk) in values.iter_mut().zip(got.chunks(8)) {
                *v += i64::from_le_bytes(chunk.try_into().unwrap());
            }
        }
        values[0] += self.bias;
        Ok(())
    }
    fn barrier(&mut self) -> Result<(), CommError> {
        self.allreduce_sum_i64(&mut [0]).map(|_| ())
    }
    fn raw_handle(&self) -> *mut c_void {
        std::ptr::null_mut()
    }
    fn wait_ready(&mut self) -> Result<(), CommError> {
        self.waited.lock().unwrap().push(self.group.name.clone());
        Ok(())
    }
    fn split(
        &mut self,
        color: u32,
        group: Option<&GroupInfo>,
        options: &CommOptions,
    ) -> Result<Option<Box<dyn Communicator>>, CommError> {
        self.splits.lock().unwrap().push((group.map(|_| color), options.clone()));
        Ok(group.map(|g| {
            let store: Arc<dyn Store> = Arc::new(PrefixStore::new(&format!("split/{}", g.name), self.store.clone()));
            Box::new(StoreComm {
                store,
                group: g.clone(),
                round: 0,
                bias: 0,
                splits: Arc::default(),
                waited: self.waited.clone(),
            }) as Box<dyn Communicator>
        }))
    }
}

#[derive(Default)]
struct Factory {
    created: Mutex<Vec<String>>,
    lie_about: Option<String>,
    splits: SplitLog,
    /// Wait (this long) for every member in `create_group`, like a real rendezvous.
    rendezvous: Option<Duration>,
    /// Create the per-group strategy's groups in one `create_groups_together` call.
    together: bool,
    waited: Arc<Mutex<Vec<String>>>,
}

impl CommFactory for Factory {
    fn name(&self) -> &str {
        "store-double"
    }
    fn split_unavailable(&self) -> Option<String> {
        None
    }
    fn create_group(
        &self,
        group: &GroupInfo,
        _: &CommOptions,
        store: Arc<dyn Store>,
    ) -> Result<Box<dyn Communicator>, CommError> {
        self.created.lock().unwrap().push(group.name.clone());
        if let Some(t) = self.rendezvous {
            store.set(&format!("here/{}", group.group_rank), b"").map_err(store_err)?;
            let keys: Vec<String> = (0..group.size()).map(|r| format!("here/{r}")).collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            store.wait(&keys, t).map_err(store_err)?;
        }
        // A "wrong" communicator: its sums include a foreign member of rank 99.
        let bias = if self.lie_about.as_deref() == Some(group.name.as_str()) { 99 } else { 0 };
        Ok(Box::new(StoreComm {
            store,
            group: group.clone(),
            round: 0,
            bias,
            splits: Arc::default(),
            waited: self.waited.clone(),
        }))
    }
    fn creates_together(&self) -> bool {
        self.together
    }
    fn create_groups_together(
        &self,
        groups: &[crate::backend::GroupRequest<'_>],
    ) -> Result<Vec<Box<dyn Communicator>>, (usize, CommError)> {
        self.created.lock().unwrap().push("(together)".into());
        groups
            .iter()
            .enumerate()
            .map(|(i, (g, o, store))| self.create_group(g, o, store.clone()).map_err(|e| (i, e)))
            .collect()
    }
    fn create_world(
        &self,
        world: &GroupInfo,
        _: &CommOptions,
        store: Arc<dyn Store>,
    ) -> Result<Box<dyn Communicator>, CommError> {
        Ok(Box::new(StoreComm {
            store,
            group: world.clone(),
            round: 0,
            bias: 0,
            splits: self.splits.clone(),
            waited: self.waited.clone(),
        }))
    }
}

fn plan_for(rank: u32) -> RankPlan {
    // World of 4, tp=2: tp groups {0,1},{2,3}; dp groups {0,2},{1,3}; dp_with_cp = dp (cp=1);
    // an "embedding"-like kind only ranks 0 and 3 are in.
    let tp = rank / 2;
    let dp = rank % 2;
    let mut groups = vec![
        // Aliases not adjacent: sharing must not depend on plan order.
        GroupPlan { grid: None, kind: plan_kind("data_parallel_with_cp"), index: dp, members: vec![dp, dp + 2] },
        GroupPlan {
            grid: None,
            kind: plan_kind("tensor_model_parallel"),
            index: tp,
            members: vec![2 * tp, 2 * tp + 1],
        },
        GroupPlan { grid: None, kind: plan_kind("data_parallel"), index: dp, members: vec![dp, dp + 2] },
    ];
    if rank == 0 || rank == 3 {
        groups.push(GroupPlan { grid: None, kind: plan_kind("embedding"), index: 0, members: vec![0, 3] });
    }
    let kinds = ["data_parallel_with_cp", "tensor_model_parallel", "data_parallel", "embedding"]
        .map(|k| (None, plan_kind(k)))
        .to_vec();
    RankPlan { rank, world: vec![0, 1, 2, 3], kinds, groups }
}

/// Per rank: verification result, communicators created per group, communicator name per
/// plan entry, split calls on the world.
struct Outcome {
    verified: Result<usize, GroupError>,
    created: Vec<String>,
    names: Vec<String>,
    splits: Vec<(Option<u32>, CommOptions)>,
    waited: Vec<String>,
}

fn run(strategy: CommStrategy, lie_about: Option<&str>, config: CommConfig) -> Vec<Outcome> {
    run_with(strategy, lie_about, config, false)
}

fn run_with(strategy: CommStrategy, lie_about: Option<&str>, config: CommConfig, together: bool) -> Vec<Outcome> {
    // One in-process store per communicator name, shared by the rank threads.
    let stores: Arc<Mutex<HashMap<String, Arc<dyn Store>>>> = Arc::default();
    let threads: Vec<_> = (0..4u32)
        .map(|rank| {
            let stores = stores.clone();
            let lie = lie_about.map(str::to_string);
            let config = config.clone();
            std::thread::spawn(move || {
                let f = Factory { lie_about: lie, together, ..Default::default() };
                let store_for = |name: &str| -> Arc<dyn Store> {
                    let mut m = stores.lock().unwrap();
                    m.entry(name.to_string())
                        .or_insert_with(|| Arc::new(MemoryStore::new(Duration::from_secs(10))))
                        .clone()
                };
                let progress = store_for("progress");
                let created = create_groups(
                    &plan_for(rank),
                    strategy,
                    &f,
                    &store_for,
                    progress,
                    &config,
                    Duration::from_secs(10),
                    None,
                )
                .unwrap();
                assert_eq!(created.world.is_some(), strategy == CommStrategy::Split);
                let groups = created.groups;
                let names = groups.iter().map(|g| g.comm_name.clone()).collect();
                let verified = verify_groups(&groups, rank, rank % 2 == 0);
                let created = f.created.lock().unwrap().clone();
                let splits = f.splits.lock().unwrap().clone();
                let waited = f.waited.lock().unwrap().clone();
                Outcome { verified, created, names, splits, waited }
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn aliases_share_one_communicator_and_all_verify() {
    for (rank, o) in run(CommStrategy::PerGroup, None, CommConfig::default()).into_iter().enumerate() {
        let in_embedding = rank == 0 || rank == 3;
        assert_eq!(o.verified.unwrap(), 2 + in_embedding as usize, "rank {rank}");
        let dp = rank % 2;
        let tp = rank / 2;
        let mut want = vec![format!("data_parallel_with_cp/{dp}"), format!("tensor_model_parallel/{tp}")];
        if in_embedding {
            want.push("embedding/0".into());
        }
        assert_eq!(o.created, want);
        assert_eq!(o.names[2], format!("data_parallel_with_cp/{dp}"));
        assert!(o.splits.is_empty());
    }
}

#[test]
fn groups_created_together_are_the_distinct_ones_each_waited_for() {
    for (rank, o) in run_with(CommStrategy::PerGroup, None, CommConfig::default(), true).into_iter().enumerate() {
        let in_embedding = rank == 0 || rank == 3;
        assert_eq!(o.verified.unwrap(), 2 + in_embedding as usize, "rank {rank}");
        let (dp, tp) = (rank % 2, rank / 2);
        let mut want = vec![
            "(together)".to_string(),
            format!("data_parallel_with_cp/{dp}"),
            format!("tensor_model_parallel/{tp}"),
        ];
        if in_embedding {
            want.push("embedding/0".into());
        }
        assert_eq!(o.created, want, "one call, the distinct groups in kind order");
        assert_eq!(o.waited, want[1..], "each distinct communicator waited for once");
        assert_eq!(o.names[2], format!("data_parallel_with_cp/{dp}"));
    }
}

#[test]
fn split_joins_one_collective_per_kind_on_every_rank() {
    for (rank, o) in run(CommStrategy::Split, None, CommConfig::default()).into_iter().enumerate() {
        let in_embedding = rank == 0 || rank == 3;
        assert_eq!(o.verified.unwrap(), 2 + in_embedding as usize, "rank {rank}");
        assert!(o.created.is_empty(), "split strategy created groups one by one: {:?}", o.created);
        assert_eq!(o.waited.len(), 2 + in_embedding as usize, "every split child waited for: {:?}", o.waited);
        let (dp, tp) = (rank as u32 % 2, rank as u32 / 2);
        // dp_with_cp, tp, dp (an alias: no color), embedding (color only for members).
        let colors: Vec<Option<u32>> = o.splits.iter().map(|s| s.0).collect();
        assert_eq!(colors, vec![Some(dp), Some(tp), None, in_embedding.then_some(0)], "rank {rank}");
        assert_eq!(o.names[2], format!("data_parallel_with_cp/{dp}"));
    }
}

#[test]
fn kinds_with_other_options_get_their_own_communicator() {
    let mut config = CommConfig::default();
    config.add_yaml("dp: {max_ctas: 2}", "test").unwrap();
    for (rank, o) in run(CommStrategy::Split, None, config).into_iter().enumerate() {
        let dp = rank as u32 % 2;
        assert_eq!(o.splits[2], (Some(dp), CommOptions { max_ctas: Some(2), ..Default::default() }), "rank {rank}");
        assert_eq!(o.names[2], format!("data_parallel/{dp}"));
        assert_eq!(o.verified.unwrap(), 3 + (rank == 0 || rank == 3) as usize);
    }
}

#[test]
fn a_communicator_with_wrong_members_fails_verification_naming_the_group() {
    let out = run(CommStrategy::PerGroup, Some("tensor_model_parallel/0"), CommConfig::default());
    for rank in [0usize, 1] {
        let err = out[rank].verified.as_ref().unwrap_err().to_string();
        assert!(err.contains("group tensor_model_parallel/0 (ranks 0-1)"), "{err}");
    }
}

/// The host rank 3 publishes in the tests below.
fn host_n3() -> crate::runtime::launch::host::HostInfo {
    crate::runtime::launch::host::HostInfo {
        hostname: "n3".into(),
        addr: "10.0.0.4".parse().unwrap(),
        why: String::new(),
    }
}

/// Ranks `0..n` create their groups of `plan(rank)` one by one, each creation a rendezvous
/// that waits 0.5 s for every member: the number of groups of each, or its error.
fn run_with_rendezvous(n: u32, plan: fn(u32) -> RankPlan) -> Vec<Result<usize, GroupError>> {
    let stores: Arc<Mutex<HashMap<String, Arc<dyn Store>>>> = Arc::default();
    // Rank 3's host is known (as if it published it at check-in), the others' are not.
    let progress: Arc<dyn Store> = Arc::new(MemoryStore::new(Duration::from_secs(10)));
    crate::runtime::launch::host::publish(progress.as_ref(), 3, &host_n3()).unwrap();
    stores.lock().unwrap().insert("progress".into(), progress);
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let stores = stores.clone();
            std::thread::spawn(move || {
                let f = Factory { rendezvous: Some(Duration::from_millis(500)), ..Default::default() };
                let store_for = |name: &str| -> Arc<dyn Store> {
                    let mut m = stores.lock().unwrap();
                    m.entry(name.to_string())
                        .or_insert_with(|| Arc::new(MemoryStore::new(Duration::from_secs(10))))
                        .clone()
                };
                let progress = store_for("progress");
                let config = CommConfig::default();
                create_groups(
                    &plan(rank),
                    CommStrategy::PerGroup,
                    &f,
                    &store_for,
                    progress,
                    &config,
                    Duration::from_secs(1),
                    None,
                )
                .map(|c| c.groups.len())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn a_member_that_stops_early_is_named_by_the_groups_waiting_for_it() {
    let out = run_with_rendezvous(4, |rank| {
        let mut plan = plan_for(rank);
        if rank == 3 {
            // Rank 3 creates its first kind's group, then stops (as if it hung or died).
            plan.kinds.truncate(1);
            plan.groups.truncate(1);
        }
        plan
    });
    // Rank 2's tensor group {2, 3} waits for rank 3 in vain.
    let e = out[2].as_ref().expect_err("rank 2 must fail").to_string();
    assert!(e.starts_with("group tensor_model_parallel/1 (ranks 2-3)"), "{e}");
    assert!(e.ends_with("rank(s) 3 on host 'n3' (10.0.0.4) did not come to this group"), "{e}");
    // Ranks 0 and 1 share no group with rank 3 past the first kind except the embedding
    // group {0, 3}, which rank 0 waits for.
    let e = out[0].as_ref().expect_err("rank 0 must fail").to_string();
    assert!(
        e.starts_with("group embedding/0 (ranks 0, 3)") && e.contains("rank(s) 3 on host 'n3' (10.0.0.4) did not come"),
        "{e}"
    );
    assert_eq!(out[1].as_ref().ok(), Some(&3));
}

/// Rank 3 dies before creating anything. Rank 1 waits for it in data_parallel_with_cp {1, 3}
/// and fails; rank 0 then waits in vain for rank 1 (alive, but failed at that earlier group)
/// in tensor_model_parallel {0, 1}: rank 0 must blame rank 3, not the live rank 1.
#[test]
fn a_live_member_stuck_behind_a_dead_rank_is_not_blamed() {
    let out: Vec<String> =
        run_with_rendezvous(3, plan_for).into_iter().map(|r| r.expect_err("every rank fails").to_string()).collect();
    assert!(
        out[1].starts_with("group data_parallel_with_cp/1 (ranks 1, 3)")
            && out[1].ends_with("rank(s) 3 on host 'n3' (10.0.0.4) did not come to this group"),
        "{}",
        out[1]
    );
    assert!(
        out[2].starts_with("group tensor_model_parallel/1 (ranks 2-3)")
            && out[2].ends_with("rank(s) 3 on host 'n3' (10.0.0.4) did not come to this group"),
        "{}",
        out[2]
    );
    let e = &out[0];
    assert!(e.starts_with("group tensor_model_parallel/0 (ranks 0-1)"), "{e}");
    assert!(!e.contains("rank(s) 1 did not come"), "blames the live rank 1: {e}");
    assert!(e.ends_with("rank(s) 1 failed at an earlier group, waiting for rank(s) 3 on host 'n3' (10.0.0.4)"), "{e}");
}

#[test]
fn strategies_resolve_by_what_the_backend_offers() {
    let f = Factory::default();
    assert_eq!(resolve_strategy(CommStrategy::Auto, &f), Ok(CommStrategy::Split));
    assert_eq!(resolve_strategy(CommStrategy::PerGroup, &f), Ok(CommStrategy::PerGroup));
    struct NoSplit;
    impl CommFactory for NoSplit {
        fn name(&self) -> &str {
            "nosplit"
        }
        fn create_group(
            &self,
            _: &GroupInfo,
            _: &CommOptions,
            _: Arc<dyn Store>,
        ) -> Result<Box<dyn Communicator>, CommError> {
            Err(CommError::new(CommErrorKind::Unsupported, "unused"))
        }
    }
    assert_eq!(resolve_strategy(CommStrategy::Auto, &NoSplit), Ok(CommStrategy::PerGroup));
    struct Prefers;
    impl CommFactory for Prefers {
        fn name(&self) -> &str {
            "prefers"
        }
        fn split_unavailable(&self) -> Option<String> {
            None
        }
        fn prefers_per_group(&self) -> bool {
            true
        }
        fn create_group(
            &self,
            _: &GroupInfo,
            _: &CommOptions,
            _: Arc<dyn Store>,
        ) -> Result<Box<dyn Communicator>, CommError> {
            Err(CommError::new(CommErrorKind::Unsupported, "unused"))
        }
    }
    assert_eq!(resolve_strategy(CommStrategy::Auto, &Prefers), Ok(CommStrategy::PerGroup));
    assert_eq!(resolve_strategy(CommStrategy::Split, &Prefers), Ok(CommStrategy::Split));
    let e = resolve_strategy(CommStrategy::Split, &NoSplit).unwrap_err();
    assert!(e.contains("split strategy was requested") && e.contains("'nosplit'"), "{e}");
}
