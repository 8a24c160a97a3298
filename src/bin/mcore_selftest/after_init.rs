//!
//! `--group NAME:R1,R2,...`: groups made after init by their members only. Each rank starts
//! the groups it is a member of (in the order given, or shuffled per rank), then waits for each
//! (in name order, or `--group-wait start` in the order started) and verifies it with an all-reduce whose result the members predict; ranks
//! that are members of none do nothing.

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
        Some(("shuffled", seed)) => {
            seed.trim().parse().map(Some).map_err(|_| format!("--group-order '{v}': the seed '{seed}' is not a number"))
        }
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
