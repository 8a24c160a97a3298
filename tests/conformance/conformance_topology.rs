//! Conformance of the topology engine with Megatron-Core 0.16.1 and 0.19.2: every group of every
//! kind, every per-rank query that maps to our API, and every accept/reject decision, read at test
//! time from `tests/data/conformance/{,v0.19.2/}megatron_groups.json.gz` (see docs/conformance.md,
//! which also lists the documented deviations from 0.19.2's defects checked here).

use crate::common;

use mcore_init::topology::{GroupKind, Topology, TopologyConfig};
use serde_json::Value;
use std::collections::BTreeMap;

/// Which Megatron-Core release a vector file comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Version {
    V0_16_1,
    V0_19_2,
}

/// Config fields outside our scope; a config using any of them is skipped (counted by reason).
/// 0.19.2's options (gtp, egtp, local world, rank offset) are in scope for its vectors.
fn out_of_scope(c: &Value, version: Version) -> Option<&'static str> {
    if version == Version::V0_16_1 {
        if !c["local_world_size"].is_null() {
            return Some("local_world_size");
        }
        if c["rank_offset"].as_i64() != Some(0) {
            return Some("rank_offset != 0");
        }
        if c["gtp"].as_i64() != Some(1) || c["egtp"].as_i64().unwrap_or(1) != 1 {
            return Some("gtp");
        }
    }
    if c["hybrid_cp"].as_bool() == Some(true) {
        return Some("hybrid_cp");
    }
    if c["use_sharp"].as_bool() == Some(true) || !c["sharp_enabled_group"].is_null() {
        return Some("use_sharp");
    }
    if c["create_all_gather_group"].as_bool() == Some(true) {
        return Some("create_all_gather_group");
    }
    if !c["pp_comm_backend"].is_null() {
        return Some("pp_comm_backend");
    }
    None
}

fn u32_of(v: &Value, what: &str) -> u32 {
    v.as_u64().unwrap_or_else(|| panic!("{what}: {v}")) as u32
}

/// A documented deviation from 0.19.2 (docs/conformance.md): the config and why we differ.
fn deviation(c: &Value) -> Option<&'static str> {
    let order = c["order"].as_str().unwrap_or("");
    if !order.to_lowercase().split('-').any(|t| t == "tp") {
        return Some("order without tp: 0.19.2 rejects it ('tp' is not in list), we accept it as 0.16.1 does");
    }
    let remat = c["gtp"].as_i64().unwrap_or(1) > 1 || c["egtp"].as_i64().unwrap_or(1) > 1;
    if remat && order != order.to_lowercase() {
        return Some("upper-case order with gtp: 0.19.2 puts gtp first, we put it after tp as for lower case");
    }
    None
}

fn config_of(c: &Value) -> (TopologyConfig, u32) {
    let world = u32_of(&c["world_size"], "world_size");
    let cfg = TopologyConfig {
        tp: u32_of(&c["tp"], "tp"),
        pp: u32_of(&c["pp"], "pp"),
        vpp: c["vpp"].as_u64().map(|v| v as u32),
        cp: u32_of(&c["cp"], "cp"),
        hierarchical_cp: c["hcp"].as_array().map(|a| a.iter().map(|v| u32_of(v, "hcp")).collect()).unwrap_or_default(),
        ep: u32_of(&c["ep"], "ep"),
        etp: c["etp"].as_u64().map(|v| v as u32),
        dist_opt_instances: u32_of(&c["nd"], "nd"),
        order: c["order"].as_str().expect("order").to_string(),
        gtp: c["gtp"].as_u64().unwrap_or(1) as u32,
        egtp: c["egtp"].as_u64().unwrap_or(1) as u32,
        rank_offset: c["rank_offset"].as_u64().unwrap_or(0) as u32,
        // Megatron's grid is always `local_world_size` (default: the world) ranks of the world.
        local_world_size: Some(c["local_world_size"].as_u64().map_or(world, |v| v as u32)),
        ..Default::default()
    };
    (cfg, world)
}

