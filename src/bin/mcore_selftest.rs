//! `mcore-selftest [layout flags] [--backend gloo|nccl|PATH] [--timeout SECONDS]`
//!
//! A worker: initializes from the launcher's environment (mcore-launch or torchrun), verifies
//! every communicator of every group kind with an all-reduce whose result the layout predicts,
//! checks that a second initialize with the same settings is a no-op, prints one line for a
//! person (coordinates, host, communicators, times; rank 0 adds a per-kind table of creation
//! times) or with `--json` one JSON line (`{"rank", "host", "ok", "groups", "init_seconds", ...,
//! "line"}`), and exits non-zero on any failure.

mod common;

use common::cli::{Flags, GRID_USAGE, LAYOUT_USAGE};
use common::os::{boottime_seconds, seconds_since_process_start};
use mcore_init::rng::layout::rank_stream_seeds;
use mcore_init::runtime::groups::verify_group;
use mcore_init::runtime::{self, InitArgs, InitOutcome, Runtime, SuspendReport, SuspendRequest};
use mcore_init::topology::TopologyConfig;
use serde_json::{json, Value};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn usage() -> String {
    format!(
        "usage: mcore-selftest {LAYOUT_USAGE} {GRID_USAGE} [--backend gloo|nccl|PATH] [--timeout SECONDS|none] [--cycles N] \
         [--seed S [--seed-policy megatron|roll|sharded:<kind>,...] [--data-parallel-random-init]] \
         [--comm-strategy auto|split|per-group] [--comm-config FILE.yaml] [--split-share] [--device N] [--json] \
         [--spares N] [--fail-rank R[,R...] [--fail-at before|during|verify|after] [--recovery-window SECONDS]] \
         [--fault RANK:start|checkin|created|verify|destroy|recover:kill|stop] \
         [--group NAME:R1,R2,... (repeatable) [--group-order given|shuffled:SEED] [--group-wait name|start] \
         [--group-timeout SECONDS] [--group-absent RANK]] \
         [--suspend-resume [GRID:]KIND[,KIND...]|[GRID:]all] [--suspend-each-kind]"
    )
}

/// Test hook: the rank named here exits right after initializing, as if it crashed after the
/// rendezvous; the others must fail with an error, not hang.
const EXIT_AFTER_INIT_ENV: &str = "MCORE_SELFTEST_EXIT_AFTER_INIT";

/// Test hook: the rank named here does not come to `--suspend-resume`'s resume (it sleeps 20 s,
/// then exits); the others' resume must fail within its timeout, naming it.
const SKIP_RESUME_ENV: &str = "MCORE_SELFTEST_SKIP_RESUME";

struct Options {
    init: InitArgs,
    /// init → verify → destroy this many times; open fds and threads are compared between the
    /// end of the first and of the last cycle.
    cycles: u32,
    /// One JSON line instead of the human one (`--json`, and always with `--fail-rank`).
    json: bool,
    /// `--fail-rank R [--fail-at before|during|verify|after]`: rank R is killed and the survivors
    /// recover (docs/recovery.md); every rank prints its JSON line.
    fail: Option<recovery::FailOptions>,
    /// `--suspend-resume KINDS|all`: after verifying, suspend those kinds' communicators, check
    /// that using one is refused, resume them (timed), and verify every kind again.
    suspend: Option<SuspendRequest>,
    /// `--suspend-each-kind`: after verifying, suspend the layout's kinds one after another on
    /// every rank (kept suspended), rank 0 reading the device's free memory before and after each
    /// (NCCL: `cuMemGetInfo`; ranks meet through the store between steps); then resume all and
    /// verify every kind again.
    suspend_each: bool,
    /// `--group`: groups made after init by their members (see [`after_init`]).
    groups: after_init::GroupRun,
}

