//! Bounded fuzzing of the input parsers, run by every `cargo test` (a few seconds): the layout
//! flags and timeouts as the tools read them, the C layout config (`mcore_topology_create` and
//! the queries on what it creates), and the communicator config YAML.
//!
//! Inputs come from the corpus in `tests/fuzz_corpus/` (kept: add every input that once broke
//! something) and from a seeded generator that mutates corpus entries and builds new ones from
//! tokens. Nothing may panic (in process: caught and reported with the input; through C: the
//! `MCORE_STATUS_PANIC` status), and the tool must exit 0 or 2. `MCORE_FUZZ_SEED` picks another
//! seed, `MCORE_FUZZ_SCALE` multiplies the number of cases (for longer local runs).

use crate::common;
// The tools' argument parsing (no part of the library), included by path.
#[allow(dead_code)]
#[path = "../../src/bin/common/cli.rs"]
mod cli;

use cli::{is_layout_flag, layout_flag, number, parse_grid, utf8_args, Flags};
use common::Rng;
use mcore_init::abi::mcore_status;
use mcore_init::ffi::topology::*;
use mcore_init::runtime::CommConfig;
use mcore_init::topology::{Topology, TopologyConfig};
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStringExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn seed() -> u64 {
    std::env::var("MCORE_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026)
}

fn scale() -> usize {
    std::env::var("MCORE_FUZZ_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

fn corpus(kind: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus").join(kind);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 10, "the {kind} corpus lost its files");
    files.into_iter().map(|p| (p.clone(), std::fs::read(&p).unwrap())).collect()
}

/// A corpus `.args` file: one argument per line, bytes as they are.
fn split_args(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    if v.last().is_some_and(Vec::is_empty) {
        v.pop();
    }
    v
}

const FLAGS: &[&str] = &[
    "--world-size",
    "--tp",
    "--pp",
    "--vpp",
    "--cp",
    "--hcp",
    "--ep",
    "--etp",
    "--dist-opt-instances",
    "--order",
    "--rank-offset",
    "--rank",
    "--grid",
    "--all-members",
    "--timeout",
    "--json",
    "--seed",
    "--seed-policy",
    "--data-parallel-random-init",
    "--bogus",
    "-h",
];
const VALUES: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "8",
    "16",
    "-1",
    "4294967295",
    "4294967296",
    "2147483647",
    "-2147483648",
    "1e300",
    "inf",
    "nan",
    "none",
    "0.5",
    "2,2",
    "2,,2",
    "1,1,1,1",
    "",
    " ",
    "tp-cp-ep-dp-pp",
    "tp-cp-ep-pp-dp",
    "pp-dp",
    "tp-tp",
    "x",
    "18446744073709551616",
    "-0",
    "+3",
    "0x10",
    "sharded:tensor_model_parallel",
    "roll",
    "megatron",
    "r:tp=2",
    "rollout:tp=4,rank-offset=8,local-world-size=8",
    "a:cp=4,hcp=2,2,tp=2",
    "a:",
    "default:tp=2,pp=2",
    "b:tp=2,tp=4",
];

fn mutate_bytes(rng: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    match rng.below(4) {
        0 if !b.is_empty() => {
            let i = rng.below(b.len());
            b[i] ^= 1 << rng.below(8);
        }
        1 => {
            let i = rng.below(b.len() + 1);
            b.insert(i, *rng.pick(b"0123456789,-=.e\xff\xc3 "));
        }
        2 if !b.is_empty() => {
            b.remove(rng.below(b.len()));
        }
        _ => b.extend_from_slice(rng.pick(VALUES).as_bytes()),
    }
    b
}

fn random_args(rng: &mut Rng, seeds: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    let mut args = if rng.chance(2) {
        rng.pick(seeds).clone()
    } else {
        (0..rng.below(12))
            .map(|_| if rng.chance(2) { rng.pick(FLAGS) } else { rng.pick(VALUES) }.as_bytes().to_vec())
            .collect()
    };
    for _ in 0..rng.below(5) {
        let n = args.len();
        match rng.below(5) {
            0 if n > 0 => {
                let i = rng.below(n);
                args[i] = mutate_bytes(rng, args[i].clone());
            }
            1 => args.insert(rng.below(n + 1), rng.pick(FLAGS).as_bytes().to_vec()),
            2 => args.insert(rng.below(n + 1), rng.pick(VALUES).as_bytes().to_vec()),
            3 if n > 0 => {
                args.remove(rng.below(n));
            }
            _ => args.push(format!("{}={}", rng.pick(FLAGS), rng.pick(VALUES)).into_bytes()),
        }
    }
    args
}

/// Parse `args` the way the tools do, then build and query the layout. Returns the world size
/// when the layout was valid.
fn parse_layout(args: &[Vec<u8>], rng_rank: u64) -> Option<u32> {
    let os: Vec<OsString> = args.iter().map(|a| OsString::from_vec(a.clone())).collect();
    let args = utf8_args(os).ok()?;
    let mut config = TopologyConfig::default();
    let mut world = None;
    let mut grids = Vec::new();
    let mut flags = Flags::new(&args);
    while let Some((flag, inline)) = flags.next() {
        let Ok(value) = flags.value(flag, inline) else { break };
        if flag == "--world-size" {
            world = number(flag, value).ok();
        } else if flag == "--grid" {
            grids.extend(parse_grid(value).ok());
        } else if flag == "--timeout" {
            let _ = mcore_init::timeout::parse_seconds(flag, value);
        } else if is_layout_flag(flag) {
            let _ = layout_flag(&mut config, flag, value);
        }
    }
    let world = world?;
    for g in grids {
        if let Ok(t) = Topology::new(g.config, world) {
            let _ = t.rank_view(t.rank_offset());
        }
    }
    let t = Topology::new(config, world).ok()?;
    let rank = t.rank_offset().saturating_add((rng_rank % u64::from(world.max(1))) as u32);
    if let Ok(view) = t.rank_view(rank) {
        for m in view.groups.iter().take(4) {
            let _ = t.group(m.kind(), m.group_index());
        }
    }
    for kind in t.kinds().into_iter().take(64) {
        let _ = t.group_count(kind);
    }
    Some(world)
}

#[test]
fn layout_flags_and_timeouts_never_panic() {
    let mut rng = Rng(seed());
    let seeds: Vec<Vec<Vec<u8>>> = corpus("layout").iter().map(|(_, b)| split_args(b)).collect();
    for case in 0..100_000 * scale() {
        let args = if case < seeds.len() { seeds[case].clone() } else { random_args(&mut rng, &seeds) };
        let r = rng.next();
        if catch_unwind(|| parse_layout(&args, r)).is_err() {
            let shown: Vec<String> = args.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            panic!("seed {}: case {case} panicked on {shown:?}", seed());
        }
    }
}

/// The built tool on the corpus and on mutants with small worlds: exit 0 or 2, never a panic.
#[test]
fn mcore_topo_exits_0_or_2_on_the_corpus_and_mutants() {
    let mut rng = Rng(seed() ^ 1);
    let seeds: Vec<Vec<Vec<u8>>> = corpus("layout").iter().map(|(_, b)| split_args(b)).collect();
    let mut runs = seeds.clone();
    while runs.len() < seeds.len() + 60 * scale() {
        let args = random_args(&mut rng, &seeds);
        // Keep the printed output small: valid layouts only with small worlds.
        if parse_layout(&args, 0).is_none_or(|w| w <= 4096) {
            runs.push(args);
        }
    }
    for args in runs {
        let os: Vec<OsString> = args.iter().map(|a| OsString::from_vec(a.clone())).collect();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcore-topo")).args(&os).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0 | 2)) && !err.contains("panicked"),
            "mcore-topo {os:?}: {:?} {err}",
            out.status
        );
        if out.status.code() == Some(2) {
            assert_eq!(err.lines().count(), 1, "one error line: {err}");
        }
    }
}

const INTS: &[i32] = &[0, 1, 2, 3, 4, 8, 16, -1, -2, i32::MAX, i32::MIN, 1 << 16, 1 << 30];
const ORDERS: &[&[u8]] = &[
    b"tp-cp-ep-dp-pp",
    b"tp-cp-ep-pp-dp",
    b"tp-pp-dp",
    b"",
    b"tp-tp-cp-ep-dp-pp",
    b"\xff\xfe",
    b"pp-dp-ep-cp-tp",
    b"tp cp",
];

fn int(rng: &mut Rng) -> i32 {
    if rng.chance(3) {
        rng.next() as i32
    } else {
        *rng.pick(INTS)
    }
}

#[test]
fn the_c_layout_config_never_panics() {
    let mut rng = Rng(seed() ^ 2);
    let worlds = [0u32, 1, 2, 4, 8, 16, 64, 1 << 20, u32::MAX];
    for case in 0..100_000 * scale() {
        let mut cfg = std::mem::MaybeUninit::<mcore_topology_config>::uninit();
        // SAFETY: a writable struct for init to fill.
        assert_eq!(unsafe { mcore_topology_config_init(cfg.as_mut_ptr()) }, mcore_status::Ok);
        // SAFETY: filled by init.
        let mut cfg = unsafe { cfg.assume_init() };
        for field in [
            &mut cfg.tp,
            &mut cfg.pp,
            &mut cfg.vpp,
            &mut cfg.cp,
            &mut cfg.ep,
            &mut cfg.etp,
            &mut cfg.dist_opt_instances,
        ] {
            if rng.chance(2) {
                *field = int(&mut rng);
            }
        }
        let hcp: Vec<i32> =
            (0..rng.below(5)).map(|_| if rng.chance(2) { *rng.pick(&[1, 2, 4]) } else { int(&mut rng) }).collect();
        if !hcp.is_empty() {
            cfg.hcp = hcp.as_ptr();
            cfg.hcp_len = hcp.len();
        } else if rng.chance(8) {
            cfg.hcp_len = rng.below(4); // NULL with a length: an error, not a read
        }
        let order = if rng.chance(3) {
            let mut o = rng.pick(ORDERS).to_vec();
            if rng.chance(2) {
                o = mutate_bytes(&mut rng, o);
            }
            o.retain(|&b| b != 0);
            Some(CString::new(o).unwrap())
        } else {
            None
        };
        if let Some(o) = &order {
            cfg.order = o.as_ptr();
        }
        if rng.chance(4) {
            cfg.rank_offset = rng.next() as u32;
        }
        if rng.chance(10) {
            // An older, shorter struct.
            cfg.struct_size = rng.below(std::mem::size_of::<mcore_topology_config>() + 1) as u32;
        }
        let world = if rng.chance(3) { rng.next() as u32 } else { *rng.pick(&worlds) };
        let mut topo = std::ptr::null_mut();
        // SAFETY: cfg and its buffers are valid for the call.
        let st = unsafe { mcore_topology_create(&cfg, world, &mut topo) };
        assert_ne!(st, mcore_status::Panic, "seed {}: case {case}: {cfg:?} world {world}", seed());
        if st != mcore_status::Ok {
            continue;
        }
        for _ in 0..4 {
            let kind = if rng.chance(2) { rng.below(40) as i32 - 2 } else { int(&mut rng) };
            let rank =
                if rng.chance(2) { cfg.rank_offset.wrapping_add(rng.below(64) as u32) } else { rng.next() as u32 };
            let mut info = std::mem::MaybeUninit::<mcore_group_info>::uninit();
            let mut buf = [0u32; 64];
            let (mut n, mut count) = (0usize, 0u64);
            // SAFETY: a live topology and valid out-pointers and buffer lengths.
            let statuses = unsafe {
                [
                    mcore_topology_group(topo, rank, kind, info.as_mut_ptr()),
                    mcore_topology_group_ranks(topo, rank, kind, buf.as_mut_ptr(), buf.len(), &mut n),
                    mcore_topology_group_count(topo, kind, &mut count),
                    mcore_topology_group_at(topo, kind, rng.next() % (count + 2), buf.as_mut_ptr(), buf.len(), &mut n),
                ]
            };
            assert!(!statuses.contains(&mcore_status::Panic), "seed {}: case {case}: kind {kind} rank {rank}", seed());
        }
        // SAFETY: created above, destroyed once.
        unsafe { mcore_topology_destroy(topo) };
    }
}

const YAML_TOKENS: &[&str] = &[
    "tp",
    "dp",
    "pp",
    "ep_dp",
    "hcp",
    "hierarchical_context_parallel_2",
    "tensor_model_parallel",
    "bogus",
    "max_ctas",
    "min_ctas",
    "cga_cluster_size",
    "net_name",
    "split_share",
    "is_high_priority_stream",
    ": ",
    ":",
    "\n",
    "\n  ",
    "\n    ",
    "{",
    "}",
    "[",
    "]",
    ", ",
    "- ",
    "&a ",
    "*a",
    "&b ",
    "*b",
    "---\n",
    "...\n",
    "? ",
    "!!str ",
    "!!int ",
    "'",
    "\"",
    "# c\n",
    "4",
    "-1",
    "99999999999",
    "true",
    "no",
    "~",
    "Socket",
    "0x1f",
    "1e3",
    "|\n  x\n",
    ">\n  y\n",
    "%YAML 1.2\n",
    "\t",
    "\\u0000",
    "\u{feff}",
];

#[test]
fn the_communicator_config_yaml_never_panics() {
    let mut rng = Rng(seed() ^ 3);
    let seeds: Vec<Vec<u8>> = corpus("yaml").into_iter().map(|(_, b)| b).collect();
    for case in 0..30_000 * scale() {
        let bytes = if case < seeds.len() {
            seeds[case].clone()
        } else if rng.chance(2) {
            let mut b = rng.pick(&seeds).clone();
            for _ in 0..1 + rng.below(4) {
                b = if rng.chance(2) {
                    mutate_bytes(&mut rng, b)
                } else {
                    let i = rng.below(b.len() + 1);
                    let mut t = b[..i].to_vec();
                    t.extend_from_slice(rng.pick(YAML_TOKENS).as_bytes());
                    t.extend_from_slice(&b[i..]);
                    t
                };
            }
            b
        } else {
            (0..1 + rng.below(40)).flat_map(|_| rng.pick(YAML_TOKENS).as_bytes().to_vec()).collect()
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let result = catch_unwind(AssertUnwindSafe(|| {
            let mut c = CommConfig::default();
            c.add_yaml(&text, "fuzz.yaml").map(|()| c.fingerprint())
        }));
        match result {
            Err(_) => panic!("seed {}: case {case} panicked on {text:?}", seed()),
            Ok(Err(e)) => assert!(e.starts_with("fuzz.yaml"), "errors name the source: {e}"),
            Ok(Ok(_)) => {}
        }
    }
}

/// Found by the fuzzer: a `struct_size` ending inside the `order` pointer copied half of it (a
/// wild pointer, SIGSEGV). Now refused: only the sizes of released layouts are read.
#[test]
fn a_struct_size_inside_a_pointer_field_is_refused() {
    let mut cfg = std::mem::MaybeUninit::<mcore_topology_config>::uninit();
    // SAFETY: a writable struct for init to fill.
    assert_eq!(unsafe { mcore_topology_config_init(cfg.as_mut_ptr()) }, mcore_status::Ok);
    // SAFETY: filled by init.
    let mut cfg = unsafe { cfg.assume_init() };
    let order = CString::new("tp-cp-ep-dp-pp").unwrap();
    cfg.order = order.as_ptr();
    cfg.struct_size = (std::mem::offset_of!(mcore_topology_config, order) + 4) as u32;
    let mut topo = std::ptr::null_mut();
    // SAFETY: valid struct and out-pointer.
    assert_eq!(unsafe { mcore_topology_create(&cfg, 8, &mut topo) }, mcore_status::InvalidArgument);
    // SAFETY: the library's NUL-terminated message of this thread.
    let msg = unsafe { std::ffi::CStr::from_ptr(mcore_init::ffi::error::mcore_last_error_message()) }.to_string_lossy();
    assert!(msg.contains("is not the size of a layout this library knows"), "{msg}");
}
