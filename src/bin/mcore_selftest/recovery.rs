//!
//! `--fail-rank`: kill ranks before, during or after init, and recover on the survivors.

use crate::verify::{verify_every_kind, verify_mindspeed, verify_rng};
use mcore_init::runtime::recovery::{
    announce_recoverable, check_health, reinitialize, Health, ReinitArgs, Reinitialized,
};
use mcore_init::runtime::{self, InitArgs, InitOutcome, InitPhase, LaunchEnv};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// When `--fail-rank`'s ranks die.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailAt {
    /// Before they initialize: the others' check-in misses them.
    Before,
    /// Once every rank has checked in, before any communicator exists.
    During,
    /// Once its communicators exist, before they are verified: ranks that share no group
    /// with it may finish init and learn of the failure from a health check.
    Verify,
    /// After a verified init, killed by rank 0.
    After,
}

impl std::str::FromStr for FailAt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "before" => Ok(FailAt::Before),
            "during" => Ok(FailAt::During),
            "verify" => Ok(FailAt::Verify),
            "after" => Ok(FailAt::After),
            _ => Err(format!("--fail-at: '{s}' is not one of before, during, verify, after")),
        }
    }
}

pub struct FailOptions {
    pub ranks: Vec<u32>,
    pub at: FailAt,
    pub window: Option<Duration>,
}

/// SIGKILL this process (by its pid, as a crash would end it).
fn kill_self() -> ! {
    crate::common::os::signal_self(libc::SIGKILL);
    unreachable!("SIGKILL did not end the process")
}

fn die_when_checked_in(phase: InitPhase) {
    if phase == InitPhase::CheckedIn {
        kill_self();
    }
}

fn die_when_created(phase: InitPhase) {
    if phase == InitPhase::Created {
        kill_self();
    }
}

fn check_ranks(f: &FailOptions, world: u32) -> Result<(), String> {
    if let Some(r) = f.ranks.iter().find(|&&r| r >= world) {
        return Err(format!("--fail-rank {r} is not a rank of the world of {world}"));
    }
    if f.ranks.contains(&0) {
        return Err("--fail-rank 0: rank 0 hosts the rendezvous store, which recovery needs; pick another rank".into());
    }
    announce_recoverable().map_err(|e| format!("cannot tell mcore-launch that this job recovers: {e}"))
}

/// `--fail-at before|during|verify`: the ranks to fail kill themselves before initializing,
/// once every rank has checked in, or once their communicators exist; the others' init fails naming them (after the init timeout),
/// or succeeds and learns of the failure from a health check; all recover.
pub fn fail_in_init(args: &InitArgs, f: &FailOptions) -> Result<Value, String> {
    let env = LaunchEnv::from_process().map_err(|e| e.to_string())?;
    check_ranks(f, env.world_size)?;
    if f.ranks.contains(&env.rank) {
        match f.at {
            FailAt::Before => kill_self(),
            FailAt::During => runtime::set_phase_hook(Some(die_when_checked_in)),
            _ => runtime::set_phase_hook(Some(die_when_created)),
        }
    }
    let start = Instant::now();
    let (how, suspected) = match runtime::initialize(args.clone()) {
        Ok(InitOutcome::Spare) => return spare(args, Some(f)),
        Err(e) => (format!("init failed: {e}"), vec![]),
        Ok(_) => match check_health(f.window).map_err(|e| e.to_string())? {
            Health::Failed(suspects) => ("init succeeded; the health check found the failure".into(), suspects),
            Health::Healthy => {
                return Err(format!("ranks {:?} were to fail during init, but every rank is healthy", f.ranks))
            }
        },
    };
    let detected = start.elapsed().as_secs_f64();
    let outcome = reinitialize(ReinitArgs { suspected, window: f.window, timeout: None });
    let mut line = recovered_line(args, Some(f), outcome.map_err(|e| format!("{how}; recovery failed: {e}"))?)?;
    line["detected_after_s"] = json!(detected);
    line["detected"] = json!(how);
    Ok(line)
}