fn parse_args(args: &[String]) -> Result<Option<Options>, String> {
    let mut init = InitArgs { topology: TopologyConfig::default(), ..InitArgs::default() };
    let mut cycles = 1;
    let mut json = false;
    let (mut fail_rank, mut window, mut fail_at) = (None, None, None);
    let mut suspend = None;
    let mut suspend_each = false;
    init.timeout = runtime::timeout_from_env().map_err(|e| e.to_string())?;
    let mut groups = after_init::GroupRun::default();
    let mut flags = Flags::new(args);
    let mut grids = common::cli::GridArgs::default();
    while let Some((flag, inline)) = flags.next() {
        if grids.flag(flag, inline, &mut flags)? {
            continue;
        }
        match flag {
            "--group" => groups.specs.push(after_init::parse_group(flags.value(flag, inline)?)?),
            "--group-order" => groups.order = after_init::parse_order(flags.value(flag, inline)?)?,
            "--group-wait" => {
                groups.wait_in_start_order = match flags.value(flag, inline)? {
                    "name" => false,
                    "start" => true,
                    other => return Err(format!("--group-wait '{other}': expected name or start")),
                }
            }
            "--group-timeout" => {
                groups.timeout = Some(mcore_init::timeout::parse_seconds(flag, flags.value(flag, inline)?)?);
            }
            "--group-absent" => groups.absent = Some(common::cli::number(flag, flags.value(flag, inline)?)?),
            "-h" | "--help" => return Ok(None),
            "--backend" => init.backend = flags.value(flag, inline)?.to_string(),
            "--seed" => {
                let v = flags.value(flag, inline)?;
                init.seed = Some(v.trim().parse::<i64>().map_err(|_| format!("--seed: '{v}' is not an integer"))?);
            }
            "--seed-policy" => {
                let v = flags.value(flag, inline)?;
                init.seed_policy = v.parse().map_err(|e| format!("--seed-policy: {e}"))?;
            }
            "--data-parallel-random-init" => init.data_parallel_random_init = true,
            "--comm-strategy" => {
                init.comm_strategy = flags.value(flag, inline)?.parse().map_err(|e| format!("--comm-strategy: {e}"))?;
            }
            "--comm-config" => {
                let path = flags.value(flag, inline)?;
                init.comm_config
                    .add_yaml_file(std::path::Path::new(path))
                    .map_err(|e| format!("--comm-config: {e}"))?;
            }
            "--split-share" => init.comm_config.default.split_share = Some(true),
            "--json" if inline.is_some() => return Err("--json takes no value".into()),
            "--json" => json = true,
            "--device" => init.device = Some(common::cli::number(flag, flags.value(flag, inline)?)?),
            "--cycles" => {
                cycles = common::cli::number(flag, flags.value(flag, inline)?)?;
                if cycles == 0 {
                    return Err("--cycles: must be at least 1".into());
                }
            }
            "--fail-rank" => {
                let v = flags.value(flag, inline)?;
                fail_rank = Some(v.split(',').map(|r| common::cli::number(flag, r)).collect::<Result<Vec<u32>, _>>()?);
            }
            "--spares" => init.spares = common::cli::number(flag, flags.value(flag, inline)?)?,
            "--fail-at" => fail_at = Some(flags.value(flag, inline)?.parse::<recovery::FailAt>()?),
            "--recovery-window" => {
                window = Some(mcore_init::timeout::parse_seconds(flag, flags.value(flag, inline)?)?);
            }
            "--timeout" => {
                init.timeout = mcore_init::timeout::parse_seconds(flag, flags.value(flag, inline)?)?;
            }
            "--fault" => fault::arm(flags.value(flag, inline)?)?,
            "--suspend-each-kind" if inline.is_some() => return Err("--suspend-each-kind takes no value".into()),
            "--suspend-each-kind" => suspend_each = true,
            "--suspend-resume" => {
                // [GRID:]KIND[,KIND...] or [GRID:]all.
                let v = flags.value(flag, inline)?.trim();
                let (grid, list) = match v.split_once(':') {
                    Some((g, l)) => (Some(g.trim().to_string()), l.trim()),
                    None => (None, v),
                };
                let mut req = match list {
                    "all" => SuspendRequest::all(),
                    "" => return Err("--suspend-resume: name kinds (comma-separated) or all".into()),
                    list => SuspendRequest::kinds(list.split(',').map(str::trim)),
                };
                req.grid = grid;
                suspend = Some(req);
            }
            _ => return Err(format!("unknown option '{flag}'")),
        }
    }
    // The first grid (the plain layout flags' `default`, or the first --grid when no plain
    // flag was given) and the others, each seeded as the first is (from its own coordinates).
    let mut list = grids.finish()?.into_iter();
    let first = list.next().expect("finish gives at least one grid");
    (init.topology, init.grid_name) = (first.config, first.name);
    init.grids = list.map(|g| runtime::GridSpec { name: g.name, topology: g.config, seed: init.seed }).collect();
    let fail = match (fail_rank, window, fail_at) {
        (Some(ranks), window, at) if cycles == 1 => {
            Some(recovery::FailOptions { ranks, at: at.unwrap_or(recovery::FailAt::After), window })
        }
        (Some(_), ..) => return Err("--fail-rank runs one cycle: drop --cycles".into()),
        (None, Some(_), _) => return Err("--recovery-window needs --fail-rank R".into()),
        (None, _, Some(_)) => return Err("--fail-at needs --fail-rank R".into()),
        (None, None, None) => None,
    };
    // A recovery run reports in JSON (every rank's outcome: recovered, left, or the refusal), as
    // the scripts that drive it read it; the human line is its "line" field.
    let json = json || fail.is_some();
    if (suspend.is_some() || suspend_each) && (fail.is_some() || cycles > 1) {
        return Err("--suspend-resume and --suspend-each-kind run one cycle without --fail-rank".into());
    }
    if suspend.is_some() && suspend_each {
        return Err("--suspend-resume and --suspend-each-kind: choose one".into());
    }
    if groups.specs.is_empty()
        && (groups.timeout.is_some() || groups.absent.is_some() || groups.order.is_some() || groups.wait_in_start_order)
    {
        return Err("--group-order, --group-timeout and --group-absent need --group NAME:R1,R2,...".into());
    }
    if !groups.specs.is_empty() && fail.is_some() {
        return Err("--group and --fail-rank do not go together".into());
    }
    Ok(Some(Options { init, cycles, json, fail, suspend, suspend_each, groups }))
}