/// 0.19.2's module globals that only alias groups of our kinds: the intra-partial groups with
/// gtp are the gtp-inclusive groups when the axis is > 1 (a single optimizer instance is then
/// required), else the intra-partial groups without it.
fn alias_global(name: &str, t: &Topology) -> Option<GroupKind> {
    let s = t.sizes();
    match name {
        "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT" => Some(if s.gtp > 1 {
            GroupKind::DataParallelWithCpWithGtpRemat
        } else {
            GroupKind::IntraPartialDataParallelWithCp
        }),
        "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP_WITH_GTP_REMAT" => Some(if s.egtp > 1 {
            GroupKind::ExpertDataParallelWithGtpRemat
        } else {
            GroupKind::IntraPartialExpertDataParallel
        }),
        _ => None,
    }
}

/// The group-kind key (docs/topology.md) for a Megatron module global, or why it is not one of ours.
fn key_of_global(name: &str) -> Result<String, &'static str> {
    if name.ends_with("_GLOO") || name.contains("_GLOO_") {
        return Err("gloo twin");
    }
    if name.ends_with("_AG") {
        return Err("all-gather twin");
    }
    if name.starts_with("_HYBRID_") {
        return Err("hybrid dp-cp");
    }
    if let Some(level) = name.strip_prefix("_HIERARCHICAL_CONTEXT_PARALLEL_GROUPS[") {
        return Ok(format!("hierarchical_context_parallel_{}", level.trim_end_matches(']')));
    }
    let base = name.strip_prefix('_').expect("leading underscore").replacen("_GROUP", "", 1);
    Ok(base.to_lowercase())
}

/// Our answer to a query, in a form comparable with the vector's RESULT.
#[derive(Debug, PartialEq)]
enum Answer {
    /// A group (members) or none (not a member / absent kind).
    Group(Option<Vec<u32>>),
    /// A list of groups, or none.
    Groups(Option<Vec<Vec<u32>>>),
    Int(Option<i64>),
    Bool(bool),
    Ints(Vec<i64>),
    Str(String),
    /// Our API refuses the call (out of range etc.).
    Error,
}

fn group(t: &Topology, kind: GroupKind, rank: u32) -> Answer {
    Answer::Group(t.group_of(kind, rank).unwrap().map(|g| g.members()))
}
fn size(t: &Topology, kind: GroupKind, rank: u32) -> Answer {
    Answer::Int(t.membership(kind, rank).unwrap().map(|m| i64::from(m.size())))
}
fn grank(t: &Topology, kind: GroupKind, rank: u32) -> Answer {
    Answer::Int(t.membership(kind, rank).unwrap().map(|m| i64::from(m.rank)))
}
fn src(t: &Topology, kind: GroupKind, rank: u32) -> Answer {
    Answer::Int(t.group_of(kind, rank).unwrap().map(|g| i64::from(g.first())))
}
fn ranks(t: &Topology, kind: GroupKind, rank: u32) -> Answer {
    t.group_of(kind, rank).unwrap().map_or(Answer::Error, |g| Answer::Ints(g.iter().map(i64::from).collect()))
}
/// The gtp size/rank getters answer 0 on a rank outside the grid (0.19.2).
fn or_zero(a: Answer) -> Answer {
    match a {
        Answer::Int(None) => Answer::Int(Some(0)),
        a => a,
    }
}
fn boolean(r: Result<bool, mcore_init::topology::TopologyError>) -> Answer {
    r.map_or(Answer::Error, Answer::Bool)
}

/// Parse `name(k=v, ...)` into the name and its keyword arguments.
fn parse_key(key: &str) -> (&str, BTreeMap<&str, &str>) {
    let (name, rest) = key.split_once('(').expect("call syntax");
    let args = rest
        .trim_end_matches(')')
        .split(", ")
        .filter(|s| !s.is_empty())
        .map(|kv| kv.split_once('=').expect("k=v"))
        .collect();
    (name, args)
}

