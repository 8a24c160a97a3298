//! NCCL communicators on a real GPU. Every test is `#[ignore]`d: run them on a CUDA machine with
//! `scripts/gpu-tests.sh` (which finds libnccl.so.2 and passes `--ignored --skip _child`).
//!
//! Several ranks on one GPU: NCCL >= 2.30 allows it with `NCCL_MULTI_RANK_GPU_ENABLE=1`; older
//! releases refuse two ranks of one host on one device, so each rank gets its own
//! `NCCL_HOSTID` (and `NCCL_SOCKET_IFNAME=lo`): NCCL then takes them for different hosts and
//! connects them over sockets.

use mcore_init::backend::nccl::{Device, Feature, InitSpec, NcclComm, NcclConfig, NcclLibrary, NcclUniqueId};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);
const CHILD_ENV: &str = "MCORE_NCCL_GPU_CHILD_RANK";

fn lib() -> &'static NcclLibrary {
    NcclLibrary::global().unwrap_or_else(|e| panic!("GPU tests need NCCL: {e}"))
}

#[test]
#[ignore = "needs a GPU"]
fn world_of_one_inits_reduces_splits_and_destroys() {
    let lib = lib();
    eprintln!("NCCL {} from {}", lib.version(), lib.path());
    let id = lib.unique_id().unwrap();
    let mut comm =
        NcclComm::init_rank(lib, "world", &id, 1, 0, Device::Ordinal(0), &NcclConfig::default(), TIMEOUT).unwrap();
    assert_eq!((comm.size(), comm.rank()), (1, 0));
    assert!(!comm.raw_handle().is_null());
    let mut v = vec![1i64, -2, 3 << 40];
    comm.allreduce_sum_i64(&mut v, TIMEOUT).unwrap();
    assert_eq!(v, [1, -2, 3 << 40]);

    let mut child = comm.split("world/child", Some(0), 0, None, TIMEOUT).unwrap().expect("member of color 0");
    assert_eq!((child.size(), child.rank()), (1, 0));
    let mut w = vec![7i64];
    child.allreduce_sum_i64(&mut w, TIMEOUT).unwrap();
    assert_eq!(w, [7]);
    child.destroy(TIMEOUT).unwrap();
    comm.destroy(TIMEOUT).unwrap();
}

#[test]
#[ignore = "needs a GPU"]
fn several_communicators_start_together_and_splits_run_ahead_of_their_inits() {
    let lib = lib();
    let specs: Vec<InitSpec> = ["a/0", "b/0", "c/0"]
        .iter()
        .map(|g| InitSpec {
            group: g.to_string(),
            id: lib.unique_id().unwrap(),
            root_ids: Vec::new(),
            nranks: 1,
            rank: 0,
            config: NcclConfig::default(),
            timeout: TIMEOUT,
        })
        .collect();
    let mut comms =
        NcclComm::init_together(lib, &specs, Device::Ordinal(0)).map_err(|(i, e)| format!("spec {i}: {e}")).unwrap();
    for c in &mut comms {
        c.wait_ready().unwrap();
        let mut v = vec![2i64];
        c.allreduce_sum_i64(&mut v, TIMEOUT).unwrap();
        assert_eq!(v, [2]);
    }
    // Two splits in a row on one parent, their children waited for afterwards.
    let parent = &comms[0];
    let mut kids: Vec<NcclComm> = (0..2)
        .map(|k| parent.split_start(&format!("a/child{k}"), Some(0), 0, None, TIMEOUT).unwrap().expect("member"))
        .collect();
    for k in &mut kids {
        k.expect_size_rank(1, 0);
        k.wait_ready().unwrap();
        assert_eq!((k.size(), k.rank()), (1, 0));
    }
    for c in kids.into_iter().chain(comms) {
        c.destroy(TIMEOUT).unwrap();
    }
}

/// The environment that lets `nranks` ranks share one GPU with this NCCL, for rank `rank`.
fn shared_gpu_env(lib: &NcclLibrary, rank: u32) -> Vec<(&'static str, String)> {
    if lib.require(Feature::MultiRankGpu).is_ok() {
        vec![("NCCL_MULTI_RANK_GPU_ENABLE", "1".into())]
    } else {
        vec![("NCCL_HOSTID", format!("host-{rank}")), ("NCCL_SOCKET_IFNAME", "lo".into())]
    }
}