/// Open file descriptors and threads of this process.
fn fds_and_threads() -> (usize, usize) {
    let count = |dir: &str| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    (count("/proc/self/fd"), count("/proc/self/task"))
}

/// All-reduce `[rank, 1]` over every kind's communicator (aliased kinds included) and compare
/// with the members the topology lists for that kind.
fn verify_every_kind(rt: &Runtime) -> Result<usize, String> {
    for g in &rt.groups {
        verify_group(g, rt.env.rank).map_err(|mut e| {
            e.error = rt.explain_collective(e.error);
            e.to_string()
        })?;
    }
    Ok(rt.groups.len())
}

/// With RNG seeded: every group all-reduces this rank's actual `default` and (when present)
/// `model-parallel-rng` seeds; the sum must equal the seeds the policy predicts for the members,
/// so ranks that must differ (tp peers) and ranks that must agree (replicas) are both checked.
fn verify_rng(rt: &Runtime, args: &InitArgs) -> Result<usize, String> {
    let mut checked = 0;
    for (grid, (_, _, seed)) in rt.grids.iter().zip(args.all_grids()) {
        checked += verify_grid_rng(rt, grid, seed, args)?;
    }
    Ok(checked)
}

/// [`verify_rng`] of one grid: its seeds predicted from the members' coordinates in it.
fn verify_grid_rng(rt: &Runtime, grid: &runtime::Grid, seed: Option<i64>, args: &InitArgs) -> Result<usize, String> {
    let (Some(rng), Some(seed)) = (&grid.rng, seed) else { return Ok(0) };
    let predicted = |rank: u32| {
        rank_stream_seeds(&grid.topology, rank, &args.seed_policy, seed, args.data_parallel_random_init)
            .map_err(|e| format!("rank {rank}: {e}"))
    };
    let names: Vec<String> = predicted(rt.env.rank)?
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n == "default" || n == "model-parallel-rng")
        .collect();
    let actual: Vec<i64> = {
        let rng = rng.lock().map_err(|_| "RNG lock poisoned".to_string())?;
        names
            .iter()
            .map(|n| rng.tracker().state(n).map(|s| s.seed as i64).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?
    };
    for g in rt.groups.iter().filter(|g| g.plan.grid == grid.tag) {
        let mut values = actual.clone();
        let mut comm = g.comm.lock().map_err(|_| format!("{}: communicator lock poisoned", g.plan.kind))?;
        comm.allreduce_sum_i64(&mut values).map_err(|e| format!("{}: RNG all-reduce failed: {e}", g.plan.kind))?;
        let mut want = vec![0i64; names.len()];
        for &m in &g.plan.members {
            let seeds = predicted(m)?;
            for (w, name) in want.iter_mut().zip(&names) {
                *w += seeds.iter().find(|(n, _)| n == name).map(|(_, s)| *s as i64).unwrap_or(0);
            }
        }
        if values != want {
            return Err(format!(
                "{}: sum of the members' {names:?} seeds is {values:?}, the {} policy predicts {want:?}",
                g.plan.name(),
                args.seed_policy
            ));
        }
    }
    Ok(names.len())
}

fn report(rt: &Runtime, init_seconds: f64, ready: f64, checked: usize) -> Value {
    let t = rt.timings;
    json!({
        "rank": rt.env.rank,
        "world_size": rt.env.world_size,
        // Where this rank runs and the address it advertised to its peers, and why.
        "host": {"name": rt.host.hostname, "addr": rt.host.addr.to_string(), "why": rt.host.why},
        "ok": true,
        "backend": rt.backend_name,
        "strategy": rt.strategy.to_string(),
        "groups": checked,
        "communicators": rt.communicators,
        "init_seconds": init_seconds,
        "ready_since_process_start_s": ready,
        "store_round_trips": rt.store_round_trips(),
        "phases_s": {
            "store": t.store.as_secs_f64(), "checkin": t.checkin.as_secs_f64(),
            "groups": t.groups.as_secs_f64(), "world": t.world.as_secs_f64(), "verify": t.verify.as_secs_f64(),
        },
        // Per kind: the time this rank spent creating its communicator (split collective or init).
        "create_s": rt.groups.iter().map(|g| (g.plan.key(), json!(g.created_in.as_secs_f64()))).collect::<serde_json::Map<_, _>>(),
        // Kinds whose groups use another kind's communicator (same members and options).
        "reused_kinds": rt.groups.iter().filter(|g| g.comm_name != g.plan.name()).map(|g| g.plan.key()).collect::<Vec<_>>(),
        "kinds": rt.groups.iter().map(|g| g.plan.key()).collect::<Vec<_>>(),
        "grids": rt.grids.iter().map(|g| g.name.clone()).collect::<Vec<_>>(),
        // Per kind: the members of this rank's group (what was verified).
        "members": rt.groups.iter().map(|g| (g.plan.key(), json!(g.plan.members))).collect::<serde_json::Map<_, _>>(),
    })
}

