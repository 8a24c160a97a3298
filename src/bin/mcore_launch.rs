//! `mcore-launch --nproc N [--nnodes M --node-rank K] [--master-addr A] [--master-port P]
//! [--timeout S] -- PROGRAM ARGS...`
//!
//! A launcher that sets the environment torchrun's static rendezvous sets (RANK, LOCAL_RANK,
//! WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, MASTER_ADDR,
//! MASTER_PORT, ...), forwards each rank's output line by line with a `[rank N]: ` prefix, and
//! when one of its ranks fails stops the others and exits with that rank's status. With
//! `--timeout`, ranks still running then are stopped and named.
//!
//! Several machines: run it once per node with the same `--nnodes`, `--nproc`, `--master-addr`
//! (a reachable address of node 0, whose rank 0 hosts the store) and `--master-port`, and that
//! node's `--node-rank`. Node K runs global ranks K*N .. K*N+N-1. Each launcher watches only its
//! own ranks; ranks on other nodes fail by their init timeout when one of them is gone.
//!
//! Recovery (docs/recovery.md): each rank gets `MCORE_LAUNCH_DIR`, a directory of this launcher.
//! Once a rank has announced there that the job recovers from a rank's death
//! (`runtime::recovery::announce_recoverable`), a rank killed by a signal does not stop the
//! others: the job succeeds when every other rank exits 0 (survivors and ranks that leave).

mod common;

use common::os::{signal_process_group, SIGKILL, SIGTERM};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: mcore-launch --nproc N [--nnodes M --node-rank K] [--master-addr ADDR] \
[--master-port PORT] [--timeout SECONDS|none] -- PROGRAM [ARGS...]";

/// torch's default store port, used by several nodes when `--master-port` is not given.
const DEFAULT_MASTER_PORT: u16 = 29500;

struct Args {
    nproc: u32,
    nnodes: u32,
    node_rank: u32,
    master_addr: String,
    master_port: Option<u16>,
    timeout: Option<Duration>,
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
            return Ok(Args { nproc, nnodes, node_rank, master_addr, master_port, timeout, program });
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
                )
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
            other => return Err(format!("unknown option '{other}'")),
        }
        i += 2;
    }
    Err("missing '--' before the program to launch".into())
}

/// A free TCP port on the loopback interface (bound then released, like torchrun's default).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn forward(rank: u32, source: impl Read + Send + 'static, to_stderr: bool) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
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
    Command::new(&args.program[0])
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

/// SIGTERM every rank's process group, give them a grace period, then SIGKILL what is left.
fn stop_all(children: &mut [(u32, Child)]) {
    const GRACE: Duration = Duration::from_secs(3);
    for (_, c) in children.iter_mut() {
        let _ = signal_process_group(c.id(), SIGTERM);
    }
    let deadline = Instant::now() + GRACE;
    for (_, c) in children.iter_mut() {
        while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    for (_, c) in children.iter_mut() {
        // The leader may be gone while its children still hold our pipes: kill the whole group.
        let _ = signal_process_group(c.id(), SIGKILL);
        let _ = c.wait();
    }
}

fn run(args: Args) -> Result<u8, String> {
    let port = match args.master_port {
        Some(p) => p,
        // Every node must agree on the port: torch's default, as torchrun does.
        None if args.nnodes > 1 => DEFAULT_MASTER_PORT,
        None => free_port().map_err(|e| format!("cannot find a free port on 127.0.0.1: {e}"))?,
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
    for local_rank in 0..args.nproc {
        let rank = global_rank(&args, local_rank);
        match spawn_rank(&args, local_rank, port, &run_id, &dir.0) {
            Ok(mut child) => {
                forwarders.push(forward(rank, child.stdout.take().expect("piped"), false));
                forwarders.push(forward(rank, child.stderr.take().expect("piped"), true));
                children.push((rank, child));
            }
            Err(e) => {
                stop_all(&mut children);
                return Err(format!("cannot start rank {rank} ('{}'): {e}", args.program[0].to_string_lossy()));
            }
        }
    }
    let start = Instant::now();
    let mut running: Vec<usize> = (0..children.len()).collect();
    let mut code = 0u8;
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
            code = status.code().map(|c| (c & 0xff) as u8).filter(|c| *c != 0).unwrap_or(1);
            break;
        }
        if let Some(limit) = args.timeout {
            if start.elapsed() >= limit {
                let names: Vec<String> = running.iter().map(|&i| children[i].0.to_string()).collect();
                eprintln!(
                    "mcore-launch: timeout after {:.1} s; rank(s) still running: {}; stopping them",
                    limit.as_secs_f64(),
                    names.join(", ")
                );
                code = 124;
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop_all(&mut children);
    for f in forwarders {
        let _ = f.join();
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
