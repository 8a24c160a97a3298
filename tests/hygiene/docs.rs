//! Docs that cannot go stale (issue 46): the `MCORE_*` variables of the code's one table
//! (`mcore_init::env_vars`) against the sources and README.md's "Environment" table.

use crate::size::files;
use mcore_init::env_vars::{HARNESS, VARIABLES};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `MCORE_[A-Z0-9_]*` token of `text` not ending in `_` (a prefix); `quoted`: only those
/// right after a `"` and right before one.
fn tokens(text: &str, quoted: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("MCORE_") {
        let bytes = text.as_bytes();
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let len = text[at..]
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(text.len() - at);
        let name = &text[at..at + len];
        if name.ends_with('_') || (quoted && (at == 0 || bytes[at - 1] != b'"' || bytes.get(at + len) != Some(&b'"'))) {
            continue;
        }
        out.insert(name.to_string());
    }
    out
}

/// The tokens of every file under the `dirs` of the repository with one of `extensions`.
fn tokens_under(dirs: &[&str], extensions: &[&str], quoted: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for dir in dirs {
        let path = root().join(dir);
        let list = if path.is_file() { vec![path] } else { files(&path, extensions) };
        for file in list {
            out.extend(tokens(&read(&file), quoted));
        }
    }
    out
}

const CODE_EXT: &[&str] = &["rs", "c", "cc", "cpp", "h", "hpp", "py"];

/// The names read by the code (quoted names in the library, the tools, the plugins and the
/// Python package; status names aside) are the table's, and every table entry is read somewhere.
#[test]
fn the_table_lists_every_variable_the_code_reads() {
    let mut read_by_code = BTreeSet::new();
    for dir in ["src", "backends", "python/mcore_init"] {
        for file in files(&root().join(dir), CODE_EXT).into_iter().filter(|f| !f.ends_with("src/env_vars.rs")) {
            read_by_code.extend(tokens(&read(&file), true));
        }
    }
    let read_by_code: BTreeSet<String> = read_by_code.into_iter().filter(|n| !n.starts_with("MCORE_STATUS_")).collect();
    let table: BTreeSet<String> =
        VARIABLES.iter().map(|v| v.name.to_string()).chain(HARNESS.iter().map(|n| n.to_string())).collect();
    let missing: Vec<_> = read_by_code.difference(&table).collect();
    assert!(missing.is_empty(), "read by the code but not in src/env_vars.rs (VARIABLES or HARNESS): {missing:?}");
    let unread: Vec<_> = VARIABLES.iter().map(|v| v.name.to_string()).filter(|n| !read_by_code.contains(n)).collect();
    assert!(unread.is_empty(), "in src/env_vars.rs VARIABLES but read nowhere: {unread:?}");
}

/// Every `MCORE_*` name the scripts and tests use is a code identifier (a C or Rust name the
/// library defines) or in the table, so that the library's typo warning stays quiet in CI.
#[test]
fn the_scripts_and_tests_use_only_names_of_the_table() {
    let identifiers = tokens_under(&["include", "src", "backends/hccl/include", "backends/hccl/src"], CODE_EXT, false);
    let used = tokens_under(
        &[
            "scripts",
            "tests",
            "python",
            "cpp_tests",
            "examples",
            "bench",
            "benches",
            "backends",
            "cmake",
            "CMakeLists.txt",
        ],
        &["rs", "c", "cc", "cpp", "h", "hpp", "py", "sh", "txt", "cmake", "in", "toml", "md"],
        false,
    );
    let unknown: Vec<_> =
        used.iter().filter(|n| !identifiers.contains(*n) && !mcore_init::env_vars::is_known(n)).collect();
    assert!(
        unknown.is_empty(),
        "MCORE_* names used by scripts or tests: add them to HARNESS in src/env_vars.rs: {unknown:?}"
    );
}

/// README.md's "Environment" table has a row for every variable of the table, and names no
/// `MCORE_*` variable the table does not have.
#[test]
fn the_readme_has_a_row_for_every_variable() {
    let readme = read(&root().join("README.md"));
    let start = readme.find("## Environment").expect("README.md has an \"## Environment\" section");
    let rows: String = readme[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('|').nth(1).unwrap_or("").to_string() + "\n")
        .collect();
    let documented = tokens(&rows, false);
    let missing: Vec<_> = VARIABLES.iter().map(|v| v.name).filter(|n| !documented.contains(*n)).collect();
    assert!(missing.is_empty(), "no row in README.md's Environment table for {missing:?}");
    let extra: Vec<_> = documented.iter().filter(|n| !VARIABLES.iter().any(|v| v.name == n.as_str())).collect();
    assert!(extra.is_empty(), "README.md documents variables src/env_vars.rs does not list: {extra:?}");
}

/// Rows of docs/troubleshooting.md whose message is another program's (the loader, pip, torch,
/// OpenMPI), not ours: their first cell starts with one of these.
const NOT_OURS: &[&str] =
    &["`error while loading shared libraries", "`pip`", "torch:", "OpenMPI:", "a timeout value error"];

