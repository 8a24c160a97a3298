//! `mcore-launch --nproc N [--nnodes M --node-rank K] [--master-addr A] [--master-port P]
//! [--timeout S] [--grace S] -- PROGRAM ARGS...`
//!
//! A launcher that sets the environment torchrun's static rendezvous sets (RANK, LOCAL_RANK,
//! WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, MASTER_ADDR,
//! MASTER_PORT, ...), forwards each rank's output line by line with a `[rank N]: ` prefix, and
//! when one of its ranks fails stops the others and exits with that rank's status. With
//! `--timeout`, ranks still running then are stopped and named.
//!
//! Each rank leads its own process group. SIGINT, SIGTERM or SIGHUP to the launcher is passed on
//! to every rank's group; what is still running after the grace period (`--grace`, 5 s; a second
//! signal ends it at once) gets SIGKILL, and the launcher exits with 128 + the signal's number.
//! Stopping after a failure or a timeout works the same way with SIGTERM.
//!
//! Several machines: run it once per node with the same `--nnodes`, `--nproc`, `--master-addr`
//! (a reachable address of node 0, whose rank 0 hosts the store) and `--master-port`, and that
//! node's `--node-rank`. Node K runs global ranks K*N .. K*N+N-1. Each launcher watches only its
//! own ranks; ranks on other nodes fail by their init timeout when one of them is gone.
//!
//! One node without `--master-port`: a free port on 127.0.0.1, the kernel's pick, or one from
//! `MCORE_PORT_RANGE=LO-HI` when set (outside the kernel's ephemeral range, so that nothing else
//! on the machine takes it before rank 0 binds it: `mcore_init::store::tcp::free_port`).
//!
//! Recovery (docs/recovery.md): each rank gets `MCORE_LAUNCH_DIR`, a directory of this launcher.
//! Once a rank has announced there that the job recovers from a rank's death
//! (`runtime::recovery::announce_recoverable`), a rank killed by a signal does not stop the
//! others: the job succeeds when every other rank exits 0 (survivors and ranks that leave).

mod common;

use common::os::{signal_process_group, SIGHUP, SIGINT, SIGKILL, SIGTERM};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: mcore-launch --nproc N [--nnodes M --node-rank K] [--master-addr ADDR] \
[--master-port PORT] [--timeout SECONDS|none] [--grace SECONDS] -- PROGRAM [ARGS...]
  --timeout: stop the ranks (SIGTERM, then SIGKILL after --grace) when the job runs longer; the
  launcher names the ranks that had finished and those still running, and exits with 124. Each
  rank gets MCORE_INIT_TIMEOUT below it (a fifth less, 3-30 s; a lower one of yours is kept), so
  that a rank waiting at init ends first and says what it waited for (an explicit timeout your
  program passes to initialize is its own).
  --grace: on SIGINT/SIGTERM/SIGHUP (passed on to every rank) or a failure, how long ranks get
  to end before SIGKILL (default 5; 0-3600); the launcher then exits with 128 + the signal.";

/// The init deadline a rank gets under `--timeout limit`: a fifth less (at least 3 s, at most
/// 30 s less; never under half the limit), so that its init wait ends (within its deadline plus
/// 2 s) and names what it waited for before the launcher stops it.
fn rank_init_timeout(limit: Duration) -> Duration {
    let margin = (limit / 5).clamp(Duration::from_secs(3), Duration::from_secs(30));
    limit.saturating_sub(margin).max(limit / 2)
}

/// `MCORE_INIT_TIMEOUT` for the ranks under `--timeout`: `None` when the job has no limit, or
/// when the launcher's own environment already asks for a deadline as short.
fn rank_init_timeout_env(limit: Option<Duration>) -> Option<String> {
    let limit = limit.filter(|l| *l < mcore_init::timeout::NO_LIMIT)?;
    let want = rank_init_timeout(limit);
    let own = std::env::var("MCORE_INIT_TIMEOUT").ok().and_then(|v| mcore_init::timeout::parse_seconds("", &v).ok());
    own.map_or(true, |own| own > want).then(|| format!("{:.3}", want.as_secs_f64()))
}

