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

#[allow(unused_imports)] // not every tool signals processes
pub use libc::{SIGKILL, SIGTERM};

/// Seconds since boot (CLOCK_BOOTTIME): a clock every process on this machine shares, so that
/// events of several ranks can be compared (the GPU benchmark's "last rank in to last rank ready").
#[allow(dead_code)] // mcore-selftest's only
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
