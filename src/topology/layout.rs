//! `Topology`: a validated layout and every query on it. One rank's groups are computed from its
//! coordinates (a few divisions per kind); group member lists are produced on demand.

use super::config::{Sizes, TopologyConfig};
use super::error::TopologyError;
use super::generator::{parse_order, with_gtp, Dim, Generator};
use super::group::{Grid, Group, Shape};
use super::kind::GroupKind;
use super::validate::validate;
use std::sync::Arc;

/// Which of the two generators a kind uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Dense,
    Expert,
}

/// How the groups of a kind derive from a generator (docs/topology.md: "The rank generator",
/// "Hierarchical context parallelism", "Embedding groups", "Distributed-optimizer instances").
#[derive(Debug, Clone, Copy)]
enum Spec {
    /// All ranks sharing the coordinates outside `mask`.
    Plain { side: Side, mask: u8 },
    /// Each `mask` group with dim `dim` cut as `inner · size · outer`: groups of `size` members at
    /// stride `inner` inside blocks of `inner·size` coordinates; numbered group, block, offset.
    Split { side: Side, mask: u8, dim: Dim, inner: u64, size: u64, outer: u64 },
    /// Each `mask` group cut into `parts` contiguous slices of its (ascending) member list.
    Slice { side: Side, mask: u8, parts: u64 },
    /// One group per pipeline group (defaults or user callback).
    Embedding { position: bool },
}

const TP: u8 = Dim::Tp.bit();
const PP: u8 = Dim::Pp.bit();
const DP: u8 = Dim::Dp.bit();
const EP: u8 = Dim::Ep.bit();
const CP: u8 = Dim::Cp.bit();
const GTP: u8 = Dim::Gtp.bit();
const ALL: u8 = TP | PP | DP | EP | CP | GTP;

/// A rank's membership in one group: the group and the rank's index in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub group: Group,
    /// The rank's group rank (index in the ascending member list).
    pub rank: u32,
}

impl Membership {
    pub fn kind(&self) -> GroupKind {
        self.group.kind()
    }
    /// Index of the group among the groups of its kind.
    pub fn group_index(&self) -> u64 {
        self.group.index()
    }
    /// Number of members of the group.
    pub fn size(&self) -> u32 {
        self.group.len()
    }
    /// The members, ascending.
    pub fn members(&self) -> Vec<u32> {
        self.group.members()
    }
}

/// A rank's place in its pipeline group (ring neighbours wrap around).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineView {
    /// Pipeline stage of the rank (its pp group rank).
    pub rank: u32,
    /// Number of pipeline stages.
    pub size: u32,
    /// Global rank of stage 0 of this pipeline.
    pub first: u32,
    /// Global rank of the last stage.
    pub last: u32,
    /// Global rank of the next stage (stage 0 after the last).
    pub next: u32,
    /// Global rank of the previous stage (the last before stage 0).
    pub prev: u32,
}

/// Everything one rank needs: its group in every kind it belongs to, and its pipeline place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankView {
    pub rank: u32,
    /// One entry per kind this rank is a member of, in `Topology::kinds()` order.
    pub groups: Vec<Membership>,
    pub pipeline: PipelineView,
}

impl RankView {
    /// This rank's membership in `kind`, if it is a member.
    pub fn get(&self, kind: GroupKind) -> Option<&Membership> {
        self.groups.iter().find(|m| m.kind() == kind)
    }

    /// Megatron-Core 0.19's `get_all_ranks()` string: tp, gtp, gtp-inclusive dp, cp, pp and ep
    /// group ranks joined by `_` (see [`RankView::all_ranks_string_0_16`] for 0.16's form).
    pub fn all_ranks_string(&self) -> String {
        use GroupKind::*;
        self.join_ranks(&[
            TensorModelParallel,
            GtpWeightRemat,
            DataParallelWithGtpRemat,
            ContextParallel,
            PipelineModelParallel,
            ExpertModelParallel,
        ])
    }

    /// Megatron-Core 0.16's `get_all_ranks()` string: tp, dp, cp, pp and ep group ranks.
    pub fn all_ranks_string_0_16(&self) -> String {
        use GroupKind::*;
        self.join_ranks(&[
            TensorModelParallel,
            DataParallel,
            ContextParallel,
            PipelineModelParallel,
            ExpertModelParallel,
        ])
    }

