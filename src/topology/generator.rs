//! The mixed-radix rank generator (see docs/conformance.md): six dimensions in the order of the
//! order string, the first token varying fastest. Five are named in order strings (tp, pp, dp, ep,
//! cp); the sixth, Megatron-Core 0.19's weight-rematerialization axis (gtp on the dense grid, egtp
//! on the expert grid), is never named by the user but placed by [`with_gtp`].

use super::error::TopologyError;
use crate::quote::quoted;

/// One of the six dimensions of a rank generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    Tp = 0,
    Pp = 1,
    Dp = 2,
    Ep = 3,
    Cp = 4,
    /// The weight-rematerialization axis (`gtp_remat` on the dense grid, `egtp` on the expert one).
    Gtp = 5,
}

impl Dim {
    /// The sequence in which Megatron visits the names (also the append order of absent ones).
    /// `Gtp` comes last: it is always placed explicitly (see [`with_gtp`]), never appended.
    pub const ALL: [Dim; 6] = [Dim::Tp, Dim::Pp, Dim::Dp, Dim::Ep, Dim::Cp, Dim::Gtp];
    /// The dims a user's order string may name (`Gtp` is placed by the layout, not named).
    pub const ORDER: [Dim; 5] = [Dim::Tp, Dim::Pp, Dim::Dp, Dim::Ep, Dim::Cp];

    pub fn name(self) -> &'static str {
        ["tp", "pp", "dp", "ep", "cp", "gtp_remat"][self as usize]
    }

    fn from_token(t: &str) -> Option<Dim> {
        Dim::ORDER.iter().copied().find(|d| d.name() == t)
    }

    /// A one-bit mask for this dimension.
    pub const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// Parse an order string: lower-cased, split on `-`; unknown and repeated tokens are errors.
/// Returns the named dims in the order given (absent ones are not appended here).
pub fn parse_order(order: &str) -> Result<Vec<Dim>, TopologyError> {
    let lower = order.to_lowercase();
    let mut dims = Vec::new();
    for token in lower.split('-') {
        let dim = Dim::from_token(token).ok_or_else(|| {
            TopologyError::config(format!(
                "order {}: unknown token {} (expected tp, pp, dp, ep, cp joined by '-')",
                quoted(order),
                quoted(token)
            ))
        })?;
        if dims.contains(&dim) {
            return Err(TopologyError::config(format!("order {}: token '{token}' appears twice", quoted(order))));
        }
        dims.push(dim);
    }
    Ok(dims)
}

/// Megatron-Core 0.19's placement of the rematerialization axis in a parsed order: right after
/// `after` (the first of those dims present in the order), else first. The dense grid uses
/// `[Tp]`, the expert grid `[Ep, Tp]`. The order is matched case-insensitively (0.19.2 matches
/// it case-sensitively and puts the axis first for upper-case orders: a documented deviation).
pub fn with_gtp(named: &[Dim], after: &[Dim]) -> Vec<Dim> {
    let mut v = named.to_vec();
    let at = after.iter().find_map(|a| named.iter().position(|d| d == a).map(|i| i + 1)).unwrap_or(0);
    v.insert(at, Dim::Gtp);
    v
}

/// A generator: the size and stride of each dimension, and the token order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generator {
    /// Dims in token order (first = fastest).
    pub order: [Dim; 6],
    /// Size per dim, indexed by `Dim as usize`.
    pub size: [u64; 6],
    /// Stride per dim, indexed by `Dim as usize`.
    pub stride: [u64; 6],
}

impl Generator {
    /// Build a generator for `sizes` (indexed by dim) from the parsed order. A dim absent from the
    /// order must have size 1 (it is appended); `which` names the generator in the message.
    pub fn new(sizes: [u64; 6], named: &[Dim], order_text: &str, which: &str) -> Result<Self, TopologyError> {
        let mut order = Vec::with_capacity(6);
        order.extend_from_slice(named);
        for d in Dim::ALL {
            if !named.contains(&d) {
                if sizes[d as usize] != 1 {
                    return Err(TopologyError::config(format!(
                        "{which}: the size of {} is {}, but the order '{order_text}' does not name it",
                        d.name(),
                        sizes[d as usize]
                    )));
                }
                order.push(d);
            }
        }
        let mut stride = [0u64; 6];
        let mut s = 1u64;
        for &d in &order {
            stride[d as usize] = s;
            s *= sizes[d as usize];
        }
        Ok(Generator { order: order.try_into().expect("six dims"), size: sizes, stride })
    }

