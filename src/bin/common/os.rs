//! Thin safe wrappers over the few OS calls the tools need (the tools' only `unsafe` stays here).

/// Send `signal` (e.g. `libc::SIGTERM`) to every process of process group `pgid`.
pub fn signal_process_group(pgid: u32, signal: i32) -> std::io::Result<()> {
    let pgid = i32::try_from(pgid)
        .ok()
        .filter(|p| *p > 1)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("bad process group {pgid}")))?;
    // SAFETY: kill(2) takes plain integers; a negative pid addresses the process group.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Send `signal` (e.g. `libc::SIGKILL`, `libc::SIGSTOP`) to this process.
pub fn signal_self(signal: i32) {
    // SAFETY: kill(2) on our own pid with a plain signal number; no memory is involved.
    unsafe { libc::kill(std::process::id() as i32, signal) };
}

#[allow(unused_imports)] // not every tool signals processes
pub use libc::{SIGHUP, SIGINT, SIGKILL, SIGTERM};

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// The last signal [`catch_signals`] caught (0: none yet) and how many it caught in all.
static CAUGHT: AtomicI32 = AtomicI32::new(0);
static CAUGHT_COUNT: AtomicUsize = AtomicUsize::new(0);

extern "C" fn record_signal(signal: libc::c_int) {
    // Only lock-free atomic stores: async-signal-safe.
    CAUGHT.store(signal, Ordering::SeqCst);
    CAUGHT_COUNT.fetch_add(1, Ordering::SeqCst);
}

/// From now on, `signals` no longer end the process: each is recorded, for [`caught_signal`]
/// to report. A signal this process was started with ignored (`nohup` ignores SIGHUP) stays
/// ignored, as shells and Python do. Handlers reset to the default on exec, so children
/// started later get the default action (or the inherited "ignore").
pub fn catch_signals(signals: &[i32]) -> std::io::Result<()> {
    for &signal in signals {
        // SAFETY: sigaction reads and writes sigaction structs that live on this stack frame;
        // all-zero is a valid sigaction (no flags, empty mask). The handler only stores
        // atomics, which is async-signal-safe.
        let rc = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
                -1
            } else if old.sa_sigaction == libc::SIG_IGN {
                0
            } else {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = record_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                // Blocking calls of other threads (the output forwarders' reads) go on.
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, std::ptr::null_mut())
            }
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The last signal caught since [`catch_signals`] and how many were caught in all, if any.
pub fn caught_signal() -> Option<(i32, usize)> {
    let count = CAUGHT_COUNT.load(Ordering::SeqCst);
    (count > 0).then(|| (CAUGHT.load(Ordering::SeqCst), count))
}

/// The conventional name of the signals the tools handle ("SIGTERM"), else "signal N".
pub fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGKILL => "SIGKILL".into(),
        other => format!("signal {other}"),
    }
}

/// Seconds since boot (CLOCK_BOOTTIME): a clock every process on this machine shares, so that
/// events of several ranks can be compared (the GPU benchmark's "last rank in to last rank ready").
pub fn boottime_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which lives on this stack frame.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc == 0 {
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    } else {
        f64::NAN
    }
}

/// Seconds from this process's start to now (from /proc: start time in clock ticks since boot
/// and the system uptime), so that a measurement includes loading and everything before main.
pub fn seconds_since_process_start() -> std::io::Result<f64> {
    // SAFETY: sysconf takes and returns plain integers.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks <= 0 {
        return Err(std::io::Error::other("sysconf(_SC_CLK_TCK) failed"));
    }
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Field 22 (starttime) counts from after the ')' closing the command name.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let start: f64 = after
        .split_whitespace()
        .nth(19)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| std::io::Error::other("cannot parse /proc/self/stat"))?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")?
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| std::io::Error::other("cannot parse /proc/uptime"))?;
    Ok((uptime - start / ticks as f64).max(0.0))
}
