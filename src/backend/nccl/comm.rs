//! `NcclComm`: one communicator, created with a deadline (non-blocking init or split, polled with
//! `ncclCommGetAsyncError`, aborted on expiry), destroyed or aborted exactly once.
#![forbid(unsafe_code)]

use super::config::NcclConfig;
use super::error::NcclError;
use super::loader::cuda::{CudaDriver, DeviceBuffer, Stream};
use super::loader::nccl::{NcclLibrary, RawComm, NCCL_IN_PROGRESS, NCCL_SPLIT_NOCOLOR, NCCL_SUCCESS};
use super::unique_id::NcclUniqueId;
use super::version::Feature;
use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

/// Which CUDA device the communicator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Make this ordinal's primary context current first (`cudaSetDevice`).
    Ordinal(i32),
    /// Use whatever device is current on the calling thread (the caller set it).
    Current,
}

/// A live communicator of one group.
pub struct NcclComm {
    lib: &'static NcclLibrary,
    raw: Option<RawComm>,
    group: String,
    size: u32,
    rank: u32,
    device: Device,
    /// The config it was created with (a split without one inherits it).
    config: NcclConfig,
    /// Bound of collectives run through the runtime's `Communicator` seam.
    op_timeout: Duration,
}

impl std::fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NcclComm({} rank {}/{} on {:?})", self.group, self.rank, self.size, self.device)
    }
}

/// How long to sleep between polls: grows from 100 µs to 10 ms.
fn backoff(step: &mut Duration) {
    std::thread::sleep(*step);
    *step = (*step * 2).min(Duration::from_millis(10));
}

fn select(device: Device) -> Result<(), NcclError> {
    match device {
        Device::Ordinal(d) => CudaDriver::global()?.set_device(d),
        Device::Current => Ok(()),
    }
}

/// Wait until `comm` leaves `ncclInProgress` or `timeout` passes; on error or expiry the
/// communicator is aborted and the error names `what`.
fn wait_ready(lib: &'static NcclLibrary, comm: RawComm, what: &str, call: &str, timeout: Duration, start: Instant) -> Result<RawComm, NcclError> {
    let mut step = Duration::from_micros(100);
    loop {
        let state = match lib.comm_async_error(&comm) {
            Ok(s) => s,
            Err(rc) => {
                let e = lib.call_error(&format!("ncclCommGetAsyncError for {what}"), rc, Some(&comm));
                lib.comm_abort(comm);
                return Err(e);
            }
        };
        if state == NCCL_SUCCESS {
            return Ok(comm);
        }
        if state != NCCL_IN_PROGRESS {
            let e = lib.call_error(&format!("{call} for {what}"), state, Some(&comm));
            lib.comm_abort(comm);
            return Err(e);
        }
        if start.elapsed() >= timeout {
            lib.comm_abort(comm);
            return Err(NcclError::Timeout { what: format!("{call} of {what} (communicator aborted)"), deadline: timeout });
        }
        backoff(&mut step);
    }
}

fn to_c_int(v: u32, name: &str) -> Result<c_int, NcclError> {
    c_int::try_from(v).map_err(|_| NcclError::invalid(format!("{name} {v} does not fit a C int")))
}

impl NcclComm {
    /// Join group `group` as `rank` of `nranks` with the id rank 0 of the group made, by
    /// non-blocking `ncclCommInitRankConfig` (unless `config.blocking`), within `timeout`.
    #[allow(clippy::too_many_arguments)]
    pub fn init_rank(
        lib: &'static NcclLibrary,
        group: &str,
        id: &NcclUniqueId,
        nranks: u32,
        rank: u32,
        device: Device,
        config: &NcclConfig,
        timeout: Duration,
    ) -> Result<NcclComm, NcclError> {
        let start = Instant::now();
        if nranks == 0 || rank >= nranks {
            return Err(NcclError::invalid(format!("group {group}: rank {rank} is outside 0..{nranks}")));
        }
        let (n, r) = (to_c_int(nranks, "nranks")?, to_c_int(rank, "rank")?);
        lib.require(Feature::CommInitRankConfig)?;
        let mut raw_config = config.to_raw()?;
        select(device).map_err(|e| prefix(group, e))?;
        let what = format!("group {group} (rank {rank} of {nranks})");
        let (rc, comm) = lib.comm_init_rank_config(n, id, r, &mut raw_config)?;
        let comm = finish_call(lib, rc, comm, &what, "ncclCommInitRankConfig", timeout, start)?
            .ok_or_else(|| NcclError::invalid(format!("ncclCommInitRankConfig for {what} returned no communicator")))?;
        Ok(NcclComm { lib, raw: Some(comm), group: group.to_string(), size: nranks, rank, device, config: config.clone(), op_timeout: timeout })
    }

