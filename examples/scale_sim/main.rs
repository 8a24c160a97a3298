//! Scale simulator (issue 33 item 5; figures only, never asserted): thousands of simulated ranks
//! as threads, each with its own store connection(s), against a store server in another process,
//! then held idle. The ranks run in child processes of at most [`SLICE`] ranks each (a rank of
//! ours holds four descriptors: two connections, each with the duplicate its client keeps for
//! aborting and waking), so that every process stays under the open-file limit.
//! Driven by `bench/scale_sim.sh`; the figures and how to read them are in docs/BENCHMARKS.md.
//!
//! ```text
//! scale_sim ours|torch PORT RANKS SERVER_PID [IDLE_SECONDS] [--gloo-dp] [--served]
//! ```
//! - `ours`: every rank runs this project's real protocol code at the store (see [`adapter`]:
//!   its liveness, started with the initialization's deadline, its host label and the check-in
//!   meeting; then the liveness as it stays while the job is idle).
//! - `torch`: every rank sends the store requests that `torch.distributed.init_process_group`
//!   plus Megatron-Core's `new_group` per group make, as torch's TCPStore client sends them
//!   (this project's client speaks the same wire protocol): see [`torch_rank`].
//!
//! Prints one JSON line: time from the first rank's start to the last rank ready, failures, the
//! rendezvous requests the ranks counted, and at the server (SERVER_PID, port PORT): CPU seconds
//! (`/proc/PID/stat`), TCP segments received (`ss -ti` `segs_in` summed over the server's
//! connections) and, with `--served` (our server, `store_scale serve`, its stdin on descriptor 3
//! and its stdout on 4), the requests it served: during init, over the settling time after it
//! (`settle_*`: ours, the 6 s the liveness's busy linger took until issue 42; torch, half a second) and over IDLE_SECONDS
//! (default 4; `bench/scale_sim.sh` gives 62) of the job held idle after that (`idle_*`, the
//! steady state).

mod adapter;
mod shared;

use mcore_init::store::{Store, TcpStore};
use shared::{cpu_s, megatron_groups, PP, TP};
use std::any::Any;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(300);
/// How long the simulator waits for every rank to be ready before it reports how many were.
const READY_LIMIT: Duration = Duration::from_secs(240);
/// Ranks per simulated node.
const PER_NODE: u32 = 8;
/// Most ranks one child process runs (6 descriptors a rank of ours: 12,288 of the 20,000 allowed).
const SLICE: u32 = 2048;

/// What a ready rank keeps until the end of the idle hold.
type Held = Box<dyn Any + Send>;