    fn join_ranks(&self, kinds: &[GroupKind]) -> String {
        let r = |k| self.get(k).map(|m| m.rank).unwrap_or(0).to_string();
        kinds.iter().map(|&k| r(k)).collect::<Vec<_>>().join("_")
    }
}

/// A validated parallel layout for a world size.
#[derive(Clone, Debug)]
pub struct Topology {
    config: TopologyConfig,
    sizes: Sizes,
    /// Ranks of the grid (the local world size when one is given).
    world: u64,
    /// The whole world (ranks outside the grid belong to no group).
    total: u64,
    offset: u64,
    dense: Generator,
    expert: Generator,
    /// Per hierarchical context-parallel level: the product of the sizes of the levels before
    /// it (so that looking a level up costs O(1), not O(levels)).
    hcp_inner: Vec<u64>,
}

impl Topology {
    /// Validate `config` for `world_size` ranks (Megatron-Core's checks plus our own: zero sizes,
    /// bad order tokens, overflow) and build the layout. Costs O(1) in the world size.
    ///
    /// With `config.local_world_size`, `world_size` is the whole world and the grid covers
    /// `rank_offset .. rank_offset + local_world_size` of it; without, the grid has `world_size`
    /// ranks starting at `rank_offset`.
    pub fn new(config: TopologyConfig, world_size: u32) -> Result<Topology, TopologyError> {
        let sizes = validate(&config, world_size)?;
        let named = parse_order(&config.order)?;
        let s = &sizes;
        let dense_sizes = [s.tp, s.pp, s.dp, 1, s.cp, s.gtp].map(u64::from);
        let expert_sizes = [s.etp, s.pp, s.expert_dp, s.ep, 1, s.egtp].map(u64::from);
        let dense_order = with_gtp(&named, &[Dim::Tp]);
        let expert_order = with_gtp(&named, &[Dim::Ep, Dim::Tp]);
        let dense = Generator::new(dense_sizes, &dense_order, &config.order, "dense layout")?;
        let expert = Generator::new(expert_sizes, &expert_order, &config.order, "expert layout")?;
        super::validate::validate_generators(&config, &sizes, &dense, &expert)?;
        let hcp_inner = sizes
            .hierarchical_cp
            .iter()
            .scan(1u64, |inner, &s| {
                let before = *inner;
                *inner = inner.saturating_mul(u64::from(s));
                Some(before)
            })
            .collect();
        Ok(Topology {
            hcp_inner,
            world: u64::from(sizes.world_size),
            total: u64::from(world_size),
            offset: u64::from(config.rank_offset),
            config,
            sizes,
            dense,
            expert,
        })
    }

    pub fn config(&self) -> &TopologyConfig {
        &self.config
    }

    pub fn sizes(&self) -> &Sizes {
        &self.sizes
    }

    /// Number of ranks of the grid (the local world size when one is given).
    pub fn world_size(&self) -> u32 {
        self.world as u32
    }

    /// The whole world given to [`Topology::new`]: the grid's size unless a local world size
    /// was given.
    pub fn total_world_size(&self) -> u32 {
        self.total as u32
    }

    /// Whether `rank` is in the grid (`rank_offset .. rank_offset + world_size()`); other ranks
    /// of the world belong to no group.
    pub fn in_grid(&self, rank: u32) -> bool {
        let r = u64::from(rank);
        r >= self.offset && r - self.offset < self.world
    }

    pub fn rank_offset(&self) -> u32 {
        self.offset as u32
    }

    /// Number of hierarchical context-parallel levels (0 when not used).
    pub fn hierarchical_cp_levels(&self) -> u32 {
        self.sizes.hierarchical_cp.len() as u32
    }

    /// Whether this layout has groups of `kind` (hierarchical levels only when configured, the
    /// inter-instance expert group only with more than one distributed-optimizer instance).
    pub fn has_kind(&self, kind: GroupKind) -> bool {
        match kind {
            GroupKind::HierarchicalContextParallel(i) => i < self.hierarchical_cp_levels(),
            GroupKind::InterPartialExpertDataParallel => self.sizes.dist_opt_instances > 1,
            _ => true,
        }
    }

    /// The kinds of this layout in table order (docs/topology.md, "Group kinds").
    pub fn kinds(&self) -> Vec<GroupKind> {
        let mut v = Vec::with_capacity(GroupKind::FIXED.len() + self.sizes.hierarchical_cp.len());
        for k in GroupKind::FIXED {
            if self.has_kind(k) {
                v.push(k);
            }
            if k == GroupKind::ContextParallel {
                v.extend((0..self.hierarchical_cp_levels()).map(GroupKind::HierarchicalContextParallel));
            }
        }
        v
    }

