//! Shared helpers for integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The folder with Megatron-Core's ground-truth vectors: `$MCORE_CONFORMANCE_DIR`, else the
/// copy in the repository, `tests/data/conformance` (0.16.1 at the top, 0.19.2 in `v0.19.2/`;
/// see docs/conformance.md). Panics with a clear message when absent.
pub fn conformance_dir() -> PathBuf {
    let dir = match std::env::var_os("MCORE_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/conformance"),
    };
    assert!(
        dir.is_dir(),
        "conformance vectors not found at {}: the repository's copy is tests/data/conformance \
         (docs/conformance.md); MCORE_CONFORMANCE_DIR overrides it",
        dir.display()
    );
    dir
}

/// Read and parse a JSON file of the conformance folder (`.json` or `.json.gz`).
pub fn read_conformance_json(name: &str) -> serde_json::Value {
    use std::io::Read;
    let path = conformance_dir().join(name);
    let raw = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "conformance vector file {} cannot be read ({e}): the repository's copy is \
             tests/data/conformance (docs/conformance.md); MCORE_CONFORMANCE_DIR overrides it",
            path.display()
        )
    });
    let text = if name.ends_with(".gz") {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_string(&mut s)
            .unwrap_or_else(|e| panic!("{}: not a gzip of UTF-8 text ({e})", path.display()));
        s
    } else {
        String::from_utf8(raw).unwrap_or_else(|e| panic!("{}: not UTF-8 ({e})", path.display()))
    };
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: not valid JSON ({e})", path.display()))
}

/// xorshift64*: a small, seeded, reproducible generator for the bounded fuzz tests (no
/// dependency; the same seed gives the same cases).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// The `mcore-backend-probe` test worker (tests/support/mcore_backend_probe.rs), a Cargo example
/// so that it is never installed: `target/<profile>/examples/mcore-backend-probe`, next to the
/// `deps/` folder this test runs from. `cargo test` and `cargo build --all-targets` build it;
/// when only one test target was built, it is built here with the same profile and target folder.
pub fn backend_probe() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps/<test>");
    let probe = profile_dir.join("examples/mcore-backend-probe");
    if probe.is_file() {
        return probe;
    }
    let profile = profile_dir.file_name().and_then(|p| p.to_str()).unwrap_or("debug");
    let target_dir = profile_dir.parent().expect("target folder");
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "--quiet", "--example", "mcore-backend-probe", "--profile"])
        .arg(if profile == "debug" { "dev" } else { profile })
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    let status = cmd.status();
    assert!(
        matches!(status, Ok(s) if s.success()) && probe.is_file(),
        "the test worker {} is missing and building it failed ({status:?}): run \
         `cargo build --example mcore-backend-probe` with this test's profile",
        probe.display()
    );
    probe
}

/// A free TCP port on loopback (bound then released; a test's own processes take it next): from
/// `MCORE_PORT_RANGE` when set (scripts/test.sh gives each lane its own), see
/// `mcore_init::store::tcp::free_port`.
pub fn free_port() -> u16 {
    mcore_init::store::tcp::free_port().unwrap()
}

/// `MCORE_GLOO_PLUGIN` when it names a built plugin; otherwise `None`, saying on stderr that
/// the test is skipped and that `suite` (a scripts/test.d script) runs it with the plugin.
pub fn gloo_plugin(suite: &str) -> Option<String> {
    let p = std::env::var("MCORE_GLOO_PLUGIN").ok().filter(|p| std::path::Path::new(p).exists());
    if p.is_none() {
        eprintln!("skipped: MCORE_GLOO_PLUGIN is not set to a built libmcore_init_gloo.so (run {suite})");
    }
    p
}

/// Wait for `child` at most `limit`; kill it past that (the test then fails on its status). Its
/// piped output is read while it runs, so that a child writing more than a pipe holds does not
/// block (or, for a launcher, give up forwarding its ranks' lines).
pub fn wait_bounded(mut child: std::process::Child, limit: std::time::Duration) -> std::process::Output {
    use std::io::Read;
    use std::sync::{Arc, Mutex};
    type Sink = Arc<Mutex<Vec<u8>>>;
    fn drain(pipe: Option<impl Read + Send + 'static>) -> (Sink, std::thread::JoinHandle<()>) {
        let sink: Sink = Arc::default();
        let to = sink.clone();
        let t = std::thread::spawn(move || {
            let Some(mut p) = pipe else { return };
            let mut chunk = [0u8; 65536];
            while let Ok(n @ 1..) = p.read(&mut chunk) {
                to.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        (sink, t)
    }
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let status = child.wait().unwrap();
    // A grandchild that outlived the child may hold its pipes open: take what came within 5 s.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !(out.1.is_finished() && err.1.is_finished()) && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let take = |s: &Sink| std::mem::take(&mut *s.lock().unwrap());
    std::process::Output { status, stdout: take(&out.0), stderr: take(&err.0) }
}

/// `exe` as rank `rank` of a world of `world` meeting on 127.0.0.1:`port` (torchrun's variables,
/// no launcher), its output piped.
pub fn rank_command(exe: &str, rank: u32, world: u32, port: &str) -> std::process::Command {
    use std::process::Stdio;
    let mut cmd = std::process::Command::new(exe);
    cmd.env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The name the test harness knows test `name` of the calling module by (`FILE::NAME`: each
/// crate of tests/ holds its files as modules), for a test that runs one of its own tests again
/// in a child process with `--exact`. Call as `test_name(module_path!(), "name")`.
pub fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_crate, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}