/// The memory a backend reports, as JSON (null when unknown).
fn memory_json(m: Option<mcore_init::backend::CommMemory>) -> Value {
    m.map_or(Value::Null, |m| {
        json!({"suspendable": m.suspendable, "persistent": m.persistent, "total": m.total, "suspended": m.suspended})
    })
}

/// Suspend what `req` names, check that a suspended communicator refuses an all-reduce naming
/// its kind, resume (timed; the runtime verifies what it resumed), then verify every kind again.
fn suspend_resume(req: &SuspendRequest) -> Result<Value, String> {
    let suspended: SuspendReport = runtime::suspend(req).map_err(|e| format!("suspend: {e}"))?;
    if suspended.communicators.is_empty() {
        return Err(format!("suspend of {req:?} suspended no communicator of this rank"));
    }
    // Every group of a suspended communicator must refuse, naming the kind as suspended.
    let refused = runtime::with_runtime(|rt| {
        let mut refused = 0;
        for g in &rt.groups {
            if !suspended.communicators.iter().any(|c| c.name == g.comm_name) {
                continue;
            }
            match verify_group(g, rt.env.rank) {
                Ok(()) => return Err(format!("{}: an all-reduce on a suspended communicator worked", g.plan.kind)),
                Err(e)
                    if e.error.message.contains("suspended") && e.error.message.contains(&g.plan.kind.to_string()) =>
                {
                    refused += 1
                }
                Err(e) => return Err(format!("{}: a suspended communicator failed otherwise: {e}", g.plan.kind)),
            }
        }
        Ok(refused)
    })
    .map_err(|e| e.to_string())??;
    let me = std::env::var("RANK").ok();
    if me.is_some() && std::env::var(SKIP_RESUME_ENV).ok() == me {
        eprintln!("mcore-selftest: not coming to the resume ({SKIP_RESUME_ENV})");
        std::thread::sleep(Duration::from_secs(20));
        std::process::exit(3);
    }
    let resumed = runtime::resume(req).map_err(|e| format!("resume: {e}"))?;
    if resumed.communicators.len() != suspended.communicators.len() {
        return Err(format!(
            "suspended {} communicators but resumed {}",
            suspended.communicators.len(),
            resumed.communicators.len()
        ));
    }
    let verified_all = runtime::with_runtime(verify_every_kind).map_err(|e| e.to_string())??;
    let per_comm: Vec<Value> = suspended
        .communicators
        .iter()
        .filter_map(|s| resumed.communicators.iter().find(|r| r.name == s.name).map(|r| (s, r)))
        .map(|(s, r)| {
            json!({
                "name": s.name, "kinds": s.kinds, "mode": s.mode.to_string(),
                "memory": memory_json(s.memory), "memory_suspended": memory_json(s.memory_suspended),
                "suspend_s": s.took.as_secs_f64(), "resume_s": r.took.as_secs_f64(),
            })
        })
        .collect();
    Ok(json!({
        "communicators": per_comm,
        "suspend_s": suspended.took.as_secs_f64(),
        "resume_s": resumed.took.as_secs_f64(),
        "verified_after_resume": resumed.verified,
        "groups_verified_after": verified_all,
        "refused_while_suspended": refused,
    }))
}

/// Every rank meets at the barrier `key` (at most 120 s).
fn store_barrier(rt: &Runtime, key: &str) -> Result<(), String> {
    rt.barrier(key, Duration::from_secs(120)).map_err(|e| format!("store barrier {key}: {e}"))
}

/// The device's free bytes (NCCL backend only: `cuMemGetInfo` on the init's device).
fn device_free(args: &InitArgs) -> Option<u64> {
    if args.backend != "nccl" {
        return None;
    }
    let driver = mcore_init::backend::nccl::loader::cuda::CudaDriver::global().ok()?;
    let ordinal = args.device.unwrap_or(0) as i32;
    driver.mem_get_info(ordinal)?.ok().map(|(free, _)| free as u64)
}

