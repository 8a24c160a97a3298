//! A self-contained SVG picture of a layout: the ranks as a grid of GPUs (one row per node),
//! coloured by the groups of one kind, each cell labelled with its pipeline stage and
//! data-parallel replica, optionally one rank highlighted with the members of its groups.
//! A pure function (returns the text); no fonts, scripts or links to load.

use super::error::TopologyError;
use super::kind::GroupKind;
use super::layout::{RankView, Topology};
use super::nodes::{grid_node_spans, node_placement, NodePlacement, NodeSpan, NODE_LOCAL_KINDS};
use std::fmt::Write as _;

/// Most ranks a picture draws.
pub const MAX_PICTURE_RANKS: u32 = 4096;

/// Fill colours, group `i` of the coloured kind gets `PALETTE[i % len]`.
pub const PALETTE: [&str; 12] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac",
    "#1f3b73", "#8cd17d",
];

/// What to draw.
#[derive(Debug, Clone)]
pub struct PictureOptions {
    pub gpus_per_node: u32,
    /// The kind whose groups give the colours.
    pub color_by: GroupKind,
    /// A rank to highlight with its groups.
    pub rank: Option<u32>,
}

const CELL_W: u32 = 72;
const CELL_H: u32 = 48;
const GAP: u32 = 6;
const LEFT: u32 = 70;
const TOP: u32 = 48;

/// One line of the text below a picture at `*y` (indented when `text` starts with two spaces),
/// The picture's opening: the `<svg>` element of `width` × `height` and its white background.
fn svg_open(out: &mut String, width: u32, height: u32) {
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(out, "<rect width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>");
}

/// The labels of `nodes` rows of GPUs from `top`, the first being node `first_node`.
fn node_labels(out: &mut String, top: u32, first_node: u32, nodes: u32) {
    for n in 0..nodes {
        let y = top + n * (CELL_H + GAP);
        let _ = writeln!(
            out,
            "<text x=\"10\" y=\"{}\" font-weight=\"bold\">node {}</text>",
            y + CELL_H / 2 + 4,
            first_node + n
        );
    }
}