/// The fixed parts of a quoted message: the text between its placeholders (`...`, a quoted value
/// `'x'`, `<kind>`, a number, a word of capitals such as `R`, `A:P` or `SIGINT`, a lone letter)
/// and its parentheses, semicolons and `: `, each at least 12 characters long.
fn fixed_parts(message: &str) -> Vec<String> {
    let chars: Vec<char> = message.chars().collect();
    let mut parts = vec![String::new()];
    let mut i = 0;
    let cut = |parts: &mut Vec<String>| parts.push(String::new());
    while i < chars.len() {
        let c = chars[i];
        let prev_word = i > 0 && chars[i - 1].is_alphanumeric();
        let next_word = |j: usize| chars.get(j).is_some_and(|c| c.is_alphanumeric());
        if message[message.char_indices().nth(i).unwrap().0..].starts_with("...") {
            cut(&mut parts);
            i += 3;
        } else if c == '\'' && !prev_word {
            let end = chars[i + 1..].iter().position(|&d| d == '\'').map_or(chars.len(), |p| i + 1 + p);
            cut(&mut parts);
            i = end + 1;
        } else if c == '<' {
            let end = chars[i..].iter().position(|&d| d == '>').map_or(chars.len(), |p| i + p);
            cut(&mut parts);
            i = end + 1;
        } else if c.is_ascii_digit() && !prev_word {
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            cut(&mut parts);
        } else if "();".contains(c) || (c == ':' && chars.get(i + 1) == Some(&' ')) {
            // Parentheses, semicolons and `: ` often join pieces the code writes apart.
            cut(&mut parts);
            i += 1;
        } else if c.is_ascii_uppercase() && !prev_word && i.checked_sub(1).map_or(true, |p| chars[p] != '_') {
            // A word of capitals only (`R`, `A:P`, `SIGINT`): a placeholder or a value.
            let end = (i..chars.len()).find(|&j| !chars[j].is_ascii_uppercase()).unwrap_or(chars.len());
            if end < chars.len() && (chars[end].is_alphanumeric() || chars[end] == '_') {
                parts.last_mut().unwrap().extend(&chars[i..end]);
            } else {
                cut(&mut parts);
            }
            i = end;
        } else if c.is_alphabetic() && !prev_word && !next_word(i + 1) && c != 'a' && (i == 0 || chars[i - 1] != '\'') {
            cut(&mut parts);
            i += 1;
        } else {
            parts.last_mut().unwrap().push(c);
            i += 1;
        }
    }
    parts
        .into_iter()
        .map(|p| p.trim_matches(|c: char| c.is_whitespace() || ",;:()".contains(c)).to_string())
        .filter(|p| p.len() >= 12)
        .collect()
}

/// Source text with Rust's string continuations (`\` then a newline and indentation) and Python's
/// adjacent literals (`"a " "b"`, `"a " f"b"`) joined and every run of whitespace one space, so
/// that a message split over lines reads as one.
fn normalized(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("\\\n") {
        out.push_str(&rest[..at]);
        rest = rest[at + 2..].trim_start();
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ").replace("\" f\"", "").replace("\" \"", "")
}

/// Every message docs/troubleshooting.md quotes (the first cell of a table row, in backticks)
/// still has its fixed parts in the sources that print it.
#[test]
fn troubleshooting_quotes_messages_the_code_prints() {
    let mut corpus = String::new();
    for dir in ["src", "python/mcore_init", "backends"] {
        for file in files(&root().join(dir), CODE_EXT) {
            corpus.push_str(&normalized(&read(&file)));
            corpus.push('\n');
        }
    }
    let doc = read(&root().join("docs/troubleshooting.md"));
    let (mut checked, mut stale) = (0, Vec::new());
    for row in doc.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| message") && !l.starts_with("| ---")) {
        let cell = row.split(" | ").next().unwrap_or("").trim_start_matches("| ");
        if NOT_OURS.iter().any(|p| cell.starts_with(p)) {
            continue;
        }
        for quoted in cell.split('`').skip(1).step_by(2) {
            for part in fixed_parts(quoted) {
                checked += 1;
                if !corpus.contains(&part) {
                    stale.push(part);
                }
            }
        }
    }
    assert!(checked >= 40, "only {checked} message parts found in docs/troubleshooting.md");
    assert!(stale.is_empty(), "docs/troubleshooting.md quotes text the sources no longer print: {stale:#?}");
}

#[test]
fn fixed_parts_skip_placeholders() {
    assert_eq!(
        fixed_parts("rank(s) 2, 4 did not come to the check-in (not started, crashed, ...)"),
        ["did not come to the check-in", "not started, crashed"]
    );
    assert_eq!(fixed_parts("rank R is not a member of any <kind> group"), ["is not a member of any"]);
    assert_eq!(fixed_parts("cannot load backend plugin '/path/x.so': ..."), ["cannot load backend plugin"]);
    assert_eq!(fixed_parts("mcore-launch: at SIGINT, rank(s) still running"), ["mcore-launch", "still running"]);
    assert_eq!(
        fixed_parts("the dynamic loader's search path MCORE_LOG"),
        ["the dynamic loader's search path MCORE_LOG"]
    );
}
