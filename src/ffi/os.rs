//! Thin safe wrappers over the few OS calls the tools need (the unsafe stays here).

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

pub use libc::{SIGKILL, SIGTERM};
