//! One lock-poison policy (issue 42 item 6): `src/lock.rs` decides what a poisoned lock means
//! (taken as it is) and every other file of `src/` goes through it (`locked()`, `wait_on`,
//! `wait_up_to`) instead of recovering a poisoned lock or wait itself.

use std::path::{Path, PathBuf};

/// The lines of `text` that recover a poisoned lock or wait by hand, outside comments.
fn inline_recoveries(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .filter(|code| {
            code.contains("PoisonError") || (code.contains("unwrap_or_else(") && code.contains("into_inner"))
        })
        .map(|code| code.trim().to_string())
        .collect()
}

#[test]
fn no_file_but_the_policy_recovers_a_poisoned_lock() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let policy = root.join("src/lock.rs");
    let mut found = Vec::new();
    for path in crate::size::files(&root.join("src"), &["rs"]) {
        if path == policy {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let rel = path.strip_prefix(&root).unwrap_or(Path::new("?")).display().to_string();
        found.extend(inline_recoveries(&text).into_iter().map(|l| format!("{rel}: {l}")));
    }
    assert!(found.is_empty(), "poisoned locks recovered outside src/lock.rs (use its traits):\n{}", found.join("\n"));
}

#[test]
fn the_check_sees_an_inline_recovery() {
    let text = "let g = m.lock().unwrap_or_else(|p| p.into_inner());\n\
                let g = cv.wait(g).unwrap_or_else(PoisonError::into_inner);\n\
                let v = cell.into_inner(); // unwrap_or_else(|p| p.into_inner()) in a comment\n\
                let g = m.locked();\n";
    assert_eq!(inline_recoveries(text).len(), 2);
}