/// `--fail-at after` (the default), after a verified init (`line` is its report): every rank
/// publishes its pid and waits for all; rank 0 kills the ranks to fail with SIGKILL; the
/// survivors recover, naming them as suspected.
pub fn fail_and_recover(args: &InitArgs, f: &FailOptions, line: Value) -> Result<Value, String> {
    let (store, rank, world, layout_world) =
        runtime::with_runtime(|rt| (rt.store(), rt.env.rank, rt.env.world_size, rt.env.world_size - args.spares))
            .map_err(|e| e.to_string())?;
    let timeout = args.timeout;
    check_ranks(f, world)?;
    let world = layout_world; // spares stand by elsewhere: the layout's ranks meet here
    let se = |e: mcore_init::store::StoreError| format!("--fail-rank: store: {e}");
    store.set(&format!("selftest/pid/{rank}"), std::process::id().to_string().as_bytes()).map_err(se)?;
    store.add("selftest/ready", 1).map_err(se)?;
    let deadline = Instant::now() + timeout;
    while store.add("selftest/ready", 0).map_err(se)? < i64::from(world) {
        if Instant::now() >= deadline {
            return Err(format!("--fail-rank: not every rank of {world} reached the kill point in time"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    if f.ranks.contains(&rank) {
        // Killed any moment now; if not, that is the failure.
        std::thread::sleep(timeout);
        return Err(format!("rank {rank} was to be killed (--fail-rank) but is still running"));
    }
    let mut suspected = vec![];
    for &victim in f.ranks.iter().filter(|_| rank == 0) {
        let pid = String::from_utf8_lossy(&store.get(&format!("selftest/pid/{victim}")).map_err(se)?).to_string();
        let pid: i32 = pid.trim().parse().map_err(|_| format!("--fail-rank: bad pid '{pid}' of rank {victim}"))?;
        // SAFETY: kill(2) on the pid the rank to kill published; no memory is involved.
        if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
            return Err(format!("--fail-rank: kill({pid}, SIGKILL) failed: {}", std::io::Error::last_os_error()));
        }
        suspected.push(victim);
    }
    drop(store);
    crate::fault::at(crate::fault::Point::Recover);
    let outcome = reinitialize(ReinitArgs { suspected, window: f.window, timeout: None });
    let mut out = recovered_line(args, Some(f), outcome.map_err(|e| e.to_string())?)?;
    out["init_seconds_before"] = line["init_seconds"].clone();
    Ok(out)
}

/// A spare (`--spares N`): stand by until a recovery places it or the job ends (at most
/// twice the init timeout).
pub fn spare(args: &InitArgs, f: Option<&FailOptions>) -> Result<Value, String> {
    let window = f.and_then(|f| f.window);
    let outcome = reinitialize(ReinitArgs { suspected: vec![], window, timeout: Some(args.timeout * 2) })
        .map_err(|e| format!("spare: {e}"))?;
    let mut line = recovered_line(args, f, outcome)?;
    line["spare"] = json!(true);
    Ok(line)
}

/// The JSON line of a rank after recovery: `"left": true`, or `"recovered": true` with every
/// group of the new layout (and its RNG seeds) verified by a collective.
fn recovered_line(args: &InitArgs, f: Option<&FailOptions>, outcome: Reinitialized) -> Result<Value, String> {
    let (report, left) = match outcome {
        Reinitialized::Recovered(r) => (r, false),
        Reinitialized::Left(r) => (r, true),
    };
    let seconds = report.total.as_secs_f64();
    let common = json!({
        "old_rank": report.old_rank, "old_world_size": report.old_world_size, "failed": report.failed,
        "dropped": report.dropped, "recovery_seconds": seconds, "agree_seconds": report.agree.as_secs_f64(),
        "killed": f.map(|f| f.ranks.clone()), "fail_at": f.map(|f| format!("{:?}", f.at).to_lowercase()),
        "world_from": report.world_from.as_str(), "kept_kinds": report.kept_kinds,
    });
    let mut out = if left {
        let why = if report.failed.is_empty() {
            "the job ended without needing this spare".to_string()
        } else {
            format!("its data-parallel replica was dropped after the failure of {:?}", report.failed)
        };
        json!({
            "rank": report.old_rank, "ok": true, "left": true, "world_size": report.new_world_size,
            "line": format!("rank {} left: {why}", report.old_rank),
        })
    } else {
        runtime::with_runtime(|rt| {
            let checked = verify_every_kind(rt)?;
            let rng_streams = verify_rng(rt, args)?;
            let mindspeed = verify_mindspeed(rt, args)?;
            let mut out = crate::verify::report(rt, seconds, f64::NAN, checked);
            out["rng_streams_verified"] = json!(rng_streams);
            if args.mindspeed.is_some() {
                out["mindspeed_groups_verified"] = json!(mindspeed);
            }
            out["recovered"] = json!(true);
            let human = crate::human::rank_line(rt, &out);
            out["line"] = json!(format!(
                "{human} | recovered from the failure of {:?} in {seconds:.3} s (was rank {})",
                report.failed, report.old_rank
            ));
            Ok::<_, String>(out)
        })
        .map_err(|e| e.to_string())??
    };
    if let (Some(a), Value::Object(b)) = (out.as_object_mut(), common) {
        a.extend(b);
    }
    Ok(out)
}
