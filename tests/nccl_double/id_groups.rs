//! Groups joined from unique-id bytes (`mcore_id_group_*`, docs/id-groups.md) against the libnccl
//! TEST DOUBLE: the logic of the join (its deadline when a peer never comes, the abort, a re-join
//! with a new id, the warm-up inside the join, base64 between processes, the collectives and
//! destroy), in child processes of this binary that call the C API and never `mcore_initialize`.
//! Not evidence about NCCL: real ids come from the PyPI libnccl in tests/backends/nccl_cpu.rs,
//! and a real foreign peer is scripts/gpu-tests.sh's part.

use super::nccl_double::{command, finish, Rendezvous};
use mcore_init::ffi::error::mcore_last_error_message;
use mcore_init::ffi::id_group::*;
use mcore_init::ffi::mcore_status;
use std::ffi::{c_void, CStr};
use std::time::{Duration, Instant};

const MODE: &str = "MCORE_ID_TEST_MODE";

fn last_error() -> String {
    // SAFETY: never NULL, valid until the next call on this thread.
    unsafe { CStr::from_ptr(mcore_last_error_message()) }.to_string_lossy().into_owned()
}

fn mint() -> Vec<u8> {
    let mut id = vec![0u8; 128];
    let mut n = 0;
    // SAFETY: a 128-byte buffer and a writable length.
    let s = unsafe { mcore_unique_id_create(std::ptr::null(), id.as_mut_ptr(), id.len(), &mut n) };
    assert_eq!((s, n), (mcore_status::Ok, 128), "{}", last_error());
    id
}

/// Join `name` as `rank` of `size` with the warm-up; the status, the handle and the time taken.
fn join(
    name: &CStr,
    id: &[u8],
    size: u32,
    rank: u32,
    timeout_ms: u64,
) -> (mcore_status, *mut mcore_id_group, Duration) {
    let mut args = mcore_id_group_args { struct_size: 0, ..Default::default() };
    // SAFETY: writable args.
    assert_eq!(unsafe { mcore_id_group_args_init(&mut args) }, mcore_status::Ok);
    args.name = name.as_ptr();
    (args.id, args.id_len, args.world_size, args.rank) = (id.as_ptr(), id.len(), size, rank);
    (args.timeout_ms, args.warmup, args.device) = (timeout_ms, true, 0);
    let mut g = std::ptr::null_mut();
    let start = Instant::now();
    // SAFETY: args filled above, `id` alive for the call; writable out-pointer.
    let s = unsafe { mcore_id_group_join(&args, &mut g) };
    (s, g, start.elapsed())
}

fn allreduce(g: *mut mcore_id_group, values: &mut [i64]) -> mcore_status {
    // SAFETY: a live handle (or one the test expects refused) and a writable slice.
    unsafe { mcore_id_group_allreduce_sum_i64(g, values.as_mut_ptr(), values.len()) }
}

/// Child: join a group of 2 whose other rank never comes (deadline 2 s), then join a new id
/// alone, use it, destroy it, and use the destroyed handle. Prints one line per step.
fn lonely() {
    let (s, g, took) = join(c"weights", &mint(), 2, 0, 2000);
    println!("STEP lonely status={s:?} ms={} null={} msg={}", took.as_millis(), g.is_null(), last_error());
    let (s, g, _) = join(c"weights", &mint(), 1, 0, 10_000);
    println!("STEP rejoin status={s:?} msg={}", last_error());
    let mut comm: *mut c_void = std::ptr::null_mut();
    // SAFETY: a live handle and a writable out-pointer.
    let s = unsafe { mcore_id_group_communicator(g, &mut comm) };
    let mut v = [7i64, -2];
    let r = allreduce(g, &mut v);
    println!("STEP use comm={s:?}/{} allreduce={r:?} values={v:?}", !comm.is_null());
    // SAFETY: the live handle, not used afterwards except to see it refused.
    unsafe { mcore_id_group_destroy(g) };
    let r = allreduce(g, &mut v);
    println!("STEP destroyed allreduce={r:?} msg={}", last_error());
}