/// See `Options::suspend_each`: per kind, the communicators this rank suspended and (rank 0) the
/// device memory that came free; then every kind resumed and verified.
fn suspend_each_kind(args: &InitArgs) -> Result<Value, String> {
    let (kinds, rank) = runtime::with_runtime(|rt| {
        let kinds: Vec<String> = rt.topology().kinds().into_iter().map(|k| k.key().into_owned()).collect();
        (kinds, rt.env.rank)
    })
    .map_err(|e| e.to_string())?;
    let barrier = |key: String| runtime::with_runtime(|rt| store_barrier(rt, &key)).map_err(|e| e.to_string())?;
    let mut steps = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        barrier(format!("suspend_each/{i}/before"))?;
        let before = if rank == 0 { device_free(args) } else { None };
        barrier(format!("suspend_each/{i}/measured"))?;
        let report =
            runtime::suspend(&SuspendRequest::kinds([kind.as_str()])).map_err(|e| format!("suspend {kind}: {e}"))?;
        barrier(format!("suspend_each/{i}/suspended"))?;
        let after = if rank == 0 { device_free(args) } else { None };
        steps.push(json!({
            "kind": kind,
            "communicators": report.communicators.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            "modes": report.communicators.iter().map(|c| c.mode.to_string()).collect::<Vec<_>>(),
            "suspend_s": report.took.as_secs_f64(),
            "device_freed_bytes": before.zip(after).map(|(b, a)| a as i64 - b as i64),
        }));
    }
    barrier("suspend_each/resume".into())?;
    let before_resume = if rank == 0 { device_free(args) } else { None };
    let resumed = runtime::resume(&SuspendRequest::all()).map_err(|e| format!("resume: {e}"))?;
    barrier("suspend_each/resumed".into())?;
    let after_resume = if rank == 0 { device_free(args) } else { None };
    let verified_all = runtime::with_runtime(verify_every_kind).map_err(|e| e.to_string())??;
    Ok(json!({
        "steps": steps,
        "resume_s": resumed.took.as_secs_f64(),
        "resumed": resumed.communicators.len(),
        "device_taken_by_resume_bytes": before_resume.zip(after_resume).map(|(b, a)| b as i64 - a as i64),
        "groups_verified_after": verified_all,
    }))
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
        let mut line = report(rt, init_seconds, ready, checked);
        line["rng_streams_verified"] = json!(rng_streams);
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
        let made = after_init::run(groups).inspect_err(|_| {
            let _ = runtime::destroy();
        })?;
        line["after_init_groups"] = made;
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
    let opts = match common::cli::utf8_args(std::env::args_os().skip(1)).and_then(|argv| parse_args(&argv)) {
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
                let line =
                    json!({"rank": rank, "host": {"name": runtime::host::hostname()}, "ok": false, "error": msg});
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

/// `--fail-rank`: kill ranks before, during or after init, and recover on the survivors.
mod recovery {
    use super::{verify_every_kind, verify_rng};
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
            return Err(
                "--fail-rank 0: rank 0 hosts the rendezvous store, which recovery needs; pick another rank".into()
            );
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
        super::fault::at(super::fault::Point::Recover);
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
                let mut out = super::report(rt, seconds, f64::NAN, checked);
                out["rng_streams_verified"] = json!(rng_streams);
                out["recovered"] = json!(true);
                let human = super::human::rank_line(rt, &out);
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
}

/// The human output: one line per rank, rank 0's per-kind creation-time table.
mod human {
    use mcore_init::runtime::Runtime;
    use mcore_init::topology::GroupKind;
    use serde_json::Value;
    use std::fmt::Write as _;

    /// `text` cut to at most `max` characters (an ellipsis marks the cut).
    pub fn shorten(text: &str, max: usize) -> String {
        if text.chars().count() <= max {
            return text.to_string();
        }
        let mut s: String = text.chars().take(max.saturating_sub(3)).collect();
        s.push_str("...");
        s
    }

    fn secs(v: &Value) -> f64 {
        v.as_f64().unwrap_or(f64::NAN)
    }

    /// `rank 3/8 ok  tp 1/2 pp 1/2 cp 0/2 dp 0/1 ep 0/1 | gloo split: 20 groups, 9 comms |
    /// init 0.412 s (store .. checkin .. groups .. verify ..) ready 0.501 s, 34 store trips`
    /// (under 200 characters).
    pub fn rank_line(rt: &Runtime, j: &Value) -> String {
        let rank = rt.env.rank;
        let mut coords = String::new();
        use GroupKind::*;
        for (name, kind) in [
            ("tp", TensorModelParallel),
            ("pp", PipelineModelParallel),
            ("cp", ContextParallel),
            ("dp", DataParallel),
            ("ep", ExpertModelParallel),
        ] {
            // A coordinate of a size-1 axis says nothing: left out, to keep the line short.
            if let Ok(Some(m)) = rt.topology().membership(kind, rank).map(|m| m.filter(|m| m.size() > 1)) {
                let _ = write!(coords, " {name} {}/{}", m.rank, m.size());
            }
        }
        let p = &j["phases_s"];
        let line = format!(
            "rank {rank}/{} @{}/{} ok{coords} | {} {}: {} groups, {} comms | init {:.3} s (store {:.3} checkin \
             {:.3} groups {:.3} verify {:.3}) ready {:.3} s, {} store trips",
            rt.env.world_size,
            rt.host.hostname,
            rt.host.addr,
            j["backend"].as_str().unwrap_or("?"),
            j["strategy"].as_str().unwrap_or("?"),
            j["groups"],
            j["communicators"],
            secs(&j["init_seconds"]),
            secs(&p["store"]),
            secs(&p["checkin"]),
            secs(&p["groups"]),
            secs(&p["verify"]),
            secs(&j["ready_since_process_start_s"]),
            j["store_round_trips"],
        );
        // Room for the launcher's `[rank N]: ` prefix within 200 characters.
        shorten(&line, 185)
    }

    /// Creation time per kind of this rank's communicators, slowest first, three to a line.
    pub fn create_table(j: &Value) -> String {
        let Some(map) = j["create_s"].as_object() else { return String::new() };
        // Kinds that reuse another kind's communicator: counted, not listed.
        let reused: Vec<&str> =
            j["reused_kinds"].as_array().map_or(Vec::new(), |v| v.iter().filter_map(Value::as_str).collect());
        let mut rows: Vec<(&String, f64)> =
            map.iter().filter(|(k, _)| !reused.contains(&k.as_str())).map(|(k, v)| (k, secs(v))).collect();
        rows.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
        let mut out = format!(
            "communicator creation per kind (rank {}, ms, slowest first; {} more kinds reuse one):\n",
            j["rank"],
            map.len() - rows.len()
        );
        for chunk in rows.chunks(3) {
            let cells: Vec<String> =
                chunk.iter().map(|(k, s)| format!("{:<36}{:>7.1}", shorten(k, 36), s * 1e3)).collect();
            let _ = writeln!(out, "  {}", cells.join("  ").trim_end());
        }
        out
    }
}

/// The live progress line of a large world: rank 0 reads every rank's check-in and
/// communicator-creation marks from the rendezvous store once a second (its own client
/// connection) and prints `init 3.0 s: 812/1024 ranks checked in; groups: step 2..5 (n ranks
/// done)` on stderr: rewritten in place on a terminal, a new line when it changes otherwise.
mod progress {
    use mcore_init::runtime::LaunchEnv;
    use mcore_init::store::{Store, TcpStore};
    use std::io::{IsTerminal, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    /// Worlds at least this large get the line (`MCORE_SELFTEST_PROGRESS_MIN` overrides).
    const DEFAULT_MIN_WORLD: u32 = 64;
    /// Most ranks one poll reads (two store requests each).
    const MAX_POLLED: u32 = 4096;

    pub struct Watcher {
        stop: Arc<AtomicBool>,
        handle: Option<JoinHandle<()>>,
    }

    impl Drop for Watcher {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            if let Some(h) = self.handle.take() {
                let _ = h.join();
            }
        }
    }

    pub fn start() -> Option<Watcher> {
        let env = LaunchEnv::from_process().ok()?;
        let min =
            std::env::var("MCORE_SELFTEST_PROGRESS_MIN").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_MIN_WORLD);
        if env.rank != 0 || env.world_size < min {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle =
            std::thread::Builder::new().name("selftest-progress".into()).spawn(move || watch(&env, &flag)).ok()?;
        Some(Watcher { stop, handle: Some(handle) })
    }

    fn sleep_unless(stop: &AtomicBool, d: Duration) -> bool {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if stop.load(Ordering::SeqCst) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        !stop.load(Ordering::SeqCst)
    }

    fn watch(env: &LaunchEnv, stop: &AtomicBool) {
        let start = Instant::now();
        // The first initialization of this process (epoch 0), as the runtime names its keys.
        let prefix = format!("mcore_init/{}/{}/0", env.run_id, env.restart_count);
        let tty = std::io::stderr().is_terminal();
        let mut store = None;
        let mut last = String::new();
        let mut first = true;
        while std::mem::take(&mut first) || sleep_unless(stop, Duration::from_secs(1)) {
            if store.is_none() {
                store = TcpStore::connect_with_token(
                    &env.master_addr,
                    env.master_port,
                    Duration::from_secs(1),
                    env.store_token.as_ref(),
                )
                .ok();
            }
            let Some(s) = &store else { continue };
            let n = env.world_size.min(MAX_POLLED);
            let (mut checked, mut steps) = (0u32, Vec::new());
            for r in 0..n {
                if s.check(&[&format!("{prefix}/{}", mcore_init::runtime::checkin::arrival_key(r))]).unwrap_or(false) {
                    checked += 1;
                }
                steps.push(s.add(&format!("{prefix}/progress/{r}"), 0).unwrap_or(0));
            }
            let (lo, hi) = (steps.iter().min().copied().unwrap_or(0), steps.iter().max().copied().unwrap_or(0));
            let sampled = if n < env.world_size { format!(" (first {n})") } else { String::new() };
            let text = format!(
                "init {:.0} s: {checked}/{n}{sampled} ranks checked in; communicators: creation step {lo}..{hi}",
                start.elapsed().as_secs_f64()
            );
            let body = text.split_once(": ").map_or("", |(_, b)| b).to_string();
            let mut err = std::io::stderr().lock();
            if tty {
                let _ = write!(err, "\r{text}\x1b[K");
            } else if body != last {
                let _ = writeln!(err, "{text}");
            }
            last = body;
        }
        if tty && !last.is_empty() {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// `--fault RANK:POINT:kill|stop` (the fault-injection suite, scripts/test.d/27-faults.sh): rank
/// RANK sends itself SIGKILL or SIGSTOP at POINT: `start` (before initialize), `checkin` (every
/// rank checked in, no communicator yet), `created` (communicators made, not yet verified),
/// `verify` (after initialize, as this tool's own verification begins), `destroy` (before
/// destroy), `recover` (a survivor of `--fail-rank`, as its recovery begins). The other ranks run on and must end within their deadline, naming it.
mod fault {
    use mcore_init::runtime::{self, InitPhase};
    use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    #[repr(u8)]
    pub enum Point {
        Start = 1,
        CheckIn = 2,
        Created = 3,
        Verify = 4,
        Destroy = 5,
        /// As a survivor of `--fail-rank` begins its recovery.
        Recover = 6,
    }

    /// The armed point (0: none) and signal of this process.
    static POINT: AtomicU8 = AtomicU8::new(0);
    static SIGNAL: AtomicI32 = AtomicI32::new(0);

    /// Parse `RANK:POINT:SIGNAL` and arm it when RANK is this process's `RANK`.
    pub fn arm(spec: &str) -> Result<(), String> {
        let bad = || format!("--fault: '{spec}' is not RANK:start|checkin|created|verify|destroy|recover:kill|stop");
        let mut parts = spec.split(':');
        let (Some(rank), Some(point), Some(signal), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let rank: u32 = rank.trim().parse().map_err(|_| bad())?;
        let point = match point {
            "start" => Point::Start,
            "checkin" => Point::CheckIn,
            "created" => Point::Created,
            "verify" => Point::Verify,
            "destroy" => Point::Destroy,
            "recover" => Point::Recover,
            _ => return Err(bad()),
        };
        let signal = match signal {
            "kill" => libc::SIGKILL,
            "stop" => libc::SIGSTOP,
            _ => return Err(bad()),
        };
        if std::env::var("RANK").ok().and_then(|r| r.parse::<u32>().ok()) == Some(rank) {
            POINT.store(point as u8, Ordering::SeqCst);
            SIGNAL.store(signal, Ordering::SeqCst);
            runtime::set_phase_hook(Some(on_phase));
        }
        Ok(())
    }

    fn on_phase(phase: InitPhase) {
        at(match phase {
            InitPhase::CheckedIn => Point::CheckIn,
            InitPhase::Created => Point::Created,
        });
    }

    /// Send the armed signal to this process if `point` is the armed one.
    pub fn at(point: Point) {
        if POINT.load(Ordering::SeqCst) == point as u8 {
            crate::common::os::signal_self(SIGNAL.load(Ordering::SeqCst));
        }
    }
}

/// `--group NAME:R1,R2,...`: groups made after init by their members only. Each rank starts
/// the groups it is a member of (in the order given, or shuffled per rank), then waits for each
/// (in name order, or `--group-wait start` in the order started) and verifies it with an all-reduce whose result the members predict; ranks
/// that are members of none do nothing.
mod after_init {
    use mcore_init::runtime::{self, GroupOptions, GroupSpec};
    use serde_json::{json, Value};
    use std::time::{Duration, Instant};

    #[derive(Default)]
    pub struct GroupRun {
        pub specs: Vec<GroupSpec>,
        /// `shuffled:SEED`: each rank shuffles its groups with SEED and its rank (`None`: as given).
        pub order: Option<u64>,
        pub timeout: Option<Duration>,
        /// Test aid: this rank never calls create_group (as if it hung); its peers must fail
        /// within the deadline, naming it.
        pub absent: Option<u32>,
        /// `--group-wait start`: wait for the groups in the order started, which only a backend
        /// that creates in the background allows (the Gloo plugin); `name` (the default): in
        /// name order, which every backend allows.
        pub wait_in_start_order: bool,
    }

    /// `NAME:R1,R2,...` (a rank may be a range `A-B`).
    pub fn parse_group(v: &str) -> Result<GroupSpec, String> {
        let (name, list) = v.split_once(':').ok_or_else(|| format!("--group '{v}': expected NAME:R1,R2,..."))?;
        let mut ranks = Vec::new();
        for part in list.split(',') {
            let num = |s: &str| {
                s.trim().parse::<u32>().map_err(|_| format!("--group '{v}': '{s}' is not a rank (a number, or A-B)"))
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(format!("--group '{v}': range '{part}' runs backwards"));
                    }
                    ranks.extend(a..=b);
                }
                None => ranks.push(num(part)?),
            }
        }
        Ok(GroupSpec::new(name, ranks))
    }

    /// `given` or `shuffled:SEED`.
    pub fn parse_order(v: &str) -> Result<Option<u64>, String> {
        match v.split_once(':') {
            None if v == "given" => Ok(None),
            Some(("shuffled", seed)) => seed
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| format!("--group-order '{v}': the seed '{seed}' is not a number")),
            _ => Err(format!("--group-order '{v}': expected given or shuffled:SEED")),
        }
    }

    /// `items` shuffled by a small generator seeded with `seed` (Fisher-Yates, splitmix64).
    fn shuffle<T>(items: &mut [T], seed: u64) {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for i in (1..items.len()).rev() {
            let j = (next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }

    /// Start this rank's groups, wait for each (in name order, or as started), verify each (in
    /// name order):
    /// per group its name, ranks and seconds until ready (from the first start), in the order
    /// started.
    pub fn run(g: &GroupRun) -> Result<Value, String> {
        let rank = runtime::with_runtime(|rt| rt.env.rank).map_err(|e| e.to_string())?;
        if g.absent == Some(rank) {
            eprintln!("mcore-selftest: rank {rank} makes no group after init (--group-absent)");
            return Ok(json!([]));
        }
        let mut mine: Vec<&GroupSpec> = g.specs.iter().filter(|s| s.ranks.contains(&rank)).collect();
        if let Some(seed) = g.order {
            shuffle(&mut mine, seed ^ (u64::from(rank) << 32));
        }
        let options = GroupOptions { timeout: g.timeout, ..GroupOptions::default() };
        let start = Instant::now();
        let started = mine
            .iter()
            .map(|s| runtime::start_group(&s.name, &s.ranks, &options))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        let failed = |e: runtime::RuntimeError| {
            format!("{e} (after init, {:.2} s after starting the groups)", start.elapsed().as_secs_f64())
        };
        // Creation waits in the order started (any order is safe); collectives then run in one
        // order every member shares (by name), as collectives on several groups must.
        let mut by_name: Vec<usize> = (0..started.len()).collect();
        by_name.sort_by(|&a, &b| started[a].name().cmp(started[b].name()));
        let wait_order: Vec<usize> = if g.wait_in_start_order { (0..started.len()).collect() } else { by_name.clone() };
        let mut ready = vec![0.0; started.len()];
        for &i in &wait_order {
            started[i].wait().map_err(failed)?;
            ready[i] = start.elapsed().as_secs_f64();
        }
        for &i in &by_name {
            started[i].verify().map_err(failed)?;
        }
        for (m, ready) in started.iter().zip(ready) {
            out.push(json!({"name": m.name(), "ranks": m.ranks(), "ready_s": ready}));
        }
        for m in &started {
            runtime::destroy_group(m.name()).map_err(|e| e.to_string())?;
        }
        Ok(Value::Array(out))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn groups_and_orders_parse() {
            let g = parse_group("ws:0,8,12").unwrap();
            assert_eq!((g.name.as_str(), g.ranks), ("ws", vec![0, 8, 12]));
            assert_eq!(parse_group("a:0-2,5").unwrap().ranks, vec![0, 1, 2, 5]);
            assert!(parse_group("a").unwrap_err().contains("NAME:R1"));
            assert!(parse_group("a:x").unwrap_err().contains("'x' is not a rank"));
            assert_eq!(parse_order("shuffled:7").unwrap(), Some(7));
            assert!(parse_order("random").is_err());
            let mut v: Vec<u32> = (0..10).collect();
            shuffle(&mut v, 3);
            let mut sorted = v.clone();
            sorted.sort();
            assert_eq!(sorted, (0..10).collect::<Vec<_>>());
            assert_ne!(v, sorted, "a shuffle of 10 with seed 3 moves something");
        }
    }
}
