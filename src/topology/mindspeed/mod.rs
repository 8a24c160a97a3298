//! MindSpeed's extra process groups (Huawei's Megatron extension for Ascend): context-parallel
//! Ulysses / ring / double-ring windows, 2-D tensor parallel, the pipeline send/recv twin and the
//! hot-expert broadcast groups, built on a Megatron layout from MindSpeed's options
//! (docs/topology.md, "MindSpeed's groups"; docs/conformance.md for the versions matched).
//!
//! One rank's groups come from a few index calculations per kind ([`MindSpeedLayout::rank_groups`]);
//! [`MindSpeedLayout::creation_sequence`] walks the world for tools. Every rank creates the same
//! sequence of kinds (MindSpeed's tp-y-cp stops early on some ranks: not here).

mod options;
mod rank;

use super::error::TopologyError;
use super::generator::Dim;
use super::kind::GroupKind;
use super::layout::Topology;
use super::DEFAULT_ORDER;
pub use options::{CpAlgo, MindSpeedOptions, DEFAULT_ATTENTION_HEADS, MAX_HOT_EXPERT_GROUPS, OPTION_KEYS};
pub use rank::RankLists;
use std::fmt;

/// One kind of MindSpeed group, named by the `pg_name` MindSpeed gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MindSpeedKind {
    Cp2,
    CpUlysses,
    CpRing,
    CpRingIntra,
    CpRingIntraOverlap,
    Nd1Dim1,
    AgXSdRcvOverlap,
    Nd1Dim2,
    AgYSdRcvOverlap,
    Nd2Dim1,
    Nd2Dim2,
    TpYCp,
    TpYCpOverlap,
    PpNewStream,
    /// The hot-expert broadcast groups (`trans_hot_expert_group_num` copies of each
    /// expert-parallel group).
    Exp,
}

impl MindSpeedKind {
    /// Every kind, in the order MindSpeed first creates them.
    pub const ALL: [MindSpeedKind; 15] = [
        MindSpeedKind::Cp2,
        MindSpeedKind::CpUlysses,
        MindSpeedKind::CpRing,
        MindSpeedKind::CpRingIntra,
        MindSpeedKind::CpRingIntraOverlap,
        MindSpeedKind::Nd1Dim1,
        MindSpeedKind::AgXSdRcvOverlap,
        MindSpeedKind::Nd1Dim2,
        MindSpeedKind::AgYSdRcvOverlap,
        MindSpeedKind::Nd2Dim1,
        MindSpeedKind::Nd2Dim2,
        MindSpeedKind::TpYCp,
        MindSpeedKind::TpYCpOverlap,
        MindSpeedKind::PpNewStream,
        MindSpeedKind::Exp,
    ];

    /// MindSpeed's `pg_name` of the kind (our key).
    pub fn name(self) -> &'static str {
        match self {
            MindSpeedKind::Cp2 => "cp2",
            MindSpeedKind::CpUlysses => "cp_ulysses",
            MindSpeedKind::CpRing => "cp_ring",
            MindSpeedKind::CpRingIntra => "cp_ring_intra",
            MindSpeedKind::CpRingIntraOverlap => "cp_ring_intra_overlap",
            MindSpeedKind::Nd1Dim1 => "nd1_dim1",
            MindSpeedKind::AgXSdRcvOverlap => "ag_x_sd_rcv_overlap",
            MindSpeedKind::Nd1Dim2 => "nd1_dim2",
            MindSpeedKind::AgYSdRcvOverlap => "ag_y_sd_rcv_overlap",
            MindSpeedKind::Nd2Dim1 => "nd2_dim1",
            MindSpeedKind::Nd2Dim2 => "nd2_dim2",
            MindSpeedKind::TpYCp => "tp-y-cp",
            MindSpeedKind::TpYCpOverlap => "tp-y-cp-overlap",
            MindSpeedKind::PpNewStream => "pp_new_stream",
            MindSpeedKind::Exp => "exp",
        }
    }

    /// The kind named `name` (MindSpeed's `pg_name`).
    pub fn from_name(name: &str) -> Result<MindSpeedKind, TopologyError> {
        MindSpeedKind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
            let names: Vec<_> = MindSpeedKind::ALL.iter().map(|k| k.name()).collect();
            TopologyError::unknown_kind(format!(
                "unknown MindSpeed group kind {} (expected one of {})",
                crate::quote::quoted(name),
                names.join(", ")
            ))
        })
    }
}

