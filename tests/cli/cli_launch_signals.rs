//! `mcore-launch` owns its ranks: SIGTERM, SIGINT or SIGHUP to the launcher reaches every rank's
//! process group (their children too), ranks still running after `--grace` get SIGKILL, the
//! launcher exits with 128 + the signal, no rank process is left, and a relaunch on the same
//! `--master-port` finds it free. Real processes throughout.
//!
//! The ranks that hold MASTER_PORT are this test binary run again as a rank program
//! (`rank_program` below, selected by `MCORE_LAUNCH_TEST_RANK`): rank 0 hosts the library's TCP
//! store on MASTER_PORT and every rank connects to it, as `mcore-selftest`'s ranks do at init,
//! without needing a communicator backend.

use crate::common;

use mcore_init::store::{Store, TcpStore};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const LAUNCH: &str = env!("CARGO_BIN_EXE_mcore-launch");
const ROLE: &str = "MCORE_LAUNCH_TEST_RANK";
/// The launcher's default `--grace`.
const GRACE: Duration = Duration::from_secs(5);
/// How much longer than its grace the launcher may take to exit, and its ranks to be gone.
const SLACK: Duration = Duration::from_secs(2);

fn env_u32(name: &str) -> u32 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} is not set"))
}

/// The rank program: nothing unless `MCORE_LAUNCH_TEST_RANK` is set (then the launcher runs this
/// test binary with `--exact rank_program`).
/// - `init`: rank 0 hosts the store on MASTER_PORT, every rank connects, prints `pid P` and waits
///   for a key nobody sets (a rendezvous that never completes: ranks still in init).
/// - `run`: the rendezvous completes, each rank starts a child (`sleep 60`), prints its own and
///   the child's pid, and "trains" until the child ends (60 s).
/// - `exit`: the rendezvous completes and every rank exits 0 (rank 0 once all are done).
#[test]
fn rank_program() {
    let Ok(role) = std::env::var(ROLE) else { return };
    let (rank, world) = (env_u32("RANK"), env_u32("WORLD_SIZE"));
    let port: u16 = env_u32("MASTER_PORT").try_into().expect("MASTER_PORT");
    let timeout = Duration::from_secs(30);
    let (_server, store) = if rank == 0 {
        let (server, client) =
            TcpStore::host("127.0.0.1", port, timeout).expect("rank 0 hosts the store on MASTER_PORT");
        (Some(server), client)
    } else {
        (None, TcpStore::connect("127.0.0.1", port, timeout).expect("connect to the store"))
    };
    if role == "init" {
        println!("pid {}", std::process::id());
        let _ = store.wait(&["never-set"], Duration::from_secs(60));
        return;
    }
    if store.add("arrived", 1).unwrap() == i64::from(world) {
        store.set("all-arrived", b"1").unwrap();
    }
    store.wait(&["all-arrived"], timeout).expect("every rank arrives");
    match role.as_str() {
        "run" => {
            let mut child = Command::new("sleep").arg("60").spawn().expect("start sleep");
            println!("pid {}\npid {}", std::process::id(), child.id());
            // "Training": as long as the child runs.
            let _ = child.wait();
        }
        "exit" => {
            store.set(&format!("done/{rank}"), b"1").unwrap();
            if rank == 0 {
                let keys: Vec<String> = (0..world).map(|r| format!("done/{r}")).collect();
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                store.wait(&keys, timeout).expect("every rank is done");
            }
            println!("rendezvous done");
        }
        other => panic!("unknown {ROLE} '{other}'"),
    }
}

/// The command line that runs [`rank_program`] in `role`; with `ignore_term`, under a shell that
/// ignores SIGTERM first (the rank and its child inherit that).
fn rank_command(ignore_term: bool) -> Vec<String> {
    let me = std::env::current_exe().unwrap().to_str().expect("UTF-8 test binary path").to_string();
    let mut cmd = Vec::new();
    if ignore_term {
        cmd.extend(["sh", "-c", "trap '' TERM; exec \"$0\" \"$@\""].map(String::from));
    }
    cmd.extend([
        me,
        "--exact".into(),
        common::test_name(module_path!(), "rank_program"),
        "--nocapture".into(),
        "--test-threads".into(),
        "1".into(),
    ]);
    cmd
}

/// Whether process `pid` still runs (a zombie, dead but not yet reaped by its parent, does not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the ')' that closes the command name.
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()) != Some('Z'),
        Err(_) => false,
    }
}

fn send(signal: &str, pid: u32) {
    let ok = Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill -{signal} {pid} failed");
}

