//! `mcore-topo --mindspeed KEY=VALUE,...`: MindSpeed's extra groups of the layout, or of one
//! rank (docs/topology.md, "MindSpeed's groups").

use mcore_init::topology::{MindSpeedGroup, MindSpeedLayout, RankLists};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// Most ranks the whole-layout report lists (as for Megatron's groups).
pub fn check_size(ms: &MindSpeedLayout, world: u32, max: u64) -> Result<(), String> {
    let listed = u64::from(world) * ms.steps().len() as u64;
    if listed > max {
        return Err(format!(
            "MindSpeed's groups would list {listed} ranks, more than the {max} this tool prints; use --rank R"
        ));
    }
    Ok(())
}

fn about(ms: &MindSpeedLayout) -> Value {
    let kinds: Vec<Value> = ms.kinds().iter().map(|&k| json!({"kind": k.name(), "copies": ms.copies(k)})).collect();
    json!({"context_parallel_algo": ms.algo().name(), "creation_sequence_rank_independent": true, "kinds": kinds})
}

/// `"mindspeed"` (the validated algorithm, the kinds in creation order) and
/// `"mindspeed_groups"`: for each kind its rank lists in MindSpeed's creation order, as MindSpeed
/// passes them to `new_group`.
pub fn layout_json(ms: &MindSpeedLayout, out: &mut Map<String, Value>) -> Result<(), String> {
    let mut groups = Map::new();
    for g in ms.creation_sequence().map_err(|e| e.to_string())? {
        let lists = groups.entry(g.kind.name()).or_insert_with(|| Value::Array(Vec::new()));
        lists.as_array_mut().expect("an array").push(json!(g.ranks));
    }
    out.insert("mindspeed".into(), about(ms));
    out.insert("mindspeed_groups".into(), Value::Object(groups));
    Ok(())
}

fn lists_of(l: &RankLists) -> Vec<(&'static str, &Vec<u32>)> {
    [
        ("ring_inter_window_kv", &l.ring_inter_window_kv),
        ("ring_inter_window_dkv", &l.ring_inter_window_dkv),
        ("tp_x_ring", &l.tp_x_ring),
        ("tp_y_ring", &l.tp_y_ring),
        ("tp_y_cp", &l.tp_y_cp),
        ("expert_model_parallel", &l.expert_model_parallel),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .collect()
}

/// The rank's place in a group: its index in communicator order (ascending ranks).
fn group_rank(g: &MindSpeedGroup, rank: u32) -> usize {
    g.ranks.iter().filter(|&&r| r < rank).count()
}

/// `"mindspeed_groups"`: the rank's group of each kind (`ranks` as MindSpeed passes them,
/// `rank` its place in communicator order, `copies`), and `"mindspeed_rank_lists"`.
pub fn rank_json(ms: &MindSpeedLayout, rank: u32, out: &mut Map<String, Value>) -> Result<(), String> {
    let mut groups = Map::new();
    for g in ms.rank_groups(rank).map_err(|e| e.to_string())?.iter().filter(|g| g.copy == 0) {
        groups.insert(
            g.kind.name().into(),
            json!({"ranks": g.ranks, "index": g.index, "rank": group_rank(g, rank), "size": g.ranks.len(),
                   "copies": ms.copies(g.kind)}),
        );
    }
    let lists = ms.rank_lists(rank).map_err(|e| e.to_string())?;
    let lists: Map<String, Value> = lists_of(&lists).into_iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    out.insert("mindspeed".into(), about(ms));
    out.insert("mindspeed_groups".into(), Value::Object(groups));
    out.insert("mindspeed_rank_lists".into(), Value::Object(lists));
    Ok(())
}

fn list(ranks: &[u32]) -> String {
    let items: Vec<String> = ranks.iter().map(u32::to_string).collect();
    format!("[{}]", items.join(","))
}

/// The whole layout's MindSpeed groups as a table (kinds in creation order).
pub fn layout_table(ms: &MindSpeedLayout) -> Result<String, String> {
    let mut out = format!("\nMindSpeed groups (context_parallel_algo {})\n", ms.algo());
    let seq = ms.creation_sequence().map_err(|e| e.to_string())?;
    if seq.is_empty() {
        out.push_str("  none with these options\n");
    }
    for kind in ms.kinds() {
        let lists: Vec<String> = seq.iter().filter(|g| g.kind == kind).map(|g| list(&g.ranks)).collect();
        let _ = writeln!(out, "{:<24} {:>8}  {}", kind.name(), lists.len(), lists.join(" "));
    }
    Ok(out)
}

/// One rank's MindSpeed groups and stored lists as a table.
pub fn rank_table(ms: &MindSpeedLayout, rank: u32) -> Result<String, String> {
    let mut out = format!("\nMindSpeed groups of rank {rank} (context_parallel_algo {})\n", ms.algo());
    let groups = ms.rank_groups(rank).map_err(|e| e.to_string())?;
    if groups.is_empty() {
        out.push_str("  none with these options\n");
    }
    for g in groups.iter().filter(|g| g.copy == 0) {
        let copies = match ms.copies(g.kind) {
            1 => String::new(),
            n => format!(" x{n}"),
        };
        let rs = format!("{}/{}", group_rank(g, rank), g.ranks.len());
        let _ = writeln!(out, "{:<24} {:>8} {:>11}  {}{copies}", g.kind.name(), g.index, rs, list(&g.ranks));
    }
    for (name, ranks) in lists_of(&ms.rank_lists(rank).map_err(|e| e.to_string())?) {
        let _ = writeln!(out, "{:<24} {:>8} {:>11}  {}", name, "list", "", list(ranks));
    }
    Ok(out)
}
