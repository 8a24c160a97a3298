//! A self-contained SVG picture of a layout: the ranks as a grid of GPUs (one row per node),
//! coloured by the groups of one kind, each cell labelled with its pipeline stage and
//! data-parallel replica, optionally one rank highlighted with the members of its groups.
//! A pure function (returns the text); no fonts, scripts or links to load.

use super::error::TopologyError;
use super::kind::GroupKind;
use super::layout::Topology;
use super::nodes::node_placement;
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
    let cols = gpn.min(world);
    let grid_w = cols * (CELL_W + GAP);
    let legend_lines = 3
        + placement.kinds.len() as u32 / 4
        + highlight.as_ref().map_or(0, |v| v.groups.len() as u32 + 1)
        + placement.warnings.len() as u32;
    let width = (LEFT + grid_w + 20).max(720);
    let height = TOP + nodes * (CELL_H + GAP) + 20 + legend_lines * 16 + 10;
    let s = t.sizes();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(out, "<rect width=\"{width}\" height=\"{height}\" fill=\"#ffffff\"/>");
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
    let _ = writeln!(
        out,
        "<text x=\"10\" y=\"36\">colour: {} group; in each GPU: rank, pipeline stage S, data-parallel replica D, context-parallel rank C</text>",
        opts.color_by
    );
    let in_rank_group =
        |r: u32| highlight.as_ref().and_then(|v| v.get(opts.color_by)).is_some_and(|m| m.group.contains(r));
    for n in 0..nodes {
        let y = TOP + n * (CELL_H + GAP);
        let _ = writeln!(
            out,
            "<text x=\"10\" y=\"{}\" font-weight=\"bold\">node {}</text>",
            y + CELL_H / 2 + 4,
            first_node + n
        );
    }
    for local in 0..world {
        let r = offset + local;
        let node = r / gpn - first_node;
        let col = r % gpn;
        let (x, y) = (LEFT + col * (CELL_W + GAP), TOP + node * (CELL_H + GAP));
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
    let mut y = TOP + nodes * (CELL_H + GAP) + 20;
    let mut line = |out: &mut String, text: &str, colour: &str| {
        let (x, text) = match text.strip_prefix("  ") {
            Some(t) => (24, t),
            None => (10, text),
        };
        let _ = writeln!(out, "<text x=\"{x}\" y=\"{y}\" fill=\"{colour}\">{}</text>", esc(text));
        y += 16;
    };
    let crossing: Vec<String> = placement
        .kinds
        .iter()
        .filter(|k| k.crossing > 0)
        .map(|k| format!("{} {}/{}", k.kind, k.crossing, k.groups))
        .collect();
    if crossing.is_empty() {
        line(&mut out, "groups crossing nodes: none", "#000000");
    } else {
        line(&mut out, "groups crossing nodes (kind crossing/all):", "#000000");
        for chunk in crossing.chunks(4) {
            line(&mut out, &format!("  {}", chunk.join(", ")), "#000000");
        }
    }
    for w in &placement.warnings {
        line(&mut out, &format!("warning: {}", w.message), "#b00000");
    }
    if let Some(v) = &highlight {
        line(&mut out, &format!("rank {} (thick border), its {} group dashed:", v.rank, opts.color_by), "#000000");
        for m in &v.groups {
            let members = m.members();
            let shown: Vec<String> = members.iter().take(16).map(u32::to_string).collect();
            let more = if members.len() > 16 { ",..." } else { "" };
            line(&mut out, &format!("  {}: [{}{more}]", m.kind(), shown.join(",")), "#000000");
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
}