impl fmt::Display for MindSpeedKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One MindSpeed group: its kind, the copy (hot-expert groups come in several identical
/// copies; 0 for every other kind), its index among the kind's groups in creation order, and its
/// ranks as MindSpeed passes them to `new_group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MindSpeedGroup {
    pub kind: MindSpeedKind,
    pub copy: u32,
    pub index: u32,
    pub ranks: Vec<u32>,
}

/// MindSpeed's groups of one Megatron layout: the validated options and the sizes they use.
#[derive(Debug, Clone)]
pub struct MindSpeedLayout {
    options: MindSpeedOptions,
    algo: CpAlgo,
    /// World, tp, pp, cp, dp, ranks per pipeline stage.
    w: u32,
    t: u32,
    c: u32,
    d: u32,
    stage: u32,
    /// Ulysses degree of the hybrid algorithms (1 otherwise); ring lists per CP list of the
    /// double ring (u for hybrid, 1 for megatron).
    u: u32,
    ring_stride: u32,
    window: u32,
    /// 2-D tensor parallel's X and Y.
    x: u32,
    y: u32,
    /// Expert-parallel group count and this layout's Megatron topology (for the hot-expert groups).
    topology: Topology,
    hot: u32,
}

fn refuse(rule: &str, detail: String) -> TopologyError {
    TopologyError::config(format!("MindSpeed rule {rule}: {detail}"))
}

/// Whether the layout's dense grid is the default order's: every dim of size > 1 at the stride
/// `tp-cp-ep-dp-pp` gives it (another order may name the dims differently and still agree, e.g.
/// `tp-cp-ep-pp-dp` with pp = 1).
fn grid_is_default_order(t: &Topology) -> bool {
    let s = t.sizes();
    let (tp, cp, dp) = (u64::from(s.tp), u64::from(s.cp), u64::from(s.dp));
    [(Dim::Tp, s.tp, 1), (Dim::Cp, s.cp, tp), (Dim::Dp, s.dp, tp * cp), (Dim::Pp, s.pp, tp * cp * dp)]
        .into_iter()
        .all(|(dim, size, stride)| size == 1 || t.dense_stride(dim) == stride)
}

/// The layout restrictions: MindSpeed always assumes Megatron's default order (another order is
/// accepted when it gives the same grid), no rank offset and no Megatron-Core 0.19 axes.
fn check_layout(t: &Topology) -> Result<(), TopologyError> {
    let cfg = t.config();
    let s = t.sizes();
    if s.gtp == 1 && !grid_is_default_order(t) {
        return Err(refuse(
            "default order",
            format!(
                "MindSpeed builds its groups for order {DEFAULT_ORDER} and ignores Megatron's order; order {} \
                 places the ranks differently, so its groups would not line up with Megatron's (docs/topology.md)",
                crate::quote::quoted(&cfg.order)
            ),
        ));
    }
    if cfg.rank_offset != 0 || s.total_world_size != s.world_size || s.gtp != 1 || s.egtp != 1 {
        return Err(refuse(
            "plain world",
            format!(
                "MindSpeed's groups need a layout over the whole world from rank 0 without gtp/egtp \
                 (rank offset {}, local world {}, world {}, gtp {}, egtp {})",
                cfg.rank_offset, s.world_size, s.total_world_size, s.gtp, s.egtp
            ),
        ));
    }
    Ok(())
}

