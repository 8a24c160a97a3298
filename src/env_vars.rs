//! The one table of `MCORE_*` environment variables: every one the library, its tools, its
//! plugins and its Python package read ([`VARIABLES`], each with a row in README.md's
//! "Environment" table), and the names this project's own build and test scripts use
//! ([`HARNESS`], never documented). tests/hygiene/docs.rs keeps the table, the sources and
//! the docs in step. At init, [`typo_warnings`] turns a name in neither list (a typo that would
//! silently leave a setting at its default) and an unknown `MCORE_LOG` level into warnings.

/// Who reads a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    Library,
    Launcher,
    Selftest,
    GlooPlugin,
    HcclPlugin,
    Python,
}

/// One variable a user may set.
#[derive(Debug, Clone, Copy)]
pub struct Variable {
    pub name: &'static str,
    pub reader: Reader,
}

const fn var(name: &'static str, reader: Reader) -> Variable {
    Variable { name, reader }
}

use Reader::*;

/// Every `MCORE_*` variable read outside the tests.
pub const VARIABLES: &[Variable] = &[
    var("MCORE_INIT_TIMEOUT", Library),
    var("MCORE_LOG", Library),
    var("MCORE_BACKEND_PLUGIN", Library),
    var("MCORE_NCCL_LIBRARY", Library),
    var("MCORE_NCCL_PYTHON_SITE", Library),
    var("MCORE_NCCL_GLOBAL_SYMBOLS", Library),
    var("MCORE_NCCL_RANKS_PER_ROOT", Library),
    var("MCORE_NCCL_STRICT_CONFIG", Library),
    var("MCORE_NCCL_PSK_FILE", Library),
    var("MCORE_NCCL_SUSPEND_MODE", Library),
    var("MCORE_NCCL_CONCURRENT", Library),
    var("MCORE_INIT_STORE_BIND", Library),
    var("MCORE_INIT_STORE_MAX_MEMORY", Library),
    var("MCORE_JOB_ID", Library),
    var("MCORE_STORE_TOKEN", Library),
    var("MCORE_STORE_TOKEN_FILE", Library),
    var("MCORE_STORE_KEEP_OPEN", Library),
    var("MCORE_RENDEZVOUS", Library),
    var("MCORE_PMIX_LIBRARY", Library),
    var("MCORE_HCCL_GROUP_BUFFER", Library),
    var("MCORE_LAUNCH_DIR", Library),
    var("MCORE_PORT_RANGE", Launcher),
    var("MCORE_SELFTEST_PROGRESS_MIN", Selftest),
    var("MCORE_SELFTEST_HOLD_S", Selftest),
    var("MCORE_SELFTEST_EXIT_AFTER_INIT", Selftest),
    var("MCORE_SELFTEST_SKIP_RESUME", Selftest),
    var("MCORE_GLOO_HOSTNAME", GlooPlugin),
    var("MCORE_HCCL_LIBRARY", HcclPlugin),
    var("MCORE_HCCL_ACL_LIBRARY", HcclPlugin),
    var("MCORE_HCCL_DEVICE", HcclPlugin),
    var("MCORE_HCCL_DEVICE_IP", HcclPlugin),
    var("MCORE_HCCL_BUFFER_MB", HcclPlugin),
    var("MCORE_HCCL_DETERMINISTIC", HcclPlugin),
    var("MCORE_INIT_LIBRARY", Python),
];