/// Child: rank `MCORE_ID_TEST_RANK` of a pair; rank 0 mints the id and hands it over in base64
/// through a file of the rendezvous folder; both join with the warm-up, all-reduce, broadcast.
fn pair() {
    let rank: u32 = std::env::var("MCORE_ID_TEST_RANK").unwrap().parse().unwrap();
    let file = std::path::Path::new(&std::env::var("MCORE_NCCL_DOUBLE_DIR").unwrap()).join("id.b64");
    let id = if rank == 0 {
        let id = mint();
        let mut text = vec![0 as std::ffi::c_char; 200];
        let mut n = 0;
        // SAFETY: readable id, writable buffer and length.
        let s = unsafe { mcore_unique_id_to_base64(id.as_ptr(), id.len(), text.as_mut_ptr(), text.len(), &mut n) };
        assert_eq!((s, n), (mcore_status::Ok, 173), "{}", last_error());
        // SAFETY: NUL-terminated by the call.
        let text = unsafe { CStr::from_ptr(text.as_ptr()) }.to_str().unwrap().to_string();
        std::fs::write(file.with_extension("tmp"), &text).unwrap();
        std::fs::rename(file.with_extension("tmp"), &file).unwrap();
        id
    } else {
        let start = Instant::now();
        let text = loop {
            if let Ok(t) = std::fs::read_to_string(&file) {
                break t;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "rank 0 never wrote {}", file.display());
            std::thread::sleep(Duration::from_millis(5));
        };
        let c = std::ffi::CString::new(text).unwrap();
        let mut id = vec![0u8; 128];
        let mut n = 0;
        // SAFETY: a NUL-terminated text, a 128-byte buffer and a writable length.
        let s = unsafe { mcore_unique_id_from_base64(c.as_ptr(), id.as_mut_ptr(), id.len(), &mut n) };
        assert_eq!((s, n), (mcore_status::Ok, 128), "{}", last_error());
        id
    };
    let (s, g, _) = join(c"m2n", &id, 2, rank, 30_000);
    assert_eq!(s, mcore_status::Ok, "rank {rank}: {}", last_error());
    let (mut r, mut n) = (9, 9);
    // SAFETY: a live handle, writable outs.
    assert_eq!(unsafe { mcore_id_group_rank(g, &mut r, &mut n) }, mcore_status::Ok);
    let mut v = [rank as i64 + 1, 10];
    let ar = allreduce(g, &mut v);
    let mut data: Vec<u8> =
        if rank == 0 { (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect() } else { vec![0; 64] };
    // SAFETY: a live handle and a writable buffer of 64 bytes.
    let bc = unsafe { mcore_id_group_broadcast(g, data.as_mut_ptr().cast(), data.len(), 0) };
    // SAFETY: as above; root 2 is outside the group.
    let bad = unsafe { mcore_id_group_broadcast(g, data.as_mut_ptr().cast(), data.len(), 2) };
    let bad_msg = last_error();
    let want: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
    println!(
        "PAIR rank={r}/{n} allreduce={ar:?} values={v:?} broadcast={bc:?} bytes_ok={} bad_root={bad:?} {bad_msg}",
        data == want
    );
    // SAFETY: the live handle, not used afterwards.
    unsafe { mcore_id_group_destroy(g) };
}

/// Child: join a group of one with the launch order of `MCORE_ID_TEST_ORDER` (-1, 0, 1); the
/// double traces the config it was given.
fn order() {
    let order: i32 = std::env::var("MCORE_ID_TEST_ORDER").unwrap().parse().unwrap();
    let id = mint();
    let mut args =
        mcore_id_group_args { id: id.as_ptr(), id_len: id.len(), world_size: 1, rank: 0, ..Default::default() };
    (args.launch_order_implicit, args.device, args.timeout_ms) = (order, 0, 10_000);
    let mut g = std::ptr::null_mut();
    // SAFETY: args with a live id, a writable out-pointer.
    let s = unsafe { mcore_id_group_join(&args, &mut g) };
    println!("STEP order status={s:?} msg={}", last_error());
    // SAFETY: the live handle, not used afterwards.
    unsafe { mcore_id_group_destroy(g) };
}

/// Run by the tests below in a child process (the double as NCCL and CUDA).
#[test]
#[ignore = "child half of the id-group tests"]
fn id_group_child() {
    match std::env::var(MODE).as_deref() {
        Ok("lonely") => lonely(),
        Ok("pair") => pair(),
        Ok("order") => order(),
        _ => panic!("run only as a child of the id-group tests ({MODE} unset)"),
    }
}

fn child(rv: &Rendezvous, env: &[(&str, &str)]) -> std::process::Child {
    let exe = std::env::current_exe().unwrap();
    let name = crate::common::test_name(module_path!(), "id_group_child");
    let args = ["--exact", name.as_str(), "--ignored", "--nocapture", "--test-threads=1"];
    command(exe.to_str().unwrap(), &args, rv, env).spawn().unwrap()
}

fn step<'a>(out: &'a str, name: &str) -> &'a str {
    let tag = format!("STEP {name} ");
    out.lines().find_map(|l| l.find(&tag).map(|at| &l[at..])).unwrap_or_else(|| panic!("no {tag:?} in:\n{out}"))
}