/// MindSpeed's `validate_args` rules for context parallelism (checked only at cp > 1, where its
/// CP wrapper runs).
fn check_cp(o: &MindSpeedOptions, algo: CpAlgo, cp: u32, tp: u32) -> Result<u32, TopologyError> {
    let w = o.cp_window_size;
    match algo {
        CpAlgo::Megatron if w == 0 || w >= cp || cp % w != 0 => Err(refuse(
            "megatron_cp_algo window",
            format!("cp_window_size {w} must be in [1, cp) and divide cp (cp {cp})"),
        )),
        CpAlgo::Hybrid | CpAlgo::HybridAdaptive => {
            let name = algo.name();
            let u = o.ulysses_degree_in_cp.ok_or_else(|| {
                refuse(&format!("{name} ulysses degree"), "ulysses_degree_in_cp must be given".into())
            })?;
            if u == 0 || cp % u != 0 || cp / u <= 1 {
                return Err(refuse(
                    &format!("{name} ring degree"),
                    format!("cp {cp} must be a multiple of ulysses_degree_in_cp {u} with ring degree cp/u > 1"),
                ));
            }
            let r = cp / u;
            if algo == CpAlgo::Hybrid {
                let heads = o.num_attention_heads.unwrap_or(DEFAULT_ATTENTION_HEADS);
                if heads % (u * tp) != 0 {
                    return Err(refuse(
                        "hybrid_cp_algo heads",
                        format!("num_attention_heads {heads} must be divisible by ulysses_degree_in_cp {u} * tp {tp}"),
                    ));
                }
                if w == 0 || w >= r || r % w != 0 {
                    return Err(refuse(
                        "hybrid_cp_algo window",
                        format!("cp_window_size {w} must be in [1, ring degree {r}) and divide it"),
                    ));
                }
            }
            Ok(u)
        }
        _ => Ok(1),
    }
}

/// MindSpeed's rules for 2-D tensor parallel.
fn check_tp_2d(o: &MindSpeedOptions, tp: u32, ep: u32) -> Result<(), TopologyError> {
    if o.tp_x == 0 || o.tp_y == 0 || o.tp_x.checked_mul(o.tp_y) != Some(tp) {
        return Err(refuse("tp_2d sizes", format!("tp {tp} must equal tp_x {} * tp_y {}", o.tp_x, o.tp_y)));
    }
    if ep > 1 || o.balanced_moe_experts {
        return Err(refuse("tp_2d without MoE", format!("tp_2d does not support MoE (ep {ep})")));
    }
    if !matches!(o.context_parallel_algo, CpAlgo::Megatron | CpAlgo::Ulysses) {
        return Err(refuse(
            "tp_2d cp algorithm",
            format!("tp_2d needs megatron_cp_algo or ulysses_cp_algo, not {}", o.context_parallel_algo),
        ));
    }
    Ok(())
}

impl MindSpeedLayout {
    /// Validate `options` on `topology` as MindSpeed does (and the layout restrictions above).
    pub fn new(topology: &Topology, options: MindSpeedOptions) -> Result<MindSpeedLayout, TopologyError> {
        check_layout(topology)?;
        let s = topology.sizes();
        if options.tp_2d {
            check_tp_2d(&options, s.tp, s.ep)?;
        }
        let algo = options.validated_algo();
        let u = if s.cp > 1 { check_cp(&options, algo, s.cp, s.tp)? } else { 1 };
        let (x, y) = if options.tp_2d { (options.tp_x, options.tp_y) } else { (1, 1) };
        let hot = options.hot_expert_groups();
        if u64::from(s.world_size) * u64::from(hot) > u64::from(u32::MAX) {
            return Err(refuse(
                "hot-expert groups",
                format!(
                    "{hot} copies of the expert groups of {} ranks number more groups than fit in 32 bits",
                    s.world_size
                ),
            ));
        }
        Ok(MindSpeedLayout {
            algo,
            w: s.world_size,
            t: s.tp,
            c: s.cp,
            d: s.dp,
            stage: s.world_size / s.pp,
            u,
            ring_stride: if algo == CpAlgo::Hybrid { u } else { 1 },
            window: options.cp_window_size,
            x,
            y,
            hot,
            topology: topology.clone(),
            options,
        })
    }

