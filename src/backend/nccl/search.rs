//! Where `libnccl.so.2` is looked for, in order:
//! 1. `MCORE_NCCL_LIBRARY` (a file path): when set, the only candidate.
//! 2. `libnccl.so.2` through the dynamic loader's own search (`LD_LIBRARY_PATH`, rpath, ld.so.cache).
//! 3. The `nvidia/nccl/lib` (cu12) or `nvidia/cu13/lib` folder of a pip-installed `nvidia-nccl-cu12`
//!    / `nvidia-nccl-cu13` in: `MCORE_NCCL_PYTHON_SITE` (`:`-separated site-packages folders), the
//!    site-packages of the venv in `VIRTUAL_ENV`, and those of the `python3` on `PATH`.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The soname of NCCL 2 and the only library file of its pip wheels.
pub(crate) const NCCL_SONAME: &str = "libnccl.so.2";
/// Wheel folders (relative to a site-packages folder) that hold `libnccl.so.2`.
pub(crate) const WHEEL_LIB_DIRS: [&str; 2] = ["nvidia/nccl/lib", "nvidia/cu13/lib"];
/// How long asking `python3` for its site-packages folders may take.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(10);

/// One place to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// A bare file name resolved by the dynamic loader's search.
    LoaderName(String),
    /// A file path, opened only if it exists.
    Path(PathBuf),
}

impl Candidate {
    /// The text handed to `dlopen` and shown in errors.
    pub fn display(&self) -> String {
        match self {
            Candidate::LoaderName(n) => n.clone(),
            Candidate::Path(p) => p.display().to_string(),
        }
    }
}

/// The ordered candidates for one load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibrarySearch {
    pub candidates: Vec<Candidate>,
    /// True when `MCORE_NCCL_LIBRARY` (or [`LibrarySearch::explicit`]) chose the only candidate.
    pub explicit: bool,
    /// Ask the `python3` on `PATH` for its site folders when no candidate served (it costs a
    /// process start, ~0.2 s, so it comes last).
    pub ask_python: bool,
    /// Open the library `RTLD_GLOBAL` and resolve NCCL's symbols through the process's global
    /// scope, so that a library `LD_PRELOAD`ed before it interposes them (NVIDIA's
    /// `nccl_checkpoint` shim for cuda-checkpoint): [`GLOBAL_SYMBOLS_ENV`]`=1`.
    pub global_symbols: bool,
}

/// `MCORE_NCCL_GLOBAL_SYMBOLS=1`: resolve NCCL's symbols through the process's global scope
/// ([`LibrarySearch::global_symbols`]).
pub const GLOBAL_SYMBOLS_ENV: &str = "MCORE_NCCL_GLOBAL_SYMBOLS";

impl LibrarySearch {
    /// Exactly one file: a path, or a bare file name (no `/`) for the loader to resolve.
    pub fn explicit(path: impl Into<PathBuf>) -> Self {
        let path: PathBuf = path.into();
        let c = match path.to_str() {
            Some(name) if !name.contains('/') => Candidate::LoaderName(name.to_string()),
            _ => Candidate::Path(path),
        };
        LibrarySearch { candidates: vec![c], explicit: true, ask_python: false, global_symbols: false }
    }

    /// From the process environment; the `python3` on `PATH` is asked for its site folders only
    /// if every other candidate fails (see [`LibrarySearch::python_candidates`]).
    pub fn from_env() -> Self {
        let mut s = Self::from_lookup(|k| std::env::var(k).ok(), Vec::new);
        s.ask_python = !s.explicit;
        s.global_symbols = std::env::var(GLOBAL_SYMBOLS_ENV).is_ok_and(|v| v.trim() == "1");
        s
    }