/// One simulated rank of torch + Megatron-Core at the store (a request pattern in this
/// project's own words, learned from torch's `TCPStore.cpp`, `distributed_c10d.py`,
/// `ProcessGroupNCCL.cpp` and Gloo's `connectFullMesh`; docs/BENCHMARKS.md lists it):
/// 1. the client connects (VALIDATE, PING);
/// 2. `waitForWorkers`: every rank ADDs 1 to `init/`; the server's own process (rank 0) reads it
///    (GET: WAIT then GET) every 10 ms until it reaches the world size;
/// 3. `init_process_group` and every `new_group` make no store request of their own (the
///    store-based barrier after them is off by default, `TORCH_DIST_INIT_BARRIER=0`); each NCCL
///    group's first collective exchanges its unique id: the group's rank 0 SETs 128 bytes, every
///    other member GETs them (WAIT then GET). Counted for the world and the 6 Megatron groups of
///    each rank at tp 8, pp 4 (tp, pp, dp, dp-with-cp, model-parallel, tensor-and-data);
/// 4. with `gloo_dp`: Megatron's Gloo data-parallel group (made by default), whose Gloo
///    full-mesh connect has each member SET its host name and its pair addresses and GET both
///    keys of every other member.
fn torch_rank(port: u16, r: u32, n: u32, gloo_dp: bool) -> Result<(Held, u64), String> {
    fn e(what: &str) -> impl Fn(mcore_init::store::StoreError) -> String + '_ {
        move |err| format!("{what}: {err}")
    }
    let store = TcpStore::connect("127.0.0.1", port, TIMEOUT).map_err(e("connect"))?;
    store.add("init/", 1).map_err(e("init/"))?;
    if r == 0 {
        loop {
            let v = store.get("init/").map_err(e("init/"))?;
            if String::from_utf8_lossy(&v).trim().parse::<u32>().unwrap_or(0) >= n {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    for (kind, g, leader) in megatron_groups(r as usize, n as usize) {
        let key = format!("default_pg/{kind}_{g}/nccl/0");
        if r as usize == leader {
            store.set(&key, &[7u8; 128]).map_err(e(&key))?;
        } else {
            store.get(&key).map_err(e(&key))?;
        }
    }
    if gloo_dp {
        // The dp group: this rank's tp and pp coordinates, members along dp.
        let (tp, pp) = (TP as u32, PP as u32);
        let dp = n / (tp * pp);
        let (t, d, p) = (r % tp, (r / tp) % dp, r / (tp * dp));
        let g = t + tp * p;
        let addresses = vec![5u8; 40 * dp as usize];
        store.set(&format!("gloo_dp_{g}/rank_{d}"), b"node-hostname").map_err(e("gloo host"))?;
        store.set(&format!("gloo_dp_{g}/{d}"), &addresses).map_err(e("gloo addresses"))?;
        for i in (0..dp).filter(|&i| i != d) {
            store.get(&format!("gloo_dp_{g}/rank_{i}")).map_err(e("gloo host"))?;
            store.get(&format!("gloo_dp_{g}/{i}")).map_err(e("gloo addresses"))?;
        }
    }
    let requests = store.round_trips();
    Ok((Box::new(store), requests))
}

/// Asks our server (`store_scale serve`: its stdin is this process's descriptor 3, its stdout 4)
/// how many requests it has served.
struct Served(Option<(std::fs::File, std::io::BufReader<std::fs::File>)>);

impl Served {
    fn open(asked: bool) -> Served {
        let open = |fd: u32, write: bool| {
            std::fs::OpenOptions::new().read(!write).write(write).open(format!("/proc/self/fd/{fd}")).ok()
        };
        Served(if asked { open(3, true).zip(open(4, false).map(std::io::BufReader::new)) } else { None })
    }

    fn now(&mut self) -> Option<u64> {
        use std::io::Write;
        let (ask, answer) = self.0.as_mut()?;
        ask.write_all(b"?\n").ok()?;
        let mut line = String::new();
        answer.read_line(&mut line).ok()?;
        line.trim().parse().ok()
    }
}

/// TCP segments received so far on the server's side of its connections (local port `port`).
fn segs_in(port: u16) -> u64 {
    let out = std::process::Command::new("ss")
        .args(["-tinH", "state", "established", "(", "sport", "=", &format!(":{port}"), ")"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.split_whitespace().filter_map(|w| w.strip_prefix("segs_in:")).filter_map(|v| v.parse::<u64>().ok()).sum()
}

/// One simulated rank: bring it up on `side`'s pattern, report `ok REQUESTS` (with
/// ` without-liveness` when it went on without) or `err TEXT` on stdout, and hold its
/// connections until the process ends.
fn rank(side: &str, port: u16, r: u32, n: u32, gloo_dp: bool) {
    let result = if side == "ours" {
        adapter::bring_up(port, r, n, PER_NODE, TIMEOUT).map(|(h, q)| {
            let note = if h.live() { "" } else { " without-liveness" };
            (Box::new(h) as Held, q, note)
        })
    } else {
        torch_rank(port, r, n, gloo_dp).map(|(h, q)| (h, q, ""))
    };
    let _held = match result {
        Ok((held, requests, note)) => {
            println!("ok {requests}{note}");
            Some(held)
        }
        Err(err) => {
            println!("err rank {r}: {}", err.replace('\n', " "));
            None
        }
    };
    loop {
        std::thread::park();
    }
}

/// `scale_sim child SIDE PORT RANKS FROM TO [--gloo-dp]`: ranks FROM..TO, one thread each.
fn child(side: &str, port: u16, n: u32, from: u32, to: u32, gloo_dp: bool) -> ! {
    for r in from..to {
        let side = side.to_string();
        let spawned =
            std::thread::Builder::new().stack_size(256 * 1024).spawn(move || rank(&side, port, r, n, gloo_dp));
        if let Err(err) = spawned {
            println!("err rank {r}: no thread: {err}");
        }
    }
    loop {
        std::thread::park();
    }
}

/// Start the child processes for `n` ranks; every line they print comes through `tx`.
fn children(side: &str, port: u16, n: u32, gloo_dp: bool, tx: &mpsc::Sender<String>) -> Vec<Child> {
    let me = std::env::current_exe().expect("the simulator's own path");
    let mut out = Vec::new();
    for from in (0..n).step_by(SLICE as usize) {
        let to = (from + SLICE).min(n);
        let mut cmd = Command::new(&me);
        cmd.args(["child", side, &port.to_string(), &n.to_string(), &from.to_string(), &to.to_string()]);
        if gloo_dp {
            cmd.arg("--gloo-dp");
        }
        let mut c = cmd.stdout(Stdio::piped()).spawn().expect("a child process of the simulator");
        let lines = std::io::BufReader::new(c.stdout.take().expect("piped stdout")).lines();
        let tx = tx.clone();
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| drop(tx.send(l))));
        out.push(c);
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: scale_sim ours|torch PORT RANKS SERVER_PID [IDLE_SECONDS] [--gloo-dp] [--served]";
    let gloo_dp = args.iter().any(|a| a == "--gloo-dp");
    let mut served = Served::open(args.iter().any(|a| a == "--served"));
    let args: Vec<&str> = args.iter().map(String::as_str).filter(|a| !a.starts_with("--")).collect();
    let num = |i: usize| args.get(i).and_then(|v| v.parse::<u32>().ok());
    if let (Some(&"child"), Some(side), Some(port), Some(n), Some(from), Some(to)) =
        (args.get(1), args.get(2), num(3), num(4), num(5), num(6))
    {
        child(side, port as u16, n, from, to, gloo_dp);
    }
    let (Some(side), Some(port), Some(n), Some(pid)) = (
        args.get(1).copied().filter(|s| ["ours", "torch"].contains(s)),
        args.get(2).and_then(|v| v.parse::<u16>().ok()),
        num(3).filter(|&n| n as usize % (TP * PP) == 0 && n > 0),
        args.get(4).map(|s| s.to_string()),
    ) else {
        eprintln!("{usage}\n(RANKS a multiple of {})", TP * PP);
        std::process::exit(2);
    };
    let idle = args.get(5).and_then(|v| v.parse::<f64>().ok()).unwrap_or(4.0);
    let cpu = || cpu_s(&pid).unwrap_or(f64::NAN);
    let (tx, rx) = mpsc::channel::<String>();
    let (cpu0, segs0, served0) = (cpu(), segs_in(port), served.now());
    let start = Instant::now();
    let mut procs = children(side, port, n, gloo_dp, &tx);
    drop(tx);
    let (mut requests, mut failed, mut first_error, mut seen, mut unwatched) = (0u64, 0u32, None, 0u32, 0u32);
    let mut last_note = Instant::now();
    while seen < n {
        if last_note.elapsed() > Duration::from_secs(10) {
            eprintln!("scale_sim: {seen} of {n} ranks ready after {:.0} s", start.elapsed().as_secs_f64());
            last_note = Instant::now();
        }
        let line = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Timeout) if start.elapsed() < READY_LIMIT => continue,
            Err(_) => break,
        };
        seen += 1;
        let ok = line.strip_prefix("ok ").map(|rest| rest.split_once(' ').unwrap_or((rest, "")));
        match ok.and_then(|(q, note)| Some((q.parse::<u64>().ok()?, note))) {
            Some((q, note)) => {
                requests += q;
                unwatched += u32::from(!note.is_empty());
            }
            None => {
                failed += 1;
                first_error.get_or_insert(line);
            }
        }
    }
    let ready_s = start.elapsed().as_secs_f64();
    // Ranks neither ready nor failed within READY_LIMIT (then `ready_s` is that limit).
    let not_ready = n - seen;
    let (cpu1, segs1, served1, t1) = (cpu(), segs_in(port), served.now(), Instant::now());
    // Settling: the last replies, and (ours) the watchers probing a few seconds after the last
    // store call; then a window of the job doing nothing.
    std::thread::sleep(if side == "ours" { adapter::settle() } else { Duration::from_millis(500) });
    let (cpu2, segs2, served2, t2) = (cpu(), segs_in(port), served.now(), Instant::now());
    let settle = t2.duration_since(t1).as_secs_f64();
    std::thread::sleep(Duration::from_secs_f64(idle));
    let (cpu3, segs3, served3, window) = (cpu(), segs_in(port), served.now(), t2.elapsed().as_secs_f64());
    for p in &mut procs {
        let _ = p.kill();
        let _ = p.wait();
    }
    let idle_requests =
        if side == "ours" { format!("{:.1}", adapter::idle_requests_per_rank_per_s() * n as f64) } else { "0".into() };
    let delta = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| b.saturating_sub(a));
    let json = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    let (init_served, settle_served, idle_served) =
        (delta(served0, served1), delta(served1, served2), delta(served2, served3));
    let up = (n - failed - not_ready).max(1) as f64;
    let served_fields = format!(
        "\"init_served\":{},\"init_served_per_rank\":{},\"init_us_per_served\":{},\"settle_s\":{settle:.2},\
         \"settle_server_cpu_per_s\":{:.3},\"settle_segs_in_per_s_per_rank\":{:.2},\"settle_served_per_s\":{},\
         \"idle_served_per_s\":{},\"idle_served_per_s_per_rank\":{}",
        json(init_served.map(|v| v.to_string())),
        json(init_served.map(|v| format!("{:.2}", v as f64 / up))),
        json(init_served.filter(|&v| v > 0).map(|v| format!("{:.1}", (cpu1 - cpu0) * 1e6 / v as f64))),
        (cpu2 - cpu1) / settle,
        segs2.saturating_sub(segs1) as f64 / settle / n as f64,
        json(settle_served.map(|v| format!("{:.1}", v as f64 / settle))),
        json(idle_served.map(|v| format!("{:.2}", v as f64 / window))),
        json(idle_served.map(|v| format!("{:.4}", v as f64 / window / n as f64))),
    );
    println!(
        "{{\"side\":\"{side}\",\"ranks\":{n},\"processes\":{},\"gloo_dp\":{gloo_dp},\"ready_s\":{ready_s:.3},\
         \"failed\":{failed},\"not_ready\":{not_ready},\"ready_without_liveness\":{unwatched},\"first_error\":{},\"init_requests\":{requests},\
         \"init_requests_per_rank\":{:.2},\"init_server_cpu_s\":{:.2},\"init_segs_in\":{},\"idle_window_s\":{window:.2},\
         \"idle_server_cpu_per_s\":{:.3},\"idle_segs_in_per_s\":{:.1},\"idle_segs_in_per_s_per_rank\":{:.2},\
         \"idle_requests_per_s_by_design\":{idle_requests},\"server_connections_per_rank\":{},{served_fields}}}",
        procs.len(),
        first_error.map_or("null".into(), |e| format!("{e:?}")),
        requests as f64 / up,
        cpu1 - cpu0,
        segs1.saturating_sub(segs0),
        (cpu3 - cpu2) / window,
        segs3.saturating_sub(segs2) as f64 / window,
        segs3.saturating_sub(segs2) as f64 / window / n as f64,
        if side == "ours" { adapter::CONNECTIONS_PER_RANK } else { 1 },
    );
}