    pub fn options(&self) -> &MindSpeedOptions {
        &self.options
    }

    /// The context-parallel algorithm after MindSpeed's validation.
    pub fn algo(&self) -> CpAlgo {
        self.algo
    }

    /// How many copies of each group `kind` has (hot-expert groups: the capped option; else 1).
    pub fn copies(&self, kind: MindSpeedKind) -> u32 {
        if kind == MindSpeedKind::Exp {
            self.hot
        } else {
            1
        }
    }

    /// Whether this layout has groups of `kind`.
    pub fn has_kind(&self, kind: MindSpeedKind) -> bool {
        use MindSpeedKind::*;
        let o = &self.options;
        let cp = self.c > 1;
        let overlap = o.use_cp_send_recv_overlap;
        let ag = o.enable_overlap_ag_with_matmul || o.enable_backward_overlap_ag_with_matmul;
        let double_ring = cp && matches!(self.algo, CpAlgo::Megatron | CpAlgo::Hybrid) && !o.tp_2d;
        match kind {
            Cp2 => cp && overlap && !(o.tp_2d && self.y > 1),
            CpUlysses | CpRing => cp && matches!(self.algo, CpAlgo::Hybrid | CpAlgo::HybridAdaptive),
            CpRingIntra => double_ring,
            CpRingIntraOverlap => double_ring && overlap,
            Nd1Dim1 | Nd1Dim2 | Nd2Dim1 | Nd2Dim2 | TpYCp | TpYCpOverlap => o.tp_2d,
            AgXSdRcvOverlap | AgYSdRcvOverlap => o.tp_2d && ag,
            PpNewStream => o.optimize_send_recv_comm && self.topology.sizes().vpp.is_none(),
            Exp => self.hot > 0,
        }
    }

    /// The kinds this layout has, in the order they are first created.
    pub fn kinds(&self) -> Vec<MindSpeedKind> {
        MindSpeedKind::ALL.into_iter().filter(|&k| self.has_kind(k)).collect()
    }

    /// The creation steps every rank takes, in order: each kind with each of its copies.
    pub fn steps(&self) -> Vec<(MindSpeedKind, u32)> {
        self.kinds().into_iter().flat_map(|k| (0..self.copies(k)).map(move |c| (k, c))).collect()
    }

    /// The CP lists (section 2 of docs/topology.md's MindSpeed part): list `l` of `W / cp`.
    fn cp_list(&self, l: u32) -> Vec<u32> {
        let (t, c) = (self.t, self.c);
        let (k, ij) = (l % t, l / t);
        let (j, i) = (ij % self.d, ij / self.d);
        let base = i * self.stage + j * t * c + k;
        (0..c).map(|m| base + t * m).collect()
    }

    /// Every group MindSpeed creates, in its creation order (walks the world: for tools).
    pub fn creation_sequence(&self) -> Result<Vec<MindSpeedGroup>, TopologyError> {
        let mut out = Vec::new();
        self.cp_sequence(&mut out);
        self.tp_2d_sequence(&mut out);
        if self.has_kind(MindSpeedKind::PpNewStream) {
            for g in 0..self.stage {
                out.push(group(MindSpeedKind::PpNewStream, g, (g..self.w).step_by(self.stage as usize).collect()));
            }
        }
        if self.has_kind(MindSpeedKind::Exp) {
            for g in self.topology.groups(GroupKind::ExpertModelParallel) {
                let g = g?;
                for copy in 0..self.hot {
                    out.push(MindSpeedGroup {
                        kind: MindSpeedKind::Exp,
                        copy,
                        index: g.index() as u32 * self.hot + copy,
                        ranks: g.members(),
                    });
                }
            }
        }
        Ok(out)
    }