/// Map one query to our API. `Err(reason)` = unmapped.
fn answer(t: &Topology, version: Version, rank: u32, key: &str) -> Result<Answer, &'static str> {
    use GroupKind::*;
    let (name, args) = parse_key(key);
    let flag = |k: &str| args.get(k).map(|v| *v == "True");
    let wcp = flag("with_context_parallel").unwrap_or(false);
    let partial = flag("partial_data_parallel").unwrap_or(false);
    let vp_stage: Option<u32> = args.get("vp_stage").map(|v| v.parse().unwrap());
    let ignore_virtual = flag("ignore_virtual").unwrap_or(true);
    if name.contains("gloo") {
        return Err("gloo groups are Megatron extras");
    }
    if args.contains_key("independent_all_gather") || name == "has_separate_all_gather_group" {
        return Err("all-gather twin is a Megatron extra");
    }
    if name.starts_with("get_hybrid") {
        return Err("hybrid dp-cp groups are out of scope");
    }
    if matches!(name, "is_initialized" | "is_unitialized" | "model_parallel_is_initialized") {
        return Err("runtime lifecycle, not layout");
    }
    if name == "get_virtual_pipeline_model_parallel_rank" {
        return Err("current virtual stage is runtime state, not layout");
    }
    // Megatron's virtual-stage queries: without a stage they assert when vpp is set.
    let stage = if ignore_virtual {
        None
    } else if t.sizes().vpp.is_some() {
        Some(vp_stage.ok_or("virtual query without vp_stage: our API takes the stage")?)
    } else {
        vp_stage
    };
    // 0.19: `with_gtp_remat` (default True) selects the gtp-inclusive groups when gtp > 1.
    let gtp = t.sizes().gtp > 1 && flag("with_gtp_remat").unwrap_or(true);
    let egtp = t.sizes().egtp > 1 && flag("with_gtp_remat").unwrap_or(true);
    let replicate_dp_kind = match (wcp, partial) {
        (false, false) => Some(DataParallel),
        (true, false) => Some(DataParallelWithCp),
        (true, true) => Some(IntraPartialDataParallelWithCp),
        (false, true) => None,
    };
    let dp_kind = match (wcp, gtp) {
        (false, true) if !partial => Some(DataParallelWithGtpRemat),
        (true, true) => Some(DataParallelWithCpWithGtpRemat),
        _ => replicate_dp_kind,
    };
    let dp_kind = || dp_kind.ok_or("partial data parallel without cp is not a group kind");
    let edp_kind = if egtp {
        ExpertDataParallelWithGtpRemat
    } else if flag("partial_expert_data_parallel").unwrap_or(false) {
        IntraPartialExpertDataParallel
    } else {
        ExpertDataParallel
    };
    let etmp_kind = if flag("with_egtp_remat").unwrap_or(false) {
        ExpertTensorModelPipelineParallelWithEgtp
    } else {
        ExpertTensorModelPipelineParallel
    };
    let tdp_kind = if wcp { TensorAndDataParallelWithCp } else { TensorAndDataParallel };
    let pipe = t.pipeline(rank);
    let p_int = |f: fn(&mcore_init::topology::PipelineView) -> u32| {
        pipe.as_ref().map_or(Answer::Error, |p| Answer::Int(Some(i64::from(f(p)))))
    };
    Ok(match name {
        "get_tensor_model_parallel_group" => group(t, TensorModelParallel, rank),
        "get_tensor_model_parallel_world_size" => size(t, TensorModelParallel, rank),
        "get_tensor_model_parallel_rank" => grank(t, TensorModelParallel, rank),
        "get_tensor_model_parallel_src_rank" => src(t, TensorModelParallel, rank),
        "get_pipeline_model_parallel_group" => group(t, PipelineModelParallel, rank),
        "get_pipeline_model_parallel_world_size" => p_int(|p| p.size),
        "get_pipeline_model_parallel_rank" => p_int(|p| p.rank),
        "get_pipeline_model_parallel_first_rank" => p_int(|p| p.first),
        "get_pipeline_model_parallel_last_rank" => p_int(|p| p.last),
        "get_pipeline_model_parallel_next_rank" => p_int(|p| p.next),
        "get_pipeline_model_parallel_prev_rank" => p_int(|p| p.prev),
        "is_pipeline_first_stage" => boolean(t.is_pipeline_first_stage(rank, stage)),
        "is_pipeline_last_stage" => boolean(t.is_pipeline_last_stage(rank, stage)),
        "is_rank_in_embedding_group" => boolean(t.is_rank_in_embedding_group(rank, stage)),
        "get_virtual_pipeline_model_parallel_world_size" => Answer::Int(t.sizes().vpp.map(i64::from)),
        "get_model_parallel_group" => group(t, ModelParallel, rank),
        "get_model_parallel_src_rank" => src(t, ModelParallel, rank),
        "get_data_parallel_group" => group(t, dp_kind()?, rank),
        "get_data_parallel_world_size" => size(t, dp_kind()?, rank),
        "get_data_parallel_rank" => grank(t, dp_kind()?, rank),
        // 0.19.2 answers from the replicate group even with gtp (reproduced; docs/conformance.md).
        "get_data_parallel_src_rank" => src(t, replicate_dp_kind.ok_or("partial dp without cp")?, rank),
        "get_context_parallel_group" => group(t, ContextParallel, rank),
        "get_context_parallel_global_ranks" => ranks(t, ContextParallel, rank),
        "get_context_parallel_world_size" => size(t, ContextParallel, rank),
        "get_context_parallel_rank" => grank(t, ContextParallel, rank),
        "get_hierarchical_context_parallel_groups" => {
            let levels = t.hierarchical_cp_levels();
            if !t.in_grid(rank) {
                return Ok(Answer::Groups(None));
            }
            Answer::Groups((levels > 0).then(|| {
                (0..levels)
                    .map(|i| t.group_of(HierarchicalContextParallel(i), rank).unwrap().unwrap().members())
                    .collect()
            }))
        }
        "get_tensor_and_context_parallel_group" => group(t, TensorAndContextParallel, rank),
        "get_tensor_and_context_parallel_world_size" => size(t, TensorAndContextParallel, rank),
        "get_tensor_and_context_parallel_rank" => grank(t, TensorAndContextParallel, rank),
        "get_tensor_and_data_parallel_group" => group(t, tdp_kind, rank),
        "get_embedding_group" => group(t, Embedding, rank),
        "get_position_embedding_group" => group(t, PositionEmbedding, rank),
        "is_rank_in_position_embedding_group" => Answer::Bool(t.group_of(PositionEmbedding, rank).unwrap().is_some()),
        "get_amax_reduction_group" => {
            let tp_only = flag("tp_only_amax_red").unwrap_or(false);
            let kind = match (wcp, tp_only) {
                (false, false) => TensorAndDataParallel,
                (false, true) => TensorModelParallel,
                (true, false) => TensorAndDataParallelWithCp,
                (true, true) => TensorAndContextParallel,
            };
            group(t, kind, rank)
        }
        "get_expert_model_parallel_group" => group(t, ExpertModelParallel, rank),
        "get_expert_model_parallel_world_size" => size(t, ExpertModelParallel, rank),
        "get_expert_model_parallel_rank" => grank(t, ExpertModelParallel, rank),
        "get_expert_model_parallel_src_rank" => src(t, ExpertModelParallel, rank),
        "get_expert_tensor_parallel_group" => group(t, ExpertTensorParallel, rank),
        "get_expert_tensor_parallel_world_size" => size(t, ExpertTensorParallel, rank),
        "get_expert_tensor_parallel_rank" => grank(t, ExpertTensorParallel, rank),
        "get_expert_tensor_and_model_parallel_group" => group(t, ExpertTensorAndModelParallel, rank),
        "get_expert_tensor_and_model_parallel_world_size" => size(t, ExpertTensorAndModelParallel, rank),
        "get_expert_tensor_and_model_parallel_rank" => grank(t, ExpertTensorAndModelParallel, rank),
        "get_expert_tensor_model_pipeline_parallel_group" => group(t, etmp_kind, rank),
        "get_expert_data_parallel_group" | "get_data_modulo_expert_parallel_group" => group(t, edp_kind, rank),
        "get_expert_data_parallel_world_size" => size(t, edp_kind, rank),
        "get_expert_data_parallel_rank" => grank(t, edp_kind, rank),
        "get_intra_distributed_optimizer_instance_group" => group(t, IntraDistributedOptimizerInstance, rank),
        "get_inter_distributed_optimizer_instance_group" => group(t, InterPartialExpertDataParallel, rank),
        "get_all_ranks" => t.rank_view(rank).map_or(Answer::Error, |v| {
            Answer::Str(if version == Version::V0_16_1 { v.all_ranks_string_0_16() } else { v.all_ranks_string() })
        }),
        "get_gtp_weight_remat_group" => group(t, GtpWeightRemat, rank),
        "get_gtp_weight_remat_world_size" => or_zero(size(t, GtpWeightRemat, rank)),
        "get_gtp_weight_remat_rank" => or_zero(grank(t, GtpWeightRemat, rank)),
        "get_gtp_weight_remat_global_ranks" => ranks(t, GtpWeightRemat, rank),
        "get_expert_gtp_weight_remat_group" => group(t, ExpertGtpWeightRemat, rank),
        "get_expert_gtp_weight_remat_world_size" => or_zero(size(t, ExpertGtpWeightRemat, rank)),
        "get_expert_gtp_weight_remat_rank" => or_zero(grank(t, ExpertGtpWeightRemat, rank)),
        "get_expert_gtp_weight_remat_global_ranks" => ranks(t, ExpertGtpWeightRemat, rank),
        _ => return Err("unknown query (not in v0.16.1's list when this test was written)"),
    })
}

