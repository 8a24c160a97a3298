//! The mixed-radix rank generator (NOTES §1): five named dimensions in the order of the order
//! string, the first token varying fastest.

use super::error::TopologyError;

/// One of the five dimensions of a rank generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    Tp = 0,
    Pp = 1,
    Dp = 2,
    Ep = 3,
    Cp = 4,
}

impl Dim {
    /// The sequence in which Megatron visits the names (also the append order of absent ones).
    pub const ALL: [Dim; 5] = [Dim::Tp, Dim::Pp, Dim::Dp, Dim::Ep, Dim::Cp];

    pub fn name(self) -> &'static str {
        ["tp", "pp", "dp", "ep", "cp"][self as usize]
    }

    fn from_token(t: &str) -> Option<Dim> {
        Dim::ALL.into_iter().find(|d| d.name() == t)
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
                "order '{order}': unknown token '{token}' (expected tp, pp, dp, ep, cp joined by '-')"
            ))
        })?;
        if dims.contains(&dim) {
            return Err(TopologyError::config(format!(
                "order '{order}': token '{token}' appears twice"
            )));
        }
        dims.push(dim);
    }
    Ok(dims)
}

/// A generator: the size and stride of each dimension, and the token order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generator {
    /// Dims in token order (first = fastest).
    pub order: [Dim; 5],
    /// Size per dim, indexed by `Dim as usize`.
    pub size: [u64; 5],
    /// Stride per dim, indexed by `Dim as usize`.
    pub stride: [u64; 5],
}

impl Generator {
    /// Build a generator for `sizes` (indexed by dim) from the parsed order. A dim absent from the
    /// order must have size 1 (it is appended); `which` names the generator in the message.
    pub fn new(sizes: [u64; 5], named: &[Dim], order_text: &str, which: &str) -> Result<Self, TopologyError> {
        let mut order = Vec::with_capacity(5);
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
        let mut stride = [0u64; 5];
        let mut s = 1u64;
        for &d in &order {
            stride[d as usize] = s;
            s *= sizes[d as usize];
        }
        Ok(Generator {
            order: order.try_into().expect("five dims"),
            size: sizes,
            stride,
        })
    }

    /// Coordinate of a local rank (global rank minus offset) along `dim`.
    #[inline]
    pub fn coord(&self, local: u64, dim: Dim) -> u64 {
        (local / self.stride[dim as usize]) % self.size[dim as usize]
    }

    /// Product of the sizes of the dims in `mask`.
    pub fn masked_size(&self, mask: u8) -> u64 {
        Dim::ALL
            .iter()
            .filter(|d| mask & d.bit() != 0)
            .map(|d| self.size[*d as usize])
            .product()
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
    pub fn group_origin(&self, mask: u8, mut index: u64) -> [u64; 5] {
        let mut c = [0u64; 5];
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
    fn docstring_example() {
        // W=16, tp=2, pp=4 -> dp=2 with tp-cp-ep-dp-pp.
        let named = parse_order("tp-cp-ep-dp-pp").unwrap();
        let g = Generator::new([2, 4, 2, 1, 1], &named, "tp-cp-ep-dp-pp", "dense").unwrap();
        assert_eq!(g.stride, [1, 4, 2, 2, 2]);
        assert_eq!(g.coord(13, Dim::Pp), 3);
        assert_eq!(g.group_index(Dim::Tp.bit(), 13), 6);
    }

    #[test]
    fn order_errors_name_the_token() {
        assert!(parse_order("tp-xx-dp").unwrap_err().message.contains("'xx'"));
        assert!(parse_order("tp-tp-dp").unwrap_err().message.contains("twice"));
        assert!(parse_order("tp--dp").is_err());
        assert_eq!(parse_order("TP-PP").unwrap(), vec![Dim::Tp, Dim::Pp]);
        let e = Generator::new([1, 1, 2, 1, 1], &[Dim::Tp, Dim::Pp], "tp-pp", "dense").unwrap_err();
        assert!(e.message.contains("dp is 2"), "{}", e.message);
    }
}