/// moving `*y` to the next line.
fn text_line(out: &mut String, y: &mut u32, text: &str, colour: &str) {
    let (x, text) = match text.strip_prefix("  ") {
        Some(t) => (24, t),
        None => (10, text),
    };
    let _ = writeln!(out, "<text x=\"{x}\" y=\"{y}\" fill=\"{colour}\">{}</text>", esc(text));
    *y += 16;
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The picture of `t` as an SVG document.
///
/// Errors: an unknown `color_by` kind for this layout, a rank outside it, `gpus_per_node` 0,
/// or more than [`MAX_PICTURE_RANKS`] ranks.
pub fn layout_svg(t: &Topology, opts: &PictureOptions) -> Result<String, TopologyError> {
    let gpn = opts.gpus_per_node;
    let world = t.world_size();
    if world > MAX_PICTURE_RANKS {
        return Err(TopologyError::range(format!(
            "world size {world}: a picture draws at most {MAX_PICTURE_RANKS} ranks"
        )));
    }
    let placement = node_placement(t, gpn)?;
    if !t.has_kind(opts.color_by) {
        return Err(TopologyError::unknown_kind(format!("color-by {}: this layout has no such groups", opts.color_by)));
    }
    let offset = t.rank_offset();
    let highlight = match opts.rank {
        Some(r) => Some(t.rank_view(r)?),
        None => None,
    };
    let first_node = offset / gpn;
    let nodes = placement.nodes as u32;
    let legend = legend(&placement, highlight.as_ref(), opts.color_by);
    let compact = world > COMPACT_ABOVE;
    let shape = if compact { Shape::compact(gpn, nodes) } else { Shape::full(gpn.min(world), nodes) };
    let width = (shape.left + shape.width + 20).max(720);
    let height = TOP + shape.height + 20 + legend.len() as u32 * 16 + 10;
    let s = t.sizes();
    let mut out = String::new();
    svg_open(&mut out, width, height);
    let _ = writeln!(
        out,
        "<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\">world {world}: tp {} pp {} cp {} ep {} dp {} \
         (order {}), {gpn} GPUs per node</text>",
        s.tp,
        s.pp,
        s.cp,
        s.ep,
        s.dp,
        esc(&t.config().order)
    );
    if compact {
        let _ = writeln!(
            out,
            "<text x=\"10\" y=\"36\">colour: {} group (no colour twice among a node and its neighbours); \
             {} nodes a row; hover a GPU for its rank, stage and replica</text>",
            opts.color_by, shape.nodes_per_row
        );
        draw_compact(&mut out, t, opts, &shape, first_node, highlight.as_ref())?;
    } else {
        let _ = writeln!(
            out,
            "<text x=\"10\" y=\"36\">colour: {} group; in each GPU: rank, pipeline stage S, data-parallel replica D, context-parallel rank C</text>",
            opts.color_by
        );
        node_labels(&mut out, TOP, first_node, nodes);
        let cells = Cells { top: TOP, first_node, gpn, highlight: highlight.as_ref() };
        draw_cells(&mut out, t, opts, &cells, offset..offset + world)?;
    }
    let mut y = TOP + shape.height + 20;
    for (text, colour) in &legend {
        text_line(&mut out, &mut y, text, colour);
    }
    out.push_str("</svg>\n");
    Ok(out)
}

/// The lines below a layout's picture, with their colours: the groups crossing nodes, the
/// placement's warnings, the highlighted rank's groups.
fn legend(placement: &NodePlacement, highlight: Option<&RankView>, color_by: GroupKind) -> Vec<(String, &'static str)> {
    let mut lines = Vec::new();
    let crossing: Vec<String> = placement
        .kinds
        .iter()
        .filter(|k| k.crossing > 0)
        .map(|k| format!("{} {}/{}", k.kind, k.crossing, k.groups))
        .collect();
    if crossing.is_empty() {
        lines.push(("groups crossing nodes: none".to_string(), "#000000"));
    } else {
        lines.push(("groups crossing nodes (kind crossing/all):".to_string(), "#000000"));
        lines.extend(crossing.chunks(4).map(|chunk| (format!("  {}", chunk.join(", ")), "#000000")));
    }
    lines.extend(placement.warnings.iter().map(|w| (format!("warning: {}", w.message), "#b00000")));
    if let Some(v) = highlight {
        lines.push((format!("rank {} (thick border), its {color_by} group dashed:", v.rank), "#000000"));
        for m in &v.groups {
            let members = m.members();
            let shown: Vec<String> = members.iter().take(16).map(u32::to_string).collect();
            let more = if members.len() > 16 { ",..." } else { "" };
            lines.push((format!("  {}: [{}{more}]", m.kind(), shown.join(",")), "#000000"));
        }
    }
    lines.push(("drawn by mcore-topo --svg".to_string(), "#777777"));
    lines
}

/// Worlds above this many ranks get the compact picture: small unlabelled cells, several nodes
/// a row (at 4,096 ranks one node a row made a picture 28,270 px tall), colours chosen so that
/// no two groups near each other share one (12 colours repeat every 12 groups).
pub const COMPACT_ABOVE: u32 = 256;
const SMALL_CELL: u32 = 14;
const SMALL_GAP: u32 = 2;
/// The gap between two nodes of a row, and the width a compact row aims at.
const NODE_GAP: u32 = 10;
const ROW_WIDTH: u32 = 1600;

/// Where the cells of a picture go: the left margin, nodes a row, and the size of the cell area.
struct Shape {
    left: u32,
    gpn: u32,
    nodes_per_row: u32,
    width: u32,
    height: u32,
}

impl Shape {
    fn full(cols: u32, nodes: u32) -> Shape {
        Shape { left: LEFT, gpn: cols, nodes_per_row: 1, width: cols * (CELL_W + GAP), height: nodes * (CELL_H + GAP) }
    }

    fn compact(gpn: u32, nodes: u32) -> Shape {
        let node_w = gpn * (SMALL_CELL + SMALL_GAP) + NODE_GAP;
        let nodes_per_row = (ROW_WIDTH / node_w).clamp(1, nodes.max(1));
        let rows = nodes.div_ceil(nodes_per_row);
        Shape { left: 100, gpn, nodes_per_row, width: nodes_per_row * node_w, height: rows * (SMALL_CELL + SMALL_GAP) }
    }

    /// The node row and column of `node` (counted from the picture's first node).
    fn node_at(&self, node: u32) -> (u32, u32) {
        (node / self.nodes_per_row, node % self.nodes_per_row)
    }

    /// The top-left corner of GPU `col` of `node` in a compact picture.
    fn cell(&self, node: u32, col: u32) -> (u32, u32) {
        let (row, at) = self.node_at(node);
        let x = self.left + at * (self.gpn * (SMALL_CELL + SMALL_GAP) + NODE_GAP) + col * (SMALL_CELL + SMALL_GAP);
        (x, TOP + row * (SMALL_CELL + SMALL_GAP))
    }

    /// Whether two nodes touch in the picture: the same, side by side in a row, or above and
    /// below each other (diagonals included).
    fn near(&self, a: u32, b: u32) -> bool {
        let ((ra, ca), (rb, cb)) = (self.node_at(a), self.node_at(b));
        ra.abs_diff(rb) <= 1 && ca.abs_diff(cb) <= 1
    }
}

/// Colour `c` of the compact picture: the palette's twelve, then golden-angle hues (which never
/// repeat) in three lightnesses.
fn colour(c: usize) -> String {
    match PALETTE.get(c) {
        Some(p) => p.to_string(),
        None => format!("hsl({:.0},60%,{}%)", (c as f64 * 137.508) % 360.0, [55, 70, 42][c % 3]),
    }
}

/// A colour for each group of `groups_by_node` (per picture node, per GPU: its group's index):
/// each group, in the order it first appears, gets the lowest colour that no group in a nearby
/// node ([`Shape::near`]) has.
fn compact_colours(groups_by_node: &[Vec<Option<u64>>], shape: &Shape) -> std::collections::HashMap<u64, usize> {
    use std::collections::{BTreeSet, HashMap};
    let present: Vec<BTreeSet<u64>> = groups_by_node.iter().map(|n| n.iter().flatten().copied().collect()).collect();
    let mut nodes_of: HashMap<u64, Vec<u32>> = HashMap::new();
    let mut order = Vec::new();
    for (n, set) in (0u32..).zip(&present) {
        for &g in set {
            nodes_of
                .entry(g)
                .or_insert_with(|| {
                    order.push(g);
                    Vec::new()
                })
                .push(n);
        }
    }
    let mut colours: HashMap<u64, usize> = HashMap::new();
    let nodes = present.len() as u32;
    for g in order {
        let mut taken: BTreeSet<usize> = BTreeSet::new();
        for &n in &nodes_of[&g] {
            let (lo, hi) = (n.saturating_sub(shape.nodes_per_row + 1), (n + shape.nodes_per_row + 2).min(nodes));
            for m in (lo..hi).filter(|&m| shape.near(n, m)) {
                taken.extend(present[m as usize].iter().filter_map(|o| colours.get(o)));
            }
        }
        let free = (0..).find(|c| !taken.contains(c)).expect("a free colour");
        colours.insert(g, free);
    }
    colours
}

/// The compact picture's cells: one small square per rank (its details in the square's title),
/// the node rows labelled.
fn draw_compact(
    out: &mut String,
    t: &Topology,
    opts: &PictureOptions,
    shape: &Shape,
    first_node: u32,
    highlight: Option<&RankView>,
) -> Result<(), TopologyError> {
    let (offset, gpn) = (t.rank_offset(), shape.gpn);
    let nodes = (offset + t.world_size() - 1) / gpn - first_node + 1;
    let mut by_node: Vec<Vec<Option<u64>>> = vec![vec![None; gpn as usize]; nodes as usize];
    let mut views = Vec::with_capacity(t.world_size() as usize);
    for r in offset..offset + t.world_size() {
        let view = t.rank_view(r)?;
        by_node[(r / gpn - first_node) as usize][(r % gpn) as usize] = view.get(opts.color_by).map(|m| m.group_index());
        views.push(view);
    }
    let colours = compact_colours(&by_node, shape);
    for row in 0..nodes.div_ceil(shape.nodes_per_row) {
        let (a, b) = (
            first_node + row * shape.nodes_per_row,
            (first_node + (row + 1) * shape.nodes_per_row).min(first_node + nodes) - 1,
        );
        let label = if a == b { format!("node {a}") } else { format!("nodes {a}-{b}") };
        let y = TOP + row * (SMALL_CELL + SMALL_GAP) + SMALL_CELL - 3;
        let _ = writeln!(out, "<text x=\"10\" y=\"{y}\" font-size=\"10\">{label}</text>");
    }
    let in_rank_group = |r: u32| highlight.and_then(|v| v.get(opts.color_by)).is_some_and(|m| m.group.contains(r));
    for (view, r) in views.iter().zip(offset..) {
        let (x, y) = shape.cell(r / gpn - first_node, r % gpn);
        let group = view.get(opts.color_by).map(|m| m.group_index());
        let fill = group.map_or("#eeeeee".to_string(), |g| colour(colours[&g]));
        let (stroke, sw) = if opts.rank == Some(r) {
            ("#000000", 3)
        } else if in_rank_group(r) {
            ("#000000", 2)
        } else {
            ("#ffffff", 0)
        };
        let replica = view.get(GroupKind::DataParallel).map_or(0, |m| m.rank);
        let _ = writeln!(
            out,
            "<rect x=\"{x}\" y=\"{y}\" width=\"{SMALL_CELL}\" height=\"{SMALL_CELL}\" fill=\"{fill}\" stroke=\"{stroke}\" \
             stroke-width=\"{sw}\"><title>rank {r}: {} group {}, stage {}, replica {replica}</title></rect>",
            opts.color_by,
            group.unwrap_or(0),
            view.pipeline.rank
        );
    }
    Ok(())
}

/// Where a panel of cells sits: its top, its first node, the GPUs per node, the highlighted
/// rank's view.
struct Cells<'a> {
    top: u32,
    first_node: u32,
    gpn: u32,
    highlight: Option<&'a RankView>,
}

