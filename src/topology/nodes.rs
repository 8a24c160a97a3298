//! Node placement: where a layout's groups sit on machines of `gpus_per_node` GPUs each (global
//! rank `r` on node `r / gpus_per_node`). A pure function of the layout; no I/O.
//!
//! Groups whose traffic is on the critical path of every layer (tensor-parallel, context-parallel
//! and expert-tensor-parallel) should stay inside one node; a warning is produced for each such kind
//! with groups that cross nodes, with an order that keeps them local when one exists, otherwise a
//! smaller size that fits a node.
//!
//! ```
//! use mcore_init::topology::{node_placement, GroupKind, Topology, TopologyConfig};
//! let t = Topology::new(TopologyConfig { tp: 8, pp: 2, ..Default::default() }, 32).unwrap();
//! let p = node_placement(&t, 4).unwrap();
//! assert_eq!(p.kind(GroupKind::TensorModelParallel).unwrap().crossing, 4);
//! assert!(!p.warnings.is_empty());
//! assert!(node_placement(&t, 8).unwrap().warnings.is_empty());
//! ```

use super::error::TopologyError;
use super::generator::{parse_order, Dim};
use super::kind::GroupKind;
use super::layout::Topology;

/// Most groups one call examines (over all kinds); bigger layouts are refused with an error.
pub const MAX_PLACEMENT_GROUPS: u64 = 1 << 24;

/// Most groups the search for a better order examines (over all candidate orders); beyond
/// that the warnings name no order.
const MAX_ORDER_SEARCH: u64 = 1 << 26;

/// The kinds whose groups should not cross nodes.
pub const NODE_LOCAL_KINDS: [GroupKind; 3] =
    [GroupKind::TensorModelParallel, GroupKind::ContextParallel, GroupKind::ExpertTensorParallel];

/// How the groups of one kind sit on nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindPlacement {
    pub kind: GroupKind,
    /// Number of groups of the kind.
    pub groups: u64,
    /// Groups whose members all sit on one node.
    pub local: u64,
    /// Groups spanning more than one node (`groups - local`).
    pub crossing: u64,
    /// Index of the first crossing group, if any.
    pub first_crossing: Option<u64>,
    /// Most nodes one group of the kind spans.
    pub max_nodes: u64,
}

/// What would keep a kind's groups inside nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeFix {
    /// Another order string with the same sizes keeps them local.
    Order(String),
    /// No order can: the groups are larger than a node or do not tile it. The text names a
    /// smaller size (or bigger nodes) that would.
    Layout(String),
}

/// A warning about a node-local kind whose groups cross nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeWarning {
    pub kind: GroupKind,
    pub crossing: u64,
    pub groups: u64,
    /// Size of one group of the kind.
    pub group_size: u32,
    pub fix: Option<NodeFix>,
    /// One line for a person, naming the kind, the count and the fix.
    pub message: String,
}

/// The placement of every kind of a layout on nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePlacement {
    pub gpus_per_node: u32,
    /// Nodes the layout's ranks occupy (the last one may be partly used).
    pub nodes: u64,
    /// One entry per kind, in `Topology::kinds()` order.
    pub kinds: Vec<KindPlacement>,
    pub warnings: Vec<NodeWarning>,
}

impl NodePlacement {
    /// The placement of one kind, if the layout has it.
    pub fn kind(&self, kind: GroupKind) -> Option<&KindPlacement> {
        self.kinds.iter().find(|k| k.kind == kind)
    }
}

fn node_of(rank: u32, gpn: u32) -> u64 {
    u64::from(rank / gpn)
}

fn place_kind(t: &Topology, kind: GroupKind, gpn: u32) -> Result<KindPlacement, TopologyError> {
    let mut p = KindPlacement { kind, groups: 0, local: 0, crossing: 0, first_crossing: None, max_nodes: 0 };
    for g in t.groups(kind) {
        let g = g?;
        // Members are ascending and nodes are contiguous rank ranges: the first and the last
        // member bound the nodes a group spans.
        let span = node_of(g.last(), gpn) - node_of(g.first(), gpn) + 1;
        p.groups += 1;
        p.max_nodes = p.max_nodes.max(span);
        if span == 1 {
            p.local += 1;
        } else {
            p.crossing += 1;
            p.first_crossing.get_or_insert(g.index());
        }
    }
    Ok(p)
}