    fn cp_sequence(&self, out: &mut Vec<MindSpeedGroup>) {
        use MindSpeedKind::*;
        let lists = self.w / self.c;
        if self.has_kind(Cp2) {
            out.extend((0..lists).map(|l| group(Cp2, l, self.cp_list(l))));
        }
        if self.has_kind(CpUlysses) {
            let (u, r) = (self.u, self.c / self.u);
            for l in 0..lists {
                let cp = self.cp_list(l);
                out.extend(
                    (0..r).map(|m| group(CpUlysses, l * r + m, cp[(m * u) as usize..((m + 1) * u) as usize].to_vec())),
                );
                out.extend((0..u).map(|m| group(CpRing, l * u + m, strided(&cp, m, u))));
            }
        }
        if self.has_kind(CpRingIntra) {
            let (s, w) = (self.ring_stride, self.window);
            let windows = self.c / s / w;
            let overlap = self.has_kind(CpRingIntraOverlap);
            for l in 0..lists {
                let cp = self.cp_list(l);
                for m in 0..s {
                    let q = strided(&cp, m, s);
                    for b in 0..windows {
                        let index = (l * s + m) * windows + b;
                        let ranks = q[(b * w) as usize..((b + 1) * w) as usize].to_vec();
                        if overlap {
                            out.push(group(CpRingIntra, index, ranks.clone()));
                            out.push(group(CpRingIntraOverlap, index, ranks));
                        } else {
                            out.push(group(CpRingIntra, index, ranks));
                        }
                    }
                }
            }
        }
    }

    fn tp_2d_sequence(&self, out: &mut Vec<MindSpeedGroup>) {
        use MindSpeedKind::*;
        if !self.has_kind(Nd1Dim1) {
            return;
        }
        let ag = self.has_kind(AgXSdRcvOverlap);
        let (t, x, y) = (self.t, self.x, self.y);
        for b in 0..self.w / t {
            let base = b * t;
            for j in 0..t / x {
                let ranks: Vec<u32> = (base + j * x..base + (j + 1) * x).collect();
                push_with_twin(out, Nd1Dim1, ag.then_some(AgXSdRcvOverlap), b * (t / x) + j, ranks);
            }
            for j in 0..x {
                let ranks: Vec<u32> = (base + j..base + t).step_by(x as usize).collect();
                push_with_twin(out, Nd1Dim2, ag.then_some(AgYSdRcvOverlap), b * x + j, ranks);
            }
            for j in 0..t / y {
                out.push(group(Nd2Dim1, b * (t / y) + j, (base + j * y..base + (j + 1) * y).collect()));
            }
            for j in 0..y {
                out.push(group(Nd2Dim2, b * y + j, (base + j..base + t).step_by(y as usize).collect()));
            }
        }
        for l in 0..self.w / (t * self.c) {
            for kx in 0..x {
                push_with_twin(out, TpYCp, Some(TpYCpOverlap), l * x + kx, self.tp_y_cp(l * t + kx));
            }
        }
    }

    /// tp-y-cp's group for CP list `l`: the TP-Y groups of its members, concatenated in CP order.
    fn tp_y_cp(&self, l: u32) -> Vec<u32> {
        let x = self.x;
        let mut v = Vec::with_capacity((self.c * self.t / x) as usize);
        for m in self.cp_list(l) {
            let base = m - m % self.t;
            v.extend((base + (m % self.t) % x..base + self.t).step_by(x as usize));
        }
        v
    }
}

fn group(kind: MindSpeedKind, index: u32, ranks: Vec<u32>) -> MindSpeedGroup {
    MindSpeedGroup { kind, copy: 0, index, ranks }
}

fn push_with_twin(
    out: &mut Vec<MindSpeedGroup>,
    kind: MindSpeedKind,
    twin: Option<MindSpeedKind>,
    index: u32,
    ranks: Vec<u32>,
) {
    if let Some(twin) = twin {
        out.push(group(kind, index, ranks.clone()));
        out.push(group(twin, index, ranks));
    } else {
        out.push(group(kind, index, ranks));
    }
}

/// `list[first::step]`.
fn strided(list: &[u32], first: u32, step: u32) -> Vec<u32> {
    list.iter().skip(first as usize).step_by(step as usize).copied().collect()
}

#[cfg(test)]
mod tests;
