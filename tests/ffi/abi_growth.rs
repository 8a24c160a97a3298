//! The C ABI can grow (docs/abi.md, "Growing a struct"): a C caller compiled against a header in
//! which `mcore_topology_config` has one more field than this library's (as the next release
//! would append) still lays out `mcore_init_args` exactly as one compiled against ours, since the
//! layout config is behind a pointer, and the library reads both structs right: the newer struct
//! is accepted while its new field is zero and refused, naming the struct, once it is set.
//!
//! The test writes the newer header by appending a field to the committed one, compiles one C
//! program against each header with the system C compiler, links both to libmcore_init.so and
//! compares what they print.

use std::path::{Path, PathBuf};
use std::process::Command;

const PROGRAM: &str = r#"
#include <mcore_init.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every field of mcore_init_args, by offset: equal under both headers. */
static void offsets(void) {
  printf("args %zu:", sizeof(mcore_init_args));
  printf(" %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu\n",
         offsetof(mcore_init_args, struct_size), offsetof(mcore_init_args, topology),
         offsetof(mcore_init_args, backend), offsetof(mcore_init_args, timeout_ms),
         offsetof(mcore_init_args, verify), offsetof(mcore_init_args, seed_rng),
         offsetof(mcore_init_args, seed), offsetof(mcore_init_args, seed_policy),
         offsetof(mcore_init_args, data_parallel_random_init), offsetof(mcore_init_args, comm_strategy),
         offsetof(mcore_init_args, comm_config_path), offsetof(mcore_init_args, comm_config),
         offsetof(mcore_init_args, split_share), offsetof(mcore_init_args, device),
         offsetof(mcore_init_args, create_all_gather_groups));
}

int main(void) {
  offsets();
  mcore_topology_config cfg;
  if (mcore_topology_config_init(&cfg) != MCORE_STATUS_OK) return 2;
  cfg.struct_size = sizeof cfg; /* the caller's own size, as its header has it */
  cfg.tp = 2;
  cfg.pp = 2;
  cfg.gtp = 1;
  cfg.local_world_size = 0;
#ifdef NEWER
  cfg.future_field = 0;
#endif
  mcore_topology *t = NULL;
  int st = mcore_topology_create(&cfg, 8, &t);
  if (st != MCORE_STATUS_OK) { printf("create %d %s\n", st, mcore_last_error_message()); return 3; }
  mcore_topology_sizes s;
  mcore_topology_get_sizes(t, &s);
  printf("sizes tp=%u pp=%u dp=%u\n", s.tp, s.pp, s.dp);
  mcore_topology_destroy(t);

  /* The init args point at the config: the library reads the config through the pointer and
     the fields after it where this caller put them: the unknown strategy is refused by name
     before anything else happens. */
  mcore_init_args args;
  if (mcore_init_args_init(&args) != MCORE_STATUS_OK) return 4;
  args.topology = &cfg;
  args.comm_strategy = "no-such-strategy";
  st = mcore_initialize(&args, NULL);
  printf("init %d %s\n", st, mcore_last_error_message());

#ifdef NEWER
  cfg.future_field = 7; /* a setting this library does not have: refused, not ignored */
  st = mcore_topology_create(&cfg, 8, &t);
  printf("newer %d %s\n", st, mcore_last_error_message());
#endif
  return 0;
}
"#;

/// The libmcore_init.so of this build. `cargo test` builds the library's cdylib with its rlib,
/// next to this test binary (target/<profile>/deps), but only `cargo build` copies it up to
/// target/<profile>: the copy there may be missing (a fresh clone running only `cargo test`) or
/// stale (an older `cargo build`), so the one in deps comes first. Should neither exist (a
/// cargo that stops building the cdylib for tests), the test builds it with cargo itself, into
/// a target folder of its own so as not to wait on the lock of the build that runs it.
fn built_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let profile_dir = deps.parent().expect("target/<profile>");
    for candidate in [deps.join("libmcore_init.so"), profile_dir.join("libmcore_init.so")] {
        if candidate.is_file() {
            return candidate;
        }
    }
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let target = profile_dir.parent().expect("target").join("abi_growth-cdylib");
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--lib", "--locked", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
    cargo.arg("--target-dir").arg(&target);
    if release {
        cargo.arg("--release");
    }
    let status = cargo.status().expect("run cargo to build libmcore_init.so");
    assert!(status.success(), "cargo build --lib failed: {status}");
    let built = target.join(if release { "release" } else { "debug" }).join("libmcore_init.so");
    assert!(built.is_file(), "cargo build --lib made no {}", built.display());
    built
}