#[test]
#[ignore = "needs a GPU"]
fn runtime_factory_creates_and_verifies_a_group() {
    use mcore_init::backend::CommFactory;
    use mcore_init::backend::GroupInfo;
    let factory = mcore_init::backend::nccl::NcclFactory::new(lib(), Device::Ordinal(0), NcclConfig::default());
    let store = std::sync::Arc::new(mcore_init::store::MemoryStore::new(TIMEOUT));
    let g = GroupInfo::new("data_parallel/0", vec![0], 0, TIMEOUT).unwrap();
    let mut comm = factory.create_group(&g, &Default::default(), store).unwrap();
    let mut v = vec![3i64, 4];
    comm.allreduce_sum_i64(&mut v).unwrap();
    assert_eq!(v, [3, 4]);
    comm.barrier().unwrap();
    assert!(!comm.raw_handle().is_null());
}

#[test]
#[ignore = "needs a GPU"]
fn blocking_config_also_works() {
    let lib = lib();
    let id = lib.unique_id().unwrap();
    let cfg = NcclConfig { blocking: true, max_ctas: Some(2), ..Default::default() };
    let mut comm = NcclComm::init_rank(lib, "blocking", &id, 1, 0, Device::Ordinal(0), &cfg, TIMEOUT).unwrap();
    let mut v = vec![5i64; 1000];
    comm.allreduce_sum_i64(&mut v, TIMEOUT).unwrap();
    assert!(v.iter().all(|&x| x == 5));
    comm.abort().unwrap();
}

#[test]
#[ignore = "needs a GPU"]
fn init_times_out_and_aborts_when_a_peer_never_joins() {
    let lib = lib();
    let id = lib.unique_id().unwrap();
    let deadline = Duration::from_secs(5);
    let start = Instant::now();
    let err = NcclComm::init_rank(lib, "lonely/0", &id, 2, 0, Device::Ordinal(0), &NcclConfig::default(), deadline)
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("lonely/0"), "{text}");
    assert!(text.contains("timed out after 5.000 s"), "{text}");
    assert!(start.elapsed() < deadline + Duration::from_secs(30), "abort took {:?}", start.elapsed());
}

/// Child half of `two_ranks_share_one_gpu`: rank from env, id from stdin.
#[test]
#[ignore = "child half of two_ranks_share_one_gpu"]
fn gpu_rank_child() {
    let rank: u32 = std::env::var(CHILD_ENV).expect("run only as a child").parse().unwrap();
    let mut bytes = Vec::new();
    std::io::stdin().read_to_end(&mut bytes).unwrap();
    let id = NcclUniqueId::from_bytes(&bytes).unwrap();
    let lib = lib();
    let group = "shared_gpu";
    let mut comm =
        NcclComm::init_rank(lib, group, &id, 2, rank, Device::Ordinal(0), &NcclConfig::default(), TIMEOUT).unwrap();
    let mut v = vec![rank as i64 + 1, 10];
    comm.allreduce_sum_i64(&mut v, TIMEOUT).unwrap();
    // Rank 0 joins color 0 alone; rank 1 is not a member (NCCL_SPLIT_NOCOLOR).
    let color = (rank == 0).then_some(0);
    let child = comm.split("shared_gpu/split", color, 0, None, TIMEOUT).unwrap();
    let child_size = child.as_ref().map_or(0, |c| c.size());
    if let Some(c) = child {
        c.destroy(TIMEOUT).unwrap();
    }
    comm.destroy(TIMEOUT).unwrap();
    println!("RESULT rank={rank} sum={},{} child_size={child_size}", v[0], v[1]);
}

#[test]
#[ignore = "needs a GPU"]
fn two_ranks_share_one_gpu() {
    let lib = lib();
    let id = lib.unique_id().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for rank in 0..2 {
        let mut c = Command::new(&exe)
            .args([
                "--exact",
                &crate::common::test_name(module_path!(), "gpu_rank_child"),
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, rank.to_string())
            .envs(shared_gpu_env(lib, rank))
            .env("NCCL_MAX_CTAS", "2")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(&id.to_bytes()).unwrap();
        children.push(c);
    }
    let start = Instant::now();
    for (rank, mut c) in children.into_iter().enumerate() {
        while c.try_wait().unwrap().is_none() {
            if start.elapsed() > TIMEOUT * 3 {
                let _ = c.kill();
                panic!("rank {rank} did not finish");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut out = String::new();
        c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        assert!(c.wait().unwrap().success(), "rank {rank} failed: {out}");
        let want = format!("RESULT rank={rank} sum=3,20 child_size={}", if rank == 0 { 1 } else { 0 });
        assert!(out.contains(&want), "rank {rank}: expected {want:?} in {out}");
    }
}
