//! Groups made after init by their members only (src/runtime/creation/member_groups.rs), with real
//! processes on loopback over the Gloo plugin: 8 ranks each making three overlapping groups in
//! orders shuffled per rank, a member that never calls, and a 16-rank weight-sync group made by
//! its three members while the other ranks do nothing. Needs `MCORE_GLOO_PLUGIN`
//! (scripts/test.d/25-runtime.sh sets it); without it every test says so and returns.

use crate::common;

use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SELFTEST: &str = env!("CARGO_BIN_EXE_mcore-selftest");
const LAUNCH: &str = env!("CARGO_BIN_EXE_mcore-launch");

fn plugin() -> Option<String> {
    common::gloo_plugin("scripts/test.d/25-runtime.sh")
}

/// Run `mcore-launch --nproc n -- mcore-selftest --json <args>`; the JSON line of every rank,
/// by rank.
fn launch(n: u32, args: &[&str]) -> (Output, Vec<Option<Value>>) {
    let plugin = plugin().unwrap();
    let mut cmd = Command::new(LAUNCH);
    cmd.args(["--nproc", &n.to_string(), "--timeout", "120", "--", SELFTEST, "--json", "--backend", &plugin])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = common::wait_bounded(cmd.spawn().unwrap(), Duration::from_secs(150));
    let mut by_rank = vec![None; n as usize];
    for v in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once("]: ").map(|(_, j)| j.to_string()))
        .filter_map(|j| serde_json::from_str::<Value>(&j).ok())
    {
        if let Some(r) = v["rank"].as_u64() {
            by_rank[r as usize] = Some(v);
        }
    }
    (out, by_rank)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Three groups of 8 ranks with overlapping members: every rank is in two or three of them.
const THREE: [&str; 6] = ["--group", "a:0-5", "--group", "b:2-7", "--group", "c:0,1,4,5,6"];

fn members(name: &str) -> Vec<u64> {
    match name {
        "a" => (0..=5).collect(),
        "b" => (2..=7).collect(),
        "c" => vec![0, 1, 4, 5, 6],
        _ => panic!("unknown group {name}"),
    }
}

#[test]
fn eight_ranks_make_three_overlapping_groups_in_shuffled_orders_and_all_verify() {
    if plugin().is_none() {
        return;
    }
    let start = Instant::now();
    // Waited for in the shuffled start order too: the Gloo plugin creates in the background.
    let mut args = vec!["--tp", "2", "--timeout", "30", "--group-order", "shuffled:2026", "--group-wait", "start"];
    args.extend(THREE);
    let (out, lines) = launch(8, &args);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let mut orders = std::collections::BTreeSet::new();
    for (rank, line) in lines.iter().enumerate() {
        let line = line.as_ref().unwrap_or_else(|| panic!("no line from rank {rank}: {}", text(&out.stdout)));
        assert_eq!(line["ok"], true, "{line}");
        let made = line["after_init_groups"].as_array().expect("after_init_groups");
        let names: Vec<&str> = made.iter().map(|g| g["name"].as_str().unwrap()).collect();
        let mut want: Vec<&str> = ["a", "b", "c"].into_iter().filter(|n| members(n).contains(&(rank as u64))).collect();
        let mut sorted = names.clone();
        sorted.sort();
        want.sort();
        assert_eq!(sorted, want, "rank {rank} made and verified each of its groups once");
        for g in made {
            let ranks: Vec<u64> = g["ranks"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap()).collect();
            assert_eq!(ranks, members(g["name"].as_str().unwrap()), "{g}");
        }
        orders.insert(names.join(","));
    }
    // The fixed seed gives ranks different orders (else nothing was shuffled).
    assert!(orders.len() >= 3, "orders started: {orders:?}");
    assert!(start.elapsed() < Duration::from_secs(60), "took {:?}", start.elapsed());
}