/// The most ranks one launcher starts (each costs two output threads and two pipes).
const MAX_NPROC: u32 = 4096;

/// Default for `--grace`, and its upper bound.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);
const MAX_GRACE_SECONDS: f64 = 3600.0;

/// How long to wait for a rank to end after SIGKILL (a process in an uninterruptible sleep may
/// take a while), and for the output forwarders to drain once the ranks are gone.
const AFTER_KILL: Duration = Duration::from_secs(5);

/// torch's default store port, used by several nodes when `--master-port` is not given.
const DEFAULT_MASTER_PORT: u16 = 29500;

struct Args {
    nproc: u32,
    nnodes: u32,
    node_rank: u32,
    master_addr: String,
    master_port: Option<u16>,
    timeout: Option<Duration>,
    grace: Duration,
    /// The program and its arguments, passed on as given (they need not be UTF-8).
    program: Vec<OsString>,
}

fn parse_args(argv: &[OsString]) -> Result<Args, String> {
    let mut nproc = None;
    let mut nnodes = 1u32;
    let mut node_rank = None;
    let mut master_addr = "127.0.0.1".to_string();
    let mut master_port = None;
    let mut timeout = None;
    let mut grace = DEFAULT_GRACE;
    let mut i = 0;
    while i < argv.len() {
        let flag = common::cli::utf8_arg(i + 1, &argv[i])?;
        if flag == "--" {
            let program = argv[i + 1..].to_vec();
            if program.is_empty() {
                return Err("no program after '--'".into());
            }
            let nproc: u32 = nproc.ok_or("--nproc is required")?;
            let node_rank = match node_rank {
                Some(k) if k >= nnodes => {
                    return Err(format!("--node-rank {k} is out of range for --nnodes {nnodes} (0..{})", nnodes - 1))
                }
                Some(k) => k,
                None if nnodes > 1 => return Err(format!("--node-rank is required with --nnodes {nnodes}")),
                None => 0,
            };
            if nproc.checked_mul(nnodes).is_none() {
                return Err(format!("--nproc {nproc} x --nnodes {nnodes} ranks is too many"));
            }
            return Ok(Args { nproc, nnodes, node_rank, master_addr, master_port, timeout, grace, program });
        }
        if flag == "-h" || flag == "--help" {
            return Err(String::new());
        }
        if !flag.starts_with("--") {
            return Err(format!("unexpected argument '{flag}': missing '--' before the program to launch"));
        }
        let value = argv.get(i + 1).ok_or_else(|| format!("{flag} needs a value"))?;
        let value = common::cli::utf8_arg(i + 2, value)?;
        match flag {
            "--nproc" | "--nproc-per-node" => {
                nproc = Some(
                    value
                        .parse::<u32>()
                        .ok()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| format!("--nproc must be a whole number >= 1, got '{value}'"))?,
                );
                if let Some(n) = nproc.filter(|n| *n > MAX_NPROC) {
                    return Err(format!("--nproc {n} is more ranks than one launcher starts (at most {MAX_NPROC})"));
                }
            }
            "--nnodes" => {
                nnodes = value.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                    format!("--nnodes must be a whole number >= 1 (static rendezvous: no ranges), got '{value}'")
                })?
            }
            "--node-rank" | "--node_rank" => {
                node_rank = Some(
                    value
                        .parse::<u32>()
                        .map_err(|_| format!("--node-rank must be a whole number >= 0, got '{value}'"))?,
                )
            }
            "--master-addr" | "--master_addr" => master_addr = value.to_string(),
            "--master-port" | "--master_port" => {
                master_port = Some(
                    value
                        .parse::<u16>()
                        .ok()
                        .filter(|p| *p != 0)
                        .ok_or_else(|| format!("--master-port must be a port number 1-65535, got '{value}'"))?,
                )
            }
            "--timeout" => timeout = Some(mcore_init::timeout::parse_seconds("--timeout", value)?),
            "--grace" => {
                grace = value
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|s| (0.0..=MAX_GRACE_SECONDS).contains(s))
                    .and_then(|s| Duration::try_from_secs_f64(s.abs()).ok())
                    .ok_or_else(|| {
                        format!("--grace must be a number of seconds from 0 to {MAX_GRACE_SECONDS}, got '{value}'")
                    })?
            }
            other => return Err(format!("unknown option '{other}'")),
        }
        i += 2;
    }
    Err("missing '--' before the program to launch".into())
}