    /// Coordinate of a local rank (global rank minus offset) along `dim`.
    #[inline]
    pub fn coord(&self, local: u64, dim: Dim) -> u64 {
        (local / self.stride[dim as usize]) % self.size[dim as usize]
    }

    /// Product of the sizes of the dims in `mask`.
    pub fn masked_size(&self, mask: u8) -> u64 {
        Dim::ALL.iter().filter(|d| mask & d.bit() != 0).map(|d| self.size[*d as usize]).product()
    }

    /// Index of the group (over the dims in `mask`) that holds `local`: the unmasked coordinates
    /// as a mixed-radix number, first unmasked token fastest.
    pub fn group_index(&self, mask: u8, local: u64) -> u64 {
        let mut idx = 0;
        let mut mul = 1;
        for &d in &self.order {
            if mask & d.bit() == 0 {
                idx += self.coord(local, d) * mul;
                mul *= self.size[d as usize];
            }
        }
        idx
    }

    /// Coordinates (indexed by dim) of the unmasked dims of group `index`; masked dims are 0.
    pub fn group_origin(&self, mask: u8, mut index: u64) -> [u64; 6] {
        let mut c = [0u64; 6];
        for &d in &self.order {
            if mask & d.bit() == 0 {
                let n = self.size[d as usize];
                c[d as usize] = index % n;
                index /= n;
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_megabyte_order_gives_a_short_error_naming_it() {
        for order in ["x".repeat(1 << 20), format!("tp-{}", "q".repeat(1 << 20)), "tp-".repeat(1 << 18)] {
            let e = parse_order(&order).unwrap_err().to_string();
            assert!(e.len() < 1024 && e.starts_with("order '") && e.contains(" bytes)"), "{} bytes", e.len());
        }
    }

    #[test]
    fn docstring_example() {
        // W=16, tp=2, pp=4 -> dp=2 with tp-cp-ep-dp-pp.
        let named = parse_order("tp-cp-ep-dp-pp").unwrap();
        let g = Generator::new([2, 4, 2, 1, 1, 1], &named, "tp-cp-ep-dp-pp", "dense").unwrap();
        assert_eq!(g.stride, [1, 4, 2, 2, 2, 16]);
        assert_eq!(g.coord(13, Dim::Pp), 3);
        assert_eq!(g.group_index(Dim::Tp.bit(), 13), 6);
    }

    #[test]
    fn order_errors_name_the_token() {
        assert!(parse_order("tp-xx-dp").unwrap_err().message.contains("'xx'"));
        assert!(parse_order("tp-tp-dp").unwrap_err().message.contains("twice"));
        assert!(parse_order("tp--dp").is_err());
        assert_eq!(parse_order("TP-PP").unwrap(), vec![Dim::Tp, Dim::Pp]);
        let e = Generator::new([1, 1, 2, 1, 1, 1], &[Dim::Tp, Dim::Pp], "tp-pp", "dense").unwrap_err();
        assert!(e.message.contains("dp is 2"), "{}", e.message);
        assert!(parse_order("tp-gtp_remat").is_err(), "the gtp axis is not a user token");
    }

    #[test]
    fn gtp_axis_placement() {
        use Dim::*;
        let o = parse_order("tp-cp-ep-dp-pp").unwrap();
        assert_eq!(with_gtp(&o, &[Tp]), vec![Tp, Gtp, Cp, Ep, Dp, Pp]);
        assert_eq!(with_gtp(&o, &[Ep, Tp]), vec![Tp, Cp, Ep, Gtp, Dp, Pp]);
        let o = parse_order("dp-pp").unwrap();
        assert_eq!(with_gtp(&o, &[Tp]), vec![Gtp, Dp, Pp]);
        let o = parse_order("TP-DP-PP").unwrap();
        assert_eq!(with_gtp(&o, &[Ep, Tp]), vec![Tp, Gtp, Dp, Pp]);
        // W=16 tp=2 gtp=2 pp=2: gtp peers are tp apart, pipelines 8 apart.
        let g = Generator::new([2, 2, 2, 1, 1, 2], &with_gtp(&parse_order("tp-cp-ep-dp-pp").unwrap(), &[Tp]), "", "")
            .unwrap();
        assert_eq!((g.stride[Gtp as usize], g.stride[Dp as usize], g.stride[Pp as usize]), (2, 4, 8));
    }
}