    /// `ncclCommSplit`, collective over this whole communicator: members pass `Some(color)`,
    /// non-members `None` (`NCCL_SPLIT_NOCOLOR`) and get `Ok(None)`. `key` orders the child's ranks.
    /// `config` `None` inherits this communicator's config.
    pub fn split(&self, group: &str, color: Option<u32>, key: u32, config: Option<&NcclConfig>, timeout: Duration) -> Result<Option<NcclComm>, NcclError> {
        let start = Instant::now();
        let parent = self.raw()?;
        let c = match color {
            Some(c) => to_c_int(c, "color")?,
            None => NCCL_SPLIT_NOCOLOR,
        };
        let k = to_c_int(key, "key")?;
        let mut raw_config = config.map(|c| c.to_raw()).transpose()?;
        select(self.device).map_err(|e| prefix(group, e))?;
        let what = format!("group {group} (split of {})", self.group);
        let (rc, child) = self.lib.comm_split(parent, c, k, raw_config.as_mut())?;
        if child.is_none() && rc == NCCL_IN_PROGRESS {
            // A non-member's NULL child: the parent carries the split's progress.
            self.wait_parent(&what, timeout, start)?;
        }
        let Some(child) = finish_call(self.lib, rc, child, &what, "ncclCommSplit", timeout, start)? else {
            return Ok(None);
        };
        let (size, rank) = self.lib.comm_size_rank(&child)?;
        Ok(Some(NcclComm {
            lib: self.lib,
            raw: Some(child),
            group: group.to_string(),
            size: size as u32,
            rank: rank as u32,
            device: self.device,
            config: config.unwrap_or(&self.config).clone(),
            op_timeout: timeout,
        }))
    }

    fn wait_parent(&self, what: &str, timeout: Duration, start: Instant) -> Result<(), NcclError> {
        let parent = self.raw()?;
        let mut step = Duration::from_micros(100);
        loop {
            match self.lib.comm_async_error(parent) {
                Ok(NCCL_SUCCESS) => return Ok(()),
                Ok(NCCL_IN_PROGRESS) if start.elapsed() < timeout => backoff(&mut step),
                Ok(NCCL_IN_PROGRESS) => {
                    return Err(NcclError::Timeout { what: format!("ncclCommSplit of {what} on the parent"), deadline: timeout })
                }
                Ok(rc) | Err(rc) => return Err(self.lib.call_error(&format!("ncclCommSplit for {what}"), rc, Some(parent))),
            }
        }
    }

    fn raw(&self) -> Result<&RawComm, NcclError> {
        self.raw.as_ref().ok_or_else(|| NcclError::invalid(format!("the communicator of group {} was already released", self.group)))
    }

