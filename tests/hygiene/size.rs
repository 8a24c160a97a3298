//! Sizes a reader can hold in their head (issue 33, "shape that shows it"): no function in
//! `src/runtime` over [`MAX_FN_LINES`] lines, and no source file of the project over
//! [`MAX_FILE_LINES`] lines.
//!
//! A function's length runs from the line of its `fn` to the line of its closing brace, both
//! counted, comments and blank lines included. Every `fn` counts the same: a helper, a method, a
//! `#[test]` function in a `mod tests`, a function nested in another (which counts inside its
//! parent's length too). A test is code that is read when it fails, so it gets no extra room.
//!
//! Source files: Rust, C, C++ and Python (`.rs`, `.c`, `.cc`, `.cpp`, `.h`, `.hpp`, `.py`) and
//! shell scripts under `src/` (the tools in `src/bin` too), `backends/`, `python/`, `bench/`,
//! `benches/`, `examples/`, `scripts/`, `tests/` and `cpp_tests/`. The generated C headers under
//! `include/` are not written by hand and are not counted; three test files not split yet are
//! named in [`NOT_SPLIT_YET`] (docs/architecture.md, "Sizes").

use std::path::{Path, PathBuf};

/// The longest function allowed in `src/runtime`, in lines.
const MAX_FN_LINES: usize = 80;
/// The longest source file allowed, in lines.
const MAX_FILE_LINES: usize = 1000;
/// Folders (from the repository root) whose source files [`MAX_FILE_LINES`] bounds.
const SOURCE_ROOTS: &[&str] =
    &["src", "backends", "python", "bench", "benches", "examples", "scripts", "tests", "cpp_tests"];
/// Test files over [`MAX_FILE_LINES`] not split yet (issue 33 follow-up); any other file over it fails.
const NOT_SPLIT_YET: &[&str] =
    &["tests/backends/backend_plugin.rs", "tests/nccl_double/nccl_double.rs", "tests/runtime/runtime_multiprocess.rs"];
/// Extensions of the source files counted.
const SOURCE_EXTENSIONS: &[&str] = &["rs", "c", "cc", "cpp", "h", "hpp", "py", "sh"];
/// Folders never walked: build outputs and caches.
const SKIPPED_DIRS: &[&str] = &["target", "build", "stage", "__pycache__", ".venv", ".git"];