fn ranks_of(v: &Value) -> Vec<u32> {
    v.as_array().expect("rank list").iter().map(|r| u32_of(r, "rank")).collect()
}

/// Whether our answer matches Megatron's RESULT.
fn matches(ours: &Answer, expected: &Value) -> bool {
    if let Some(g) = expected.get("group") {
        return *ours == Answer::Group(Some(ranks_of(&g["ranks"])));
    }
    if let Some(gs) = expected.get("groups") {
        let lists = gs.as_array().unwrap().iter().map(|g| ranks_of(&g["ranks"])).collect();
        return *ours == Answer::Groups(Some(lists));
    }
    if expected.get("error").is_some() {
        return matches!(ours, Answer::Error | Answer::Group(None) | Answer::Groups(None) | Answer::Int(None));
    }
    let v = &expected["ok"];
    match ours {
        Answer::Group(None) | Answer::Groups(None) | Answer::Int(None) => v.is_null(),
        Answer::Int(Some(i)) => v.as_i64() == Some(*i),
        Answer::Bool(b) => v.as_bool() == Some(*b),
        Answer::Str(s) => v.as_str() == Some(s.as_str()),
        Answer::Ints(l) => {
            v.as_array().map(|a| a.iter().filter_map(Value::as_i64).collect::<Vec<_>>()) == Some(l.clone())
        }
        _ => false,
    }
}