    /// For Megatron-Core 0.19's kinds: the first earlier kind of this layout whose groups are
    /// exactly this kind's (e.g. `data_parallel` for `data_parallel_with_gtp_remat` at gtp = 1,
    /// any single-rank kind for `gtp_weight_remat` at gtp = 1). Rank-independent; `None` for
    /// other kinds or when no earlier kind has the same groups.
    pub fn alias_of(&self, kind: GroupKind) -> Option<GroupKind> {
        if !GroupKind::added_in_0_19().contains(&kind) || !self.has_kind(kind) {
            return None;
        }
        // The dims of a plain spec that have more than one coordinate: equal on one side means
        // equal groups; none on either side means single-rank groups on both.
        let effective = |spec: Spec| match spec {
            Spec::Plain { side, mask } => {
                let gen = self.generator(side);
                let bits = Dim::ALL.iter().filter(|d| mask & d.bit() != 0 && gen.size[**d as usize] > 1);
                Some((side, bits.fold(0u8, |m, d| m | d.bit())))
            }
            _ => None,
        };
        let (side, mask) = effective(self.spec(kind))?;
        self.kinds().into_iter().take_while(|k| *k != kind).find(|&k| match effective(self.spec(k)) {
            Some((s, m)) => (m == 0 && mask == 0) || (s == side && m == mask),
            None => false,
        })
    }

    /// The kinds whose groups Megatron-Core's post-init helper `create_all_gather_groups`
    /// duplicates (all-gather twins, separate communicators for overlap): `data_parallel_with_cp`,
    /// and `expert_data_parallel` when ep > 1. The twins have exactly these kinds' groups, for
    /// every order, rank offset and gtp (0.19.2 recomputes them with the default order and no
    /// offset, which differs there: a documented deviation).
    pub fn all_gather_twin_kinds(&self) -> Vec<GroupKind> {
        let mut v = vec![GroupKind::DataParallelWithCp];
        if self.sizes.ep > 1 {
            v.push(GroupKind::ExpertDataParallel);
        }
        v
    }

    /// The stride of `dim` on the dense grid (global rank distance between neighbours along it).
    pub(crate) fn dense_stride(&self, dim: Dim) -> u64 {
        self.dense.stride[dim as usize]
    }

    fn generator(&self, side: Side) -> &Generator {
        match side {
            Side::Dense => &self.dense,
            Side::Expert => &self.expert,
        }
    }

    fn spec(&self, kind: GroupKind) -> Spec {
        use GroupKind::*;
        use Side::*;
        let nd = u64::from(self.sizes.dist_opt_instances);
        let edp = u64::from(self.sizes.expert_dp);
        let plain = |side, mask| Spec::Plain { side, mask };
        match kind {
            TensorModelParallel => plain(Dense, TP),
            PipelineModelParallel => plain(Dense, PP),
            DataParallel => plain(Dense, DP),
            DataParallelWithCp => plain(Dense, DP | CP),
            ContextParallel => plain(Dense, CP),
            HierarchicalContextParallel(i) => {
                let hcp = &self.sizes.hierarchical_cp;
                let inner = self.hcp_inner[i as usize];
                let size = u64::from(hcp[i as usize]);
                let outer = u64::from(self.sizes.cp) / (inner * size);
                Spec::Split { side: Dense, mask: CP, dim: Dim::Cp, inner, size, outer }
            }
            ModelParallel => plain(Dense, TP | GTP | PP),
            TensorAndDataParallel => plain(Dense, TP | GTP | DP),
            TensorAndDataParallelWithCp => plain(Dense, TP | GTP | DP | CP),
            TensorAndContextParallel => plain(Dense, TP | CP),
            IntraPartialDataParallelWithCp => Spec::Slice { side: Dense, mask: DP | CP, parts: nd },
            IntraDistributedOptimizerInstance => {
                Spec::Split { side: Expert, mask: ALL, dim: Dim::Dp, inner: 1, size: edp / nd, outer: nd }
            }
            Embedding => Spec::Embedding { position: false },
            PositionEmbedding => Spec::Embedding { position: true },
            ExpertModelParallel => plain(Expert, EP),
            ExpertTensorParallel => plain(Expert, TP),
            ExpertTensorAndModelParallel => plain(Expert, TP | EP),
            ExpertTensorModelPipelineParallel => plain(Expert, TP | EP | PP),
            ExpertDataParallel => plain(Expert, DP),
            IntraPartialExpertDataParallel => {
                Spec::Split { side: Expert, mask: DP, dim: Dim::Dp, inner: 1, size: edp / nd, outer: nd }
            }
            InterPartialExpertDataParallel => {
                Spec::Split { side: Expert, mask: DP, dim: Dim::Dp, inner: edp / nd, size: nd, outer: 1 }
            }
            GtpWeightRemat => plain(Dense, GTP),
            DataParallelWithGtpRemat => plain(Dense, DP | GTP),
            DataParallelWithCpWithGtpRemat => plain(Dense, DP | CP | GTP),
            ExpertGtpWeightRemat => plain(Expert, GTP),
            ExpertTensorModelPipelineParallelWithEgtp => plain(Expert, TP | EP | PP | GTP),
            ExpertDataParallelWithGtpRemat => plain(Expert, DP | GTP),
        }
    }