/// One cell per rank of `ranks` (all in `t`'s grid), coloured by `opts.color_by`.
fn draw_cells(
    out: &mut String,
    t: &Topology,
    opts: &PictureOptions,
    c: &Cells<'_>,
    ranks: std::ops::Range<u32>,
) -> Result<(), TopologyError> {
    let (gpn, first_node, s) = (c.gpn, c.first_node, t.sizes());
    let in_rank_group = |r: u32| c.highlight.and_then(|v| v.get(opts.color_by)).is_some_and(|m| m.group.contains(r));
    for r in ranks {
        let node = r / gpn - first_node;
        let col = r % gpn;
        let (x, y) = (LEFT + col * (CELL_W + GAP), c.top + node * (CELL_H + GAP));
        let view = t.rank_view(r)?;
        let colour = view.get(opts.color_by).map_or("#eeeeee", |m| PALETTE[(m.group_index() % 12) as usize]);
        let stage = view.pipeline.rank;
        let replica = view.get(GroupKind::DataParallel).map_or(0, |m| m.rank);
        let cp = match view.get(GroupKind::ContextParallel) {
            Some(m) if s.cp > 1 => format!(" C{}", m.rank),
            _ => String::new(),
        };
        let (stroke, sw, dash) = if opts.rank == Some(r) {
            ("#000000", 4, "")
        } else if in_rank_group(r) {
            ("#000000", 2, " stroke-dasharray=\"4 2\"")
        } else {
            ("#555555", 1, "")
        };
        let _ = writeln!(
            out,
            "<g><title>rank {r}: {} group {}, stage {stage}, replica {replica}</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{CELL_W}\" height=\"{CELL_H}\" rx=\"4\" fill=\"{colour}\" \
             stroke=\"{stroke}\" stroke-width=\"{sw}\"{dash}/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\" fill=\"#000000\">{r}</text>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#000000\">S{stage} D{replica}{cp}</text></g>",
            opts.color_by,
            view.get(opts.color_by).map_or(0, |m| m.group_index()),
            x + CELL_W / 2,
            y + 20,
            x + CELL_W / 2,
            y + 38
        );
    }
    Ok(())
}