/// A running launcher; dropping it SIGKILLs whatever of it and its ranks is left (a failed test
/// leaves nothing behind).
struct Launch {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    pids: Vec<u32>,
}

impl Launch {
    fn start(flags: &[&str], port: u16, role: &str, program: &[String]) -> Launch {
        let mut cmd = Command::new(LAUNCH);
        // The launcher keeps a signal it was started with ignored (as `nohup` expects), and a
        // test run started in the background of a non-interactive shell ignores SIGINT: these
        // tests send it, so the launcher starts with every signal they send at its default.
        // SAFETY: signal(2) is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(s, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let mut child = cmd
            .args(flags)
            .args(["--master-port", &port.to_string(), "--timeout", "120", "--"])
            .args(program)
            .env(ROLE, role)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        Launch { child, lines, stderr: Some(stderr), pids: Vec::new() }
    }

    /// Wait (at most 60 s) until the ranks printed `n` pids in all.
    fn wait_for_pids(&mut self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.pids.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = self.lines.recv_timeout(left) else {
                panic!(
                    "only {} of {n} rank pids within 60 s; launcher stderr:\n{}",
                    self.pids.len(),
                    self.stderr_text()
                );
            };
            // libtest's "test rank_program ... " may precede the first one on its line.
            if let Some((_, pid)) = line.rsplit_once("pid ").filter(|_| line.starts_with("[rank ")) {
                self.pids.push(pid.trim().parse().unwrap());
            }
        }
        assert!(self.pids.iter().all(|&p| alive(p)), "a rank ended before the signal");
    }

    /// Wait at most `limit` for the launcher to exit.
    fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The launcher's stderr, all of it: SIGKILLs the launcher first if it still runs.
    fn stderr_text(&mut self) -> String {
        if self.child.try_wait().unwrap().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.stderr.take().map(|h| h.join().unwrap()).unwrap_or_default()
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for &pid in &self.pids {
            if alive(pid) {
                let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            }
        }
    }
}

