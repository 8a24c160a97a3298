//! Slurm's compressed lists: host lists (`node[01-04,07]`, `gpu-a[1-2],gpu-b3`,
//! `rack[1-2]-n[1-3]`) and task counts per node (`4(x2),3`).
//!
//! A host list is a comma-separated list of patterns (commas inside brackets belong to the
//! brackets); each pattern is text with any number of bracketed range sets, expanded in order,
//! the rightmost range fastest, as `scontrol show hostnames` does. A range keeps the zero padding
//! of its lower bound (`[08-10]` gives `08 09 10`). Only what is needed is expanded: the first
//! host and the count come from the parsed form.

use crate::quote::quoted;

/// More hosts than this in one list is refused as malformed (Slurm's own limit is far lower).
pub const MAX_HOSTS: u64 = 1 << 24;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// (low, high, width of the low bound's digits) per element of the brackets.
    Ranges(Vec<(u64, u64, usize)>),
}

impl Piece {
    fn count(&self) -> u64 {
        match self {
            Piece::Text(_) => 1,
            Piece::Ranges(rs) => rs.iter().map(|(lo, hi, _)| hi - lo + 1).sum(),
        }
    }

    /// The i-th value of this piece (i < count).
    fn nth(&self, mut i: u64) -> String {
        match self {
            Piece::Text(t) => t.clone(),
            Piece::Ranges(rs) => {
                for (lo, hi, width) in rs {
                    let n = hi - lo + 1;
                    if i < n {
                        return format!("{:0width$}", lo + i, width = *width);
                    }
                    i -= n;
                }
                unreachable!("index within the count")
            }
        }
    }
}

/// A parsed Slurm host list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    patterns: Vec<Vec<Piece>>,
}

fn bad(list: &str, why: &str) -> String {
    format!("{} is not a Slurm host list: {why}", quoted(list))
}

fn parse_ranges(list: &str, inside: &str) -> Result<Vec<(u64, u64, usize)>, String> {
    let mut out = Vec::new();
    for element in inside.split(',') {
        let element = element.trim();
        let number = |s: &str| -> Result<u64, String> {
            if s.is_empty() || s.len() > 18 || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(list, &format!("{} in brackets is not a number or a range N-M", quoted(element))));
            }
            Ok(s.parse::<u64>().expect("18 digits fit"))
        };
        let (lo_s, hi_s) = element.split_once('-').unwrap_or((element, element));
        let (lo, hi) = (number(lo_s)?, number(hi_s)?);
        if hi < lo {
            return Err(bad(list, &format!("the range {} runs backwards", quoted(element))));
        }
        out.push((lo, hi, lo_s.len()));
    }
    Ok(out)
}

