//! `--suspend-resume` and `--suspend-each-kind`: suspend communicators, check that they refuse
//! work, resume them and verify every kind again.

use crate::verify::{memory_json, verify_every_kind};
use mcore_init::runtime::groups::verify_group;
use mcore_init::runtime::{self, InitArgs, Runtime, SuspendReport, SuspendRequest};
use serde_json::{json, Value};
use std::time::Duration;

/// Test hook: the rank named here does not come to `--suspend-resume`'s resume (it sleeps 20 s,
/// then exits); the others' resume must fail within its timeout, naming it.
const SKIP_RESUME_ENV: &str = "MCORE_SELFTEST_SKIP_RESUME";

/// Suspend what `req` names, check that a suspended communicator refuses an all-reduce naming
/// its kind, resume (timed; the runtime verifies what it resumed), then verify every kind again.
pub(crate) fn suspend_resume(req: &SuspendRequest) -> Result<Value, String> {
    let suspended: SuspendReport = runtime::suspend(req).map_err(|e| format!("suspend: {e}"))?;
    if suspended.communicators.is_empty() {
        return Err(format!("suspend of {req:?} suspended no communicator of this rank"));
    }
    // Every group of a suspended communicator must refuse, naming the kind as suspended; every
    // other group (plan order on every rank: collective) must still all-reduce right.
    let (refused, usable) = runtime::with_runtime(|rt| {
        let (mut refused, mut usable) = (0, 0);
        for g in &rt.groups {
            if !suspended.communicators.iter().any(|c| c.name == g.comm_name) {
                verify_group(g, rt.env.rank)
                    .map_err(|e| format!("{}: not suspended, but unusable while others are: {e}", g.plan.kind))?;
                usable += 1;
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
        Ok((refused, usable))
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
                "freed_bytes": s.freed, "reason": s.reason,
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
        "usable_while_suspended": usable,
        "kept_shared": suspended.kept_shared.iter().map(|k| json!({
            "name": k.name, "kinds": k.kinds, "running_grids": k.running_grids,
        })).collect::<Vec<_>>(),
    }))
}

/// Every rank meets at the barrier `key` (at most 120 s).
pub(crate) fn store_barrier(rt: &Runtime, key: &str) -> Result<(), String> {
    rt.barrier(key, Duration::from_secs(120)).map_err(|e| format!("store barrier {key}: {e}"))
}

/// The device's free bytes (NCCL backend only: `cuMemGetInfo` on the init's device).
pub(crate) fn device_free(args: &InitArgs) -> Option<u64> {
    if args.backend != "nccl" {
        return None;
    }
    let driver = mcore_init::backend::nccl::loader::cuda::CudaDriver::global().ok()?;
    let ordinal = args.device.unwrap_or(0) as i32;
    driver.mem_get_info(ordinal)?.ok().map(|(free, _)| free as u64)
}

/// See `Options::suspend_each`: per kind, the communicators this rank suspended and (rank 0) the
/// device memory that came free; then every kind resumed and verified.
pub(crate) fn suspend_each_kind(args: &InitArgs) -> Result<Value, String> {
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
