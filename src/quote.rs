//! User input quoted in error messages, bounded: a name, path, order string or environment value
//! of any length gives a message of bounded size (its first [`MAX_QUOTED`] characters and its
//! length), so a megabyte of input cannot become megabytes of error text.

/// The most characters of one input that an error message shows.
pub const MAX_QUOTED: usize = 200;

/// `text` cut to its first [`MAX_QUOTED`] characters followed by `... (N bytes)` when longer,
/// unquoted (for text that is already delimited, such as a loader's reason).
pub fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        None => text.to_string(),
        Some((end, _)) => format!("{}... ({} bytes)", &text[..end], text.len()),
    }
}

/// `text` in single quotes for an error message, cut as in [`clip`]: `'abc'`, or
/// `'abc...' (N bytes)` for a long one.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        None => format!("'{text}'"),
        Some((end, _)) => format!("'{}...' ({} bytes)", &text[..end], text.len()),
    }
}

/// [`quoted`] in Rust debug form (escapes shown), for text that may hold control characters.
pub fn debug(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &text[..end], text.len()),
    }
}

/// The candidate nearest to `word` when it is a near miss (a typo: at most two single-character
/// edits, fewer than the candidate's length), for a "did you mean" in an error message.
pub fn near_miss<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let original = word;
    let word: Vec<char> = word.to_lowercase().chars().collect();
    candidates
        .into_iter()
        .filter_map(|c| {
            let cand: Vec<char> = c.to_lowercase().chars().collect();
            if word.len().abs_diff(cand.len()) > 2 || c == original {
                return None;
            }
            let d = edit_distance(&word, &cand);
            (d <= 2 && d < cand.len()).then_some((d, c))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance (insertions, deletions, substitutions).
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_miss_is_suggested_and_a_far_word_is_not() {
        let names = ["gloo", "hccl", "nccl"];
        assert_eq!(near_miss("glo", names), Some("gloo"));
        assert_eq!(near_miss("Gloo", names), Some("gloo"));
        assert_eq!(near_miss("gloop", names), Some("gloo"));
        assert_eq!(near_miss("ncl", names), Some("nccl"));
        assert_eq!(near_miss("mpi", names), None);
        assert_eq!(near_miss("gloo", names), None, "the word itself is no suggestion");
        assert_eq!(near_miss(&"g".repeat(1 << 20), names), None);
    }

    #[test]
    fn short_input_is_quoted_whole_and_long_input_is_cut_with_its_length() {
        assert_eq!(quoted("gloo"), "'gloo'");
        assert_eq!(clip("gloo"), "gloo");
        assert_eq!(debug("a\"b"), "\"a\\\"b\"");
        let exact = "x".repeat(MAX_QUOTED);
        assert_eq!(quoted(&exact), format!("'{exact}'"));
        let long = "y".repeat(1 << 20);
        let q = quoted(&long);
        assert!(q.len() < 300 && q.ends_with("...' (1048576 bytes)"), "{q}");
        assert!(clip(&long).len() < 300 && debug(&long).len() < 300);
        // Cut on a character boundary.
        let wide = "é".repeat(1000);
        assert!(quoted(&wide).starts_with(&format!("'{}...'", "é".repeat(MAX_QUOTED))));
    }
}
