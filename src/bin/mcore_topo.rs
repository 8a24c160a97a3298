//! `mcore-topo`: print a Megatron-Core parallel layout (README.md, "Tools").
//!
//! Invalid input exits with status 2 and one line on stderr naming the bad value.

mod common;

use common::cli::{is_layout_flag, layout_flag, number, Flags};
use mcore_init::rng::layout::rank_stream_seeds;
use mcore_init::rng::SeedPolicy;
use mcore_init::topology::{layout_svg, node_placement, NodeFix, NodePlacement, PictureOptions};
use mcore_init::topology::{plan_recovery, RecoveryPlan};
use mcore_init::topology::{Group, GroupKind, Topology, TopologyConfig};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::process::ExitCode;

const USAGE: &str = "usage: mcore-topo --world-size N [--tp N] [--pp N] [--vpp N] [--cp N] [--hcp S0,S1,...] \
[--ep N] [--etp N] [--gtp N] [--egtp N] [--dist-opt-instances N] [--order tp-cp-ep-dp-pp] [--rank-offset N] \
[--local-world-size N] [--rank R] \
[--seed S [--seed-policy megatron|roll|sharded:<kind>,<kind>...] [--data-parallel-random-init]] [--json] \
[--gpus-per-node N [--strict]] [--svg FILE [--color-by KIND]] [--without-ranks R1,R2,... [--spares S1,...]]

--without-ranks plans recovery (docs/recovery.md): the layout on the survivors, printed with the old -> new
rank map and the dropped ranks; --rank and the other reports then refer to the new layout.";

/// Per-rank seeds to add (`--seed`).
struct SeedOptions {
    seed: i64,
    policy: SeedPolicy,
    data_parallel_random_init: bool,
}

/// What the command line asks for.
struct Options {
    world_size: u32,
    config: TopologyConfig,
    rank: Option<u32>,
    json: bool,
    seeds: Option<SeedOptions>,
    nodes: NodeOptions,
    /// `--without-ranks` and `--spares`.
    recovery: Option<(Vec<u32>, Vec<u32>)>,
}

fn parse_args(args: &[String]) -> Result<Option<Options>, String> {
    let mut config = TopologyConfig::default();
    let (mut world_size, mut rank, mut json) = (None, None, false);
    let (mut seed, mut policy, mut dp_random_init) = (None, None, false);
    let mut flags = Flags::new(args);
    let mut nodes = NodeOptions::default();
    let (mut without, mut spares) = (None, None);
    while let Some((flag, inline)) = flags.next() {
        match flag {
            "-h" | "--help" => return Ok(None),
            "--json" if inline.is_some() => return Err("--json takes no value".into()),
            "--json" => json = true,
            "--data-parallel-random-init" if inline.is_some() => {
                return Err("--data-parallel-random-init takes no value".into())
            }
            "--data-parallel-random-init" => dp_random_init = true,
            "--seed" => {
                let v = flags.value(flag, inline)?;
                seed = Some(v.trim().parse::<i64>().map_err(|_| format!("--seed: '{v}' is not an integer"))?);
            }
            "--seed-policy" => {
                let v = flags.value(flag, inline)?;
                policy = Some(v.parse::<SeedPolicy>().map_err(|e| format!("--seed-policy: {e}"))?);
            }
            "--world-size" => world_size = Some(number(flag, flags.value(flag, inline)?)?),
            "--rank" => rank = Some(number(flag, flags.value(flag, inline)?)?),
            "--without-ranks" => without = Some(rank_list(flag, flags.value(flag, inline)?)?),
            "--spares" => spares = Some(rank_list(flag, flags.value(flag, inline)?)?),
            _ if is_layout_flag(flag) => {
                layout_flag(&mut config, flag, flags.value(flag, inline)?)?;
            }
            _ if node_flag(&mut nodes, flag, inline, &mut flags)? => {}
            _ => return Err(format!("unknown option '{flag}'")),
        }
    }
    let world_size = world_size.ok_or("--world-size is required")?;
    let seeds = match (seed, policy, dp_random_init) {
        (Some(seed), policy, data_parallel_random_init) => {
            Some(SeedOptions { seed, policy: policy.unwrap_or(SeedPolicy::Megatron), data_parallel_random_init })
        }
        (None, None, false) => None,
        (None, _, _) => return Err("--seed-policy and --data-parallel-random-init need --seed S".into()),
    };
    nodes.check()?;
    let recovery = match (without, spares) {
        (Some(w), s) => Some((w, s.unwrap_or_default())),
        (None, None) => None,
        (None, Some(_)) => return Err("--spares needs --without-ranks R1,R2,...".into()),
    };
    Ok(Some(Options { world_size, config, rank, json, seeds, nodes, recovery }))
}