#[test]
fn topology_matches_megatron_core_0_16_1() {
    check_file("megatron_groups.json.gz", Version::V0_16_1, (200, 20, 10_000, 200_000));
}

#[test]
fn topology_matches_megatron_core_0_19_2() {
    check_file("v0.19.2/megatron_groups.json.gz", Version::V0_19_2, (240, 20, 12_000, 250_000));
}

/// Whether two layouts have the same groups of every kind.
fn same_groups(a: &Topology, b: &Topology) -> bool {
    a.kinds() == b.kinds()
        && a.kinds()
            .into_iter()
            .all(|k| a.groups(k).map(|g| g.unwrap().members()).eq(b.groups(k).map(|g| g.unwrap().members())))
}

/// Compare every config of one vector file; `min` = (ok configs, rejected configs, groups,
/// queries) that must at least be compared.
fn check_file(file: &str, version: Version, min: (usize, usize, usize, usize)) {
    let data = common::read_conformance_json(file);
    let configs = data["configs"].as_array().expect("configs");
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    let mut unmapped: BTreeMap<&'static str, BTreeMap<String, usize>> = BTreeMap::new();
    let (mut ok_configs, mut err_configs, mut groups_compared, mut queries_compared) = (0, 0, 0usize, 0usize);
    let mut failures = Vec::new();
    let mut deviations: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut aliases_compared = 0usize;
    for entry in configs {
        let c = &entry["config"];
        let id = c["id"].as_str().unwrap();
        let outcome = entry["outcome"].as_str().unwrap();
        if outcome == "unsupported" {
            *skipped.entry("outcome unsupported".into()).or_default() += 1;
            continue;
        }
        if let Some(why) = out_of_scope(c, version) {
            *skipped.entry(format!("{outcome} config using {why}")).or_default() += 1;
            continue;
        }
        let (cfg, world) = config_of(c);
        if version == Version::V0_19_2 {
            if let Some(why) = deviation(c) {
                // Check the documented behaviour instead of Megatron's.
                let built = Topology::new(cfg.clone(), world);
                if why.starts_with("order without tp") {
                    let accepts_016 = c["tp"].as_u64() == Some(1);
                    if built.is_ok() != accepts_016 {
                        failures.push(format!("{id}: deviation '{why}': ours {:?}", built.err()));
                    }
                } else {
                    let lower = TopologyConfig { order: cfg.order.to_lowercase(), ..cfg.clone() };
                    let same = match (built, Topology::new(lower, world)) {
                        (Ok(a), Ok(b)) => same_groups(&a, &b),
                        _ => false,
                    };
                    if !same {
                        failures.push(format!("{id}: deviation '{why}': groups differ from the lower-case order"));
                    }
                }
                *deviations.entry(why).or_default() += 1;
                continue;
            }
        }
        let built = Topology::new(cfg, world);
        if outcome == "error" {
            err_configs += 1;
            if built.is_ok() {
                failures.push(format!("{id}: Megatron rejects ({}), we accept", entry["error"]["msg"]));
            }
            continue;
        }
        assert_eq!(outcome, "ok", "{id}");
        ok_configs += 1;
        let t = match built {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{id}: Megatron accepts, we reject: {e}"));
                continue;
            }
        };
        // Every group of every kind, in creation order.
        let mut expected_keys = Vec::new();
        for (global, v) in entry["groups_by_global"].as_object().unwrap() {
            if let Some(kind) = alias_global(global, &t) {
                let want: Vec<Vec<u32>> = v["ranks"].as_array().unwrap().iter().map(ranks_of).collect();
                let ours: Vec<Vec<u32>> = t.groups(kind).map(|g| g.unwrap().members()).collect();
                if ours != want {
                    failures.push(format!("{id}: {global} (alias of {kind}): ours {ours:?} vs megatron {want:?}"));
                }
                aliases_compared += 1;
                continue;
            }
            let key = match key_of_global(global) {
                Ok(k) => k,
                Err(why) => {
                    *skipped.entry(format!("global {why}")).or_default() += 1;
                    continue;
                }
            };
            let kind = GroupKind::from_key(&key).unwrap_or_else(|| panic!("{id}: no kind for {global} ({key})"));
            expected_keys.push(kind);
            let want: Vec<Vec<u32>> = v["ranks"].as_array().unwrap().iter().map(ranks_of).collect();
            let ours: Vec<Vec<u32>> = t.groups(kind).map(|g| g.unwrap().members()).collect();
            if ours != want {
                failures.push(format!("{id}: {key}: ours {ours:?} vs megatron {want:?}"));
            }
            groups_compared += want.len();
        }
        let mut our_kinds = t.kinds();
        if version == Version::V0_16_1 {
            our_kinds.retain(|k| !GroupKind::added_in_0_19().contains(k)); // absent from 0.16.1
        }
        our_kinds.sort();
        expected_keys.sort();
        if our_kinds != expected_keys {
            failures.push(format!("{id}: kinds differ: ours {our_kinds:?} vs megatron {expected_keys:?}"));
        }
        // Every per-rank query that maps to our API.
        for r in entry["ranks"].as_array().unwrap() {
            let rank = u32_of(&r["rank"], "rank");
            for (key, expected) in r["q"].as_object().unwrap() {
                match answer(&t, version, rank, key) {
                    Err(why) => {
                        *unmapped.entry(why).or_default().entry(parse_key(key).0.to_string()).or_default() += 1;
                    }
                    Ok(ours) => {
                        queries_compared += 1;
                        if !matches(&ours, expected) {
                            failures.push(format!("{id} rank {rank}: {key}: ours {ours:?} vs megatron {expected}"));
                        }
                    }
                }
            }
        }
    }
    println!("{file} ({version:?}): configs compared: {ok_configs} ok, {err_configs} rejected");
    println!("alias globals compared: {aliases_compared}");
    for (why, n) in &deviations {
        println!("documented deviation on {n} configs: {why}");
    }
    println!("groups compared: {groups_compared}; per-rank queries compared: {queries_compared}");
    for (why, n) in &skipped {
        println!("skipped {n}: {why}");
    }
    for (why, names) in &unmapped {
        println!("unmapped ({why}): {names:?}");
    }
    assert!(
        failures.is_empty(),
        "{} mismatches, a sample:\n{}",
        failures.len(),
        failures.iter().step_by((failures.len() / 40).max(1)).cloned().collect::<Vec<_>>().join("\n")
    );
    assert!(ok_configs >= min.0, "only {ok_configs} ok configs compared");
    assert!(err_configs >= min.1, "only {err_configs} rejected configs compared");
    assert!(groups_compared >= min.2, "only {groups_compared} groups compared");
    assert!(queries_compared >= min.3, "only {queries_compared} queries compared");
    if version == Version::V0_19_2 {
        assert!(aliases_compared > 0 && deviations.len() == 2, "{aliases_compared} {deviations:?}");
    }
}