/// A cell for a GPU outside `name`'s grid: pale, dashed, the rank only.
fn draw_empty_cell(out: &mut String, name: &str, r: u32, c: &Cells<'_>) {
    let node = r / c.gpn - c.first_node;
    let (x, y) = (LEFT + (r % c.gpn) * (CELL_W + GAP), c.top + node * (CELL_H + GAP));
    let _ = writeln!(
        out,
        "<g><title>rank {r}: not in grid {}</title><rect x=\"{x}\" y=\"{y}\" width=\"{CELL_W}\" height=\"{CELL_H}\" \
         rx=\"4\" fill=\"#f7f7f7\" stroke=\"#bbbbbb\" stroke-width=\"1\" stroke-dasharray=\"2 2\"/>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#999999\">{r}</text></g>",
        esc(name),
        x + CELL_W / 2,
        y + 28
    );
}

/// Most grids one picture draws.
pub const MAX_PICTURE_GRIDS: usize = 16;

/// The picture of several grids of one world as an SVG document: one panel per grid (in the
/// given order, headed by its name and sizes) over the same nodes, so that the eye can compare
/// where each grid's groups sit; GPUs outside a grid are pale in its panel. Below, the runs of
/// nodes with the grids their GPUs belong to ([`grid_node_spans`]) and each grid's node
/// crossings and warnings. `opts.rank` is highlighted in every grid holding it.
///
/// Errors: no grid or more than [`MAX_PICTURE_GRIDS`], a grid without the `color_by` kind (named),
/// `gpus_per_node` 0, or nodes holding more than [`MAX_PICTURE_RANKS`] GPUs.
pub fn grids_svg(grids: &[(&str, &Topology)], opts: &PictureOptions) -> Result<String, TopologyError> {
    let gpn = opts.gpus_per_node;
    if grids.is_empty() || grids.len() > MAX_PICTURE_GRIDS {
        return Err(TopologyError::range(format!(
            "{} grids: a picture draws 1 to {MAX_PICTURE_GRIDS} grids",
            grids.len()
        )));
    }
    let topologies: Vec<&Topology> = grids.iter().map(|(_, t)| *t).collect();
    let spans = grid_node_spans(&topologies, gpn)?;
    // Draw the nodes any grid touches.
    let used: Vec<&NodeSpan> = spans.iter().filter(|s| !s.grids.is_empty()).collect();
    let (first_node, last_node) = (used[0].first, used[used.len() - 1].last);
    let drawn = (last_node - first_node + 1) * u64::from(gpn);
    if drawn > u64::from(MAX_PICTURE_RANKS) {
        return Err(TopologyError::range(format!(
            "the grids' nodes hold {drawn} GPUs: a picture draws at most {MAX_PICTURE_RANKS}"
        )));
    }
    let (first_node, nodes) = (first_node as u32, (last_node - first_node + 1) as u32);
    let mut placements = Vec::with_capacity(grids.len());
    for (name, t) in grids {
        if !t.has_kind(opts.color_by) {
            return Err(TopologyError::unknown_kind(format!(
                "color-by {}: grid {name} has no such groups",
                opts.color_by
            )));
        }
        placements.push(node_placement(t, gpn)?);
    }
    let world_end = first_node * gpn + nodes * gpn;
    let cols = gpn;
    let panel_h = 22 + nodes * (CELL_H + GAP) + 14;
    let legend_lines = 2
        + spans.len() as u32
        + placements.iter().map(|p| 1 + p.warnings.len() as u32).sum::<u32>()
        + opts.rank.map_or(0, |_| grids.len() as u32);
    let width = (LEFT + cols * (CELL_W + GAP) + 20).max(720);
    let height = TOP + grids.len() as u32 * panel_h + 10 + legend_lines * 16 + 10;
    let mut out = String::new();
    svg_open(&mut out, width, height);
    let raw_names: Vec<&str> = grids.iter().map(|(n, _)| *n).collect();
    let names: Vec<String> = raw_names.iter().map(|n| esc(n)).collect();
    let _ = writeln!(
        out,
        "<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\">{} grids ({}), {gpn} GPUs per node</text>",
        grids.len(),
        names.join(", ")
    );
    let _ = writeln!(
        out,
        "<text x=\"10\" y=\"36\">colour: {} group of each grid; in each GPU: rank, pipeline stage S, data-parallel replica D, context-parallel rank C</text>",
        opts.color_by
    );
    let mut top = TOP;
    for (name, t) in grids {
        let s = t.sizes();
        let (a, b) = (t.rank_offset(), t.rank_offset() + t.world_size() - 1);
        let _ = writeln!(
            out,
            "<text x=\"10\" y=\"{}\" font-size=\"13\" font-weight=\"bold\">grid {}: ranks {a}..{b}, tp {} pp {} cp {} ep {} dp {} (order {})</text>",
            top + 12,
            esc(name),
            s.tp,
            s.pp,
            s.cp,
            s.ep,
            s.dp,
            esc(&t.config().order)
        );
        let cells_top = top + 22;
        node_labels(&mut out, cells_top, first_node, nodes);
        let highlight = match opts.rank {
            Some(r) if t.in_grid(r) => Some(t.rank_view(r)?),
            _ => None,
        };
        let cells = Cells { top: cells_top, first_node, gpn, highlight: highlight.as_ref() };
        for r in first_node * gpn..a {
            draw_empty_cell(&mut out, name, r, &cells);
        }
        draw_cells(&mut out, t, opts, &cells, a..b + 1)?;
        for r in b + 1..world_end {
            draw_empty_cell(&mut out, name, r, &cells);
        }
        top += panel_h;
    }
    let mut y = top + 10;
    let mut line = |out: &mut String, text: &str, colour: &str| text_line(out, &mut y, text, colour);
    line(&mut out, "pale GPUs: not in the panel's grid; nodes and the grids on their GPUs:", "#000000");
    for span in &spans {
        line(&mut out, &format!("  {}", span.describe(&raw_names)), "#000000");
    }
    for ((name, _), p) in grids.iter().zip(&placements) {
        let crossing: Vec<String> = p
            .kinds
            .iter()
            .filter(|k| k.crossing > 0 && NODE_LOCAL_KINDS.contains(&k.kind))
            .map(|k| format!("{} {}/{}", k.kind, k.crossing, k.groups))
            .collect();
        let text = if crossing.is_empty() { "none".to_string() } else { crossing.join(", ") };
        line(&mut out, &format!("grid {name}: node-local groups crossing nodes: {text}"), "#000000");
        for w in &p.warnings {
            line(&mut out, &format!("  warning: {}", w.message), "#b00000");
        }
    }
    if let Some(r) = opts.rank {
        for (name, t) in grids {
            let text = match t.rank_view(r) {
                Ok(v) => {
                    let m = v
                        .get(opts.color_by)
                        .map_or(String::new(), |m| format!(": {} group {} (dashed)", opts.color_by, m.group_index()));
                    format!("rank {r} (thick border) in grid {name}{m}")
                }
                Err(_) => format!("rank {r} is not in grid {name}"),
            };
            line(&mut out, &text, "#000000");
        }
    }
    line(&mut out, "drawn by mcore-topo --svg", "#777777");
    out.push_str("</svg>\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyConfig;

    #[test]
    fn picture_has_every_rank_and_the_group_colours() {
        let t = Topology::new(TopologyConfig { tp: 2, pp: 2, cp: 2, ..Default::default() }, 8).unwrap();
        let opts = PictureOptions { gpus_per_node: 4, color_by: GroupKind::TensorModelParallel, rank: Some(5) };
        let svg = layout_svg(&t, &opts).unwrap();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert_eq!(svg.matches("<title>rank ").count(), 8);
        // Four tp groups: four palette colours.
        for c in &PALETTE[..4] {
            assert!(svg.contains(&format!("fill=\"{c}\"")), "{c}");
        }
        assert!(!svg.contains(PALETTE[4]));
        assert!(svg.contains("stroke-width=\"4\""), "rank 5 highlighted");
        assert!(svg.contains("node 1</text>"));
        assert!(!svg.contains("http://") || svg.matches("http://").count() == 1, "no links but the namespace");
        let bad = PictureOptions { rank: Some(8), ..opts.clone() };
        assert!(layout_svg(&t, &bad).is_err());
        let big = Topology::new(TopologyConfig::default(), 8192).unwrap();
        assert!(layout_svg(&big, &opts).unwrap_err().message.contains("at most 4096"));
    }

    /// At 4,096 ranks the picture is compact (a few hundred pixels tall, not 28,270) and two
    /// GPUs of nearby nodes (side by side, above, below) in different groups never share a
    /// colour, whichever kind colours them.
    #[test]
    fn a_compact_picture_is_short_and_nearby_groups_differ() {
        let t = Topology::new(TopologyConfig { tp: 8, pp: 4, cp: 2, ..Default::default() }, 4096).unwrap();
        for kind in [GroupKind::TensorModelParallel, GroupKind::DataParallel, GroupKind::PipelineModelParallel] {
            let opts = PictureOptions { gpus_per_node: 8, color_by: kind, rank: Some(100) };
            let svg = layout_svg(&t, &opts).unwrap();
            let height: u32 = svg.split("height=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
            assert!(height < 1500, "{kind}: {height} px tall (28,270 before the compact picture)");
            let mut cells = vec![(String::new(), 0u64); 4096];
            for line in svg.lines().filter(|l| l.starts_with("<rect x=") && l.contains("<title>rank ")) {
                let fill = line.split("fill=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
                let title = line.split("<title>rank ").nth(1).unwrap();
                let rank: usize = title.split(':').next().unwrap().parse().unwrap();
                let group: u64 = title.split(" group ").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
                cells[rank] = (fill, group);
            }
            assert!(cells.iter().all(|(f, _)| !f.is_empty()), "{kind}: a rank without its cell");
            let shape = Shape::compact(8, 512);
            let mut distinct = std::collections::BTreeSet::new();
            for a in 0..4096usize {
                distinct.insert(&cells[a].0);
                for b in a + 1..4096 {
                    if shape.near(a as u32 / 8, b as u32 / 8) && cells[a].1 != cells[b].1 {
                        assert_ne!(cells[a].0, cells[b].0, "{kind}: ranks {a} and {b}, nearby, groups differ");
                    }
                }
            }
            assert!(distinct.len() >= 2, "{kind}");
        }
    }

    #[test]
    fn picture_of_two_grids_has_a_panel_each_and_the_shared_nodes() {
        let grid = |tp, offset, local| {
            let cfg = TopologyConfig { tp, rank_offset: offset, local_world_size: Some(local), ..Default::default() };
            Topology::new(cfg, 24).unwrap()
        };
        // train on ranks 0..16 (tp 2), rollout on 8..24 (tp 4): node 1 is shared.
        let (train, rollout) = (grid(2, 0, 16), grid(4, 8, 16));
        let opts = PictureOptions { gpus_per_node: 8, color_by: GroupKind::TensorModelParallel, rank: Some(9) };
        let svg = grids_svg(&[("train", &train), ("rollout", &rollout)], &opts).unwrap();
        assert!(svg.contains(">grid train: ranks 0..15, tp 2 ") && svg.contains(">grid rollout: ranks 8..23, tp 4 "));
        // Each panel draws the 24 GPUs of the three nodes: 16 in the grid, 8 pale.
        assert_eq!(svg.matches("<title>rank ").count(), 48);
        assert_eq!(svg.matches(": not in grid train</title>").count(), 8);
        assert_eq!(svg.matches(": not in grid rollout</title>").count(), 8);
        assert!(svg.contains(">node 0: train</text>"), "{svg}");
        assert!(svg.contains(">node 1: train, rollout (GPUs shared)</text>"));
        assert!(svg.contains(">node 2: rollout</text>"));
        // Eight tp groups in train: all eight first colours appear; rank 9 highlighted twice.
        for c in &PALETTE[..8] {
            assert!(svg.contains(&format!("fill=\"{c}\"")), "{c}");
        }
        assert_eq!(svg.matches("stroke-width=\"4\"").count(), 2);
        let bad = PictureOptions { color_by: GroupKind::HierarchicalContextParallel(0), ..opts.clone() };
        let err = grids_svg(&[("train", &train), ("rollout", &rollout)], &bad).unwrap_err();
        assert!(err.message.contains("grid train"), "{}", err.message);
        assert!(grids_svg(&[], &opts).is_err());
    }
}
