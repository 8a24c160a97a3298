//! One rank's MindSpeed groups and stored rank lists, from its coordinates: no walk of the world.

use super::{group, strided, MindSpeedGroup, MindSpeedKind, MindSpeedLayout};
use crate::topology::error::TopologyError;
use crate::topology::kind::GroupKind;

/// The rank lists MindSpeed stores per rank without a group behind them (empty when the layout
/// has none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankLists {
    /// `_CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_KV`: the rank's ring list taken every
    /// `cp_window_size` from the rank's place in its window.
    pub ring_inter_window_kv: Vec<u32>,
    /// `_CONTEXT_PARALLEL_RANKS_FOR_RING_INTER_WINDOW_DKV`: the diagonal walk over the windows.
    pub ring_inter_window_dkv: Vec<u32>,
    /// `_TP_X_PARALLEL_RING_RANKS` (the rank's nd1_dim1 group).
    pub tp_x_ring: Vec<u32>,
    /// `_TP_Y_PARALLEL_RING_RANKS` (the rank's nd1_dim2 group).
    pub tp_y_ring: Vec<u32>,
    /// `TensorParallelYUnionCP.global_ranks` (the rank's tp-y-cp group).
    pub tp_y_cp: Vec<u32>,
    /// `_EXPERT_MODEL_PARALLEL_GLOBAL_RANKS` of balanced MoE (the rank's expert-parallel group).
    pub expert_model_parallel: Vec<u32>,
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The rank's coordinates in MindSpeed's CP lists: (list index, position in the list).
struct CpPlace {
    list: u32,
    pos: u32,
}

/// A rank's double-ring place: its ring list, and its position in it.
struct RingPlace {
    index: u32,
    ring: Vec<u32>,
    pos: u32,
}

impl MindSpeedLayout {
    fn check_rank(&self, rank: u32) -> Result<(), TopologyError> {
        if rank >= self.w {
            return Err(TopologyError::range(format!("rank {rank}: the layout has ranks 0..{}", self.w - 1)));
        }
        Ok(())
    }

    fn cp_place(&self, rank: u32) -> CpPlace {
        let (t, c) = (self.t, self.c);
        let (i, rem) = (rank / self.stage, rank % self.stage);
        let (j, rem) = (rem / (t * c), rem % (t * c));
        let (m, k) = (rem / t, rem % t);
        CpPlace { list: (i * self.d + j) * t + k, pos: m }
    }

    fn ring_place(&self, p: &CpPlace) -> RingPlace {
        let s = self.ring_stride;
        let m = p.pos % s;
        RingPlace { index: p.list * s + m, ring: strided(&self.cp_list(p.list), m, s), pos: p.pos / s }
    }

    /// `rank`'s groups, in creation order (one per kind, `copies` for the hot-expert groups).
    pub fn rank_groups(&self, rank: u32) -> Result<Vec<MindSpeedGroup>, TopologyError> {
        self.check_rank(rank)?;
        let mut out = Vec::new();
        for kind in self.kinds() {
            self.push_rank_group(kind, rank, &mut out)?;
        }
        Ok(out)
    }

    /// `rank`'s group of `kind` (the first copy for the hot-expert groups); `None` when the
    /// layout has no such groups.
    pub fn rank_group(&self, kind: MindSpeedKind, rank: u32) -> Result<Option<MindSpeedGroup>, TopologyError> {
        self.check_rank(rank)?;
        if !self.has_kind(kind) {
            return Ok(None);
        }
        let mut out = Vec::new();
        self.push_rank_group(kind, rank, &mut out)?;
        Ok(out.into_iter().next())
    }