/// A directory holding libmcore_init.so (see [`built_lib`]) under its link name and its soname,
/// as an install lays it out.
fn stage_lib(dir: &Path) -> PathBuf {
    let built = built_lib();
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    for name in ["libmcore_init.so".to_string(), format!("libmcore_init.so.{}", env!("MCORE_SOVERSION"))] {
        let _ = std::fs::remove_file(lib.join(&name));
        std::os::unix::fs::symlink(&built, lib.join(name)).unwrap();
    }
    lib
}

fn compile_and_run(dir: &Path, name: &str, include: &Path, define: Option<&str>) -> String {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.join(name);
    let lib = stage_lib(dir);
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.arg("-std=c11").arg("-Wall").arg("-Werror").arg("-I").arg(include).arg(&src).arg("-o").arg(&exe);
    cc.arg("-L").arg(&lib).arg("-lmcore_init").arg(format!("-Wl,-rpath,{}", lib.display()));
    if let Some(d) = define {
        cc.arg(format!("-D{d}"));
    }
    let out = cc.output().expect("run the C compiler (cc)");
    assert!(out.status.success(), "cc failed for {name}:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe)
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .env_remove("MASTER_ADDR")
        .env_remove("MASTER_PORT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "{name} exited with {:?}: {stdout}", run.status);
    stdout
}

#[test]
fn a_caller_with_a_grown_layout_config_reads_right_and_init_args_do_not_move() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("mcore-abi-growth-{}", std::process::id()));
    // Removed however the test ends.
    struct RemoveOnDrop(PathBuf);
    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = RemoveOnDrop(dir.clone());
    let newer_include = dir.join("newer-include");
    std::fs::create_dir_all(&newer_include).unwrap();
    // The newer header: our two headers, with a field appended to mcore_topology_config.
    let header = std::fs::read_to_string(root.join("include/mcore_init.h")).unwrap();
    let end = "  int32_t local_world_size;\n} mcore_topology_config;";
    assert!(header.contains(end), "the layout config no longer ends with local_world_size: update this test");
    let grown = header.replace(end, "  int32_t local_world_size;\n  int64_t future_field;\n} mcore_topology_config;");
    std::fs::write(newer_include.join("mcore_init.h"), grown).unwrap();
    std::fs::copy(root.join("include/mcore_backend.h"), newer_include.join("mcore_backend.h")).unwrap();

    let ours = compile_and_run(&dir, "ours", &root.join("include"), None);
    let newer = compile_and_run(&dir, "newer", &newer_include, Some("NEWER"));

    let line = |out: &str, prefix: &str| {
        out.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no '{prefix}' line in:\n{out}"))
            .to_string()
    };
    // Growing the layout config moves no field of the init args.
    assert_eq!(line(&ours, "args "), line(&newer, "args "));
    // Both callers' configs are read right.
    for out in [&ours, &newer] {
        assert_eq!(line(out, "sizes "), "sizes tp=2 pp=2 dp=2");
        // The args' comm_strategy, after the pointer, is read where each caller put it.
        let init = line(out, "init ");
        assert!(init.starts_with("init 1 ") && init.contains("'no-such-strategy'"), "{init}");
    }
    // A set field this library does not know is refused by name.
    let refused = line(&newer, "newer ");
    assert!(
        refused.starts_with("newer 1 ")
            && refused.contains("mcore_topology_config")
            && refused.contains("newer header"),
        "{refused}"
    );
}