fn check_gpn(gpus_per_node: u32) -> Result<(), TopologyError> {
    if gpus_per_node == 0 {
        return Err(TopologyError::config("gpus_per_node 0: a node needs at least one GPU"));
    }
    Ok(())
}

/// Crossing groups of each node-local kind, for scoring candidate orders.
fn local_kind_crossings(t: &Topology, gpn: u32) -> Result<[u64; 3], TopologyError> {
    let mut out = [0; 3];
    for (i, kind) in NODE_LOCAL_KINDS.into_iter().enumerate() {
        if t.has_kind(kind) {
            out[i] = place_kind(t, kind, gpn)?.crossing;
        }
    }
    Ok(out)
}

/// Every order string over the five dims a user may name (first token fastest).
fn all_orders() -> Vec<String> {
    fn permute(rest: Vec<Dim>, prefix: &mut Vec<Dim>, out: &mut Vec<String>) {
        if rest.is_empty() {
            let names: Vec<&str> = prefix.iter().map(|d| d.name()).collect();
            out.push(names.join("-"));
            return;
        }
        for i in 0..rest.len() {
            let mut r = rest.clone();
            let d = r.remove(i);
            prefix.push(d);
            permute(r, prefix, out);
            prefix.pop();
        }
    }
    let mut out = Vec::new();
    permute(Dim::ORDER.to_vec(), &mut Vec::new(), &mut out);
    out
}

/// Positions at which `a` and `b` (parsed orders) differ, counting dims missing from one.
fn order_distance(a: &[Dim], b: &[Dim]) -> usize {
    (0..5).filter(|&i| a.get(i) != b.get(i)).count()
}

/// The order, among those the layout accepts, with the fewest crossing groups of the node-local
/// kinds (tensor-parallel first), closest to the current order on ties; `None` when none is
/// better than the current one.
fn best_order(t: &Topology, gpn: u32, current: [u64; 3]) -> Result<Option<(String, [u64; 3])>, TopologyError> {
    let work: u64 = NODE_LOCAL_KINDS.iter().map(|&k| t.group_count(k)).sum();
    if work.saturating_mul(all_orders().len() as u64) > MAX_ORDER_SEARCH {
        return Ok(None);
    }
    let here = parse_order(&t.config().order)?;
    let mut best: Option<(([u64; 3], usize), String)> = None;
    for order in all_orders() {
        let mut cfg = t.config().clone();
        cfg.order = order.clone();
        let Ok(cand) = Topology::new(cfg, t.total_world_size()) else {
            continue;
        };
        let score = (local_kind_crossings(&cand, gpn)?, order_distance(&here, &parse_order(&order)?));
        if best.as_ref().map_or(true, |(s, _)| score < *s) {
            best = Some((score, order));
        }
    }
    Ok(best.filter(|((c, _), _)| *c < current).map(|((c, _), o)| (o, c)))
}

