//! The crate's layers import one way (docs/architecture.md): `abi` (shared C types) and `quote`
//! (bounded quoting of input in errors) and `input_file` (bounded reading of input files) below
//! `topology`/`rng`/`store`/`timeout`, below `backend`, below `runtime`, below `ffi`; nothing
//! imports `ffi`; and no two files import each other (a file and the `mod.rs` of a module
//! containing it excepted: a parent re-exporting its children is not a loop).
//!
//! A static check over `src/` (not the binaries, which sit on top): every `crate::...` and
//! `super::...` path outside comments is resolved to the file that defines it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layer of each top-level module; a module may use its own layer and those below.
fn layer(top: &str) -> Option<u32> {
    Some(match top {
        "abi" | "quote" | "input_file" => 0,
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

/// The identifier chain after position `at` (`a::b::{...}` gives `[a, b]`).
fn chain(text: &str, at: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = &text[at..];
    loop {
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    out
}

/// Every module path a file at module path `me` refers to (`super` of `a::b`, whether the file
/// is `a/b.rs` or `a/b/mod.rs`, is `a`).
fn references(text: &str, me: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        for (i, _) in code.match_indices("crate::") {
            out.push(chain(code, i + "crate::".len()));
        }
        let mut from = 0;
        while let Some(i) = code[from..].find("super::") {
            let start = from + i;
            // Only the first `super` of a `super::super::x` run.
            if start >= 7 && &code[start - 7..start] == "super::" {
                from = start + 7;
                continue;
            }
            let mut base: Vec<String> = me.to_vec();
            base.pop();
            let mut rest = start + "super::".len();
            while code[rest..].starts_with("super::") {
                base.pop();
                rest += "super::".len();
            }
            base.extend(chain(code, rest));
            out.push(base);
            from = rest;
        }
    }
    out
}

/// The longest prefix of `path` that is a file's module.
fn resolve<'a>(path: &[String], modules: &'a BTreeMap<Vec<String>, PathBuf>) -> Option<&'a Vec<String>> {
    (1..=path.len()).rev().find_map(|n| modules.get_key_value(&path[..n]).map(|(k, _)| k))
}

#[test]
fn imports_run_one_way_and_no_two_files_import_each_other() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    let mut edges: BTreeSet<(Vec<String>, Vec<String>)> = BTreeSet::new();
    let mut wrong_way = Vec::new();
    for (me, path) in &modules {
        let text = std::fs::read_to_string(path).unwrap();
        for r in references(&text, me) {
            let Some(target) = resolve(&r, &modules) else { continue };
            if target == me {
                continue;
            }
            let (Some(from), Some(to)) = (layer(&me[0]), layer(&target[0])) else { continue };
            if to > from {
                wrong_way.push(format!("{} uses {}", path.display(), r.join("::")));
            }
            edges.insert((me.clone(), target.clone()));
        }
    }
    assert!(wrong_way.is_empty(), "imports against the layers:\n{}", wrong_way.join("\n"));
    let ancestor = |a: &Vec<String>, b: &Vec<String>| b.starts_with(a) || a.starts_with(b);
    let loops: Vec<String> = edges
        .iter()
        .filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone())) && !ancestor(a, b))
        .map(|(a, b)| format!("{} <-> {}", a.join("::"), b.join("::")))
        .collect();
    assert!(loops.is_empty(), "files that import each other:\n{}", loops.join("\n"));
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