fn sizes_json(t: &Topology) -> Value {
    let s = t.sizes();
    json!({
        "tp": s.tp, "pp": s.pp, "vpp": s.vpp, "cp": s.cp, "hcp": s.hierarchical_cp,
        "ep": s.ep, "etp": s.etp, "dp": s.dp, "expert_dp": s.expert_dp,
        "dist_opt_instances": s.dist_opt_instances,
        "order": t.config().order, "rank_offset": t.rank_offset(),
        "gtp": s.gtp, "egtp": s.egtp, "local_world_size": t.config().local_world_size,
        "total_world_size": t.total_world_size(),
    })
}

fn all_groups(t: &Topology, kind: GroupKind) -> Result<Vec<Group>, String> {
    t.groups(kind).map(|g| g.map_err(|e| e.to_string())).collect()
}

/// `{"world_size", "sizes", "groups": {key: [[ranks]...]}}`; an `"rng"` section can be added
/// to the returned map by the caller.
fn layout_json(t: &Topology) -> Result<Map<String, Value>, String> {
    let mut groups = Map::new();
    for kind in t.kinds() {
        let lists: Vec<Value> = all_groups(t, kind)?.iter().map(|g| json!(g.members())).collect();
        groups.insert(kind.key().into_owned(), Value::Array(lists));
    }
    let mut out = Map::new();
    out.insert("world_size".into(), json!(t.world_size()));
    out.insert("sizes".into(), sizes_json(t));
    out.insert("groups".into(), Value::Object(groups));
    Ok(out)
}

/// Why `rank` has no view: it is a rank of the world outside the grid (local world size).
fn outside_grid(t: &Topology, rank: u32) -> Option<String> {
    (rank < t.total_world_size() && !t.in_grid(rank)).then(|| {
        format!(
            "rank {rank} is outside the grid (ranks {}..{} of a world of {}): it belongs to no group",
            t.rank_offset(),
            u64::from(t.rank_offset()) + u64::from(t.world_size()) - 1,
            t.total_world_size()
        )
    })
}

/// `{"rank", "groups": {key: {"ranks", "rank", "size"}}, "pipeline": {...}}`; for a rank outside
/// the grid `{"rank", "in_grid": false, "groups": {}, "note"}`.
fn rank_json(t: &Topology, rank: u32) -> Result<Map<String, Value>, String> {
    if let Some(note) = outside_grid(t, rank) {
        let mut out = Map::new();
        out.insert("rank".into(), json!(rank));
        out.insert("in_grid".into(), json!(false));
        out.insert("groups".into(), json!({}));
        out.insert("note".into(), json!(note));
        return Ok(out);
    }
    let view = t.rank_view(rank).map_err(|e| e.to_string())?;
    let mut groups = Map::new();
    for m in &view.groups {
        groups.insert(
            m.kind().key().into_owned(),
            json!({"ranks": m.members(), "rank": m.rank, "size": m.size(), "index": m.group_index()}),
        );
    }
    let p = view.pipeline;
    let first = t.is_pipeline_first_stage(rank, None).map_err(|e| e.to_string())?;
    let last = t.is_pipeline_last_stage(rank, None).map_err(|e| e.to_string())?;
    let mut out = Map::new();
    out.insert("rank".into(), json!(rank));
    out.insert("in_grid".into(), json!(true));
    out.insert("groups".into(), Value::Object(groups));
    out.insert(
        "pipeline".into(),
        json!({"rank": p.rank, "size": p.size, "first": p.first, "last": p.last, "next": p.next,
               "prev": p.prev, "is_first_stage": first, "is_last_stage": last,
               "virtual_size": t.sizes().vpp}),
    );
    Ok(out)
}