    /// How long a collective through the runtime seam may take (default: the creation timeout).
    pub fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    pub fn set_op_timeout(&mut self, timeout: Duration) {
        self.op_timeout = timeout;
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The config it was created with.
    pub fn config(&self) -> &NcclConfig {
        &self.config
    }

    /// The `ncclComm_t` for users of the C API (NULL once released).
    pub fn raw_handle(&self) -> *mut c_void {
        self.raw.as_ref().map_or(std::ptr::null_mut(), |r| r.as_ptr())
    }

    /// Finalize (flushing outstanding work, within `timeout`) then `ncclCommDestroy`; a finalize
    /// that fails or expires aborts instead and reports why.
    pub fn destroy(mut self, timeout: Duration) -> Result<(), NcclError> {
        let start = Instant::now();
        let comm = self.raw.take().ok_or_else(|| NcclError::invalid("communicator already released"))?;
        let what = format!("group {}", self.group);
        if let Some(rc) = self.lib.comm_finalize(&comm) {
            let comm = finish_call(self.lib, rc, Some(comm), &what, "ncclCommFinalize", timeout, start)?.expect("given Some");
            return self.destroy_raw(comm);
        }
        self.destroy_raw(comm)
    }

    fn destroy_raw(&self, comm: RawComm) -> Result<(), NcclError> {
        let rc = self.lib.comm_destroy(comm);
        if rc == NCCL_SUCCESS {
            Ok(())
        } else {
            Err(self.lib.call_error(&format!("ncclCommDestroy for group {}", self.group), rc, None))
        }
    }

    /// `ncclCommAbort`: release without waiting for peers.
    pub fn abort(mut self) -> Result<(), NcclError> {
        let comm = self.raw.take().ok_or_else(|| NcclError::invalid("communicator already released"))?;
        let rc = self.lib.comm_abort(comm);
        if rc == NCCL_SUCCESS {
            Ok(())
        } else {
            Err(self.lib.call_error(&format!("ncclCommAbort for group {}", self.group), rc, None))
        }
    }

    /// Sum `values` over the group in place through device memory (verification collective):
    /// copy to the device, `ncclAllReduce`, wait for the stream within `timeout`, copy back.
    pub fn allreduce_sum_i64(&mut self, values: &mut [i64], timeout: Duration) -> Result<(), NcclError> {
        let start = Instant::now();
        let driver = CudaDriver::global()?;
        let device = match self.device {
            Device::Ordinal(d) => d,
            Device::Current => {
                return Err(NcclError::invalid(format!(
                    "group {}: allreduce_sum_i64 needs the communicator's device ordinal (created with Device::Current)",
                    self.group
                )))
            }
        };
        driver.set_device(device)?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut buf = DeviceBuffer::new(driver, bytes.len())?;
        buf.copy_from_host(&bytes)?;
        let stream = Stream::new(driver)?;
        let what = format!("allreduce on group {}", self.group);
        let comm = self.raw()?;
        let mut rc = self.lib.all_reduce_sum_i64(comm, &buf, values.len(), &stream)?;
        let mut step = Duration::from_micros(100);
        // Non-blocking communicators may return ncclInProgress until the op is enqueued.
        while rc == NCCL_IN_PROGRESS {
            rc = self.lib.comm_async_error(comm).unwrap_or_else(|e| e);
            if rc == NCCL_IN_PROGRESS && start.elapsed() >= timeout {
                return Err(NcclError::Timeout { what: format!("{what} to be enqueued"), deadline: timeout });
            }
            backoff(&mut step);
        }
        if rc != NCCL_SUCCESS {
            return Err(self.lib.call_error(&format!("ncclAllReduce ({what})"), rc, Some(comm)));
        }
        while !stream.is_done()? {
            if let Ok(state) = self.lib.comm_async_error(comm) {
                if state != NCCL_SUCCESS && state != NCCL_IN_PROGRESS {
                    return Err(self.lib.call_error(&what, state, Some(comm)));
                }
            }
            if start.elapsed() >= timeout {
                return Err(NcclError::Timeout { what: format!("{what} to complete on device {device}"), deadline: timeout });
            }
            backoff(&mut step);
        }
        let mut out = vec![0u8; bytes.len()];
        buf.copy_to_host(&mut out)?;
        for (v, chunk) in values.iter_mut().zip(out.chunks_exact(8)) {
            *v = i64::from_ne_bytes(chunk.try_into().expect("8-byte chunk"));
        }
        Ok(())
    }
}

impl Drop for NcclComm {
    /// Abort a communicator nobody destroyed; never panics, never waits for peers.
    fn drop(&mut self) {
        if let Some(comm) = self.raw.take() {
            let _ = self.lib.comm_abort(comm);
        }
    }
}

fn prefix(group: &str, e: NcclError) -> NcclError {
    match e {
        NcclError::InvalidArgument(m) => NcclError::InvalidArgument(format!("group {group}: {m}")),
        NcclError::Call { call, code, name, detail } => NcclError::Call { call: format!("{call} (for group {group})"), code, name, detail },
        NcclError::LibraryNotFound { library, tried, hint } => {
            NcclError::LibraryNotFound { library: format!("{library}, needed by group {group},"), tried, hint }
        }
        other => other,
    }
}

/// Interpret the immediate result of a non-blocking call that may hand out a communicator.
fn finish_call(
    lib: &'static NcclLibrary,
    rc: c_int,
    comm: Option<RawComm>,
    what: &str,
    call: &str,
    timeout: Duration,
    start: Instant,
) -> Result<Option<RawComm>, NcclError> {
    match (rc, comm) {
        (NCCL_SUCCESS | NCCL_IN_PROGRESS, Some(c)) => wait_ready(lib, c, what, call, timeout, start).map(Some),
        (NCCL_SUCCESS | NCCL_IN_PROGRESS, None) => Ok(None),
        (rc, comm) => {
            let e = lib.call_error(&format!("{call} for {what}"), rc, comm.as_ref());
            if let Some(c) = comm {
                lib.comm_abort(c);
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn communicators_can_move_between_threads() {
        fn is_send<T: Send>(_: Option<T>) -> bool {
            true
        }
        assert!(is_send::<NcclComm>(None));
    }
}