/// A peer that never comes: the join ends at its 2 s deadline (+2 s at most) with TIMEOUT naming
/// the group, its size and that NCCL cannot count arrivals; nothing stale is left, so a new id
/// joins at once, and the destroyed group is refused by name.
#[test]
fn a_peer_that_never_comes_ends_the_join_at_its_deadline_and_a_new_id_joins() {
    let rv = Rendezvous::new("id-lonely");
    let out = finish(child(&rv, &[(MODE, "lonely")]));
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    let lonely = step(&text, "lonely");
    assert!(lonely.contains("status=Timeout") && lonely.contains("null=true"), "{lonely}");
    assert!(lonely.contains("all 2 ranks of group weights") && lonely.contains("rank 0"), "{lonely}");
    assert!(lonely.contains("NCCL does not report how many") && lonely.contains("aborted"), "{lonely}");
    let ms: u64 = lonely.split("ms=").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!((2000..4000).contains(&ms), "the join took {ms} ms with a 2 s deadline: {lonely}");
    assert!(step(&text, "rejoin").contains("status=Ok"), "{text}");
    let used = step(&text, "use");
    assert!(used.contains("comm=Ok/true") && used.contains("allreduce=Ok values=[7, -2]"), "{used}");
    let gone = step(&text, "destroyed");
    assert!(gone.contains("allreduce=InvalidArgument") && gone.contains("not a live handle"), "{gone}");
}

/// Two processes: rank 0 mints the id and hands it over in base64; both join with the warm-up
/// (the double sums its float), then an all-reduce and a broadcast whose bytes are checked.
#[test]
fn two_processes_join_from_base64_with_the_warm_up_and_broadcast() {
    let rv = Rendezvous::new("id-pair");
    let kids: Vec<_> = (0..2).map(|r| child(&rv, &[(MODE, "pair"), ("MCORE_ID_TEST_RANK", &r.to_string())])).collect();
    for (rank, kid) in kids.into_iter().enumerate() {
        let out = finish(kid);
        let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "rank {rank}: {text}");
        let line = text.lines().find_map(|l| l.find("PAIR ").map(|at| &l[at..])).unwrap_or_else(|| panic!("{text}"));
        assert!(line.contains(&format!("rank={rank}/2")), "{line}");
        assert!(line.contains("allreduce=Ok values=[3, 20]"), "{line}");
        assert!(line.contains("broadcast=Ok bytes_ok=true"), "{line}");
        assert!(
            line.contains("bad_root=InvalidArgument") && line.contains("root 2 is not a rank of its 2 ranks"),
            "{line}"
        );
    }
}

/// NCCL's implicit launch order: on by default where the library has the per-communicator field
/// (2.31+), left out below it (NCCL_LAUNCH_ORDER_IMPLICIT is the switch there), and 0 when asked.
#[test]
fn the_launch_order_is_implicit_by_default_where_nccl_has_the_field() {
    for (version, order, want) in [
        ("23203", "-1", "launchOrderImplicit=1"),
        ("23102", "0", "launchOrderImplicit=0"),
        ("22803", "-1", "launchOrderImplicit=-2"),
    ] {
        let rv = Rendezvous::new("id-order");
        let env = [
            (MODE, "order"),
            ("MCORE_ID_TEST_ORDER", order),
            ("MCORE_NCCL_DOUBLE_VERSION", version),
            ("MCORE_NCCL_DOUBLE_TRACE", "1"),
        ];
        let out = finish(child(&rv, &env));
        let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && step(&text, "order").contains("status=Ok"), "{version}/{order}: {text}");
        let config =
            text.lines().find(|l| l.contains("config of ncclCommInitRankConfig")).unwrap_or_else(|| panic!("{text}"));
        assert!(config.contains("commName=id_group") && config.contains(want), "{version}/{order}: {config}");
    }
}