    /// `rank` relative to the grid: `Ok(None)` for a rank of the world outside the grid (with a
    /// local world size), an error for a rank outside the world.
    fn local(&self, rank: u32) -> Result<Option<u64>, TopologyError> {
        let r = u64::from(rank);
        if self.in_grid(rank) {
            return Ok(Some(r - self.offset));
        }
        if self.config.local_world_size.is_some() && r < self.total {
            return Ok(None);
        }
        Err(TopologyError::range(format!(
            "rank {rank} is outside the layout's ranks {}..{}",
            self.offset,
            self.offset + self.world - 1
        )))
    }

    /// Like `local`, but a rank outside the grid is an error saying it belongs to no group.
    fn local_in_grid(&self, rank: u32) -> Result<u64, TopologyError> {
        self.local(rank)?.ok_or_else(|| {
            TopologyError::range(format!(
                "rank {rank} is outside the grid: the layout covers ranks {}..{} (local world size {} at \
                 rank offset {}) of a world of {}, so rank {rank} belongs to no group and has no pipeline",
                self.offset,
                self.offset + self.world - 1,
                self.world,
                self.offset,
                self.total
            ))
        })
    }

    /// Number of groups of `kind` (0 for a kind this layout does not have).
    pub fn group_count(&self, kind: GroupKind) -> u64 {
        if !self.has_kind(kind) {
            return 0;
        }
        match self.spec(kind) {
            Spec::Plain { side, mask } => self.world / self.generator(side).masked_size(mask),
            Spec::Split { side, mask, inner, outer, .. } => {
                self.world / self.generator(side).masked_size(mask) * outer * inner
            }
            Spec::Slice { side, mask, parts } => self.world / self.generator(side).masked_size(mask) * parts,
            Spec::Embedding { .. } => self.world / u64::from(self.sizes.pp),
        }
    }

    /// The box of group `parent` over `mask`, with dim `over` (if any) restricted to the
    /// coordinates `start + m·step`, `m < count`.
    fn grid(&self, side: Side, mask: u8, parent: u64, over: Option<(Dim, u64, u64, u64)>) -> Grid {
        let gen = self.generator(side);
        let origin = gen.group_origin(mask, parent);
        let mut base = self.offset;
        for d in Dim::ALL {
            base += origin[d as usize] * gen.stride[d as usize];
        }
        let mut grid = Grid::new(0);
        for &d in &gen.order {
            let stride = gen.stride[d as usize];
            match over {
                Some((od, start, step, count)) if od == d => {
                    base += start * stride;
                    grid.push_axis(stride * step, count);
                }
                _ if mask & d.bit() != 0 => grid.push_axis(stride, gen.size[d as usize]),
                _ => {}
            }
        }
        grid.base = base;
        grid
    }