    fn push_rank_group(
        &self,
        kind: MindSpeedKind,
        rank: u32,
        out: &mut Vec<MindSpeedGroup>,
    ) -> Result<(), TopologyError> {
        use MindSpeedKind::*;
        let p = self.cp_place(rank);
        let (t, x, y) = (self.t, self.x, self.y);
        let (block, off) = (rank / t, rank % t);
        let base = block * t;
        let g = match kind {
            Cp2 => group(kind, p.list, self.cp_list(p.list)),
            CpUlysses => {
                let (u, r) = (self.u, self.c / self.u);
                let b = p.pos / u;
                let list = self.cp_list(p.list);
                group(kind, p.list * r + b, list[(b * u) as usize..((b + 1) * u) as usize].to_vec())
            }
            CpRing => {
                group(kind, p.list * self.u + p.pos % self.u, strided(&self.cp_list(p.list), p.pos % self.u, self.u))
            }
            CpRingIntra | CpRingIntraOverlap => {
                let r = self.ring_place(&p);
                let w = self.window;
                let b = r.pos / w;
                let windows = r.ring.len() as u32 / w;
                group(kind, r.index * windows + b, r.ring[(b * w) as usize..((b + 1) * w) as usize].to_vec())
            }
            Nd1Dim1 | AgXSdRcvOverlap => {
                let j = off / x;
                group(kind, block * (t / x) + j, (base + j * x..base + (j + 1) * x).collect())
            }
            Nd1Dim2 | AgYSdRcvOverlap => {
                group(kind, block * x + off % x, (base + off % x..base + t).step_by(x as usize).collect())
            }
            Nd2Dim1 => {
                let j = off / y;
                group(kind, block * (t / y) + j, (base + j * y..base + (j + 1) * y).collect())
            }
            Nd2Dim2 => group(kind, block * y + off % y, (base + off % y..base + t).step_by(y as usize).collect()),
            TpYCp | TpYCpOverlap => {
                let l = p.list / t;
                group(kind, l * x + off % x, self.tp_y_cp(l * t + off % x))
            }
            PpNewStream => {
                let first = rank % self.stage;
                group(kind, first, (first..self.w).step_by(self.stage as usize).collect())
            }
            Exp => {
                let Some(m) = self.topology.membership(GroupKind::ExpertModelParallel, rank)? else { return Ok(()) };
                let (e, ranks) = (m.group_index() as u32, m.members());
                out.extend((0..self.hot).map(|copy| MindSpeedGroup {
                    kind,
                    copy,
                    index: e * self.hot + copy,
                    ranks: ranks.clone(),
                }));
                return Ok(());
            }
        };
        out.push(g);
        Ok(())
    }

    /// The rank lists `rank` stores (see [`RankLists`]).
    pub fn rank_lists(&self, rank: u32) -> Result<RankLists, TopologyError> {
        self.check_rank(rank)?;
        let mut lists = RankLists::default();
        if self.has_kind(MindSpeedKind::CpRingIntra) {
            let r = self.ring_place(&self.cp_place(rank));
            let (kv, dkv) = inter_window_lists(&r.ring, r.pos, self.window);
            lists.ring_inter_window_kv = kv;
            lists.ring_inter_window_dkv = dkv;
        }
        let ranks_of = |kind| self.rank_group(kind, rank).map(|g| g.map(|g| g.ranks).unwrap_or_default());
        lists.tp_x_ring = ranks_of(MindSpeedKind::Nd1Dim1)?;
        lists.tp_y_ring = ranks_of(MindSpeedKind::Nd1Dim2)?;
        lists.tp_y_cp = ranks_of(MindSpeedKind::TpYCp)?;
        lists.expert_model_parallel = ranks_of(MindSpeedKind::Exp)?;
        Ok(lists)
    }
}

/// The KV and DKV lists of the rank at position `pos` of ring list `ring` with window `w`.
///
/// KV: `ring[pos % w :: w]`. DKV: the walk from window 0 at position s that steps to the next
/// window (cyclically) and the next position (mod w) until a rank repeats; the rank keeps the
/// first s whose walk reaches it. The walk visits (window, position) = (i mod n_w, (s + i) mod w),
/// so it reaches (b, p) iff s = p - b modulo gcd(n_w, w): the first such s is that residue.
pub(super) fn inter_window_lists(ring: &[u32], pos: u32, w: u32) -> (Vec<u32>, Vec<u32>) {
    let n_w = ring.len() as u32 / w;
    let kv = strided(ring, pos % w, w);
    let g = gcd(n_w, w);
    let (b, p) = (pos / w, pos % w);
    let s = (p + g * (b / g + 1) - b) % g;
    let len = n_w / g * w;
    let dkv = (0..len).map(|i| ring[((i % n_w) * w + (s + i) % w) as usize]).collect();
    (kv, dkv)
}