fn summary(t: &Topology) -> String {
    let s = t.sizes();
    let vpp = s.vpp.map_or("-".to_string(), |v| v.to_string());
    let hcp = if s.hierarchical_cp.is_empty() { "-".to_string() } else { format!("{:?}", s.hierarchical_cp) };
    let local = match t.config().local_world_size {
        Some(_) => format!(" of a world of {}", t.total_world_size()),
        None => String::new(),
    };
    format!(
        "world size {} (ranks {}..{}{local}), order {}\ntp {} pp {} vpp {} cp {} hcp {} ep {} etp {} gtp {} egtp {} | \
         dp {} expert dp {} | dist-opt instances {}\n",
        s.world_size,
        t.rank_offset(),
        u64::from(t.rank_offset()) + u64::from(s.world_size) - 1,
        t.config().order,
        s.tp,
        s.pp,
        vpp,
        s.cp,
        hcp,
        s.ep,
        s.etp,
        s.gtp,
        s.egtp,
        s.dp,
        s.expert_dp,
        s.dist_opt_instances
    )
}

fn list(ranks: &[u32]) -> String {
    let items: Vec<String> = ranks.iter().map(u32::to_string).collect();
    format!("[{}]", items.join(","))
}

fn layout_table(t: &Topology) -> Result<String, String> {
    let mut out = summary(t);
    let _ = writeln!(out, "\n{:<48} {:>8} {:>6}  groups (ranks)", "kind", "count", "size");
    for kind in t.kinds() {
        let groups = all_groups(t, kind)?;
        let size = groups.first().map_or(0, Group::len);
        let lists: Vec<String> = groups.iter().map(|g| list(&g.members())).collect();
        let _ = writeln!(out, "{:<48} {:>8} {:>6}  {}", kind.key(), groups.len(), size, lists.join(" "));
    }
    Ok(out)
}

fn rank_table(t: &Topology, rank: u32) -> Result<String, String> {
    let mut out = summary(t);
    if let Some(note) = outside_grid(t, rank) {
        let _ = writeln!(out, "\n{note}");
        return Ok(out);
    }
    let view = t.rank_view(rank).map_err(|e| e.to_string())?;
    let _ = writeln!(out, "\nrank {rank}\n{:<48} {:>8} {:>11}  ranks", "kind", "group", "rank/size");
    for m in &view.groups {
        let rs = format!("{}/{}", m.rank, m.size());
        let _ = writeln!(out, "{:<48} {:>8} {:>11}  {}", m.kind().key(), m.group_index(), rs, list(&m.members()));
    }
    let p = view.pipeline;
    let _ = writeln!(
        out,
        "\npipeline: stage {} of {}, first {}, last {}, next {}, prev {}",
        p.rank, p.size, p.first, p.last, p.next, p.prev
    );
    Ok(out)
}

/// Most ranks one invocation prints (about a gigabyte of text); beyond that, refuse up front
/// instead of exhausting memory.
const MAX_LISTED_RANKS: u64 = 1 << 27;

