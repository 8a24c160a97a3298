//! One process group: its kind, its index among the groups of that kind, and its members in
//! communicator order (ascending global ranks), produced on demand.

use super::kind::GroupKind;
use std::sync::Arc;

/// A set of ranks `base + sum(m_k * stride_k)`, `m_k < count_k`, enumerated with the first axis
/// fastest, restricted to the positions `start .. start + len` of that enumeration. Axis strides
/// grow faster than the span of the axes before them, so the enumeration is ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grid {
    pub base: u64,
    pub axes: [(u64, u64); 6],
    pub naxes: usize,
    pub start: u64,
    pub len: u64,
}

impl Grid {
    pub fn new(base: u64) -> Self {
        Grid { base, axes: [(0, 1); 6], naxes: 0, start: 0, len: 1 }
    }

    /// Add an axis (callers add them in ascending stride order); size-1 axes are dropped.
    pub fn push_axis(&mut self, stride: u64, count: u64) {
        if count > 1 {
            self.axes[self.naxes] = (stride, count);
            self.naxes += 1;
            self.len *= count;
        }
    }

    fn axes(&self) -> &[(u64, u64)] {
        &self.axes[..self.naxes]
    }

    /// The rank at enumeration position `p` of the whole box.
    fn at_box(&self, mut p: u64) -> u64 {
        let mut r = self.base;
        for &(stride, count) in self.axes() {
            r += (p % count) * stride;
            p /= count;
        }
        r
    }

    /// Enumeration position of `rank` in the whole box, if it is in the box.
    fn box_position(&self, rank: u64) -> Option<u64> {
        let mut rem = rank.checked_sub(self.base)?;
        let mut digits = [0u64; 6];
        for (k, &(stride, count)) in self.axes().iter().enumerate().rev() {
            let m = rem / stride;
            if m >= count {
                return None;
            }
            digits[k] = m;
            rem -= m * stride;
        }
        if rem != 0 {
            return None;
        }
        let mut p = 0;
        for (k, &(_, count)) in self.axes().iter().enumerate().rev() {
            p = p * count + digits[k];
        }
        Some(p)
    }
}

impl Grid {
    /// The enumeration positions `start .. start + len` as boxes: each fixes the digits of the
    /// slower axes, runs one axis over a range of its digits and the faster axes over all of
    /// theirs. At most two boxes per axis, ascending.
    fn boxes(&self) -> Vec<RankBox> {
        let axes = self.axes();
        let n = axes.len();
        // prefix[k]: positions in one full box of the first k axes.
        let mut prefix = vec![1u64; n + 1];
        for k in 0..n {
            prefix[k + 1] = prefix[k] * axes[k].1;
        }
        let (mut lo, hi) = (self.start, self.start + self.len);
        let mut out = Vec::new();
        while lo < hi {
            let mut k = 0;
            while k < n && lo % prefix[k + 1] == 0 && lo + prefix[k + 1] <= hi {
                k += 1;
            }
            let run = if k < n { (axes[k].1 - (lo / prefix[k]) % axes[k].1).min((hi - lo) / prefix[k]) } else { 1 };
            let mut b = RankBox { base: self.at_box(lo) as u32, axes: Vec::with_capacity(k + 1) };
            b.axes.extend(axes[..k].iter().map(|&(s, c)| (s as u32, c as u32)));
            if k < n && run > 1 {
                b.axes.push((axes[k].0 as u32, run as u32));
            }
            out.push(b);
            lo += run * prefix[k];
        }
        out
    }
}

/// A compact, exact description of some ranks: `base + sum(m_k * stride_k)` for every `m_k <
/// count_k` (axes in ascending stride order, the first fastest). A group's members are the
/// union of a few such boxes ([`Group::boxes`]), whatever the group's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankBox {
    /// The first (smallest) rank of the box.
    pub base: u32,
    /// `(stride, count)` per axis; no axis for a single rank.
    pub axes: Vec<(u32, u32)>,
}

impl RankBox {
    /// Number of ranks in the box.
    pub fn len(&self) -> u64 {
        self.axes.iter().map(|&(_, c)| u64::from(c)).product()
    }

