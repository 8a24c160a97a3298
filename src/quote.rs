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

#[cfg(test)]
mod tests {
    use super::*;

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
