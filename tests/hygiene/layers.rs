//! The crate's layers import one way (docs/architecture.md): `abi` (shared C types) and `quote`
//! (bounded quoting of input in errors) and `input_file` (bounded reading of input files) and
//! `env_vars` (the table of `MCORE_*` variables) and `lock` (the lock-poison policy) below
//! `topology`/`rng`/`store`/`timeout`, below `backend`, below `runtime`, below `ffi`; nothing
//! imports `ffi`; and no import circle of any length among files (`a -> b -> a` or
//! `a -> b -> c -> a`; a file and the `mod.rs` of a module containing it excepted: a parent
//! re-exporting its children is not a loop).
//!
//! A static check over `src/` (not the binaries, which sit on top): every `crate::...` and
//! `super::...` path outside comments, each leaf of a grouped import (`use super::{a, b::{c, d}}`,
//! over several lines too) included, is resolved to the file that defines it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layer of each top-level module; a module may use its own layer and those below.
fn layer(top: &str) -> Option<u32> {
    Some(match top {
        "abi" | "quote" | "input_file" | "env_vars" | "wait_words" | "lock" => 0,
        "topology" | "rng" | "store" | "timeout" => 1,
        "backend" => 2,
        "runtime" => 3,
        "ffi" => 4,
        _ => return None,
    })
}

/// Module path (`backend::plugin::vtable`) of every file under src/ except lib.rs and bin/.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(src).unwrap();
            if rel.starts_with("bin") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().map_or(true, |e| e != "rs") || rel == Path::new("lib.rs") {
                continue;
            }
            let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            let file = parts.pop().unwrap();
            if file != "mod.rs" {
                parts.push(file.trim_end_matches(".rs").to_string());
            }
            out.insert(parts, path);
        }
    }
    out
}

/// Whether `at` starts a path word (`crate`, `super`) rather than the tail of another word
/// (`my_crate::`, `$crate::` counts: a macro's path).
fn word_start(code: &str, at: usize) -> bool {
    at == 0 || !code.as_bytes()[at - 1].is_ascii_alphanumeric() && code.as_bytes()[at - 1] != b'_'
}

/// The paths of the use tree at `at` under `base`, into `out`; where the tree ends. A plain
/// path `a::b` gives `base::a::b`; a group, flat or nested and across lines, gives one path per
/// leaf: `a::{b, c::{d, self}, e as f, *}` gives `base::a::b`, `base::a::c::d`, `base::a::c`,
/// `base::a::e` and `base::a`.
fn use_tree(code: &str, mut at: usize, mut path: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    loop {
        let rest = &code[at..];
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if end > 0 && &rest[..end] != "self" {
            path.push(rest[..end].to_string());
        }
        at += end;
        match code[at..].strip_prefix("::") {
            Some(_) if end > 0 => at += 2,
            _ => break,
        }
    }
    if !code[at..].starts_with('{') {
        out.push(path);
        return at;
    }
    at += 1;
    loop {
        at += code[at..].len() - code[at..].trim_start().len();
        if at >= code.len() || code[at..].starts_with('}') {
            return (at + 1).min(code.len());
        }
        at = use_tree(code, at, path.clone(), out);
        // Past ` as name` to the `,` or `}` after this item (a nested group's braces are behind).
        at += code[at..].find([',', '}']).unwrap_or(code.len() - at);
        if code[at..].starts_with(',') {
            at += 1;
        }
    }
}

/// Every module path a file at module path `me` refers to (`super` of `a::b`, whether the file
/// is `a/b.rs` or `a/b/mod.rs`, is `a`), grouped imports (`use super::{a, b::{c, d}}`, over
/// several lines too) read leaf by leaf.
fn references(text: &str, me: &[String]) -> Vec<Vec<String>> {
    let code: Vec<&str> = text.lines().map(|line| line.split("//").next().unwrap_or("")).collect();
    let code = code.join("\n");
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if word_start(&code, i) {
            use_tree(&code, i + "crate::".len(), Vec::new(), &mut out);
        }
    }
    let mut from = 0;
    while let Some(i) = code[from..].find("super::") {
        let start = from + i;
        from = start + "super::".len();
        // Only the first `super` of a `super::super::x` run.
        if !word_start(&code, start) || code[..start].ends_with("super::") {
            continue;
        }
        let mut base: Vec<String> = me.to_vec();
        base.pop();
        let mut rest = start + "super::".len();
        while code[rest..].starts_with("super::") {
            base.pop();
            rest += "super::".len();
        }
        use_tree(&code, rest, base, &mut out);
    }
    out
}