    /// Group `index` of `kind` (indices follow Megatron-Core's creation order).
    pub fn group(&self, kind: GroupKind, index: u64) -> Result<Group, TopologyError> {
        let count = self.group_count(kind);
        if index >= count {
            return Err(TopologyError::range(format!(
                "group index {index} out of range: this layout has {count} {kind} groups"
            )));
        }
        let shape = match self.spec(kind) {
            Spec::Plain { side, mask } => Shape::Grid(self.grid(side, mask, index, None)),
            Spec::Split { side, mask, dim, inner, size, outer } => {
                let o = index % inner;
                let b = (index / inner) % outer;
                let parent = index / inner / outer;
                Shape::Grid(self.grid(side, mask, parent, Some((dim, b * inner * size + o, inner, size))))
            }
            Spec::Slice { side, mask, parts } => {
                let mut grid = self.grid(side, mask, index / parts, None);
                let len = grid.len / parts;
                grid.start = (index % parts) * len;
                grid.len = len;
                Shape::Grid(grid)
            }
            Spec::Embedding { position } => self.embedding_shape(position, index)?,
        };
        Ok(Group { kind, index, shape })
    }

    /// The groups of `kind` in creation order (empty for a kind this layout does not have).
    pub fn groups(&self, kind: GroupKind) -> impl Iterator<Item = Result<Group, TopologyError>> + '_ {
        (0..self.group_count(kind)).map(move |i| self.group(kind, i))
    }

    fn embedding_shape(&self, position: bool, pp_group: u64) -> Result<Shape, TopologyError> {
        let custom = if position { &self.config.position_embedding_ranks } else { &self.config.embedding_ranks };
        let pp = u64::from(self.sizes.pp);
        match custom {
            None => {
                let (step, count) = if position || pp == 1 { (1, 1) } else { (pp - 1, 2) };
                Ok(Shape::Grid(self.grid(Side::Dense, PP, pp_group, Some((Dim::Pp, 0, step, count)))))
            }
            Some(f) => {
                let pipeline = self.group(GroupKind::PipelineModelParallel, pp_group)?.members();
                let what = if position { "position-embedding" } else { "embedding" };
                let mut ranks = f(&pipeline).map_err(|e| {
                    TopologyError::callback(format!("{what} ranks callback failed for pipeline {pipeline:?}: {e}"))
                })?;
                ranks.sort_unstable();
                if ranks.is_empty() {
                    return Err(TopologyError::callback(format!(
                        "{what} ranks callback returned no rank for pipeline {pipeline:?}"
                    )));
                }
                if let Some(w) = ranks.windows(2).find(|w| w[0] == w[1]) {
                    return Err(TopologyError::callback(format!(
                        "{what} ranks callback returned rank {} twice for pipeline {pipeline:?}",
                        w[0]
                    )));
                }
                if let Some(r) = ranks.iter().find(|r| pipeline.binary_search(r).is_err()) {
                    return Err(TopologyError::callback(format!(
                        "{what} ranks callback returned rank {r}, which is not in pipeline {pipeline:?}"
                    )));
                }
                Ok(Shape::List(Arc::from(ranks)))
            }
        }
    }

    /// Index of the group of `kind` that would hold local rank `local` (membership aside).
    fn locate(&self, spec: Spec, local: u64) -> u64 {
        match spec {
            Spec::Plain { side, mask } => self.generator(side).group_index(mask, local),
            Spec::Split { side, mask, dim, inner, size, outer } => {
                let gen = self.generator(side);
                let c = gen.coord(local, dim);
                (gen.group_index(mask, local) * outer + c / (inner * size)) * inner + c % inner
            }
            Spec::Slice { side, mask, parts } => {
                let gen = self.generator(side);
                let (mut j, mut mul) = (0, 1);
                for &d in &gen.order {
                    if mask & d.bit() != 0 {
                        j += gen.coord(local, d) * mul;
                        mul *= gen.size[d as usize];
                    }
                }
                gen.group_index(mask, local) * parts + j / (mul / parts)
            }
            Spec::Embedding { .. } => self.dense.group_index(PP, local),
        }
    }

    /// The group of `kind` that holds `rank`, or `None` when the rank is in no such group.
    pub fn group_of(&self, kind: GroupKind, rank: u32) -> Result<Option<Group>, TopologyError> {
        Ok(self.membership(kind, rank)?.map(|m| m.group))
    }

    /// `rank`'s group of `kind` and its group rank, or `None` when it is in no such group.
    /// A rank of the world outside the grid (see [`Topology::in_grid`]) is in no group.
    pub fn membership(&self, kind: GroupKind, rank: u32) -> Result<Option<Membership>, TopologyError> {
        let Some(local) = self.local(rank)? else {
            return Ok(None);
        };
        if !self.has_kind(kind) {
            return Ok(None);
        }
        let spec = self.spec(kind);
        if let Spec::Embedding { position } = spec {
            let custom = if position { &self.config.position_embedding_ranks } else { &self.config.embedding_ranks };
            if custom.is_none() {
                let stage = self.dense.coord(local, Dim::Pp);
                let last = u64::from(self.sizes.pp) - 1;
                if !(stage == 0 || (!position && stage == last)) {
                    return Ok(None);
                }
            }
        }
        let group = self.group(kind, self.locate(spec, local))?;
        Ok(group.rank_of(rank).map(|r| Membership { group, rank: r }))
    }

    /// Every group `rank` belongs to, and its pipeline place.
    /// A rank outside the grid is an error (it belongs to no group and has no pipeline).
    pub fn rank_view(&self, rank: u32) -> Result<RankView, TopologyError> {
        self.local_in_grid(rank)?;
        let mut groups = Vec::with_capacity(GroupKind::FIXED.len() + self.sizes.hierarchical_cp.len());
        for kind in self.kinds() {
            if let Some(m) = self.membership(kind, rank)? {
                groups.push(m);
            }
        }
        Ok(RankView { rank, groups, pipeline: self.pipeline(rank)? })
    }

    /// `rank`'s pipeline stage, first/last ranks and ring neighbours.
    pub fn pipeline(&self, rank: u32) -> Result<PipelineView, TopologyError> {
        self.local_in_grid(rank)?;
        let m = self.membership(GroupKind::PipelineModelParallel, rank)?.expect("every rank has a pipeline");
        let size = m.size();
        let at = |i: u64| m.group.member(i as u32).expect("stage in range");
        // In u64: with 2^32 - 1 stages, rank + size overflows u32.
        let (stage, stages) = (u64::from(m.rank), u64::from(size));
        Ok(PipelineView {
            rank: m.rank,
            size,
            first: at(0),
            last: at(stages - 1),
            next: at((stage + 1) % stages),
            prev: at((stage + stages - 1) % stages),
        })
    }

    fn check_vp_stage(&self, vp_stage: Option<u32>) -> Result<(), TopologyError> {
        let vpp = self.sizes.vpp.unwrap_or(1);
        match vp_stage {
            Some(k) if k >= vpp => Err(TopologyError::range(format!(
                "virtual pipeline stage {k} out of range: virtual pipeline size is {}",
                self.sizes.vpp.map_or("not set (only stage 0)".to_string(), |v| v.to_string())
            ))),
            _ => Ok(()),
        }
    }

    /// Whether `rank` is on the first pipeline stage; with `vp_stage = Some(k)` and a virtual
    /// pipeline, only on virtual stage 0 (`None` ignores virtual stages).
    pub fn is_pipeline_first_stage(&self, rank: u32, vp_stage: Option<u32>) -> Result<bool, TopologyError> {
        self.check_vp_stage(vp_stage)?;
        if vp_stage.unwrap_or(0) != 0 {
            return Ok(false); // decided before the pipeline (as Megatron: even outside the grid)
        }
        Ok(self.pipeline(rank)?.rank == 0)
    }

    /// Whether `rank` is on the last pipeline stage; with `vp_stage = Some(k)` and a virtual
    /// pipeline, only on the last virtual stage (`None` ignores virtual stages).
    pub fn is_pipeline_last_stage(&self, rank: u32, vp_stage: Option<u32>) -> Result<bool, TopologyError> {
        self.check_vp_stage(vp_stage)?;
        let last_vp = self.sizes.vpp.unwrap_or(1) - 1;
        if vp_stage.is_some_and(|k| k != last_vp) {
            return Ok(false); // decided before the pipeline (as Megatron: even outside the grid)
        }
        let p = self.pipeline(rank)?;
        Ok(p.rank == p.size - 1)
    }

    /// Megatron's `is_rank_in_embedding_group`: membership, and with `vp_stage` the first member
    /// counts only on the first virtual stage and the last member only on the last one.
    pub fn is_rank_in_embedding_group(&self, rank: u32, vp_stage: Option<u32>) -> Result<bool, TopologyError> {
        self.check_vp_stage(vp_stage)?;
        let Some(m) = self.membership(GroupKind::Embedding, rank)? else {
            return Ok(false);
        };
        if vp_stage.is_none() {
            return Ok(true);
        }
        if m.rank == 0 {
            self.is_pipeline_first_stage(rank, vp_stage)
        } else if m.rank == m.size() - 1 {
            self.is_pipeline_last_stage(rank, vp_stage)
        } else {
            Ok(true)
        }
    }
}