/// Launch `nproc` ranks, wait until each is up (`pids_per_rank` pids printed per rank), send
/// `signal` (number `signum`) to the launcher, and check: it exits with 128 + `signum` within
/// the grace period + [`SLACK`], no rank process is left then, and a relaunch on the same port
/// completes a rendezvous there. Returns the launcher's stderr.
fn signal_stops_every_rank(
    signal: &str,
    signum: i32,
    flags: &[&str],
    grace: Duration,
    role: &str,
    program: &[String],
    pids_per_rank: usize,
) -> String {
    let nproc = 2;
    let port = common::free_port();
    let mut launch = Launch::start(&[&["--nproc", "2"], flags].concat(), port, role, program);
    launch.wait_for_pids(nproc * pids_per_rank);
    let sent = Instant::now();
    send(signal, launch.child.id());
    let status = launch.wait(grace + SLACK);
    let exited = sent.elapsed();
    let all_gone = loop {
        if launch.pids.iter().all(|&p| !alive(p)) {
            break Some(sent.elapsed());
        }
        if sent.elapsed() > grace + SLACK {
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = launch.stderr_text();
    let status = status.unwrap_or_else(|| panic!("the launcher still runs {exited:?} after {signal}; stderr:\n{err}"));
    assert_eq!(status.code(), Some(128 + signum), "{signal}: {status}; stderr:\n{err}");
    assert!(err.contains(&format!("got SIG{signal}; passing it on to the ranks")), "{err}");
    let left: Vec<u32> = launch.pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(all_gone.is_some(), "rank processes {left:?} outlived the launcher by more than the grace; stderr:\n{err}");
    eprintln!(
        "{signal} ({role}, {} pids): launcher exited after {:.3} s, every rank process gone after {:.3} s",
        launch.pids.len(),
        exited.as_secs_f64(),
        all_gone.unwrap().as_secs_f64()
    );
    relaunch_on(port);
    err
}

/// A new launch on `port` right after: rank 0 binds it for the store and the rendezvous completes.
fn relaunch_on(port: u16) {
    let mut again = Launch::start(&["--nproc", "2"], port, "exit", &rank_command(false));
    let status = again.wait(Duration::from_secs(60));
    let err = again.stderr_text();
    let out: Vec<String> = again.lines.try_iter().collect();
    assert!(status.is_some_and(|s| s.success()), "relaunch on port {port}: {status:?}; stderr:\n{err}");
    assert_eq!(out.iter().filter(|l| l.ends_with("rendezvous done")).count(), 2, "{out:?}");
}

#[test]
fn sigterm_while_ranks_are_in_init() {
    signal_stops_every_rank("TERM", 15, &[], GRACE, "init", &rank_command(false), 1);
}

#[test]
fn sigint_while_ranks_run_stops_them_and_their_children() {
    signal_stops_every_rank("INT", 2, &[], GRACE, "run", &rank_command(false), 2);
}

#[test]
fn sighup_while_ranks_run() {
    signal_stops_every_rank("HUP", 1, &[], GRACE, "run", &rank_command(false), 2);
}

#[test]
fn ranks_that_ignore_sigterm_get_sigkill_after_the_grace() {
    let grace = Duration::from_secs(1);
    let err = signal_stops_every_rank("TERM", 15, &["--grace", "1"], grace, "run", &rank_command(true), 2);
    assert!(err.contains("rank(s) 0, 1 still running 1.0 s after SIGTERM; sending SIGKILL"), "{err}");
}

#[test]
fn a_second_signal_sends_sigkill_at_once() {
    // A grace of an hour: only the second signal can end this within the test's bound.
    let port = common::free_port();
    let mut launch = Launch::start(&["--nproc", "2", "--grace", "3600"], port, "run", &rank_command(true));
    launch.wait_for_pids(4);
    send("TERM", launch.child.id());
    std::thread::sleep(Duration::from_millis(300));
    assert!(launch.child.try_wait().unwrap().is_none(), "the ranks ignore SIGTERM: the launcher waits");
    send("INT", launch.child.id());
    let status = launch.wait(SLACK);
    let err = launch.stderr_text();
    assert_eq!(status.and_then(|s| s.code()), Some(143), "stderr:\n{err}");
    assert!(err.contains("rank(s) 0, 1 still running when a second signal came; sending SIGKILL"), "{err}");
    let deadline = Instant::now() + SLACK;
    while launch.pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(launch.pids.iter().all(|&p| !alive(p)), "rank processes left: {:?}", launch.pids);
    relaunch_on(port);
}

/// The real ranks, when `MCORE_GLOO_PLUGIN` names the Gloo plugin (scripts/test.d/25-runtime.sh
/// sets it; without it this test says so and returns): `mcore-selftest` ranks stuck in init (each
/// told the world has 3 ranks, of which the launcher starts 2: rank 0 hosts the store on
/// MASTER_PORT and waits for rank 2), SIGTERM to the launcher, then `mcore-selftest` on 2 ranks
/// initializes on the same port.
#[test]
fn sigterm_to_selftest_ranks_stuck_in_init_then_relaunch() {
    let Some(plugin) = std::env::var("MCORE_GLOO_PLUGIN").ok().filter(|p| std::path::Path::new(p).exists()) else {
        eprintln!(
            "skipped: MCORE_GLOO_PLUGIN is not set to a built libmcore_init_gloo.so (run scripts/test.d/25-runtime.sh)"
        );
        return;
    };
    let selftest = env!("CARGO_BIN_EXE_mcore-selftest");
    let port = common::free_port();
    let stuck =
        ["sh", "-c", "echo pid $$; WORLD_SIZE=3 exec \"$0\" \"$@\"", selftest, "--backend", &plugin, "--timeout", "60"];
    let mut launch = Launch::start(&["--nproc", "2"], port, "", &stuck.map(String::from));
    launch.wait_for_pids(2);
    // Rank 0 hosts the store: wait (at most 30 s) until it listens.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "rank 0 does not listen on {port} after 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Instant::now();
    send("TERM", launch.child.id());
    let status = launch.wait(GRACE + SLACK);
    let err = launch.stderr_text();
    assert_eq!(status.and_then(|s| s.code()), Some(143), "stderr:\n{err}");
    while launch.pids.iter().any(|&p| alive(p)) && sent.elapsed() < GRACE + SLACK {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(launch.pids.iter().all(|&p| !alive(p)), "selftest ranks left: {:?}; stderr:\n{err}", launch.pids);
    eprintln!("TERM (selftest in init): every rank gone after {:.3} s", sent.elapsed().as_secs_f64());
    let program = [selftest, "--backend", &plugin, "--timeout", "60"].map(String::from);
    let mut again = Launch::start(&["--nproc", "2"], port, "", &program);
    let status = again.wait(Duration::from_secs(90));
    let err = again.stderr_text();
    let out: Vec<String> = again.lines.try_iter().collect();
    assert!(status.is_some_and(|s| s.success()), "relaunch on port {port}: {status:?}; stderr:\n{err}");
    assert_eq!(out.iter().filter(|l| l.contains(" ok ")).count(), 2, "{out:?}");
}