/// Every file under `root` whose extension is one of `extensions`, sorted.
pub(crate) fn files(root: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !SKIPPED_DIRS.contains(&name.as_str()) && !name.starts_with(".venv") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| extensions.contains(&e.to_string_lossy().as_ref())) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Rust source with comments and the contents of string and character literals blanked out
/// (newlines kept, so line numbers still match): what is left has only the braces of code.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&b, i) && raw_start(&b, i + 1) {
            // A raw string r"...", r#"..."#: ends at a quote followed by as many #.
            let hashes = b[i + 1..].iter().take_while(|&&h| h == '#').count();
            let body = i + 1 + hashes + 1;
            out.extend(std::iter::repeat(' ').take(body - i));
            i = body;
            while i < b.len()
                && !(b[i] == '"' && b[i + 1..].iter().take(hashes).filter(|&&h| h == '#').count() == hashes)
            {
                out.push(blank(b[i]));
                i += 1;
            }
            out.extend(std::iter::repeat(' ').take(1 + hashes));
            i += 1 + hashes;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('{', '\'', '\u{7b}') or a lifetime ('a, 'static).
            let len = if next == Some('\\') {
                b[i + 3..].iter().position(|&q| q == '\'').map(|p| p + 4)
            } else if b.get(i + 2) == Some(&'\'') {
                Some(3)
            } else {
                None
            };
            match len {
                Some(n) => {
                    out.extend(std::iter::repeat(' ').take(n));
                    i += n;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether the character before `i` continues an identifier (`br"..."` is a byte raw string,
/// `for"` never happens, `bar#` is not a raw string).
fn ident_before(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_') && b[i - 1] != 'b'
}

/// Whether `#*"` starts at `at` (the part of a raw string after its `r`).
fn raw_start(b: &[char], at: usize) -> bool {
    let hashes = b[at..].iter().take_while(|&&h| h == '#').count();
    b.get(at + hashes) == Some(&'"')
}

/// Every function with a body in Rust source: its name, the line of its `fn` (from 1) and its
/// length in lines (from the `fn` line to the closing brace's line, both counted).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(text);
    let chars: Vec<char> = code.chars().collect();
    let line_at = |pos: usize| chars[..pos].iter().filter(|&&c| c == '\n').count() + 1;
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = find_fn(&chars, i) {
        i = at + 2;
        let name: String = chars[at + 3..]
            .iter()
            .skip_while(|c| c.is_whitespace())
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .collect();
        // The body opens at the first `{` before any `;` (a `;` first: a declaration without a
        // body, as in a trait or an extern block). Braces of a where clause's bounds cannot
        // occur before the body's.
        let mut j = at;
        let open = loop {
            match chars.get(j) {
                Some('{') => break Some(j),
                Some(';') | None => break None,
                _ => j += 1,
            }
        };
        let Some(open) = open else { continue };
        let mut depth = 0;
        let mut k = open;
        while k < chars.len() {
            match chars[k] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        let (start, end) = (line_at(at), line_at(k.min(chars.len() - 1)));
        out.push((name, start, end - start + 1));
    }
    out
}

/// The position of the next `fn` keyword at or after `from` (a whole word followed by a name:
/// not `fn(` of a function pointer type, not part of `often`).
fn find_fn(chars: &[char], from: usize) -> Option<usize> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    (from..chars.len().saturating_sub(3)).find(|&i| {
        chars[i] == 'f'
            && chars[i + 1] == 'n'
            && chars[i + 2].is_whitespace()
            && (i == 0 || !word(chars[i - 1]))
            && chars[i + 2..].iter().find(|c| !c.is_whitespace()).is_some_and(|&c| word(c))
    })
}

/// Functions longer than `max` lines in the Rust files under `root`, one line each.
fn long_functions(root: &Path, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    for path in files(root, &["rs"]) {
        let text = std::fs::read_to_string(&path).unwrap();
        for (name, line, len) in functions(&text) {
            if len > max {
                out.push(format!("{}:{line}: fn {name} is {len} lines (at most {max})", path.display()));
            }
        }
    }
    out
}

/// Source files under `roots` longer than `max` lines, one line each (but those in [`NOT_SPLIT_YET`]).
fn long_files(roots: &[PathBuf], max: usize) -> Vec<String> {
    let mut out = Vec::new();
    for root in roots {
        for path in files(root, SOURCE_EXTENSIONS) {
            if NOT_SPLIT_YET.iter().any(|f| path == repo().join(f)) {
                continue;
            }
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            if lines > max {
                out.push(format!("{} is {lines} lines (at most {max})", path.display()));
            }
        }
    }
    out
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_function_in_the_runtime_over_80_lines() {
    let root = repo().join("src/runtime");
    assert!(functions(&std::fs::read_to_string(root.join("mod.rs")).unwrap()).iter().any(|(n, _, _)| n == "destroy"));
    let long = long_functions(&root, MAX_FN_LINES);
    assert!(long.is_empty(), "functions in src/runtime over {MAX_FN_LINES} lines:\n{}", long.join("\n"));
}

#[test]
fn no_source_file_over_1000_lines() {
    let roots: Vec<PathBuf> = SOURCE_ROOTS.iter().map(|r| repo().join(r)).collect();
    // The walk finds the files it is meant to bound (a moved folder would otherwise pass silently).
    for expected in [
        "src/lib.rs",
        "src/bin/mcore_topo.rs",
        "backends/gloo/gloo_plugin.cc",
        "python/setup.py",
        "tests/hygiene/size.rs",
    ] {
        assert!(
            roots.iter().any(|r| files(r, SOURCE_EXTENSIONS).contains(&repo().join(expected))),
            "{expected} not walked"
        );
    }
    let long = long_files(&roots, MAX_FILE_LINES);
    assert!(long.is_empty(), "source files over {MAX_FILE_LINES} lines:\n{}", long.join("\n"));
}

/// A function of `body` lines between its `fn` line and its closing brace, with braces in
/// strings, characters, comments and raw strings that must not end it early or late.
fn fixture(name: &str, body: usize) -> String {
    let mut text = format!("fn {name}<'a>(x: &'a str) -> usize {{\n");
    let tricky = [
        "    let _ = \"}}} \\\" }\";",
        "    let _ = '}';",
        "    let _ = '\\'';",
        "    let _ = r#\"}\" }\"#;",
        "    // }",
        "    /* } /* } */ } */",
        "    let _ = b\"{\";",
    ];
    for i in 0..body {
        text.push_str(tricky[i % tricky.len()]);
        text.push('\n');
    }
    text.push_str("}\n");
    text
}

#[test]
fn the_function_check_sees_a_long_function() {
    let dir = std::env::temp_dir().join(format!("mcore-hygiene-size-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("inner")).unwrap();
    // 80 lines in all (fn line, 78 body lines, closing brace) passes; 81 fails.
    let text = format!(
        "{}\n/// fn in a comment {{\nfn declared(x: u32);\ntype F = fn(u32) -> u32;\n{}#[cfg(test)]\nmod tests {{\n    #[test]\n    fn t() {{}}\n}}\n",
        fixture("fits", 78),
        fixture("too_long", 79)
    );
    let found = functions(&text);
    let names: Vec<(&str, usize)> = found.iter().map(|(n, _, len)| (n.as_str(), *len)).collect();
    assert_eq!(names, vec![("fits", 80), ("too_long", 81), ("t", 1)]);
    assert_eq!(found[1].1, 80 + 5);
    std::fs::write(dir.join("inner/a.rs"), &text).unwrap();
    let long = long_functions(&dir, MAX_FN_LINES);
    assert_eq!(long.len(), 1, "{long:?}");
    assert!(long[0].contains("fn too_long is 81 lines"), "{long:?}");
    // The file check on the same fixture folder: 1,000 lines pass, 1,001 fail, other kinds of
    // files are not counted.
    std::fs::write(dir.join("inner/ok.py"), "x = 1\n".repeat(MAX_FILE_LINES)).unwrap();
    std::fs::write(dir.join("inner/notes.txt"), "x\n".repeat(MAX_FILE_LINES + 1)).unwrap();
    assert!(long_files(std::slice::from_ref(&dir), MAX_FILE_LINES).is_empty());
    std::fs::write(dir.join("inner/big.cc"), "int x;\n".repeat(MAX_FILE_LINES + 1)).unwrap();
    let big = long_files(std::slice::from_ref(&dir), MAX_FILE_LINES);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(big.len(), 1, "{big:?}");
    assert!(big[0].ends_with("big.cc is 1001 lines (at most 1000)"), "{big:?}");
}
