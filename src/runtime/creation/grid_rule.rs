//! Megatron-Core 0.20's rule for the grids of a multi-module job, as an option
//! (`InitArgs::grids_disjoint_or_identical`): any two grids cover the same ranks or none in
//! common, and together they cover the world.

/// Check `grids` (name, first rank, number of ranks) against the rule over a world of `world`
/// ranks; the error names the offending pair (or the ranks in no grid).
pub fn check_disjoint_or_identical(grids: &[(&str, u32, u32)], world: u32) -> Result<(), String> {
    let span = |&(_, first, n): &(&str, u32, u32)| (u64::from(first), u64::from(first) + u64::from(n));
    for (i, a) in grids.iter().enumerate() {
        for b in &grids[i + 1..] {
            let ((a0, a1), (b0, b1)) = (span(a), span(b));
            if (a0, a1) != (b0, b1) && a0 < b1 && b0 < a1 {
                return Err(format!(
                    "grids '{}' (ranks {a0}..{}) and '{}' (ranks {b0}..{}) overlap without being identical: \
                     Megatron-Core 0.20's rule (grids_disjoint_or_identical) wants any two grids on the same \
                     ranks or on none in common",
                    a.0,
                    a1 - 1,
                    b.0,
                    b1 - 1
                ));
            }
        }
    }
    // Pairwise disjoint or identical: the distinct windows cover the world iff their sizes add up.
    let mut windows: Vec<(u64, u64)> = grids.iter().map(span).collect();
    windows.sort_unstable();
    windows.dedup();
    let covered: u64 = windows.iter().map(|(a, b)| b - a).sum();
    if covered != u64::from(world) {
        let names: Vec<&str> = grids.iter().map(|g| g.0).collect();
        return Err(format!(
            "grids {} cover {covered} of the world's {world} ranks: Megatron-Core 0.20's rule \
             (grids_disjoint_or_identical) wants them to cover the world",
            names.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_or_identical_grids_covering_the_world_pass() {
        // Colocated (identical) trainer and rollout, plus a disjoint reward model.
        check_disjoint_or_identical(&[("train", 0, 8), ("rollout", 0, 8), ("reward", 8, 4)], 12).unwrap();
        check_disjoint_or_identical(&[("default", 0, 16)], 16).unwrap();
    }

    #[test]
    fn an_overlap_names_the_pair_and_a_gap_the_coverage() {
        let e = check_disjoint_or_identical(&[("train", 0, 8), ("rollout", 4, 8), ("x", 12, 4)], 16).unwrap_err();
        assert!(e.starts_with("grids 'train' (ranks 0..7) and 'rollout' (ranks 4..11) overlap"), "{e}");
        let e = check_disjoint_or_identical(&[("a", 0, 8), ("b", 0, 4)], 8).unwrap_err();
        assert!(e.contains("'a' (ranks 0..7) and 'b' (ranks 0..3)"), "{e}");
        let e = check_disjoint_or_identical(&[("a", 0, 4), ("b", 8, 4)], 12).unwrap_err();
        assert!(e.contains("grids a, b cover 8 of the world's 12 ranks"), "{e}");
    }
}
