//!
//! The live progress line of a large world: rank 0 reads every rank's check-in and
//! communicator-creation marks from the rendezvous store once a second (its own client
//! connection) and prints `init 3.0 s: 812/1024 ranks checked in; groups: step 2..5 (n ranks
//! done)` on stderr: rewritten in place on a terminal, a new line when it changes otherwise.

use mcore_init::runtime::LaunchEnv;
use mcore_init::store::{Store, TcpStore};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Worlds at least this large get the line (`MCORE_SELFTEST_PROGRESS_MIN` overrides).
const DEFAULT_MIN_WORLD: u32 = 64;
/// Most ranks one poll reads (two store requests each).
const MAX_POLLED: u32 = 4096;

pub struct Watcher {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

pub fn start() -> Option<Watcher> {
    let env = LaunchEnv::from_process().ok()?;
    let min =
        std::env::var("MCORE_SELFTEST_PROGRESS_MIN").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_MIN_WORLD);
    // Under PMIx rank 0's store takes its port while initializing (env.master_port is 0 until
    // then): no progress line there yet.
    if env.rank != 0 || env.world_size < min || env.rendezvous == mcore_init::runtime::Rendezvous::Pmix {
        return None;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::Builder::new().name("selftest-progress".into()).spawn(move || watch(&env, &flag)).ok()?;
    Some(Watcher { stop, handle: Some(handle) })
}

fn sleep_unless(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !stop.load(Ordering::SeqCst)
}

fn watch(env: &LaunchEnv, stop: &AtomicBool) {
    let start = Instant::now();
    // The first initialization of this process (epoch 0), as the runtime names its keys.
    let prefix = format!("mcore_init/{}/{}/0", env.run_id, env.restart_count);
    let tty = std::io::stderr().is_terminal();
    let mut store = None;
    let mut last = String::new();
    let mut first = true;
    while std::mem::take(&mut first) || sleep_unless(stop, Duration::from_secs(1)) {
        if store.is_none() {
            store = TcpStore::connect_with_token(
                &env.master_addr,
                env.master_port,
                Duration::from_secs(1),
                env.store_token.as_ref(),
            )
            .ok();
        }
        let Some(s) = &store else { continue };
        let n = env.world_size.min(MAX_POLLED);
        let (mut checked, mut steps) = (0u32, Vec::new());
        for r in 0..n {
            if s.check(&[&format!("{prefix}/{}", mcore_init::runtime::checkin::arrival_key(r))]).unwrap_or(false) {
                checked += 1;
            }
            steps.push(s.add(&format!("{prefix}/progress/{r}"), 0).unwrap_or(0));
        }
        let (lo, hi) = (steps.iter().min().copied().unwrap_or(0), steps.iter().max().copied().unwrap_or(0));
        let sampled = if n < env.world_size { format!(" (first {n})") } else { String::new() };
        let text = format!(
            "init {:.0} s: {checked}/{n}{sampled} ranks checked in; communicators: creation step {lo}..{hi}",
            start.elapsed().as_secs_f64()
        );
        let body = text.split_once(": ").map_or("", |(_, b)| b).to_string();
        let mut err = std::io::stderr().lock();
        if tty {
            let _ = write!(err, "\r{text}\x1b[K");
        } else if body != last {
            let _ = writeln!(err, "{text}");
        }
        last = body;
    }
    if tty && !last.is_empty() {
        let _ = writeln!(std::io::stderr());
    }
}
