//!
//! `--fault RANK:POINT:kill|stop` (the fault-injection suite, scripts/test.d/27-faults.sh): rank
//! RANK sends itself SIGKILL or SIGSTOP at POINT: `start` (before initialize), `checkin` (every
//! rank checked in, no communicator yet), `created` (communicators made, not yet verified),
//! `verify` (after initialize, as this tool's own verification begins), `groups` (as the groups
//! made after init begin), `destroy` (before
//! destroy), `recover` (a survivor of `--fail-rank`, as its recovery begins). The other ranks run on and must end within their deadline, naming it.
//! `stop=SECONDS` stops the process for that long only (a helper process resumes it): a pause
//! shorter than the time left must fail nothing.

use mcore_init::runtime::{self, InitPhase};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Point {
    Start = 1,
    CheckIn = 2,
    Created = 3,
    Verify = 4,
    Destroy = 5,
    /// As a survivor of `--fail-rank` begins its recovery.
    Recover = 6,
    /// As the groups made after init (`--group`) begin.
    Groups = 7,
}

/// The armed point (0: none) and signal of this process.
static POINT: AtomicU8 = AtomicU8::new(0);
static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// With SIGSTOP: resumed after this many milliseconds (0: never).
static PAUSE_MS: AtomicU64 = AtomicU64::new(0);

/// Parse `RANK:POINT:SIGNAL` and arm it when RANK is this process's `RANK`.
pub fn arm(spec: &str) -> Result<(), String> {
    let bad = || {
        format!(
            "--fault: '{spec}' is not RANK:start|checkin|created|verify|groups|destroy|recover:kill|stop|stop=SECONDS"
        )
    };
    let mut parts = spec.split(':');
    let (Some(rank), Some(point), Some(signal), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let rank: u32 = rank.trim().parse().map_err(|_| bad())?;
    let point = match point {
        "start" => Point::Start,
        "checkin" => Point::CheckIn,
        "created" => Point::Created,
        "verify" => Point::Verify,
        "destroy" => Point::Destroy,
        "recover" => Point::Recover,
        "groups" => Point::Groups,
        _ => return Err(bad()),
    };
    let (signal, pause) = match signal.split_once('=') {
        None if signal == "kill" => (libc::SIGKILL, 0),
        None if signal == "stop" => (libc::SIGSTOP, 0),
        Some(("stop", secs)) => match secs.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s <= 3600.0 => (libc::SIGSTOP, (s * 1000.0) as u64),
            _ => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    if std::env::var("RANK").ok().and_then(|r| r.parse::<u32>().ok()) == Some(rank) {
        POINT.store(point as u8, Ordering::SeqCst);
        SIGNAL.store(signal, Ordering::SeqCst);
        PAUSE_MS.store(pause, Ordering::SeqCst);
        runtime::set_phase_hook(Some(on_phase));
    }
    Ok(())
}

fn on_phase(phase: InitPhase) {
    at(match phase {
        InitPhase::CheckedIn => Point::CheckIn,
        InitPhase::Created => Point::Created,
    });
}

/// Send the armed signal to this process if `point` is the armed one.
pub fn at(point: Point) {
    if POINT.load(Ordering::SeqCst) == point as u8 {
        let pause = PAUSE_MS.load(Ordering::SeqCst);
        if pause > 0 {
            // A stopped process cannot resume itself: a helper sends SIGCONT.
            let resume = format!("sleep {:.3}; kill -CONT {}", pause as f64 / 1000.0, std::process::id());
            let _ = std::process::Command::new("sh").args(["-c", &resume]).spawn();
        }
        crate::common::os::signal_self(SIGNAL.load(Ordering::SeqCst));
    }
}
