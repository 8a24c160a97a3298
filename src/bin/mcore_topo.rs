//! `mcore-topo`: print a Megatron-Core parallel layout (README.md, "Tools").
//!
//! Invalid input exits with status 2 and one line on stderr naming the bad value.

mod common;
#[path = "topo/mindspeed.rs"]
mod mindspeed;

use common::cli::{number, Flags, GridArg, GridArgs};
use mcore_init::rng::layout::rank_stream_seeds;
use mcore_init::rng::SeedPolicy;
use mcore_init::topology::{grid_node_spans, grids_svg, layout_svg, node_placement, NodeFix, NodePlacement};
use mcore_init::topology::{plan_recovery, RecoveryPlan};
use mcore_init::topology::{Group, GroupKind, Membership, MindSpeedLayout, MindSpeedOptions, Topology};
use mcore_init::topology::{PictureOptions, RankView, NODE_LOCAL_KINDS};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::process::ExitCode;

const USAGE: &str = "usage: mcore-topo --world-size N [--tp N] [--pp N] [--vpp N] [--cp N] [--hcp S0,S1,...] \
[--ep N] [--etp N] [--gtp N] [--egtp N] [--dist-opt-instances N] [--order tp-cp-ep-dp-pp] [--rank-offset N] \
[--local-world-size N] [--grid NAME:key=value,... ...] [--grids-disjoint-or-identical] [--rank R [--all-members]] \
[--seed S [--seed-policy megatron|roll|sharded:<kind>,<kind>...] [--data-parallel-random-init]] [--json] \
[--gpus-per-node N [--strict]] [--svg FILE [--color-by KIND]] [--without-ranks R1,R2,... [--spares S1,...]] \
[--mindspeed KEY=VALUE,...|default]

--without-ranks plans recovery (docs/recovery.md): the layout on the survivors, printed with the old -> new
rank map and the dropped ranks; --rank and the other reports then refer to the new layout.

--grid NAME:key=value,... adds a named grid (repeatable; keys as the layout flags without dashes, e.g.
--grid rollout:tp=4,rank-offset=8,local-world-size=8); the plain layout flags describe grid 'default'.
Every report is then given per grid, with the ranks the grids share and, with --gpus-per-node, which
grids each node's GPUs belong to. --grids-disjoint-or-identical refuses grids that break Megatron-Core
0.20's rule (any two on the same ranks or on none in common, all of them covering the world).

--mindspeed adds MindSpeed's extra groups (docs/topology.md), from its option names, e.g.
--mindspeed context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=2,use_cp_send_recv_overlap (a key
alone means true; 'default' means MindSpeed's defaults): JSON \"mindspeed_groups\", per kind the rank
lists in MindSpeed's creation order (with --rank R, R's group of each kind and its stored rank lists).