fn check_output_size(t: &Topology, rank: Option<u32>) -> Result<(), String> {
    let listed: u64 = match rank {
        Some(r) if outside_grid(t, r).is_some() => 0,
        Some(r) => {
            let view = t.rank_view(r).map_err(|e| e.to_string())?;
            view.groups.iter().map(|m| u64::from(m.size())).sum()
        }
        None => u64::from(t.world_size()) * t.kinds().len() as u64,
    };
    if listed > MAX_LISTED_RANKS {
        let hint = if rank.is_some() { "" } else { "; use --rank R for one rank's view" };
        return Err(format!(
            "output would list {listed} ranks, more than the {MAX_LISTED_RANKS} this tool prints{hint}"
        ));
    }
    Ok(())
}

fn run(args: &[String]) -> Result<String, String> {
    let Some(opts) = parse_args(args)? else {
        return Ok(format!("{USAGE}\n"));
    };
    let t = Topology::new(opts.config, opts.world_size).map_err(|e| e.to_string())?;
    let plan = match &opts.recovery {
        Some((failed, spares)) => Some(plan_recovery(&t, failed, spares).map_err(|e| e.to_string())?),
        None => None,
    };
    let t = plan.as_ref().map_or(t, |p| p.topology.clone());
    check_output_size(&t, opts.rank)?;
    let placement = node_report(&t, &opts.nodes, opts.rank)?;
    let seeds = match &opts.seeds {
        Some(s) => Some(rng_seeds(&t, opts.rank, s)?),
        None => None,
    };
    if opts.json {
        let mut obj = match opts.rank {
            Some(r) => rank_json(&t, r)?,
            None => layout_json(&t)?,
        };
        if let Some(seeds) = seeds {
            let list: Vec<Value> = seeds
                .into_iter()
                .map(|(rank, streams)| {
                    let streams: Map<String, Value> = streams.into_iter().map(|(n, s)| (n, json!(s))).collect();
                    json!({"rank": rank, "streams": streams})
                })
                .collect();
            obj.insert("rng".into(), Value::Array(list));
        }
        if let Some(p) = &placement {
            obj.insert("nodes".into(), placement_json(p));
        }
        if let Some(p) = &plan {
            recovery_json(p, &mut obj);
        }
        return Ok(format!("{}\n", Value::Object(obj)));
    }
    let mut out = plan.as_ref().map(recovery_table).unwrap_or_default();
    out.push_str(&match opts.rank {
        Some(r) => rank_table(&t, r)?,
        None => layout_table(&t)?,
    });
    if let Some(seeds) = seeds {
        let policy = &opts.seeds.as_ref().expect("seeds were asked for").policy;
        let _ = writeln!(out, "\nRNG seeds (policy {policy}):");
        for (rank, streams) in seeds {
            let text: Vec<String> = streams.iter().map(|(n, s)| format!("{n}={s}")).collect();
            let _ = writeln!(out, "  rank {rank:>6}: {}", text.join(" "));
        }
    }
    if let Some(p) = &placement {
        out.push_str(&placement_table(p));
    }
    Ok(out)
}

/// One rank's named stream seeds, `default` first.
type RankSeeds = (u32, Vec<(String, u64)>);

/// Named stream seeds of one rank, or of every rank of the layout.
fn rng_seeds(t: &Topology, rank: Option<u32>, s: &SeedOptions) -> Result<Vec<RankSeeds>, String> {
    let ranks: Vec<u32> = match rank {
        Some(r) if outside_grid(t, r).is_some() => vec![], // no group, so no seeds
        Some(r) => vec![r],
        None => (0..t.world_size()).map(|r| t.rank_offset() + r).collect(),
    };
    ranks
        .into_iter()
        .map(|r| {
            rank_stream_seeds(t, r, &s.policy, s.seed, s.data_parallel_random_init)
                .map(|streams| (r, streams))
                .map_err(|e| format!("--seed {}: rank {r}: {e}", s.seed))
        })
        .collect()
}

fn main() -> ExitCode {
    match common::cli::utf8_args(std::env::args_os().skip(1)).and_then(|args| run(&args)) {
        Ok(text) => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (| head) is not an error worth a panic.
            let _ = stdout.write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("mcore-topo: {}", msg.replace('\n', " "));
            ExitCode::from(2)
        }
    }
}