    /// Never true: a box holds at least its base.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// `5+64*i (i<262144)`, `5+i+64*j (i<8, j<4096)`, `7` for one rank.
impl std::fmt::Display for RankBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const VARS: [char; 6] = ['i', 'j', 'k', 'l', 'm', 'n'];
        write!(f, "{}", self.base)?;
        for (v, &(stride, _)) in VARS.iter().zip(&self.axes) {
            match stride {
                1 => write!(f, "+{v}")?,
                s => write!(f, "+{s}*{v}")?,
            }
        }
        if !self.axes.is_empty() {
            let bounds: Vec<String> = VARS.iter().zip(&self.axes).map(|(v, &(_, c))| format!("{v}<{c}")).collect();
            write!(f, " ({})", bounds.join(", "))?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shape {
    Grid(Grid),
    /// Sorted, duplicate-free ranks (from a user embedding callback).
    List(Arc<[u32]>),
}

/// One process group. Cheap to hold (no member list); members are produced on demand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub(crate) kind: GroupKind,
    pub(crate) index: u64,
    pub(crate) shape: Shape,
}

impl Group {
    /// The kind of this group.
    pub fn kind(&self) -> GroupKind {
        self.kind
    }

    /// Index of this group among the groups of its kind, in Megatron-Core's creation order
    /// (rank-independent: every rank numbers the groups alike).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Number of members.
    pub fn len(&self) -> u32 {
        match &self.shape {
            Shape::Grid(g) => g.len as u32,
            Shape::List(l) => l.len() as u32,
        }
    }

    /// True when the group has no member (never for groups this engine builds).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The member at group rank `i` (ascending global ranks), if `i < len()`.
    pub fn member(&self, i: u32) -> Option<u32> {
        match &self.shape {
            Shape::Grid(g) => (u64::from(i) < g.len).then(|| g.at_box(g.start + u64::from(i)) as u32),
            Shape::List(l) => l.get(i as usize).copied(),
        }
    }

    /// The group rank of global rank `rank`: its index in the member list, if it is a member.
    pub fn rank_of(&self, rank: u32) -> Option<u32> {
        match &self.shape {
            Shape::Grid(g) => {
                let p = g.box_position(u64::from(rank))?;
                (p >= g.start && p < g.start + g.len).then(|| (p - g.start) as u32)
            }
            Shape::List(l) => l.binary_search(&rank).ok().map(|i| i as u32),
        }
    }

    /// True when `rank` is a member.
    pub fn contains(&self, rank: u32) -> bool {
        self.rank_of(rank).is_some()
    }

    /// The first member (Megatron's "src rank" of the group).
    pub fn first(&self) -> u32 {
        self.member(0).expect("groups are never empty")
    }

    /// The last member.
    pub fn last(&self) -> u32 {
        self.member(self.len() - 1).expect("groups are never empty")
    }

    /// The members in communicator order (ascending).
    pub fn members(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.len() as usize);
        v.extend(self.iter());
        v
    }

    /// The members as a few boxes (ascending, see [`RankBox`]): O(1) in the group's size (at
    /// most two boxes per axis of the layout; one box per member only for a custom embedding
    /// group, which has at most a pipeline's ranks).
    pub fn boxes(&self) -> Vec<RankBox> {
        match &self.shape {
            Shape::Grid(g) => g.boxes(),
            Shape::List(l) => l.iter().map(|&r| RankBox { base: r, axes: Vec::new() }).collect(),
        }
    }

    /// Iterate over the members in communicator order without allocating.
    pub fn iter(&self) -> Members<'_> {
        match &self.shape {
            Shape::Grid(g) => {
                let mut digits = [0u64; 6];
                let mut p = g.start;
                for (k, &(_, count)) in g.axes().iter().enumerate() {
                    digits[k] = p % count;
                    p /= count;
                }
                Members { inner: MembersInner::Grid { grid: g, digits, next: g.at_box(g.start), left: g.len } }
            }
            Shape::List(l) => Members { inner: MembersInner::List(l.iter()) },
        }
    }
}

