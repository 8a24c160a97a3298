//! Verifying a runtime's communicators and RNG seeds, and the JSON report of a rank.

use mcore_init::rng::layout::rank_stream_seeds;
use mcore_init::runtime::groups::verify_group;
use mcore_init::runtime::{self, InitArgs, Runtime};
use mcore_init::topology::MindSpeedLayout;
use serde_json::{json, Value};

/// All-reduce `[rank, 1]` over every kind's communicator (aliased kinds included) and compare
/// with the members the topology lists for that kind.
pub(crate) fn verify_every_kind(rt: &Runtime) -> Result<usize, String> {
    for g in &rt.groups {
        verify_group(g, rt.env.rank).map_err(|mut e| {
            e.error = rt.explain_collective(e.error);
            e.to_string()
        })?;
    }
    Ok(rt.groups.len())
}

/// With MindSpeed's options: every step of MindSpeed's creation sequence, recomputed here from
/// the options and the layout, has this rank's group in the runtime with the members the
/// topology layer gives (ascending), and its own communicator (not shared with another group),
/// which `verify_every_kind` all-reduced over. The number of MindSpeed groups checked.
pub(crate) fn verify_mindspeed(rt: &Runtime, args: &InitArgs) -> Result<usize, String> {
    let Some(options) = &args.mindspeed else { return Ok(0) };
    let layout = MindSpeedLayout::new(&rt.grids[0].topology, options.clone()).map_err(|e| e.to_string())?;
    let rank = rt.env.rank;
    let mine = layout.rank_groups(rank).map_err(|e| e.to_string())?;
    let mut checked = 0;
    for (kind, copy) in layout.steps() {
        let expected = mine.iter().find(|g| g.kind == kind && g.copy == copy).map(|g| {
            let mut m = g.ranks.clone();
            m.sort_unstable();
            m
        });
        let live = rt.mindspeed_group(kind, copy);
        match (expected, live) {
            (None, None) => {}
            (Some(m), Some(g)) if g.plan.members == m && g.comm_name == g.plan.name() => checked += 1,
            (Some(m), Some(g)) => {
                return Err(format!(
                    "rank {rank}: MindSpeed group {} has members {:?} on communicator {} (expected {m:?} on its own)",
                    g.plan.name(),
                    g.plan.members,
                    g.comm_name
                ))
            }
            (e, l) => {
                return Err(format!(
                    "rank {rank}: MindSpeed {kind} copy {copy}: expected {e:?}, the runtime has {:?}",
                    l.map(|g| &g.plan.members)
                ))
            }
        }
    }
    if checked != mine.len() {
        return Err(format!("rank {rank}: {checked} MindSpeed groups checked of the {} it is in", mine.len()));
    }
    Ok(checked)
}

/// With RNG seeded: every group all-reduces this rank's actual `default` and (when present)
/// `model-parallel-rng` seeds; the sum must equal the seeds the policy predicts for the members,
/// so ranks that must differ (tp peers) and ranks that must agree (replicas) are both checked.
pub(crate) fn verify_rng(rt: &Runtime, args: &InitArgs) -> Result<usize, String> {
    let mut checked = 0;
    for (grid, (_, _, seed)) in rt.grids.iter().zip(args.all_grids()) {
        checked += verify_grid_rng(rt, grid, seed, args)?;
    }
    Ok(checked)
}

/// [`verify_rng`] of one grid: its seeds predicted from the members' coordinates in it.
pub(crate) fn verify_grid_rng(
    rt: &Runtime,
    grid: &runtime::Grid,
    seed: Option<i64>,
    args: &InitArgs,
) -> Result<usize, String> {
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
        let mut comm = mcore_init::runtime::groups::lock_comm(&g.comm).map_err(|e| format!("{}: {e}", g.plan.kind))?;
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

pub(crate) fn report(rt: &Runtime, init_seconds: f64, ready: f64, checked: usize) -> Value {
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
        // How the ranks found rank 0's store: "pmix" (published through the launcher's PMIx
        // server) or "tcp-store" (MASTER_ADDR:MASTER_PORT, or what stands in for them).
        "rendezvous": rt.env.rendezvous.name(),
        // On the store's host (rank 0): requests its server served so far, from every rank.
        "store_requests_served": rt.store_requests_served(),
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
pub(crate) fn memory_json(m: Option<mcore_init::backend::CommMemory>) -> Value {
    m.map_or(Value::Null, |m| {
        json!({"suspendable": m.suspendable, "persistent": m.persistent, "total": m.total, "suspended": m.suspended})
    })
}