/// The flag of a node-local kind's size, for suggestions.
fn size_flag(kind: GroupKind) -> &'static str {
    match kind {
        GroupKind::TensorModelParallel => "--tp",
        GroupKind::ContextParallel => "--cp",
        _ => "--etp",
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// How groups of `kind` cross nodes on `t`, and what would keep them inside one.
///
/// Errors: `gpus_per_node` 0, or a layout with more than [`MAX_PLACEMENT_GROUPS`] groups.
pub fn node_placement(t: &Topology, gpus_per_node: u32) -> Result<NodePlacement, TopologyError> {
    check_gpn(gpus_per_node)?;
    let kinds = t.kinds();
    let total: u64 = kinds.iter().map(|&k| t.group_count(k)).sum();
    if total > MAX_PLACEMENT_GROUPS {
        return Err(TopologyError::range(format!(
            "the layout has {total} groups, more than the {MAX_PLACEMENT_GROUPS} a node placement examines"
        )));
    }
    let placed = kinds.iter().map(|&k| place_kind(t, k, gpus_per_node)).collect::<Result<Vec<_>, _>>()?;
    let first = u64::from(t.rank_offset()) / u64::from(gpus_per_node);
    let last = (u64::from(t.rank_offset()) + u64::from(t.world_size()) - 1) / u64::from(gpus_per_node);
    let mut out = NodePlacement { gpus_per_node, nodes: last - first + 1, kinds: placed, warnings: Vec::new() };
    let current = local_kind_crossings(t, gpus_per_node)?;
    if current == [0; 3] {
        return Ok(out);
    }
    let order = best_order(t, gpus_per_node, current)?;
    for (i, kind) in NODE_LOCAL_KINDS.into_iter().enumerate() {
        let Some(p) = out.kind(kind).filter(|p| p.crossing > 0).cloned() else {
            continue;
        };
        // Expert tensor-parallel size defaults to tp: one warning (about tp) says it all.
        let tp_warned = out.warnings.iter().any(|w| w.kind == GroupKind::TensorModelParallel);
        if kind == GroupKind::ExpertTensorParallel && t.config().etp.is_none() && tp_warned {
            continue;
        }
        let size = t.group(kind, 0)?.len();
        let fix = match &order {
            Some((o, c)) if c[i] == 0 => Some(NodeFix::Order(o.clone())),
            _ if size > gpus_per_node || gpus_per_node % size != 0 => {
                let fits = gcd(size, gpus_per_node);
                let keep = if kind == GroupKind::TensorModelParallel {
                    // Same ranks per model replica: the pipeline takes what tensor parallelism gives up.
                    format!(" --pp {}", u64::from(t.sizes().pp) * u64::from(size / fits))
                } else {
                    String::new()
                };
                Some(NodeFix::Layout(format!("{} {fits}{keep} or nodes of at least {size} GPUs", size_flag(kind))))
            }
            _ => None,
        };
        let why = if size > gpus_per_node {
            format!("a group has {size} ranks but a node has {gpus_per_node} GPUs")
        } else {
            format!("groups of {size} ranks on nodes of {gpus_per_node} GPUs")
        };
        let advice = match &fix {
            Some(NodeFix::Order(o)) => format!("; --order {o} keeps them inside nodes"),
            Some(NodeFix::Layout(l)) => format!("; no order keeps them inside nodes: use {l}"),
            None => String::new(),
        };
        out.warnings.push(NodeWarning {
            kind,
            crossing: p.crossing,
            groups: p.groups,
            group_size: size,
            message: format!(
                "{kind}: {} of {} groups cross nodes ({why}; group {} spans {} nodes){advice}",
                p.crossing,
                p.groups,
                p.first_crossing.unwrap_or(0),
                p.max_nodes
            ),
            fix,
        });
    }
    Ok(out)
}

/// A run of consecutive nodes whose GPUs belong to the same grids (several layouts in one
/// world: [`grid_node_spans`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpan {
    /// First and last node of the run (node `n` holds ranks `n·gpus_per_node ..`).
    pub first: u64,
    pub last: u64,
    /// Indices (into the given grids) of the grids with a GPU on these nodes, ascending.
    pub grids: Vec<usize>,
    /// Whether some GPU of these nodes belongs to more than one grid (colocated grids).
    pub shared: bool,
}

impl NodeSpan {
    /// `nodes 0-1: train, rollout (GPUs shared)`, `node 3: no grid`; `names` are the grids' names
    /// in the order given to [`grid_node_spans`].
    pub fn describe<S: AsRef<str>>(&self, names: &[S]) -> String {
        let nodes = if self.first == self.last {
            format!("node {}", self.first)
        } else {
            format!("nodes {}-{}", self.first, self.last)
        };
        if self.grids.is_empty() {
            return format!("{nodes}: no grid");
        }
        let grids: Vec<&str> = self.grids.iter().map(|&i| names[i].as_ref()).collect();
        let shared = if self.shared { " (GPUs shared)" } else { "" };
        format!("{nodes}: {}{shared}", grids.join(", "))
    }
}