/// Names this project's build and test scripts, CMake files, test doubles and test children use:
/// known, so a test run is not warned about them, and not documented for users.
pub const HARNESS: &[&str] = &[
    "MCORE_BENCH_MEGATRON",
    "MCORE_BENCH_SITE",
    "MCORE_BENCH_VENV",
    "MCORE_BUILD_GLOO_PLUGIN",
    "MCORE_CARGO_TARGET_DIR",
    "MCORE_CONFORMANCE_DIR",
    "MCORE_CUDA_DOUBLE_DEVICES",
    "MCORE_EXAMPLE_BACKEND",
    "MCORE_FILESTORE_TEST_CHILD_DIR",
    "MCORE_FUZZ_SCALE",
    "MCORE_FUZZ_SEED",
    "MCORE_GLOO_PLUGIN",
    "MCORE_GLOO_SPLIT_CHILD",
    "MCORE_GLOO_SPLIT_DIR",
    "MCORE_GLOO_SPLIT_RANK",
    "MCORE_GLOO_SPLIT_WORLD",
    "MCORE_GLOO_TARBALL",
    "MCORE_GPU_BIN",
    "MCORE_GPU_OUT",
    "MCORE_GPU_REPS",
    "MCORE_GPU_SECTIONS",
    "MCORE_GPU_TIMEOUT",
    "MCORE_HCCL_DOUBLE_DESTROY_AGAIN",
    "MCORE_HCCL_DOUBLE_DIR",
    "MCORE_HCCL_DOUBLE_NO_INT64",
    "MCORE_HCCL_TESTS",
    "MCORE_HCCL_TEST_CHILD",
    "MCORE_HCCL_TEST_DIR",
    "MCORE_HCCL_TEST_RANK",
    "MCORE_HCCL_TEST_REQUIRE",
    "MCORE_ID_TEST_MODE",
    "MCORE_ID_TEST_ORDER",
    "MCORE_ID_TEST_RANK",
    "MCORE_INIT_GLOO_PLUGIN",
    "MCORE_INIT_INCLUDE_DIR",
    "MCORE_INIT_LAUNCH",
    "MCORE_INIT_LIBRARY_DIR",
    "MCORE_INIT_SELFTEST",
    "MCORE_INIT_SO",
    "MCORE_INIT_TOPO",
    "MCORE_INIT_VERSION",
    "MCORE_INSTALL_CMAKEDIR",
    "MCORE_INSTALL_DEBUG_INFO",
    "MCORE_LAUNCH",
    "MCORE_LAUNCH_TEST_RANK",
    "MCORE_LIB",
    "MCORE_NCCL_DOUBLE_ASAN",
    "MCORE_NCCL_DOUBLE_BIN_DIR",
    "MCORE_NCCL_DOUBLE_DIR",
    "MCORE_NCCL_DOUBLE_HANG_RANKS",
    "MCORE_NCCL_DOUBLE_INIT",
    "MCORE_NCCL_DOUBLE_INPROC_CHILD",
    "MCORE_NCCL_DOUBLE_LATE_INIT",
    "MCORE_NCCL_DOUBLE_NO_SUSPEND",
    "MCORE_NCCL_DOUBLE_NO_TLS",
    "MCORE_NCCL_DOUBLE_NO_TLS_UNMARKED",
    "MCORE_NCCL_DOUBLE_SHRINK",
    "MCORE_NCCL_DOUBLE_SPLIT",
    "MCORE_NCCL_DOUBLE_SPLIT_DELAY_MS",
    "MCORE_NCCL_DOUBLE_TRACE",
    "MCORE_NCCL_DOUBLE_VERSION",
    "MCORE_NCCL_GPU_CHILD_RANK",
    "MCORE_NCCL_TEST_CHILD",
    "MCORE_NCCL_TEST_REQUIRE",
    "MCORE_NCCL_TEST_STORE",
    "MCORE_PMIX_TEST_LIBRARIES",
    "MCORE_REPO_ROOT",
    "MCORE_SANITIZE",
    "MCORE_SCALE_SIM_VENV",
    "MCORE_SKIP_TORCHRUN",
    "MCORE_SOVERSION",
    "MCORE_STORE_BENCH_VENV",
    "MCORE_STORE_FUZZ_ITERS",
    "MCORE_STORE_FUZZ_SEED",
    "MCORE_STORE_TCP_CHILD_PORT",
    "MCORE_STORE_TCP_CHILD_RANK",
    "MCORE_STORE_TCP_LEAK_CHILD",
    "MCORE_TEST_CHILD",
    "MCORE_TEST_GLOO_PLUGIN",
    "MCORE_TEST_HOST_NAME_BIND_CHILD",
    "MCORE_TEST_LANES",
    "MCORE_TEST_PORTS",
    "MCORE_TEST_SOURCES",
    "MCORE_TEST_STORE_BIND_CHILD",
    "MCORE_TEST_STORE_PORT",
    "MCORE_TEST_TRAINER",
    "MCORE_TEST_UNREACHABLE_STORE_CHILD",
    "MCORE_TOOLS",
    "MCORE_TORCHRUN_VENV",
    "MCORE_TORCH_PYTHON",
    "MCORE_UPDATE_HEADER",
    "MCORE_WHEEL_PLAT",
];

/// `MCORE_LOG`'s levels: `info` is what runs without it, `debug` adds the library's debug lines.
pub const LOG_LEVELS: &[&str] = &["info", "debug"];

/// Whether `name` is in [`VARIABLES`] or [`HARNESS`].
pub fn is_known(name: &str) -> bool {
    VARIABLES.iter().any(|v| v.name == name) || HARNESS.contains(&name)
}

/// One warning line for each `MCORE_*` name of `vars` (name, value) that neither table knows,
/// with the nearest known variable when it is a near miss, and one for an `MCORE_LOG` value
/// that is not a level. Names in the order given.
pub fn typo_warnings<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, value) in vars {
        if name == "MCORE_LOG" && !LOG_LEVELS.iter().any(|l| l.eq_ignore_ascii_case(value.trim())) {
            out.push(format!(
                "mcore_init: warning: MCORE_LOG={} is not a level (known: {}); the library logs at info",
                crate::quote::quoted(value),
                LOG_LEVELS.join(", ")
            ));
        }
        if !name.starts_with("MCORE_") || is_known(name) {
            continue;
        }
        let hint = crate::quote::near_miss(name, VARIABLES.iter().map(|v| v.name))
            .map_or_else(|| " (see README.md, \"Environment\")".to_string(), |n| format!("; did you mean {n}?"));
        out.push(format!(
            "mcore_init: warning: {} is not a variable mcore_init reads, so it has no effect{hint}",
            crate::quote::quoted(name)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_is_named_with_the_nearest_variable() {
        let w = typo_warnings([("MCORE_INIT_TIMEOT", "5"), ("MCORE_INIT_TIMEOUT", "5"), ("PATH", "/bin")]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("'MCORE_INIT_TIMEOT' is not a variable")
                && w[0].ends_with("did you mean MCORE_INIT_TIMEOUT?")
        );
    }

    #[test]
    fn a_far_name_gets_no_suggestion_and_harness_names_no_warning() {
        let w = typo_warnings([("MCORE_SOMETHING_ELSE", "1"), ("MCORE_GLOO_PLUGIN", "/x.so")]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(!w[0].contains("did you mean") && w[0].contains("README.md"), "{w:?}");
    }

    #[test]
    fn an_unknown_log_level_is_named() {
        assert!(typo_warnings([("MCORE_LOG", "DEBUG"), ("MCORE_LOG", "info")]).is_empty());
        let w = typo_warnings([("MCORE_LOG", "verbose")]);
        assert_eq!(
            w,
            ["mcore_init: warning: MCORE_LOG='verbose' is not a level (known: info, debug); the library logs at info"]
        );
    }

    #[test]
    fn no_name_is_listed_twice() {
        let mut names: Vec<&str> = VARIABLES.iter().map(|v| v.name).chain(HARNESS.iter().copied()).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
    }
}
