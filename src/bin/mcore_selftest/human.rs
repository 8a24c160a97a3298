//!
//! The human output: one line per rank, rank 0's per-kind creation-time table.

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
    if rows.iter().all(|(_, s)| s * 1e3 < 0.05) {
        // Every cell would read 0.0 (a world of one, communicators reused): nothing to tell.
        return String::new();
    }
    let mut out = format!(
        "communicator creation per kind (rank {}, ms, slowest first; {} more kinds reuse one):\n",
        j["rank"],
        map.len() - rows.len()
    );
    for chunk in rows.chunks(3) {
        let cells: Vec<String> = chunk.iter().map(|(k, s)| format!("{:<36}{:>7.1}", shorten(k, 36), s * 1e3)).collect();
        let _ = writeln!(out, "  {}", cells.join("  ").trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_table_of_zeros_is_not_printed() {
        let zeros = json!({"rank": 0, "create_s": {"tensor_model_parallel": 1.3e-5, "data_parallel": 2e-6}});
        assert_eq!(create_table(&zeros), "");
        let slow = json!({"rank": 0, "create_s": {"tensor_model_parallel": 0.25, "data_parallel": 2e-6}});
        let table = create_table(&slow);
        assert!(table.starts_with("communicator creation per kind (rank 0, ms") && table.contains("250.0"), "{table}");
    }
}
