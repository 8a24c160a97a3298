//! `mcore-selftest [layout flags] [--backend gloo|nccl|PATH] [--timeout SECONDS]`
//!
//! A worker: initializes from the launcher's environment (mcore-launch or torchrun), verifies
//! every communicator of every group kind with an all-reduce whose result the layout predicts,
//! checks that a second initialize with the same settings is a no-op, prints one line for a
//! person (coordinates, host, communicators, times; rank 0 adds a per-kind table of creation
//! times) or with `--json` one JSON line (`{"rank", "host", "ok", "groups", "init_seconds", ...,
//! "line"}`), and exits non-zero on any failure.

#[path = "../common/mod.rs"]
mod common;

mod after_init;
mod args;
mod fault;
mod human;
mod progress;
mod recovery;
mod suspend;
mod verify;

use args::{parse_args, usage, Options};
use common::os::{boottime_seconds, seconds_since_process_start};
use mcore_init::runtime::{self, InitArgs, InitOutcome, SuspendRequest};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use suspend::{suspend_each_kind, suspend_resume};
use verify::{report, verify_every_kind, verify_mindspeed, verify_rng};

/// Test hook: the rank named here exits right after initializing, as if it crashed after the
/// rendezvous; the others must fail with an error, not hang.
const EXIT_AFTER_INIT_ENV: &str = "MCORE_SELFTEST_EXIT_AFTER_INIT";

/// Test hook: every rank holds its initialized runtime idle for this many seconds before
/// destroying it (docs/BENCHMARKS.md measures what an idle job costs its store host).
const HOLD_ENV: &str = "MCORE_SELFTEST_HOLD_S";
/// When this process first called initialize, in seconds since it started (the JSON error line's
/// `init_began_s`: a deadline counts from there, not from the process's start).
static INIT_BEGAN: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// Open file descriptors and threads of this process.
fn fds_and_threads() -> (usize, usize) {
    let count = |dir: &str| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    (count("/proc/self/fd"), count("/proc/self/task"))
}

