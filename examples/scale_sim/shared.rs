//! Shared by the store load generator (`examples/store_scale.rs`) and the scale simulator: the
//! communicator groups of a Megatron-Core layout at tp 8, pp 4, and a process's CPU time.

/// Tensor- and pipeline-parallel sizes of the simulated layout (cp 1, ep 1, dp the rest).
pub const TP: usize = 8;
pub const PP: usize = 4;

/// Rank `r`'s communicator groups in a world of `n` (a multiple of `TP * PP`): (kind, group
/// id within the kind, the group's first rank), for the world and Megatron-Core's tp, dp,
/// dp-with-cp, pp, model-parallel and tensor-and-data groups.
pub fn megatron_groups(r: usize, n: usize) -> [(&'static str, usize, usize); 7] {
    let dp = n / (TP * PP);
    let (t, d, p) = (r % TP, (r / TP) % dp, r / (TP * dp));
    let at = |t: usize, d: usize, p: usize| t + TP * (d + dp * p);
    [
        ("world", 0, 0),
        ("tp", d + dp * p, at(0, d, p)),
        ("dp", t + TP * p, at(t, 0, p)),
        ("dp_cp", t + TP * p, at(t, 0, p)),
        ("pp", t + TP * d, at(t, d, 0)),
        ("mp", d, at(0, d, 0)),
        ("tp_dp", p, at(0, 0, p)),
    ]
}

/// User + system CPU seconds process `pid` has used (`/proc/PID/stat` fields 14 and 15).
pub fn cpu_s(pid: &str) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}