/// The longest prefix of `path` that is a file's module.
fn resolve<'a>(path: &[String], modules: &'a BTreeMap<Vec<String>, PathBuf>) -> Option<&'a Vec<String>> {
    (1..=path.len()).rev().find_map(|n| modules.get_key_value(&path[..n]).map(|(k, _)| k))
}

/// One import: the file (module path and file path), the path it names, and the file that
/// defines it (never the file itself).
struct Import {
    me: Vec<String>,
    path: PathBuf,
    named: Vec<String>,
    target: Vec<String>,
}

/// Every import of every file under src/.
fn imports(src: &Path) -> Vec<Import> {
    let modules = modules(src);
    let mut out = Vec::new();
    for (me, path) in &modules {
        let text = std::fs::read_to_string(path).unwrap();
        for named in references(&text, me) {
            let Some(target) = resolve(&named, &modules) else { continue };
            if target != me {
                out.push(Import { me: me.clone(), path: path.clone(), named, target: target.clone() });
            }
        }
    }
    out
}

/// A file and the `mod.rs` of a module containing it (either way round): a parent re-exporting
/// its children is not a loop.
fn ancestor(a: &[String], b: &[String]) -> bool {
    b.starts_with(a) || a.starts_with(b)
}

/// The file-to-file import edges that can make a loop (see [`ancestor`]).
fn import_edges(imports: &[Import]) -> BTreeSet<(Vec<String>, Vec<String>)> {
    imports.iter().filter(|i| !ancestor(&i.me, &i.target)).map(|i| (i.me.clone(), i.target.clone())).collect()
}

/// The imports that go up a layer, one line each.
fn wrong_way(imports: &[Import]) -> Vec<String> {
    imports
        .iter()
        .filter(|i| matches!((layer(&i.me[0]), layer(&i.target[0])), (Some(from), Some(to)) if to > from))
        .map(|i| format!("{} uses {}", i.path.display(), i.named.join("::")))
        .collect()
}

#[test]
fn imports_run_one_way_and_no_two_files_import_each_other() {
    let imports = imports(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src"));
    let wrong_way = wrong_way(&imports);
    assert!(wrong_way.is_empty(), "imports against the layers:\n{}", wrong_way.join("\n"));
    let edges = import_edges(&imports);
    let loops: Vec<String> = edges
        .iter()
        .filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| format!("{} <-> {}", a.join("::"), b.join("::")))
        .collect();
    assert!(loops.is_empty(), "files that import each other:\n{}", loops.join("\n"));
}

/// One import circle through each strongly connected set of files (Tarjan's algorithm finds the
/// sets; a breadth-first search inside each gives its shortest circle through its first file),
/// written `a -> b -> c -> a`.
fn cycles(edges: &BTreeSet<(Vec<String>, Vec<String>)>) -> Vec<String> {
    type Node = Vec<String>;
    let mut next: BTreeMap<&Node, Vec<&Node>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    // Tarjan, iteratively: index and lowlink per node, the stack of the current search.
    let nodes: Vec<&Node> = next.keys().copied().collect();
    let mut index: BTreeMap<&Node, usize> = BTreeMap::new();
    let mut low: BTreeMap<&Node, usize> = BTreeMap::new();
    let mut on_stack: BTreeSet<&Node> = BTreeSet::new();
    let mut stack: Vec<&Node> = Vec::new();
    let mut sets: Vec<Vec<&Node>> = Vec::new();
    for &root in &nodes {
        if index.contains_key(root) {
            continue;
        }
        let mut work: Vec<(&Node, usize)> = vec![(root, 0)];
        while let Some(&mut (v, ref mut i)) = work.last_mut() {
            if *i == 0 {
                let n = index.len();
                index.insert(v, n);
                low.insert(v, n);
                stack.push(v);
                on_stack.insert(v);
            }
            if let Some(&w) = next[v].get(*i) {
                *i += 1;
                if !index.contains_key(w) {
                    work.push((w, 0));
                } else if on_stack.contains(w) {
                    let l = low[v].min(index[w]);
                    low.insert(v, l);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                let l = low[parent].min(low[v]);
                low.insert(parent, l);
            }
            if low[v] == index[v] {
                let mut set = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack.remove(w);
                    set.push(w);
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort();
                    sets.push(set);
                }
            }
        }
    }
    sets.sort();
    sets.iter()
        .map(|set| {
            let inside: BTreeSet<&Node> = set.iter().copied().collect();
            let start = set[0];
            // Shortest path start -> ... -> start within the set.
            let mut came_from: BTreeMap<&Node, &Node> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            'search: while let Some(v) = queue.pop_front() {
                for &w in &next[v] {
                    if !inside.contains(w) || came_from.contains_key(w) {
                        continue;
                    }
                    came_from.insert(w, v);
                    if w == start {
                        break 'search;
                    }
                    queue.push_back(w);
                }
            }
            let mut path = vec![start];
            let mut at = came_from[start];
            while at != start {
                path.push(at);
                at = came_from[at];
            }
            path.push(start);
            path.reverse();
            let names: Vec<String> = path.iter().map(|n| n.join("::")).collect();
            if path.len() - 1 == set.len() {
                names.join(" -> ")
            } else {
                let all: Vec<String> = set.iter().map(|n| n.join("::")).collect();
                format!("{} (all files tied in this circle: {})", names.join(" -> "), all.join(", "))
            }
        })
        .collect()
}