impl<'a> IntoIterator for &'a Group {
    type Item = u32;
    type IntoIter = Members<'a>;
    fn into_iter(self) -> Members<'a> {
        self.iter()
    }
}

/// Iterator over a group's members (ascending global ranks).
pub struct Members<'a> {
    inner: MembersInner<'a>,
}

enum MembersInner<'a> {
    Grid { grid: &'a Grid, digits: [u64; 6], next: u64, left: u64 },
    List(std::slice::Iter<'a, u32>),
}

impl Iterator for Members<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        match &mut self.inner {
            MembersInner::List(it) => it.next().copied(),
            MembersInner::Grid { grid, digits, next, left } => {
                if *left == 0 {
                    return None;
                }
                let out = *next as u32;
                *left -= 1;
                if *left > 0 {
                    // Odometer step: bump the fastest axis, carrying into slower ones.
                    for (k, &(stride, count)) in grid.axes().iter().enumerate() {
                        digits[k] += 1;
                        *next += stride;
                        if digits[k] < count {
                            break;
                        }
                        digits[k] = 0;
                        *next -= stride * count;
                    }
                }
                Some(out)
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.inner {
            MembersInner::List(it) => it.len(),
            MembersInner::Grid { left, .. } => *left as usize,
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for Members<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid_group(grid: Grid) -> Group {
        Group { kind: GroupKind::DataParallel, index: 0, shape: Shape::Grid(grid) }
    }

    #[test]
    fn window_over_a_box_is_ascending_and_invertible() {
        // axes: stride 1 x3, stride 8 x2 (ranks 0,1,2,8,9,10) plus base 4; window positions 2..5.
        let mut g = Grid::new(4);
        g.push_axis(1, 3);
        g.push_axis(8, 2);
        g.start = 2;
        g.len = 3;
        let grp = grid_group(g);
        assert_eq!(grp.members(), vec![6, 12, 13]);
        for (i, r) in grp.members().into_iter().enumerate() {
            assert_eq!(grp.rank_of(r), Some(i as u32));
            assert_eq!(grp.member(i as u32), Some(r));
        }
        for r in [0, 4, 5, 7, 14, 100] {
            assert_eq!(grp.rank_of(r), None, "{r}");
        }
        assert_eq!(grp.member(3), None);
        // The same window as boxes: {6}, then {12, 13}.
        let boxes = grp.boxes();
        assert_eq!(boxes, vec![RankBox { base: 6, axes: vec![] }, RankBox { base: 12, axes: vec![(1, 2)] }]);
        assert_eq!((boxes[0].to_string(), boxes[1].to_string()), ("6".to_string(), "12+i (i<2)".to_string()));
    }

    /// Every window of a three-axis box: the boxes hold exactly the members, in order, and
    /// there are at most two per axis.
    #[test]
    fn boxes_are_exact_for_every_window() {
        let mut whole = Grid::new(3);
        whole.push_axis(2, 3);
        whole.push_axis(10, 2);
        whole.push_axis(100, 4);
        for start in 0..24 {
            for len in 1..=24 - start {
                let g = grid_group(Grid { start, len, ..whole.clone() });
                let boxes = g.boxes();
                assert!(boxes.len() <= 6, "{start}+{len}: {boxes:?}");
                let mut from_boxes = Vec::new();
                for b in &boxes {
                    let box_group = {
                        let mut bg = Grid::new(u64::from(b.base));
                        for &(s, c) in &b.axes {
                            bg.push_axis(u64::from(s), u64::from(c));
                        }
                        grid_group(bg)
                    };
                    assert_eq!(box_group.len() as u64, b.len());
                    from_boxes.extend(box_group.members());
                }
                assert_eq!(from_boxes, g.members(), "window {start}+{len}: {boxes:?}");
            }
        }
        let b = RankBox { base: 5, axes: vec![(1, 8), (64, 4096)] };
        assert_eq!(b.to_string(), "5+i+64*j (i<8, j<4096)");
    }
}