/// `megatron_all_gather_groups.json`: what 0.19.2's `create_all_gather_groups()` builds. Our twins
/// are the dp-cp (and, with ep > 1, expert-dp) groups of the layout itself; where 0.19.2 agrees
/// (default order, no offset, gtp = egtp = 1) its groups must equal ours, elsewhere its groups
/// differ from the layout's and that is the documented deviation (docs/conformance.md).
#[test]
fn all_gather_twins_match_megatron_core_0_19_2_where_it_is_right() {
    let data = common::read_conformance_json("v0.19.2/megatron_all_gather_groups.json");
    let (mut agreed, mut deviations) = (0, 0);
    for entry in data["configs"].as_array().unwrap() {
        let c = &entry["config"];
        let id = c["id"].as_str().unwrap();
        let (cfg, world) = config_of(c);
        let t = Topology::new(cfg, world).unwrap();
        let twins = t.all_gather_twin_kinds();
        let lists = |k: GroupKind| -> Vec<Vec<u32>> { t.groups(k).map(|g| g.unwrap().members()).collect() };
        let init = |key: &str| -> Vec<Vec<u32>> { entry[key].as_array().unwrap().iter().map(ranks_of).collect() };
        // The twins duplicate the groups init created (Megatron's own record of them).
        assert_eq!(lists(GroupKind::DataParallelWithCp), init("init_DATA_PARALLEL_GROUP_WITH_CP"), "{id}");
        assert_eq!(lists(GroupKind::ExpertDataParallel), init("init_EXPERT_DATA_PARALLEL_GROUP"), "{id}");
        assert_eq!(twins.contains(&GroupKind::ExpertDataParallel), c["ep"].as_u64() > Some(1), "{id}");
        let right_in_megatron = c["order"] == mcore_init::topology::DEFAULT_ORDER
            && c["rank_offset"].as_u64() == Some(0)
            && c["gtp"].as_u64() == Some(1)
            && c["egtp"].as_u64() == Some(1);
        let created = &entry["created_by_helper"];
        let megatron_twins: Vec<(GroupKind, Vec<Vec<u32>>)> = [
            (GroupKind::DataParallelWithCp, "DATA_PARALLEL_GROUP_WITH_CP_AG"),
            (GroupKind::ExpertDataParallel, "EXPERT_DATA_PARALLEL_GROUP_AG"),
        ]
        .into_iter()
        .filter(|(_, k)| created.get(*k).is_some())
        .map(|(kind, k)| (kind, created[k].as_array().unwrap().iter().map(ranks_of).collect()))
        .collect();
        if right_in_megatron {
            let ours: Vec<(GroupKind, Vec<Vec<u32>>)> = twins.iter().map(|&k| (k, lists(k))).collect();
            assert_eq!(ours, megatron_twins, "{id}");
            agreed += 1;
        } else {
            assert!(
                megatron_twins.iter().any(|(k, g)| *g != lists(*k)) || megatron_twins.len() != twins.len(),
                "{id}: 0.19.2 builds the right twins here: not a deviation"
            );
            deviations += 1;
        }
    }
    assert_eq!((agreed, deviations), (2, 5));
}