#[test]
fn a_member_that_never_calls_makes_the_others_fail_within_the_deadline_naming_it() {
    if plugin().is_none() {
        return;
    }
    let mut args =
        vec!["--timeout", "30", "--group-timeout", "3", "--group-absent", "5", "--group-order", "shuffled:7"];
    args.extend(THREE);
    // Started directly (mcore-launch would stop the others once the first fails).
    let plugin = plugin().unwrap();
    let port = common::free_port().to_string();
    let children: Vec<_> = (0..8u32)
        .map(|rank| {
            common::rank_command(SELFTEST, rank, 8, &port)
                .args(["--json", "--backend", &plugin])
                .args(&args)
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = children.into_iter().map(|c| common::wait_bounded(c, Duration::from_secs(60))).collect();
    assert!(outs[5].status.success(), "rank 5 calls nothing and succeeds: {}", text(&outs[5].stderr));
    // Every rank but 5 shares a group with rank 5.
    for (rank, out) in outs.iter().enumerate().filter(|(r, _)| *r != 5) {
        assert!(!out.status.success(), "rank {rank} must fail: {}", text(&out.stdout));
        let line: Value = serde_json::from_str(text(&out.stdout).trim())
            .unwrap_or_else(|e| panic!("rank {rank}: {e}: {}", text(&out.stdout)));
        assert_eq!(line["ok"], false, "{line}");
        let e = line["error"].as_str().unwrap();
        assert!(
            e.contains("rank(s) 5 on host ")
                && e.contains(" did not come to create_group of group")
                && e.contains("within its timeout (3.0 s)"),
            "rank {rank}: {e}"
        );
        assert!(e.starts_with("group "), "names the group: {e}");
        eprintln!("rank {rank}: {e}");
        let secs: f64 = e
            .rsplit_once("after init, ")
            .and_then(|(_, t)| t.split_once(" s after").map(|(t, _)| t.parse().unwrap()))
            .unwrap_or_else(|| panic!("no time in {e}"));
        assert!((2.5..5.0).contains(&secs), "rank {rank} failed {secs} s after starting, deadline 3 s (+2 s): {e}");
    }
}

#[test]
fn a_weight_sync_group_of_16_ranks_is_made_by_its_three_members_only() {
    if plugin().is_none() {
        return;
    }
    let (out, lines) = launch(16, &["--tp", "2", "--pp", "2", "--timeout", "60", "--group", "weight-sync:0,8,12"]);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    for (rank, line) in lines.iter().enumerate() {
        let line = line.as_ref().unwrap_or_else(|| panic!("no line from rank {rank}"));
        assert_eq!(line["ok"], true, "{line}");
        let made = line["after_init_groups"].as_array().unwrap();
        if [0, 8, 12].contains(&rank) {
            assert_eq!(made.len(), 1, "{line}");
            assert_eq!(made[0]["name"], "weight-sync");
            assert_eq!(made[0]["ranks"], serde_json::json!([0, 8, 12]));
        } else {
            assert!(made.is_empty(), "rank {rank} is no member and does nothing: {line}");
        }
    }
}

#[test]
fn members_that_ask_for_other_members_are_named_with_the_field() {
    if plugin().is_none() {
        return;
    }
    // Ranks 0 and 1 ask for g = {0, 1, 2}; rank 2 for g = {0, 2}.
    let plugin = plugin().unwrap();
    let port = common::free_port().to_string();
    let children: Vec<_> = (0..3u32)
        .map(|rank| {
            let group = if rank == 2 { "g:0,2" } else { "g:0-2" };
            common::rank_command(SELFTEST, rank, 3, &port)
                .args(["--json", "--backend", &plugin, "--timeout", "30", "--group-timeout", "10", "--group", group])
                .spawn()
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    let outs: Vec<Output> = children.into_iter().map(|c| common::wait_bounded(c, Duration::from_secs(60))).collect();
    for (rank, out) in outs.iter().enumerate() {
        assert!(!out.status.success(), "rank {rank} must fail: {}", text(&out.stdout));
        let line: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
        let e = line["error"].as_str().unwrap();
        let want = if rank == 2 {
            "rank 0 asked for members 0,1,2, this rank 2 for members 0,2".to_string()
        } else {
            format!("rank 2 asked for members 0,2, this rank {rank} for members 0,1,2")
        };
        assert!(e.contains(&want), "rank {rank}: {e}");
    }
    // Found once every request is in, long before the 10 s deadline.
    assert!(start.elapsed() < Duration::from_secs(8), "took {:?}", start.elapsed());
}

/// Issue 42: a client forges rank 2's blame record during init (under the old key and under the
/// rank's claimed counter, before and after the rank claims it), then rank 2 is killed after init
/// as the members of g = {0, 1, 2} begin to make it. The survivors name rank 2 as died, from its
/// close notice, at once (not after the group's 20 s), and name no live rank: the store refused
/// the forgery (a write under another connection's claim) and cleared what was written there
/// before the claim.
#[test]
fn a_forged_record_misleads_nobody_and_a_death_after_init_is_named_at_once() {
    if plugin().is_none() {
        return;
    }
    let plugin = plugin().unwrap();
    let port = common::free_port();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let forger = {
        let stop = stop.clone();
        std::thread::spawn(move || forge_rank_2s_record(port, &stop))
    };
    let children: Vec<_> = (0..3u32)
        .map(|rank| {
            common::rank_command(SELFTEST, rank, 3, &port.to_string())
                .args(["--json", "--backend", &plugin, "--timeout", "30", "--group-timeout", "20"])
                .args(["--group", "g:0-2", "--fault", "2:groups:kill"])
                .spawn()
                .unwrap()
        })
        .collect();
    // Each rank's exit, as it comes.
    let waits: Vec<_> = children
        .into_iter()
        .map(|c| std::thread::spawn(move || (common::wait_bounded(c, Duration::from_secs(60)), Instant::now())))
        .collect();
    let ends: Vec<(Output, Instant)> = waits.into_iter().map(|w| w.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let forged = forger.join().unwrap();
    assert!(forged > 0, "the forger wrote nothing: the test proves nothing");
    let killed = ends[2].1;
    for (rank, (out, ended)) in ends.iter().enumerate().take(2) {
        assert!(!out.status.success(), "rank {rank} must fail: {}", text(&out.stdout));
        let line: Value = serde_json::from_str(text(&out.stdout).trim())
            .unwrap_or_else(|e| panic!("rank {rank}: {e}: {} {}", text(&out.stdout), text(&out.stderr)));
        let e = line["error"].as_str().unwrap();
        eprintln!("rank {rank}, {:.2} s after rank 2's death: {e}", ended.duration_since(killed).as_secs_f64());
        assert!(
            e.contains("rank(s) 2 on host ") && e.contains(" died: its connection to the rendezvous store closed"),
            "rank {rank}: {e}"
        );
        assert!(
            !e.contains("earlier group") && !e.contains("rank(s) 1") && !e.contains("rank(s) 0"),
            "rank {rank} named a live rank: {e}"
        );
        // Not at the group's deadline (20 s): at once.
        assert!(ended.duration_since(killed) < Duration::from_secs(10), "rank {rank} waited for the deadline: {e}");
    }
}

/// Until `stop`: set rank 2's blame record of the first attempt to "1" (rank 1 blamed), under
/// the old key and under rank 2's counter, on a fresh connection whenever the store closed the
/// last one. The number of writes the store took.
fn forge_rank_2s_record(port: u16, stop: &std::sync::atomic::AtomicBool) -> usize {
    use mcore_init::store::{Store, TcpStore};
    let mut took = 0;
    let until = Instant::now() + Duration::from_secs(20);
    while !stop.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < until {
        let Ok(c) = TcpStore::connect("127.0.0.1", port, Duration::from_millis(500)) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        for key in ["mcore_init/none/0/0/blame/2", "mcore_init/none/0/0/alive/2/blame"] {
            if c.set(key, b"1").is_ok() {
                took += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    took
}