--rank R shows R's groups without visiting the world: a group of more than 256 ranks is shown by its
first ranks and an exact pattern (JSON: \"boxes\"); --all-members lists every member.";

/// Per-rank seeds to add (`--seed`).
struct SeedOptions {
    seed: i64,
    policy: SeedPolicy,
    data_parallel_random_init: bool,
}

/// What the command line asks for.
struct Options {
    world_size: u32,
    /// The grids, `default` (the plain layout flags) first when there is one.
    grids: Vec<GridArg>,
    /// Whether `--grid` was given: reports are then per grid.
    multi: bool,
    rank: Option<u32>,
    /// `--all-members`: list every member of the rank's groups, however many.
    all_members: bool,
    json: bool,
    seeds: Option<SeedOptions>,
    nodes: NodeOptions,
    /// `--without-ranks` and `--spares`.
    recovery: Option<(Vec<u32>, Vec<u32>)>,
    /// `--grids-disjoint-or-identical`: Megatron-Core 0.20's rule for the grids.
    disjoint_or_identical: bool,
    /// `--mindspeed`: MindSpeed's options.
    mindspeed: Option<MindSpeedOptions>,
}

fn parse_args(args: &[String]) -> Result<Option<Options>, String> {
    let mut grids = GridArgs::default();
    let (mut world_size, mut rank, mut json, mut all_members) = (None, None, false, false);
    let (mut seed, mut policy, mut dp_random_init) = (None, None, false);
    let mut flags = Flags::new(args);
    let mut nodes = NodeOptions::default();
    let (mut without, mut spares) = (None, None);
    let mut disjoint_or_identical = false;
    let mut mindspeed = None;
    while let Some((flag, inline)) = flags.next() {
        match flag {
            "-h" | "--help" => return Ok(None),
            "--grids-disjoint-or-identical" if inline.is_some() => {
                return Err("--grids-disjoint-or-identical takes no value".into())
            }
            "--grids-disjoint-or-identical" => disjoint_or_identical = true,
            "--json" if inline.is_some() => return Err("--json takes no value".into()),
            "--json" => json = true,
            "--all-members" if inline.is_some() => return Err("--all-members takes no value".into()),
            "--all-members" => all_members = true,
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
            "--mindspeed" => {
                let v = flags.value(flag, inline)?;
                mindspeed = Some(MindSpeedOptions::parse(v).map_err(|e| format!("--mindspeed: {e}"))?);
            }
            _ if grids.flag(flag, inline, &mut flags)? => {}
            _ if node_flag(&mut nodes, flag, inline, &mut flags)? => {}
            _ => return Err(format!("unknown option '{flag}'")),
        }
    }
    let world_size = world_size.ok_or("--world-size is required")?;
    if all_members && rank.is_none() {
        return Err("--all-members needs --rank R (the whole layout lists every member)".into());
    }
    let multi = grids.has_named();
    let grids = grids.finish()?;
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
    if multi && recovery.is_some() {
        return Err("--without-ranks plans the recovery of one grid: not with --grid".into());
    }
    if mindspeed.is_some() && (multi || recovery.is_some()) {
        return Err(
            "--mindspeed describes the one layout of the plain flags: not with --grid or --without-ranks".into()
        );
    }
    Ok(Some(Options {
        world_size,
        grids,
        multi,
        rank,
        all_members,
        json,
        seeds,
        nodes,
        recovery,
        disjoint_or_identical,
        mindspeed,
    }))
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
fn rank_json(t: &Topology, rank: u32, all_members: bool) -> Result<Map<String, Value>, String> {
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
        let boxes: Vec<Value> = m.group.boxes().iter().map(|b| json!({"base": b.base, "axes": b.axes})).collect();
        let mut g = json!({"rank": m.rank, "size": m.size(), "index": m.group_index(), "first": m.group.first(),
                           "last": m.group.last(), "boxes": boxes});
        if all_members || m.size() <= LISTED_MEMBERS {
            g["ranks"] = json!(m.members());
        }
        groups.insert(m.kind().key().into_owned(), g);
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

/// Worlds above this many ranks get the compact layout table: every group listed would make
/// lines of tens of thousands of characters (27,627 at 4,096 ranks).
const COMPACT_TABLE_ABOVE: u32 = 256;
/// The longest line of the compact table.
const MAX_LINE: usize = 200;

fn layout_table(t: &Topology) -> Result<String, String> {
    let mut out = summary(t);
    let compact = t.sizes().world_size > COMPACT_TABLE_ABOVE;
    let header = if compact { "first group (ranks) = pattern; where each group starts" } else { "groups (ranks)" };
    let _ = writeln!(out, "\n{:<48} {:>8} {:>6}  {header}", "kind", "count", "size");
    for kind in t.kinds() {
        let groups = all_groups(t, kind)?;
        let size = groups.first().map_or(0, Group::len);
        let groups_text = if compact {
            let first = groups.first().map_or(String::new(), |g| group_text(g, 8));
            let starts: Vec<u32> = groups.iter().map(Group::first).collect();
            format!("{first}; starts {}", elided(&starts))
        } else {
            groups.iter().map(|g| list(&g.members())).collect::<Vec<_>>().join(" ")
        };
        let line = format!("{:<48} {:>8} {:>6}  {groups_text}", kind.key(), groups.len(), size);
        let _ = writeln!(out, "{}", if compact { fit(&line, MAX_LINE) } else { line });
    }
    if compact {
        let _ = writeln!(
            out,
            "\n(more than {COMPACT_TABLE_ABOVE} ranks: each kind by its first group; --rank R or --json lists groups)"
        );
    }
    Ok(out)
}

/// `[a,b,c,...,z]`: the first three and the last of `ranks` (all of them when at most five).
fn elided(ranks: &[u32]) -> String {
    match ranks {
        [a, b, c, .., z] if ranks.len() > 5 => format!("[{a},{b},{c},...,{z}]"),
        _ => list(ranks),
    }
}

/// `line` cut to `max` characters, ending in `...` when cut.
fn fit(line: &str, max: usize) -> String {
    match line.char_indices().nth(max - 3) {
        Some((end, _)) if line.chars().count() > max => format!("{}...", &line[..end]),
        _ => line.to_string(),
    }
}

/// Most members of one group `--rank` lists (more are shown by their pattern, unless
/// `--all-members`): the one-rank view stays O(groups of the rank), whatever the world.
const LISTED_MEMBERS: u32 = 256;

/// The members of a group: all of them, or for a bigger group than [`LISTED_MEMBERS`] its first
/// ranks, its last and its exact pattern (`[5,13,21,...,16777213] = 5+8*i (i<2097152)`).
fn members_text(m: &Membership, all_members: bool) -> String {
    if all_members {
        return list(&m.members());
    }
    group_text(&m.group, LISTED_MEMBERS)
}

/// A group's members when at most `listed`, else its first ranks, its last and its exact
/// pattern (the `--rank` view's and the compact table's).
fn group_text(g: &Group, listed: u32) -> String {
    if g.len() <= listed {
        return list(&g.members());
    }
    let head: Vec<String> = g.iter().take(3).map(|r| r.to_string()).collect();
    let boxes: Vec<String> = g.boxes().iter().map(|b| b.to_string()).collect();
    format!("[{},...,{}] = {}", head.join(","), g.last(), boxes.join(" | "))
}

fn rank_table(t: &Topology, rank: u32, all_members: bool) -> Result<String, String> {
    let mut out = summary(t);
    if let Some(note) = outside_grid(t, rank) {
        let _ = writeln!(out, "\n{note}");
        return Ok(out);
    }
    let view = t.rank_view(rank).map_err(|e| e.to_string())?;
    let _ = writeln!(out, "\nrank {rank}\n{:<48} {:>8} {:>11}  ranks", "kind", "group", "rank/size");
    for m in &view.groups {
        let rs = format!("{}/{}", m.rank, m.size());
        let members = members_text(m, all_members);
        let _ = writeln!(out, "{:<48} {:>8} {:>11}  {members}", m.kind().key(), m.group_index(), rs);
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

fn check_output_size(t: &Topology, rank: Option<u32>, all_members: bool) -> Result<(), String> {
    let listed: u64 = match rank {
        Some(r) if outside_grid(t, r).is_some() => 0,
        Some(r) => {
            let view = t.rank_view(r).map_err(|e| e.to_string())?;
            let shown = |m: &Membership| if all_members { m.size() } else { m.size().min(LISTED_MEMBERS) };
            view.groups.iter().map(|m| u64::from(shown(m))).sum()
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
    if opts.multi {
        return run_grids(&opts);
    }
    let grid = &opts.grids[0];
    let t = Topology::new(grid.config.clone(), opts.world_size).map_err(|e| e.to_string())?;
    let plan = match &opts.recovery {
        Some((failed, spares)) => Some(plan_recovery(&t, failed, spares).map_err(|e| e.to_string())?),
        None => None,
    };
    let t = plan.as_ref().map_or(t, |p| p.topology.clone());
    check_output_size(&t, opts.rank, opts.all_members)?;
    if let Some(path) = &opts.nodes.svg {
        write_svg(path, &layout_svg(&t, &picture_options(&opts)).map_err(|e| format!("--svg: {e}"))?)?;
    }
    let mut report = grid_report(&t, "", &opts)?;
    if let Some(o) = &opts.mindspeed {
        let ms = MindSpeedLayout::new(&t, o.clone()).map_err(|e| format!("--mindspeed: {e}"))?;
        mindspeed_report(&ms, &t, opts.rank, &mut report)?;
    }
    if opts.json {
        let mut obj = report.json;
        if let Some(p) = &plan {
            recovery_json(p, &mut obj);
        }
        return Ok(format!("{}\n", Value::Object(obj)));
    }
    let mut out = plan.as_ref().map(recovery_table).unwrap_or_default();
    out.push_str(&report.text);
    Ok(out)
}

/// Add MindSpeed's groups of the layout, or of `rank`, to the report.
fn mindspeed_report(
    ms: &MindSpeedLayout,
    t: &Topology,
    rank: Option<u32>,
    report: &mut GridReport,
) -> Result<(), String> {
    match rank {
        Some(r) => {
            mindspeed::rank_json(ms, r, &mut report.json)?;
            report.text.push_str(&mindspeed::rank_table(ms, r)?);
        }
        None => {
            mindspeed::check_size(ms, t.world_size(), MAX_LISTED_RANKS)?;
            mindspeed::layout_json(ms, &mut report.json)?;
            report.text.push_str(&mindspeed::layout_table(ms)?);
        }
    }
    Ok(())
}

/// One grid's reports: the layout or the rank's view, the seeds and the node placement.
struct GridReport {
    text: String,
    json: Map<String, Value>,
}

/// The reports of grid `t` (`name` prefixes its errors when there are several grids).
fn grid_report(t: &Topology, name: &str, opts: &Options) -> Result<GridReport, String> {
    let placement = node_report(t, name, &opts.nodes, opts.rank)?;
    let seeds = match &opts.seeds {
        Some(s) => Some(rng_seeds(t, opts.rank, s).map_err(|e| format!("{name}{e}"))?),
        None => None,
    };
    let mut json = match opts.rank {
        Some(r) => rank_json(t, r, opts.all_members)?,
        None => layout_json(t)?,
    };
    let mut text = match opts.rank {
        Some(r) => rank_table(t, r, opts.all_members)?,
        None => layout_table(t)?,
    };
    if let Some(seeds) = seeds {
        let policy = &opts.seeds.as_ref().expect("seeds were asked for").policy;
        let _ = writeln!(text, "\nRNG seeds (policy {policy}):");
        for (rank, streams) in &seeds {
            let line: Vec<String> = streams.iter().map(|(n, s)| format!("{n}={s}")).collect();
            let _ = writeln!(text, "  rank {rank:>6}: {}", line.join(" "));
        }
        let list: Vec<Value> = seeds
            .into_iter()
            .map(|(rank, streams)| {
                let streams: Map<String, Value> = streams.into_iter().map(|(n, s)| (n, json!(s))).collect();
                json!({"rank": rank, "streams": streams})
            })
            .collect();
        json.insert("rng".into(), Value::Array(list));
    }
    match &placement {
        Some(Placement::Layout(p)) => {
            text.push_str(&placement_table(p));
            json.insert("nodes".into(), placement_json(p));
        }
        Some(Placement::Rank(p)) => {
            text.push_str(&rank_placement_table(p));
            json.insert("nodes".into(), rank_placement_json(p));
        }
        None => {}
    }
    Ok(GridReport { text, json })
}

fn picture_options(opts: &Options) -> PictureOptions {
    PictureOptions {
        gpus_per_node: opts.nodes.gpus_per_node.unwrap_or(8),
        color_by: opts.nodes.color_by.unwrap_or(GroupKind::TensorModelParallel),
        rank: opts.rank,
    }
}

fn write_svg(path: &str, svg: &str) -> Result<(), String> {
    std::fs::write(path, svg).map_err(|e| format!("--svg: cannot write '{path}': {e}"))
}

/// The grids of `--grid` (and `default`), each in the world of `--world-size`.
fn build_grids(opts: &Options) -> Result<Vec<(String, Topology)>, String> {
    let mut out = Vec::with_capacity(opts.grids.len());
    for g in &opts.grids {
        let t = Topology::new(g.config.clone(), opts.world_size).map_err(|e| format!("grid {}: {e}", g.name))?;
        let end = u64::from(t.rank_offset()) + u64::from(t.world_size());
        if end > u64::from(opts.world_size) {
            return Err(format!(
                "grid {}: covers ranks {}..{} but the world has {} ranks (give local-world-size=N for a grid on \
                 part of the world)",
                g.name,
                t.rank_offset(),
                end - 1,
                opts.world_size
            ));
        }
        out.push((g.name.clone(), t));
    }
    if opts.disjoint_or_identical {
        let spans: Vec<(&str, u32, u32)> =
            out.iter().map(|(n, t)| (n.as_str(), t.rank_offset(), t.world_size())).collect();
        mcore_init::runtime::check_disjoint_or_identical(&spans, opts.world_size)?;
    }
    Ok(out)
}

/// Ranks `first..=last` that two grids share, if any.
fn shared_ranks(a: &Topology, b: &Topology) -> Option<(u32, u32)> {
    let end = |t: &Topology| u64::from(t.rank_offset()) + u64::from(t.world_size());
    let first = a.rank_offset().max(b.rank_offset());
    let last = end(a).min(end(b));
    (u64::from(first) < last).then(|| (first, (last - 1) as u32))
}

/// Ranks of the world in no grid, as `first..=last` runs (at most one more than the grids).
fn ranks_in_no_grid(grids: &[(String, Topology)], world: u32) -> Vec<(u32, u32)> {
    let mut windows: Vec<(u64, u64)> = grids
        .iter()
        .map(|(_, t)| (u64::from(t.rank_offset()), u64::from(t.rank_offset()) + u64::from(t.world_size())))
        .collect();
    windows.sort_unstable();
    let (mut next, mut out) = (0u64, Vec::new());
    for (a, b) in windows {
        if a > next {
            out.push((next as u32, (a - 1) as u32));
        }
        next = next.max(b);
    }
    if next < u64::from(world) {
        out.push((next as u32, world - 1));
    }
    out
}

/// `mcore-topo --grid ...`: every report per grid, then what the grids share.
fn run_grids(opts: &Options) -> Result<String, String> {
    let grids = build_grids(opts)?;
    if let Some(r) = opts.rank {
        if r >= opts.world_size {
            return Err(format!("--rank {r}: the world has ranks 0..{}", opts.world_size - 1));
        }
    }
    for (name, t) in &grids {
        check_output_size(t, opts.rank, opts.all_members).map_err(|e| format!("grid {name}: {e}"))?;
    }
    if let Some(path) = &opts.nodes.svg {
        let named: Vec<(&str, &Topology)> = grids.iter().map(|(n, t)| (n.as_str(), t)).collect();
        write_svg(path, &grids_svg(&named, &picture_options(opts)).map_err(|e| format!("--svg: {e}"))?)?;
    }
    let names: Vec<String> = grids.iter().map(|(n, _)| n.clone()).collect();
    let mut text = format!("world size {}: {} grids ({})\n", opts.world_size, grids.len(), names.join(", "));
    let mut json_grids = Vec::with_capacity(grids.len());
    for (name, t) in &grids {
        let report = grid_report(t, &format!("grid {name}: "), opts)?;
        let _ = write!(text, "\n== grid {name}: ");
        text.push_str(&report.text);
        let mut obj = Map::new();
        obj.insert("name".into(), json!(name));
        obj.extend(report.json);
        json_grids.push(Value::Object(obj));
    }
    // What the grids share: ranks (the same GPUs), ranks in no grid, nodes.
    let _ = writeln!(text, "\nranks shared by grids:");
    let mut shared_json = Vec::new();
    for (i, (a, ta)) in grids.iter().enumerate() {
        for (b, tb) in &grids[i + 1..] {
            if let Some((first, last)) = shared_ranks(ta, tb) {
                let n = u64::from(last) - u64::from(first) + 1;
                let _ = writeln!(text, "  {a} & {b}: ranks {first}..{last} ({n} ranks on the same GPUs)");
                shared_json.push(json!({"grids": [a, b], "first": first, "last": last, "count": n}));
            }
        }
    }
    if shared_json.is_empty() {
        let _ = writeln!(text, "  none (the grids are side by side)");
    }
    let idle = ranks_in_no_grid(&grids, opts.world_size);
    for (first, last) in &idle {
        let _ = writeln!(text, "ranks in no grid: {first}..{last}");
    }
    let mut obj = Map::new();
    obj.insert("world_size".into(), json!(opts.world_size));
    obj.insert("grids".into(), Value::Array(json_grids));
    obj.insert("shared_ranks".into(), Value::Array(shared_json));
    let idle: Vec<Value> = idle.iter().map(|(a, b)| json!({"first": a, "last": b})).collect();
    obj.insert("ranks_in_no_grid".into(), Value::Array(idle));
    if let Some(r) = opts.rank {
        let holding: Vec<&str> = grids.iter().filter(|(_, t)| t.in_grid(r)).map(|(n, _)| n.as_str()).collect();
        let what = if holding.is_empty() { "no grid".to_string() } else { holding.join(", ") };
        let _ = writeln!(text, "rank {r} is in: {what}");
        obj.insert("rank".into(), json!(r));
        obj.insert("rank_grids".into(), json!(holding));
    }
    if let Some(gpn) = opts.nodes.gpus_per_node {
        let topologies: Vec<&Topology> = grids.iter().map(|(_, t)| t).collect();
        let spans = grid_node_spans(&topologies, gpn).map_err(|e| format!("--gpus-per-node {gpn}: {e}"))?;
        let _ = writeln!(text, "\nnodes of {gpn} GPUs and the grids on them:");
        for s in &spans {
            let _ = writeln!(text, "  {}", s.describe(&names));
        }
        let spans_json: Vec<Value> = spans
            .iter()
            .map(|s| {
                let g: Vec<&str> = s.grids.iter().map(|&i| names[i].as_str()).collect();
                json!({"first": s.first, "last": s.last, "grids": g, "shared": s.shared})
            })
            .collect();
        let mut nodes = json!({"gpus_per_node": gpn, "spans": spans_json});
        if let Some(r) = opts.rank {
            let node = u64::from(r / gpn);
            let span = spans.iter().find(|s| s.first <= node && node <= s.last).expect("spans cover the world");
            let g: Vec<&str> = span.grids.iter().map(|&i| names[i].as_str()).collect();
            let what = if g.is_empty() { "no grid".to_string() } else { g.join(", ") };
            let _ = writeln!(text, "rank {r} is on node {node}, whose GPUs belong to: {what}");
            nodes["rank_node"] = json!({"node": node, "grids": g});
        }
        obj.insert("nodes".into(), nodes);
    }
    if opts.json {
        return Ok(format!("{}\n", Value::Object(obj)));
    }
    Ok(text)
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

/// Where a grid's groups sit on nodes: every group of the layout, or one rank's groups.
enum Placement {
    Layout(NodePlacement),
    Rank(RankPlacement),
}

/// The nodes of one rank's groups (`--rank R --gpus-per-node N`): O(groups of the rank).
struct RankPlacement {
    gpus_per_node: u32,
    rank: u32,
    /// `None`: the rank is outside the grid.
    groups: Option<Vec<(GroupKind, u64, u64)>>,
    warnings: Vec<String>,
}

/// Node placement (warnings on stderr, errors with `--strict`); `prefix` names the grid.
fn node_report(t: &Topology, prefix: &str, n: &NodeOptions, rank: Option<u32>) -> Result<Option<Placement>, String> {
    let Some(gpn) = n.gpus_per_node else {
        return Ok(None);
    };
    let (placement, warnings) = match rank {
        Some(r) => {
            let p = rank_placement(t, r, gpn)?;
            let w = p.warnings.clone();
            (Placement::Rank(p), w)
        }
        None => {
            let p = node_placement(t, gpn).map_err(|e| format!("{prefix}--gpus-per-node {gpn}: {e}"))?;
            let w = p.warnings.iter().map(|w| w.message.clone()).collect();
            (Placement::Layout(p), w)
        }
    };
    if n.strict && !warnings.is_empty() {
        return Err(format!("--strict: {prefix}{}", warnings.join(" | ")));
    }
    for w in &warnings {
        eprintln!("mcore-topo: warning: {prefix}{w}");
    }
    Ok(Some(placement))
}

/// The first and last node of each of `rank`'s groups, and a warning for each node-local kind
/// whose group crosses nodes.
fn rank_placement(t: &Topology, rank: u32, gpn: u32) -> Result<RankPlacement, String> {
    let mut p = RankPlacement { gpus_per_node: gpn, rank, groups: None, warnings: Vec::new() };
    if outside_grid(t, rank).is_some() {
        return Ok(p);
    }
    let view: RankView = t.rank_view(rank).map_err(|e| e.to_string())?;
    let mut groups = Vec::with_capacity(view.groups.len());
    for m in &view.groups {
        let (first, last) = (u64::from(m.group.first() / gpn), u64::from(m.group.last() / gpn));
        if first != last && NODE_LOCAL_KINDS.contains(&m.kind()) {
            p.warnings.push(format!(
                "{}: rank {rank}'s group {} ({} ranks) spans nodes {first}..{last} of {gpn} GPUs",
                m.kind(),
                m.group_index(),
                m.size()
            ));
        }
        groups.push((m.kind(), first, last));
    }
    p.groups = Some(groups);
    Ok(p)
}

fn rank_placement_table(p: &RankPlacement) -> String {
    let node = p.rank / p.gpus_per_node;
    let mut out = format!("\nnodes of {} GPUs: rank {} is on node {node}\n", p.gpus_per_node, p.rank);
    let Some(groups) = &p.groups else {
        return out;
    };
    let _ = writeln!(out, "{:<48} {:>12}", "kind", "nodes");
    for (kind, first, last) in groups {
        let nodes = if first == last { first.to_string() } else { format!("{first}..{last}") };
        let _ = writeln!(out, "{:<48} {:>12}", kind.key(), nodes);
    }
    out
}

fn rank_placement_json(p: &RankPlacement) -> Value {
    let groups: Option<Map<String, Value>> = p.groups.as_ref().map(|g| {
        g.iter()
            .map(|(k, a, b)| (k.key().into_owned(), json!({"first_node": a, "last_node": b, "nodes": b - a + 1})))
            .collect()
    });
    json!({"gpus_per_node": p.gpus_per_node, "node": p.rank / p.gpus_per_node, "groups": groups,
           "warnings": p.warnings})
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