    /// From any variable lookup (tests pass a map) and a source of python site folders, which
    /// is only consulted when no explicit library is set.
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>, python_sites: impl FnOnce() -> Vec<PathBuf>) -> Self {
        let set = |k: &str| var(k).filter(|v| !v.is_empty());
        if let Some(path) = set("MCORE_NCCL_LIBRARY") {
            return Self::explicit(path);
        }
        let mut sites: Vec<PathBuf> = Vec::new();
        if let Some(list) = set("MCORE_NCCL_PYTHON_SITE") {
            sites.extend(list.split(':').filter(|s| !s.is_empty()).map(PathBuf::from));
        }
        if let Some(venv) = set("VIRTUAL_ENV") {
            sites.extend(venv_site_dirs(Path::new(&venv)));
        }
        sites.extend(python_sites());
        let mut candidates = vec![Candidate::LoaderName(NCCL_SONAME.to_string())];
        push_wheel_candidates(&mut candidates, sites);
        LibrarySearch { candidates, explicit: false, ask_python: false, global_symbols: false }
    }

    /// The wheel candidates in the site folders of the `python3` on `PATH` that are not already
    /// in `candidates`.
    pub fn python_candidates(&self) -> Vec<Candidate> {
        let mut all = self.candidates.clone();
        push_wheel_candidates(&mut all, python_site_dirs());
        all.split_off(self.candidates.len())
    }

    /// What to tell a user whom no candidate served.
    pub fn hint(&self) -> String {
        if self.explicit {
            "MCORE_NCCL_LIBRARY names this file; point it at libnccl.so.2 (e.g. site-packages/nvidia/nccl/lib/libnccl.so.2) or unset it".into()
        } else {
            "Install NCCL (pip install nvidia-nccl-cu12), add its lib folder to LD_LIBRARY_PATH, or set MCORE_NCCL_LIBRARY to the libnccl.so.2 file".into()
        }
    }
}

fn push_wheel_candidates(candidates: &mut Vec<Candidate>, sites: Vec<PathBuf>) {
    for site in sites {
        for dir in WHEEL_LIB_DIRS {
            let c = Candidate::Path(site.join(dir).join(NCCL_SONAME));
            if !candidates.contains(&c) {
                candidates.push(c);
            }
        }
    }
}

/// `<venv>/lib/python3.*/site-packages` folders that exist.
fn venv_site_dirs(venv: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(venv.join(lib)) else { continue };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.is_dir())
            .collect();
        found.sort();
        out.extend(found);
    }
    out
}

/// The site-packages folders (system and user) of the `python3` on `PATH`; empty when there is
/// none or it does not answer within `PYTHON_TIMEOUT`.
pub fn python_site_dirs() -> Vec<PathBuf> {
    let script = "import site\nfor p in site.getsitepackages() + [site.getusersitepackages()]: print(p)";
    let Ok(mut child) = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    else {
        return Vec::new();
    };
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < PYTHON_TIMEOUT => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Vec::new();
            }
        }
    }
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        use std::io::Read;
        let _ = out.read_to_string(&mut text);
    }
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| PathBuf::from(l.trim())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn explicit_library_is_the_only_candidate() {
        let s = LibrarySearch::from_lookup(lookup(&[("MCORE_NCCL_LIBRARY", "/x/libnccl.so.2")]), || {
            panic!("python must not be asked when MCORE_NCCL_LIBRARY is set")
        });
        assert!(s.explicit);
        assert_eq!(s.candidates, vec![Candidate::Path("/x/libnccl.so.2".into())]);
        assert!(s.hint().contains("MCORE_NCCL_LIBRARY"));
        assert_eq!(LibrarySearch::explicit("libm.so.6").candidates, vec![Candidate::LoaderName("libm.so.6".into())]);
    }

    #[test]
    fn loader_name_first_then_sites_in_order_without_duplicates() {
        let s = LibrarySearch::from_lookup(
            lookup(&[("MCORE_NCCL_PYTHON_SITE", "/s1::/s2"), ("MCORE_NCCL_LIBRARY", "")]),
            || vec!["/s2".into(), "/py".into()],
        );
        let shown: Vec<String> = s.candidates.iter().map(|c| c.display()).collect();
        assert_eq!(
            shown,
            [
                "libnccl.so.2",
                "/s1/nvidia/nccl/lib/libnccl.so.2",
                "/s1/nvidia/cu13/lib/libnccl.so.2",
                "/s2/nvidia/nccl/lib/libnccl.so.2",
                "/s2/nvidia/cu13/lib/libnccl.so.2",
                "/py/nvidia/nccl/lib/libnccl.so.2",
                "/py/nvidia/cu13/lib/libnccl.so.2",
            ]
        );
        assert!(!s.explicit);
    }

    #[test]
    fn venv_site_packages_are_found() {
        let dir = std::env::temp_dir().join(format!("mcore-nccl-venv-{}", std::process::id()));
        let site = dir.join("lib/python3.11/site-packages");
        std::fs::create_dir_all(&site).unwrap();
        let s = LibrarySearch::from_lookup(lookup(&[("VIRTUAL_ENV", dir.to_str().unwrap())]), Vec::new);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(s.candidates[1], Candidate::Path(site.join("nvidia/nccl/lib/libnccl.so.2")));
    }
}