/// The libnccl this process uses: `{"path", "version", "shared"}` (shared: the process had it
/// loaded before mcore_init bound it), or `{"error"}`.
fn nccl_library() -> Value {
    match mcore_init::backend::nccl::NcclLibrary::global() {
        Ok(lib) => json!({"path": lib.file(), "version": lib.version().to_string(), "shared": lib.shared()}),
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// One cycle: initialize, check idempotence, verify every kind, destroy.
fn cycle(
    args: &InitArgs,
    fail: Option<&recovery::FailOptions>,
    suspend: Option<&SuspendRequest>,
    suspend_each: bool,
    groups: &after_init::GroupRun,
) -> Result<Value, String> {
    fault::at(fault::Point::Start);
    INIT_BEGAN.get_or_init(|| seconds_since_process_start().unwrap_or(f64::NAN));
    if let Some(f) = fail.filter(|f| f.at != recovery::FailAt::After) {
        let line = recovery::fail_in_init(args, f)?;
        runtime::destroy().map_err(|e| e.to_string())?;
        return Ok(line);
    }
    let start = Instant::now();
    if runtime::initialize(args.clone()).map_err(|e| e.to_string())? == InitOutcome::Spare {
        let line = recovery::spare(args, fail)?;
        runtime::destroy().map_err(|e| e.to_string())?;
        return Ok(line);
    }
    let init_seconds = start.elapsed().as_secs_f64();
    let ready = seconds_since_process_start().unwrap_or(f64::NAN);
    let ready_boottime = boottime_seconds();
    let me = std::env::var("RANK").ok();
    if me.is_some() && std::env::var(EXIT_AFTER_INIT_ENV).ok() == me {
        eprintln!("mcore-selftest: exiting right after init ({EXIT_AFTER_INIT_ENV})");
        std::process::exit(3);
    }
    match runtime::initialize(args.clone()) {
        Ok(InitOutcome::AlreadyUp) => {}
        other => return Err(format!("a second initialize with the same settings was not a no-op: {other:?}")),
    }
    fault::at(fault::Point::Verify);
    let line = runtime::with_runtime(|rt| {
        let checked = verify_every_kind(rt)?;
        let rng_streams = verify_rng(rt, args)?;
        let mindspeed = verify_mindspeed(rt, args)?;
        let mut line = report(rt, init_seconds, ready, checked);
        line["rng_streams_verified"] = json!(rng_streams);
        if args.backend == "nccl" {
            line["nccl_library"] = nccl_library();
        }
        if args.mindspeed.is_some() {
            line["mindspeed_groups_verified"] = json!(mindspeed);
        }
        // On the clock all ranks share: when this rank began and ended initialize.
        line["init_start_boottime_s"] = json!(ready_boottime - init_seconds);
        line["ready_boottime_s"] = json!(ready_boottime);
        line["line"] = json!(human::rank_line(rt, &line));
        Ok::<_, String>(line)
    })
    .map_err(|e| e.to_string())
    .and_then(|r| r);
    // A rank whose verification failed still leaves the store in order (a store host keeps
    // serving until the others have left or stopped answering), so they can name who failed.
    let line = line.inspect_err(|_| {
        let _ = runtime::destroy();
    })?;
    let mut line = match fail {
        Some(f) => recovery::fail_and_recover(args, f, line)?,
        None => line,
    };
    if let Some(req) = suspend {
        let checked = suspend_resume(req).inspect_err(|_| {
            let _ = runtime::destroy();
        })?;
        line["suspend_resume"] = checked;
    }
    if suspend_each {
        let each = suspend_each_kind(args).inspect_err(|_| {
            let _ = runtime::destroy();
        })?;
        line["suspend_each"] = each;
    }
    if !groups.specs.is_empty() {
        fault::at(fault::Point::Groups);
        let made = after_init::run(groups).inspect_err(|_| {
            let _ = runtime::destroy();
        })?;
        line["after_init_groups"] = made;
    }
    if let Some(hold) = std::env::var(HOLD_ENV).ok().and_then(|v| v.trim().parse::<f64>().ok()) {
        eprintln!("mcore-selftest: holding the runtime idle for {hold} s");
        std::thread::sleep(Duration::from_secs_f64(hold.clamp(0.0, 3600.0)));
    }
    fault::at(fault::Point::Destroy);
    runtime::destroy().map_err(|e| e.to_string())?;
    Ok(line)
}

fn run(opts: &Options) -> Result<Value, String> {
    let watcher = progress::start();
    let first = cycle(&opts.init, opts.fail.as_ref(), opts.suspend.as_ref(), opts.suspend_each, &opts.groups);
    drop(watcher);
    let mut line = first?;
    if opts.cycles > 1 {
        let first = fds_and_threads();
        for _ in 1..opts.cycles {
            line = cycle(&opts.init, None, None, false, &opts.groups)?;
        }
        // Threads of a torn-down runtime may take a moment to be reaped.
        let mut last = fds_and_threads();
        for _ in 0..100 {
            if last.0 <= first.0 && last.1 <= first.1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            last = fds_and_threads();
        }
        line["cycles"] = json!(opts.cycles);
        line["fds"] = json!([first.0, last.0]);
        line["threads"] = json!([first.1, last.1]);
        if last.0 > first.0 || last.1 > first.1 {
            return Err(format!(
                "leak across {} init/destroy cycles: fds {} -> {}, threads {} -> {}",
                opts.cycles, first.0, last.0, first.1, last.1
            ));
        }
    }
    Ok(line)
}

/// Write `text` to stdout in one write: ranks that share an output file (torchrun without
/// `--tee` hands every worker the agent's stdout) must not interleave inside each other's lines,
/// which `println!` of a long line (written in pieces of the formatter) lets happen.
fn print_whole(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn main() -> ExitCode {
    // A bad MCORE_INIT_TIMEOUT is no misuse of the command line: one line, no usage text.
    let env_timeout = match runtime::timeout_from_env() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("mcore-selftest: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = match common::cli::utf8_args(std::env::args_os().skip(1)).and_then(|argv| parse_args(&argv, env_timeout))
    {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("mcore-selftest: {msg}\n{}", usage());
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(line) if opts.json => {
            print_whole(&format!("{line}\n"));
            ExitCode::SUCCESS
        }
        Ok(line) => {
            print_whole(&format!("{}\n", line["line"].as_str().unwrap_or_default()));
            if line["rank"] == 0 {
                print!("{}", human::create_table(&line));
            }
            ExitCode::SUCCESS
        }
        Err(msg) => {
            let rank = std::env::var("RANK").ok().and_then(|r| r.parse::<u32>().ok());
            if opts.json {
                let host = json!({"name": runtime::host::hostname()});
                let began = INIT_BEGAN.get().copied();
                let line = json!({"rank": rank, "host": host, "ok": false, "error": msg, "init_began_s": began});
                print_whole(&format!("{line}\n"));
            } else {
                let who = rank.map_or("rank ?".to_string(), |r| format!("rank {r}"));
                print_whole(&format!("{who} FAILED: {}\n", human::shorten(&msg, 180)));
            }
            eprintln!("mcore-selftest: {msg}");
            ExitCode::from(1)
        }
    }
}