/// No import circle of any length among the files of `src/` (a file and its enclosing
/// `mod.rs` excepted): `a -> b -> c -> a` ties three files as tightly as two that import each
/// other.
#[test]
fn no_import_circle_of_any_length() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = cycles(&import_edges(&imports(&src)));
    assert!(found.is_empty(), "import circles among the files of src/:\n{}", found.join("\n"));
}

#[test]
fn the_circle_check_sees_a_circle_of_three() {
    // Synthetic edges: a -> b -> c -> a is one circle; d -> a and c -> e are not in it.
    let node = |s: &str| vec!["runtime".to_string(), s.to_string()];
    let edges: BTreeSet<_> =
        [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a"), ("c", "e")].iter().map(|(x, y)| (node(x), node(y))).collect();
    assert_eq!(cycles(&edges), vec!["runtime::a -> runtime::b -> runtime::c -> runtime::a".to_string()]);
    let no_circle: BTreeSet<_> = [("a", "b"), ("b", "c"), ("a", "c")].iter().map(|(x, y)| (node(x), node(y))).collect();
    assert!(cycles(&no_circle).is_empty());
}

#[test]
fn the_check_sees_a_wrong_way_import() {
    // The resolver on a synthetic file: a backend file naming crate::ffi is caught.
    let mut modules = BTreeMap::new();
    modules.insert(vec!["ffi".to_string()], PathBuf::from("ffi/mod.rs"));
    modules.insert(vec!["backend".to_string(), "x".to_string()], PathBuf::from("backend/x.rs"));
    let refs = references("use crate::ffi::FfiError; // crate::runtime in a comment", &["backend".into(), "x".into()]);
    assert_eq!(refs, vec![vec!["ffi".to_string(), "FfiError".to_string()]]);
    assert_eq!(resolve(&refs[0], &modules), Some(&vec!["ffi".to_string()]));
    let sup = references("use super::super::abi::mcore_status;", &["backend".into(), "plugin".into(), "vtable".into()]);
    assert_eq!(sup, vec![vec!["backend".to_string(), "abi".to_string(), "mcore_status".to_string()]]);
}

/// Module paths written `runtime::a::x`.
fn path(s: &str) -> Vec<String> {
    s.split("::").map(str::to_string).collect()
}

/// The imports of a fixture tree of `(file, text)` written to a temporary folder (removed after).
fn fixture(name: &str, files: &[(&str, &str)]) -> Vec<Import> {
    let dir = std::env::temp_dir().join(format!("mcore-hygiene-layers-{name}-{}", std::process::id()));
    for (file, text) in files {
        let p = dir.join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let found = imports(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    found
}

#[test]
fn the_check_reads_grouped_imports_leaf_by_leaf() {
    let me = path("store::tcp::server::state");
    let text = "use super::{claims, queues::{self, Queues}, Next as N, wire::*};\n\
                use crate::store::{\n    tcp::{auth::{ServerAuth, Step}},\n    StoreError, // crate::ffi\n};\n\
                let x = my_crate::runtime::y + super::super::Z;\n";
    let expected = [
        "store::tcp::server::claims",
        "store::tcp::server::queues",
        "store::tcp::server::queues::Queues",
        "store::tcp::server::Next",
        "store::tcp::server::wire",
        "store::tcp::auth::ServerAuth",
        "store::tcp::auth::Step",
        "store::StoreError",
        "store::tcp::Z",
    ];
    let mut found = references(text, &me);
    found.sort();
    let mut expected: Vec<Vec<String>> = expected.iter().map(|s| path(s)).collect();
    expected.sort();
    assert_eq!(found, expected);
}

#[test]
fn the_circle_check_sees_a_circle_through_grouped_imports() {
    // The store server's circle as it was (state -> claims -> event_loop -> state), each edge
    // inside a group: a flat one, a nested one over several lines, and one beside a constant
    // of the parent (an edge to the parent is not a loop).
    let found = fixture(
        "grouped",
        &[
            ("store/s/mod.rs", "mod claims;\nmod event_loop;\nmod state;\nconst K: u8 = 1;\n"),
            ("store/s/state.rs", "use super::{claims, K};\n"),
            ("store/s/claims.rs", "use crate::store::{\n    s::{event_loop::{self, E}},\n};\n"),
            ("store/s/event_loop.rs", "use super::{state::{State}, K};\n"),
        ],
    );
    assert_eq!(
        cycles(&import_edges(&found)),
        vec!["store::s::claims -> store::s::event_loop -> store::s::state -> store::s::claims"]
    );
}

#[test]
fn the_checks_see_through_nested_folders() {
    // A fixture tree: folders inside the runtime, a circle across them through `crate::` and
    // `super::super::` paths, and a lower layer naming a file two folders down.
    let found = fixture(
        "nested",
        &[
            ("runtime/mod.rs", "mod a;\nmod b;\n"),
            ("runtime/a/mod.rs", "pub mod x;\n"),
            ("runtime/a/x.rs", "use crate::runtime::b::y::Y;\npub struct X;\n"),
            ("runtime/b/mod.rs", "pub mod y;\npub mod z;\n"),
            ("runtime/b/y.rs", "use super::z::Z;\npub struct Y;\n"),
            ("runtime/b/z.rs", "use super::super::a::x::X;\npub struct Z;\n"),
            ("backend/mod.rs", "use crate::runtime::a::x::X;\n"),
            ("runtime/b/w.rs", "use crate::runtime::X;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"),
        ],
    );
    assert_eq!(cycles(&import_edges(&found)), vec!["runtime::a::x -> runtime::b::y -> runtime::b::z -> runtime::a::x"]);
    let up = wrong_way(&found);
    assert_eq!(up.len(), 1, "{up:?}");
    assert!(up[0].ends_with("uses runtime::a::x::X"), "{up:?}");
    let through = through_re_exports(&found);
    assert_eq!(through.len(), 1, "{through:?}");
    assert!(through[0].ends_with("w.rs uses runtime::X"), "{through:?}");
}

#[test]
fn the_real_tree_has_edges_between_the_runtimes_folders() {
    // Edges the runtime's files are known to have, each through another kind of path: a
    // sibling's `super::`, another folder's `crate::runtime::<folder>::`, a top-level file's
    // `super::<folder>::`. Were nested paths not resolved, they would be missing and a circle
    // through them would go unseen.
    let edges = import_edges(&imports(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")));
    for (from, to) in [
        ("runtime::lifecycle::init", "runtime::lifecycle::bring_up"),
        ("runtime::lifecycle::bring_up", "runtime::launch::store_setup"),
        ("runtime::meeting::checkin", "runtime::meeting::meet"),
        ("runtime::recovery", "runtime::lifecycle::init"),
        ("runtime::faults::liveness", "runtime::launch::host"),
        ("runtime::creation::groups", "runtime::meeting::progress"),
    ] {
        assert!(edges.contains(&(path(from), path(to))), "no edge {from} -> {to}");
    }
}

/// The imports of files of `src/runtime` that name a re-export of `runtime/mod.rs`, one line each.
fn through_re_exports(imports: &[Import]) -> Vec<String> {
    let root = vec!["runtime".to_string()];
    imports
        .iter()
        .filter(|i| i.me.starts_with(&root) && i.target == root && i.named.len() > 1)
        .map(|i| format!("{} uses {}", i.path.display(), i.named.join("::")))
        .collect()
}

/// The files of `src/runtime` name the file that defines what they use, never a re-export of
/// `runtime/mod.rs` (`crate::runtime::Runtime`): the circle check ignores an edge to an
/// enclosing `mod.rs`, so an import through the re-export would hide the edge it stands for.
/// Doc links are comments and not imports; `super::*` in a file's tests names no item.
#[test]
fn the_runtimes_files_name_the_defining_file_not_a_re_export() {
    let through = through_re_exports(&imports(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")));
    assert!(through.is_empty(), "imports through runtime/mod.rs's re-exports:\n{}", through.join("\n"));
}