impl HostList {
    /// Parse `list`; an error names the list and what is wrong with it.
    pub fn parse(list: &str) -> Result<HostList, String> {
        // Split at the commas outside brackets.
        let mut items = Vec::new();
        let (mut open, mut start) = (false, 0);
        for (i, c) in list.char_indices() {
            match c {
                '[' if open => return Err(bad(list, "brackets do not nest")),
                '[' => open = true,
                ']' if !open => return Err(bad(list, "a ']' closes nothing")),
                ']' => open = false,
                ',' if !open => {
                    items.push(&list[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        if open {
            return Err(bad(list, "a '[' is never closed"));
        }
        items.push(&list[start..]);
        let mut patterns = Vec::new();
        for item in items {
            let mut rest = item.trim();
            if rest.is_empty() {
                return Err(bad(list, "an empty name"));
            }
            if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(bad(list, &format!("the name {} has a space or control character in it", quoted(rest))));
            }
            let mut pieces = Vec::new();
            while let Some(at) = rest.find('[') {
                if at > 0 {
                    pieces.push(Piece::Text(rest[..at].to_string()));
                }
                let close = at + rest[at..].find(']').expect("brackets balanced above");
                pieces.push(Piece::Ranges(parse_ranges(list, &rest[at + 1..close])?));
                rest = &rest[close + 1..];
            }
            if !rest.is_empty() {
                pieces.push(Piece::Text(rest.to_string()));
            }
            patterns.push(pieces);
        }
        let hl = HostList { patterns };
        if hl.len_saturating() > MAX_HOSTS {
            return Err(bad(list, &format!("it names more than {MAX_HOSTS} hosts")));
        }
        Ok(hl)
    }

    fn len_saturating(&self) -> u64 {
        self.patterns
            .iter()
            .map(|p| p.iter().fold(1u64, |n, piece| n.saturating_mul(piece.count())))
            .fold(0u64, |a, b| a.saturating_add(b))
    }

    /// How many hosts the list names.
    pub fn len(&self) -> u64 {
        self.len_saturating()
    }

    /// Whether the list names no host (never true of a parsed list).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first host, as `scontrol show hostnames | head -1` prints it.
    pub fn first(&self) -> String {
        self.patterns[0].iter().map(|p| p.nth(0)).collect()
    }

    /// Every host, in Slurm's order.
    pub fn hosts(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.patterns {
            let n = p.iter().fold(1u64, |n, piece| n * piece.count());
            for mut i in 0..n {
                // The rightmost range runs fastest.
                let mut parts = vec![String::new(); p.len()];
                for (k, piece) in p.iter().enumerate().rev() {
                    let c = piece.count();
                    parts[k] = piece.nth(i % c);
                    i /= c;
                }
                out.push(parts.concat());
            }
        }
        out
    }
}

/// The task count of node `node` (0-based, `SLURM_NODEID`) in Slurm's tasks-per-node syntax:
/// `8`, `4(x2)`, `4(x2),3`. An error names the value and what is wrong with it.
pub fn tasks_on_node(spec: &str, node: u64) -> Result<u32, String> {
    let bad = |why: String| format!("{} is not a Slurm tasks-per-node list: {why}", quoted(spec));
    let mut seen = 0u64;
    let mut found = None;
    for item in spec.split(',') {
        let item = item.trim();
        let (count, times) = match item.split_once('(') {
            Some((c, rest)) => {
                let t = rest
                    .strip_suffix(')')
                    .and_then(|r| r.strip_prefix('x'))
                    .ok_or_else(|| bad(format!("{} is not N or N(xM)", quoted(item))))?;
                (c, t)
            }
            None => (item, "1"),
        };
        let number = |s: &str| {
            if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad(format!("{} is not N or N(xM)", quoted(item))));
            }
            Ok(s.parse::<u32>().expect("9 digits fit"))
        };
        let (count, times) = (number(count)?, number(times)?);
        if count == 0 || times == 0 {
            return Err(bad(format!("{} counts zero", quoted(item))));
        }
        if found.is_none() && node < seen + u64::from(times) {
            found = Some(count);
        }
        seen += u64::from(times);
    }
    found.ok_or_else(|| bad(format!("it covers {seen} node(s), and this is node {node} (SLURM_NODEID)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(s: &str) -> Vec<String> {
        HostList::parse(s).unwrap_or_else(|e| panic!("{e}")).hosts()
    }

    #[test]
    fn the_forms_slurm_writes() {
        assert_eq!(hosts("node[01-04,07]"), ["node01", "node02", "node03", "node04", "node07"]);
        assert_eq!(hosts("gpu-a[1-2],gpu-b3"), ["gpu-a1", "gpu-a2", "gpu-b3"]);
        assert_eq!(hosts("vm"), ["vm"]);
        assert_eq!(hosts("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(hosts("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(hosts("n[001-002]x"), ["n001x", "n002x"]);
        assert_eq!(hosts("rack[1-2]-n[1-2]"), ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]);
        assert_eq!(hosts("a, b[3]"), ["a", "b3"]);
        assert_eq!(hosts("10.0.0.[1-2]"), ["10.0.0.1", "10.0.0.2"]);
        let l = HostList::parse("gpu-a[1-2],gpu-b3").unwrap();
        assert_eq!((l.first(), l.len()), ("gpu-a1".to_string(), 3));
        let l = HostList::parse("node[07,01-04]").unwrap();
        assert_eq!(l.first(), "node07");
        // The first host and the count of a huge (but allowed) list without expanding it.
        let l = HostList::parse("n[0000001-9999999]").unwrap();
        assert_eq!((l.first(), l.len()), ("n0000001".to_string(), 9_999_999));
    }

    #[test]
    fn bad_lists_are_named() {
        for (list, why) in [
            ("", "empty name"),
            ("  ", "empty name"),
            ("a,,b", "empty name"),
            ("node[01-04", "never closed"),
            ("node01]", "closes nothing"),
            ("node[]", "'' in brackets"),
            ("node[a-b]", "'a-b' in brackets"),
            ("node[04-01]", "'04-01' runs backwards"),
            ("node[1-2-3]", "'1-2-3' in brackets"),
            ("node[[1]]", "do not nest"),
            ("no de", "space"),
            ("a,b\tc", "control character"),
            ("n[0-99999999],m[0-99999999]", "more than"),
            ("n[1-99999999999999999999]", "in brackets"),
        ] {
            let e = HostList::parse(list).unwrap_err();
            assert!(e.contains(&quoted(list)) && e.contains(why), "{list:?}: {e}");
        }
    }

    #[test]
    fn tasks_per_node_expands_repeats() {
        assert_eq!(tasks_on_node("8", 0), Ok(8));
        assert_eq!(tasks_on_node("4(x2)", 1), Ok(4));
        assert_eq!(tasks_on_node("4(x2),3", 2), Ok(3));
        assert_eq!(tasks_on_node("5,3", 0), Ok(5));
        for (spec, node, why) in [
            ("4(x2)", 2, "covers 2 node(s)"),
            ("4(2)", 0, "'4(2)' is not N"),
            ("x", 0, "'x' is not N"),
            ("0", 0, "'0' counts zero"),
            ("", 0, "'' is not N"),
            ("4(x2", 0, "'4(x2' is not N"),
        ] {
            let e = tasks_on_node(spec, node).unwrap_err();
            assert!(e.contains(&quoted(spec)) && e.contains(why), "{spec:?}: {e}");
        }
    }
}