fn forward(
    rank: u32,
    source: impl Read + Send + 'static,
    to_stderr: bool,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    // A small stack: one launcher may run thousands of these.
    std::thread::Builder::new().name(format!("rank {rank} output")).stack_size(256 * 1024).spawn(move || {
        for line in BufReader::new(source).split(b'\n') {
            let Ok(line) = line else { break };
            let text = String::from_utf8_lossy(&line);
            // One write per line keeps lines of different ranks whole.
            let out = format!("[rank {rank}]: {text}\n");
            let _ = if to_stderr {
                std::io::stderr().lock().write_all(out.as_bytes())
            } else {
                std::io::stdout().lock().write_all(out.as_bytes())
            };
        }
    })
}

/// Global rank `local_rank` of this node: nodes hold consecutive blocks of `nproc` ranks, as
/// torchrun's static rendezvous assigns them.
fn global_rank(args: &Args, local_rank: u32) -> u32 {
    args.node_rank * args.nproc + local_rank
}

fn spawn_rank(args: &Args, local_rank: u32, port: u16, run_id: &str, dir: &std::path::Path) -> std::io::Result<Child> {
    let world = (args.nproc * args.nnodes).to_string();
    let r = global_rank(args, local_rank).to_string();
    let mut command = Command::new(&args.program[0]);
    if let Some(t) = rank_init_timeout_env(args.timeout) {
        command.env("MCORE_INIT_TIMEOUT", t);
    }
    command
        .args(&args.program[1..])
        .env("RANK", &r)
        .env("LOCAL_RANK", local_rank.to_string())
        .env("GROUP_RANK", args.node_rank.to_string())
        .env("ROLE_RANK", &r)
        .env("ROLE_NAME", "default")
        .env("WORLD_SIZE", &world)
        .env("LOCAL_WORLD_SIZE", args.nproc.to_string())
        .env("GROUP_WORLD_SIZE", args.nnodes.to_string())
        .env("ROLE_WORLD_SIZE", &world)
        .env("MASTER_ADDR", &args.master_addr)
        .env("MASTER_PORT", port.to_string())
        .env("TORCHELASTIC_RUN_ID", run_id)
        .env("TORCHELASTIC_RESTART_COUNT", "0")
        .env(mcore_init::runtime::recovery::LAUNCH_DIR_ENV, dir)
        .env_remove("TORCHELASTIC_USE_AGENT_STORE")
        .process_group(0) // each rank leads its own group, so stopping it stops its children too
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// Where the job stands when the launcher stops it: the ranks still running and those that had
/// finished, with their exit status (`still running: 1, 3; finished: 0 (exit status: 0), ...`).
fn job_state(children: &mut [(u32, Child)]) -> String {
    let (mut running, mut finished) = (Vec::new(), Vec::new());
    for (rank, child) in children.iter_mut() {
        match child.try_wait() {
            Ok(Some(status)) => finished.push(format!("{rank} ({status})")),
            _ => running.push(rank.to_string()),
        }
    }
    let list = |v: Vec<String>| if v.is_empty() { "none".to_string() } else { v.join(", ") };
    format!("still running: {}; finished: {}", list(running), list(finished))
}

/// Whether the rank's process has not ended yet (it is reaped when it has).
fn still_running(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

/// Send `signal` to every rank's process group, give the ranks `grace` to end (a further caught
/// signal cuts it short), then SIGKILL what is left and reap the ranks (each wait bounded).
fn stop_all(children: &mut [(u32, Child)], signal: i32, grace: Duration) {
    let signals_before = common::os::caught_signal().map_or(0, |(_, n)| n);
    for (_, c) in children.iter_mut() {
        let _ = signal_process_group(c.id(), signal);
    }
    let deadline = Instant::now() + grace;
    let mut cut_short = false;
    loop {
        let running = children.iter_mut().map(|(_, c)| still_running(c)).filter(|r| *r).count();
        if running == 0 || Instant::now() >= deadline {
            break;
        }
        if common::os::caught_signal().is_some_and(|(_, n)| n > signals_before) {
            cut_short = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let left: Vec<String> = children.iter_mut().filter_map(|(r, c)| still_running(c).then(|| r.to_string())).collect();
    if !left.is_empty() {
        let why = if cut_short {
            "when a second signal came".to_string()
        } else {
            format!("{:.1} s after {}", grace.as_secs_f64(), common::os::signal_name(signal))
        };
        eprintln!("mcore-launch: rank(s) {} still running {why}; sending SIGKILL", left.join(", "));
    }
    for (_, c) in children.iter_mut() {
        // The leader may be gone while its children still hold our pipes: kill the whole group.
        let _ = signal_process_group(c.id(), SIGKILL);
    }
    let deadline = Instant::now() + AFTER_KILL;
    for (rank, c) in children.iter_mut() {
        while still_running(c) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if still_running(c) {
            eprintln!(
                "mcore-launch: rank {rank} (pid {}) has not ended {:.0} s after SIGKILL",
                c.id(),
                AFTER_KILL.as_secs_f64()
            );
        }
    }
}

/// Why the launcher stops its ranks.
enum Stop {
    /// Every rank ended (successfully, or killed in a job that recovers).
    Done,
    /// A rank failed, the timeout passed or a rank could not be started: SIGTERM, exit `code`.
    Failed(u8),
    /// The launcher got this signal: pass it on, exit 128 + it.
    Signal(i32),
}

/// The launcher caught one of the signals it passes on, and said so.
fn check_signal(grace: Duration) -> Option<Stop> {
    let (signal, _) = common::os::caught_signal()?;
    eprintln!(
        "mcore-launch: got {}; passing it on to the ranks (SIGKILL after {:.1} s, or at a second signal)",
        common::os::signal_name(signal),
        grace.as_secs_f64()
    );
    Some(Stop::Signal(signal))
}

fn run(args: Args) -> Result<u8, String> {
    // Before any rank exists: from here on no rank outlives the launcher's shutdown.
    common::os::catch_signals(&[SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| format!("cannot install the signal handlers: {e}"))?;
    let port = match args.master_port {
        Some(p) => p,
        // Every node must agree on the port: torch's default, as torchrun does.
        None if args.nnodes > 1 => DEFAULT_MASTER_PORT,
        // Bound then released, like torchrun's default; from MCORE_PORT_RANGE when set.
        None => {
            mcore_init::store::tcp::free_port().map_err(|e| format!("cannot find a free port on 127.0.0.1: {e}"))?
        }
    };
    // Store keys carry the run id, so every node's launcher must derive the same one.
    let run_id = if args.nnodes > 1 {
        format!("mcore-launch-{port}-{}x{}", args.nnodes, args.nproc)
    } else {
        format!("mcore-launch-{}-{port}", std::process::id())
    };
    let dir = LaunchDir::create(&run_id)?;
    let mut children: Vec<(u32, Child)> = Vec::new();
    let mut forwarders = Vec::new();
    let mut stop = Stop::Done;
    for local_rank in 0..args.nproc {
        let rank = global_rank(&args, local_rank);
        match spawn_rank(&args, local_rank, port, &run_id, &dir.0) {
            Ok(mut child) => {
                let (stdout, stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
                children.push((rank, child));
                match forward(rank, stdout, false).and_then(|out| Ok((out, forward(rank, stderr, true)?))) {
                    Ok((out, err)) => forwarders.extend([out, err]),
                    Err(e) => {
                        eprintln!(
                            "mcore-launch: cannot start the output thread of rank {rank}: {e}; stopping the ranks"
                        );
                        stop = Stop::Failed(1);
                        break;
                    }
                }
            }
            Err(e) => {
                eprintln!(
                    "mcore-launch: cannot start rank {rank} ('{}'): {e}; stopping the ranks",
                    args.program[0].to_string_lossy()
                );
                stop = Stop::Failed(1);
                break;
            }
        }
        if let Some(s) = check_signal(args.grace) {
            stop = s;
            break;
        }
    }
    let start = Instant::now();
    let mut running: Vec<usize> = if matches!(stop, Stop::Done) { (0..children.len()).collect() } else { Vec::new() };
    let mut killed = Vec::new();
    while !running.is_empty() {
        let mut failed = None;
        running.retain(|&i| {
            let (rank, child) = &mut children[i];
            match child.try_wait() {
                Ok(None) => true,
                Ok(Some(status)) => {
                    use std::os::unix::process::ExitStatusExt;
                    if status.signal().is_some() && dir.recoverable() {
                        eprintln!(
                            "mcore-launch: rank {rank} was killed ({status}); the job recovers, the others go on"
                        );
                        killed.push(*rank);
                    } else if !status.success() && failed.is_none() {
                        failed = Some((*rank, status));
                    }
                    false
                }
                Err(_) => false,
            }
        });
        if let Some((rank, status)) = failed {
            eprintln!("mcore-launch: rank {rank} failed ({status}); stopping the other ranks");
            stop = Stop::Failed(status.code().map(|c| (c & 0xff) as u8).filter(|c| *c != 0).unwrap_or(1));
            break;
        }
        if let Some(s) = check_signal(args.grace) {
            stop = s;
            break;
        }
        if let Some(limit) = args.timeout {
            if start.elapsed() >= limit {
                eprintln!(
                    "mcore-launch: timeout after {:.1} s; rank(s) {}; stopping them",
                    limit.as_secs_f64(),
                    job_state(&mut children)
                );
                stop = Stop::Failed(124);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Stop::Signal(signal) = stop {
        eprintln!("mcore-launch: at {}, rank(s) {}", common::os::signal_name(signal), job_state(&mut children));
    }
    let (signal, mut code) = match stop {
        Stop::Done => (SIGTERM, 0),
        Stop::Failed(code) => (SIGTERM, code),
        Stop::Signal(signal) => (signal, 128u8.saturating_add(signal as u8)),
    };
    stop_all(&mut children, signal, args.grace);
    // The ranks are gone; their output is drained unless something outside their process groups
    // still holds the pipes: then the launcher does not wait for it.
    let deadline = Instant::now() + AFTER_KILL;
    while forwarders.iter().any(|f| !f.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    for f in forwarders {
        if f.is_finished() {
            let _ = f.join();
        }
    }
    if code == 0 && !killed.is_empty() {
        if killed.len() == children.len() {
            eprintln!("mcore-launch: every rank was killed");
            code = 1;
        } else {
            let names: Vec<String> = killed.iter().map(u32::to_string).collect();
            eprintln!("mcore-launch: rank(s) {} were killed; every other rank succeeded (recovered)", names.join(", "));
        }
    }
    Ok(code)
}

/// The launcher's own directory (`MCORE_LAUNCH_DIR`), removed when the launcher ends.
struct LaunchDir(std::path::PathBuf);

impl LaunchDir {
    fn create(run_id: &str) -> Result<LaunchDir, String> {
        // Per launcher: several launchers of one run (one per node) may share a machine.
        let path = std::env::temp_dir().join(format!("{run_id}-launcher-{}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let _ = std::fs::remove_file(path.join("recoverable"));
        Ok(LaunchDir(path))
    }

    /// Whether a rank announced that the job recovers from a rank's death.
    fn recoverable(&self) -> bool {
        self.0.join("recoverable").exists()
    }
}

impl Drop for LaunchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(msg) if msg.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("mcore-launch: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("mcore-launch: {msg}");
            ExitCode::from(1)
        }
    }
}