/// The nodes of a world holding several grids, cut into runs of nodes whose GPUs belong to the
/// same grids (nodes in no grid form runs with no grid). The world is the largest
/// [`Topology::total_world_size`] (or grid end) of `grids`. Costs O(grids²) per run and there
/// are at most four runs per grid plus one: nothing is proportional to the world.
///
/// Errors: `gpus_per_node` 0.
pub fn grid_node_spans(grids: &[&Topology], gpus_per_node: u32) -> Result<Vec<NodeSpan>, TopologyError> {
    check_gpn(gpus_per_node)?;
    let gpn = u64::from(gpus_per_node);
    let window = |t: &Topology| {
        let first = u64::from(t.rank_offset());
        (first, first + u64::from(t.world_size()))
    };
    let world = grids.iter().map(|t| u64::from(t.total_world_size()).max(window(t).1)).max().unwrap_or(0);
    let nodes = world.div_ceil(gpn);
    // Node boundaries where the set of grids (or whether a node is only partly in one) changes.
    let mut cuts = vec![0, nodes];
    for t in grids {
        let (first, end) = window(t);
        cuts.extend([first / gpn, first.div_ceil(gpn), (end - 1) / gpn, end.div_ceil(gpn)]);
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut out: Vec<NodeSpan> = Vec::new();
    for w in cuts.windows(2) {
        let (a, b) = (w[0], w[1]);
        // Ranks of these nodes; with the cuts above, grids touching one node touch them all.
        let (lo, hi) = (a * gpn, (b * gpn).min(world));
        let inside = |t: &Topology| {
            let (first, end) = window(t);
            (first.max(lo), end.min(hi))
        };
        let members: Vec<usize> = (0..grids.len())
            .filter(|&i| {
                let (x, y) = inside(grids[i]);
                x < y
            })
            .collect();
        let shared = members.iter().enumerate().any(|(k, &i)| {
            members[k + 1..].iter().any(|&j| {
                let ((x1, y1), (x2, y2)) = (inside(grids[i]), inside(grids[j]));
                x1.max(x2) < y1.min(y2)
            })
        });
        match out.last_mut() {
            Some(prev) if prev.grids == members && prev.shared == shared && prev.last + 1 == a => prev.last = b - 1,
            _ => out.push(NodeSpan { first: a, last: b - 1, grids: members, shared }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyConfig;

    fn window(tp: u32, offset: u32, local: u32, world: u32) -> Topology {
        let cfg = TopologyConfig { tp, rank_offset: offset, local_world_size: Some(local), ..Default::default() };
        Topology::new(cfg, world).unwrap()
    }

    #[test]
    fn node_spans_of_colocated_and_side_by_side_grids() {
        // train on ranks 0..16, rollout on 8..24, nothing on 24..32; 8 GPUs per node.
        let (train, rollout) = (window(2, 0, 16, 32), window(4, 8, 16, 32));
        let spans = grid_node_spans(&[&train, &rollout], 8).unwrap();
        let got: Vec<_> = spans.iter().map(|s| (s.first, s.last, s.grids.clone(), s.shared)).collect();
        assert_eq!(
            got,
            vec![(0, 0, vec![0], false), (1, 1, vec![0, 1], true), (2, 2, vec![1], false), (3, 3, vec![], false)]
        );
        // Colocated over the whole world: one run.
        let spans = grid_node_spans(&[&window(2, 0, 32, 32), &window(4, 0, 32, 32)], 8).unwrap();
        assert_eq!(spans, vec![NodeSpan { first: 0, last: 3, grids: vec![0, 1], shared: true }]);
        assert_eq!(spans[0].describe(&["train", "rollout"]), "nodes 0-3: train, rollout (GPUs shared)");
        // Two grids on one node without a common GPU: the node is in both, nothing shared; a
        // grid starting mid-node cuts a run of its own.
        let spans = grid_node_spans(&[&window(1, 0, 4, 16), &window(1, 4, 12, 16)], 8).unwrap();
        let got: Vec<_> = spans.iter().map(|s| (s.first, s.last, s.grids.clone(), s.shared)).collect();
        assert_eq!(got, vec![(0, 0, vec![0, 1], false), (1, 1, vec![1], false)]);
        assert!(grid_node_spans(&[&train], 0).unwrap_err().message.contains("gpus_per_node 0"));
        // 16M ranks: a handful of runs, computed without visiting the nodes.
        let big = window(8, 0, 1 << 23, 1 << 24);
        let spans = grid_node_spans(&[&big, &window(4, 1 << 23, 1 << 23, 1 << 24)], 8).unwrap();
        assert_eq!(spans.len(), 2);
        assert_eq!((spans[1].first, spans[1].last), (1 << 20, (1 << 21) - 1));
    }

    fn topo(tp: u32, pp: u32, cp: u32, order: &str, world: u32) -> Topology {
        let cfg = TopologyConfig { tp, pp, cp, order: order.into(), ..Default::default() };
        Topology::new(cfg, world).unwrap()
    }

    #[test]
    fn tp_larger_than_a_node_suggests_a_smaller_tp() {
        let t = topo(8, 2, 1, "tp-cp-ep-dp-pp", 32);
        let p = node_placement(&t, 4).unwrap();
        assert_eq!(p.nodes, 8);
        let tp = p.kind(GroupKind::TensorModelParallel).unwrap();
        assert_eq!((tp.groups, tp.local, tp.crossing, tp.max_nodes), (4, 0, 4, 2));
        assert_eq!(p.warnings.len(), 1);
        let w = &p.warnings[0];
        assert_eq!(w.kind, GroupKind::TensorModelParallel);
        assert!(matches!(&w.fix, Some(NodeFix::Layout(l)) if l.starts_with("--tp 4 --pp 4 ")), "{w:?}");
        assert!(w.message.contains("4 of 4 groups cross nodes"), "{}", w.message);
        // Eight GPUs per node: everything tensor-parallel is local.
        let p = node_placement(&t, 8).unwrap();
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
        assert_eq!(p.kind(GroupKind::TensorModelParallel).unwrap().local, 4);
        // Pipeline groups (stride 16) always cross 8-GPU nodes.
        assert_eq!(p.kind(GroupKind::PipelineModelParallel).unwrap().crossing, 16);
    }

    #[test]
    fn a_strided_order_gets_an_order_that_keeps_tp_local() {
        // dp fastest: tp groups are strided by dp = 4 and cross 4-GPU nodes.
        let t = topo(2, 1, 1, "dp-tp-cp-ep-pp", 8);
        let p = node_placement(&t, 4).unwrap();
        assert_eq!(p.kind(GroupKind::TensorModelParallel).unwrap().crossing, 4);
        let w = &p.warnings[0];
        let Some(NodeFix::Order(o)) = &w.fix else { panic!("{w:?}") };
        let mut cfg = t.config().clone();
        cfg.order = o.clone();
        let fixed = Topology::new(cfg, 8).unwrap();
        assert!(node_placement(&fixed, 4).unwrap().warnings.is_empty(), "{o}");
    }

    #[test]
    fn cp_crossing_and_bad_input() {
        let t = topo(2, 1, 4, "tp-cp-ep-dp-pp", 16);
        let p = node_placement(&t, 4).unwrap();
        let kinds: Vec<_> = p.warnings.iter().map(|w| w.kind).collect();
        assert_eq!(kinds, vec![GroupKind::ContextParallel]);
        assert!(node_placement(&t, 0).unwrap_err().message.contains("gpus_per_node 0"));
        // A partial last node is counted.
        let p = node_placement(&topo(1, 1, 1, "tp-cp-ep-dp-pp", 10), 4).unwrap();
        assert_eq!(p.nodes, 3);
    }
}