/// `--gpus-per-node`, `--strict`, `--svg`, `--color-by`: where the ranks sit on nodes.
#[derive(Default)]
struct NodeOptions {
    gpus_per_node: Option<u32>,
    strict: bool,
    svg: Option<String>,
    color_by: Option<GroupKind>,
}

impl NodeOptions {
    fn check(&self) -> Result<(), String> {
        if self.strict && self.gpus_per_node.is_none() {
            return Err("--strict needs --gpus-per-node N".into());
        }
        if self.color_by.is_some() && self.svg.is_none() {
            return Err("--color-by needs --svg FILE".into());
        }
        Ok(())
    }
}

/// Apply one node flag; `Ok(false)` when `flag` is not one.
fn node_flag<'a>(
    o: &mut NodeOptions,
    flag: &str,
    inline: Option<&'a str>,
    flags: &mut Flags<'a>,
) -> Result<bool, String> {
    match flag {
        "--gpus-per-node" => {
            let n = number(flag, flags.value(flag, inline)?)?;
            if n == 0 {
                return Err("--gpus-per-node: 0 (a node needs at least one GPU)".into());
            }
            o.gpus_per_node = Some(n);
        }
        "--strict" if inline.is_some() => return Err("--strict takes no value".into()),
        "--strict" => o.strict = true,
        "--svg" => {
            let v = flags.value(flag, inline)?;
            if v.is_empty() {
                return Err("--svg: empty file name".into());
            }
            o.svg = Some(v.to_string());
        }
        "--color-by" => {
            let v = flags.value(flag, inline)?;
            o.color_by = Some(v.parse::<GroupKind>().map_err(|e| format!("--color-by: {e}"))?);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Node placement (warnings on stderr, errors with `--strict`) and the picture (`--svg`).
fn node_report(t: &Topology, n: &NodeOptions, rank: Option<u32>) -> Result<Option<NodePlacement>, String> {
    if let Some(path) = &n.svg {
        let pic = PictureOptions {
            gpus_per_node: n.gpus_per_node.unwrap_or(8),
            color_by: n.color_by.unwrap_or(GroupKind::TensorModelParallel),
            rank,
        };
        let svg = layout_svg(t, &pic).map_err(|e| format!("--svg: {e}"))?;
        std::fs::write(path, svg).map_err(|e| format!("--svg: cannot write '{path}': {e}"))?;
    }
    let Some(gpn) = n.gpus_per_node else {
        return Ok(None);
    };
    let p = node_placement(t, gpn).map_err(|e| format!("--gpus-per-node {gpn}: {e}"))?;
    if n.strict && !p.warnings.is_empty() {
        let all: Vec<&str> = p.warnings.iter().map(|w| w.message.as_str()).collect();
        return Err(format!("--strict: {}", all.join(" | ")));
    }
    for w in &p.warnings {
        eprintln!("mcore-topo: warning: {}", w.message);
    }
    Ok(Some(p))
}

fn placement_json(p: &NodePlacement) -> Value {
    let kinds: Map<String, Value> = p
        .kinds
        .iter()
        .map(|k| {
            (
                k.kind.key().into_owned(),
                json!({"groups": k.groups, "local": k.local, "crossing": k.crossing,
                       "first_crossing": k.first_crossing, "max_nodes": k.max_nodes}),
            )
        })
        .collect();
    let warnings: Vec<Value> = p
        .warnings
        .iter()
        .map(|w| {
            let (order, layout) = match &w.fix {
                Some(NodeFix::Order(o)) => (Some(o.as_str()), None),
                Some(NodeFix::Layout(l)) => (None, Some(l.as_str())),
                None => (None, None),
            };
            json!({"kind": w.kind.key(), "crossing": w.crossing, "groups": w.groups,
                   "suggested_order": order, "suggested_layout": layout, "message": w.message})
        })
        .collect();
    json!({"gpus_per_node": p.gpus_per_node, "nodes": p.nodes, "kinds": kinds, "warnings": warnings})
}

fn placement_table(p: &NodePlacement) -> String {
    let mut out = format!(
        "\nnodes: {} of {} GPUs\n{:<40} {:>8} {:>8} {:>8}\n",
        p.nodes, p.gpus_per_node, "kind", "groups", "in-node", "crossing"
    );
    for k in &p.kinds {
        let _ = writeln!(out, "{:<40} {:>8} {:>8} {:>8}", k.kind.key(), k.groups, k.local, k.crossing);
    }
    out
}

/// `R1,R2,...`: ranks, at least one; the message names the flag and the bad item.
fn rank_list(flag: &str, text: &str) -> Result<Vec<u32>, String> {
    let items: Vec<&str> = text.split(',').map(str::trim).collect();
    if items.iter().all(|i| i.is_empty()) {
        return Err(format!("{flag}: empty rank list (expected e.g. 5,9)"));
    }
    items.into_iter().map(|i| number(flag, i)).collect()
}

/// The plan's fields added to the layout's JSON: `dropped_ranks`, `leaving_ranks`, `failed_ranks`,
/// `rank_map` (`{"old": new}`), `spares_used` (`{"spare": failed}`), `spares_left`, `changed_kinds`,
/// `dp_before`, `dp_after`, `old_world_size`.
fn recovery_json(p: &RecoveryPlan, obj: &mut Map<String, Value>) {
    let map: Map<String, Value> = p.rank_map.iter().map(|(o, n)| (o.to_string(), json!(n))).collect();
    let spares: Map<String, Value> = p.spares_used.iter().map(|(s, f)| (s.to_string(), json!(f))).collect();
    let kinds: Vec<String> = p.changed_kinds.iter().map(|k| k.key().into_owned()).collect();
    obj.insert("old_world_size".into(), json!(p.rank_map.len() + p.dropped.len()));
    obj.insert("failed_ranks".into(), json!(p.failed));
    obj.insert("dropped_ranks".into(), json!(p.dropped));
    obj.insert("leaving_ranks".into(), json!(p.leaving));
    obj.insert("rank_map".into(), Value::Object(map));
    obj.insert("spares_used".into(), Value::Object(spares));
    obj.insert("spares_left".into(), json!(p.spares_left));
    obj.insert("changed_kinds".into(), json!(kinds));
    obj.insert("dp_before".into(), json!(p.dp_before));
    obj.insert("dp_after".into(), json!(p.dp_after));
}

/// The plan as text, printed before the new layout.
fn recovery_table(p: &RecoveryPlan) -> String {
    let mut out = String::new();
    let old = p.rank_map.len() + p.dropped.len();
    let _ = writeln!(out, "Recovery plan: failed ranks {}", list(&p.failed));
    let _ = writeln!(
        out,
        "  world {old} -> {}, dp {} -> {}; dropped ranks {} (leaving: {})",
        p.topology.world_size(),
        p.dp_before,
        p.dp_after,
        list(&p.dropped),
        list(&p.leaving)
    );
    for (s, f) in &p.spares_used {
        let _ = writeln!(out, "  spare {s} takes the place of rank {f}");
    }
    if !p.spares_left.is_empty() {
        let _ = writeln!(out, "  spares left: {}", list(&p.spares_left));
    }
    let kinds: Vec<String> = p.changed_kinds.iter().map(|k| k.key().into_owned()).collect();
    let _ = writeln!(out, "  group kinds with new membership: {}", kinds.join(", "));
    let pairs: Vec<String> = p.rank_map.iter().map(|(o, n)| format!("{o}->{n}")).collect();
    let _ = writeln!(out, "  rank map (old->new): {}\n", pairs.join(" "));
    out
}
