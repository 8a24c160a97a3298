//! Collectives of an [`NcclComm`] on host data, through device memory: the verification
//! all-reduce of int64 sums, the one-element float all-reduce a vLLM worker issues right after
//! joining its weight-sync group (the warm-up), and a byte broadcast. One path serves them all
//! ([`NcclComm::on_device`]): copy in, enqueue, wait for the stream within the deadline (a failed
//! peer or an interrupt ends the wait, naming the collective), copy out.
#![forbid(unsafe_code)]

use super::comm::{backoff, interrupted, Device, NcclComm};
use super::error::NcclError;
use super::loader::cuda::{CudaDriver, DeviceBuffer, Stream};
use super::loader::nccl::{DataType, NcclLibrary, RawComm, NCCL_IN_PROGRESS, NCCL_SUCCESS};
use std::ffi::c_int;
use std::time::{Duration, Instant};

impl NcclComm {
    /// Sum `values` over the group in place (the verification collective), within `timeout`.
    pub fn allreduce_sum_i64(&mut self, values: &mut [i64], timeout: Duration) -> Result<(), NcclError> {
        let what = format!("allreduce on group {}", self.group());
        self.allreduce_sum(&what, values, DataType::Int64, timeout, i64::to_ne_bytes, i64::from_ne_bytes)
    }

    /// Sum float32 `values` over the group in place, within `timeout` (vLLM's warm-up is one
    /// element: `[0.0]`).
    pub fn allreduce_sum_f32(&mut self, values: &mut [f32], timeout: Duration) -> Result<(), NcclError> {
        let what = format!("float all-reduce on group {}", self.group());
        self.allreduce_sum(&what, values, DataType::Float32, timeout, f32::to_ne_bytes, f32::from_ne_bytes)
    }

    /// In-place sum of `values` of `dtype` (`N` bytes each, converted by `to` and `from`).
    fn allreduce_sum<T: Copy, const N: usize>(
        &mut self,
        what: &str,
        values: &mut [T],
        dtype: DataType,
        timeout: Duration,
        to: fn(T) -> [u8; N],
        from: fn([u8; N]) -> T,
    ) -> Result<(), NcclError> {
        let bytes: Vec<u8> = values.iter().flat_map(|&v| to(v)).collect();
        let n = values.len();
        let out = self.on_device(what, &bytes, timeout, |lib, comm, buf, stream| {
            lib.all_reduce_sum(comm, buf, n, dtype, stream)
        })?;
        for (v, chunk) in values.iter_mut().zip(out.chunks_exact(N)) {
            *v = from(chunk.try_into().expect("chunks of N bytes"));
        }
        Ok(())
    }

    /// Broadcast `data` from group rank `root` to every member, in place, within `timeout`.
    pub fn broadcast_bytes(&mut self, data: &mut [u8], root: u32, timeout: Duration) -> Result<(), NcclError> {
        if root >= self.size() {
            return Err(NcclError::invalid(format!(
                "broadcast on group {}: root {root} is not a rank of its {} ranks",
                self.group(),
                self.size()
            )));
        }
        let what = format!("broadcast of {} bytes from rank {root} on group {}", data.len(), self.group());
        let n = data.len();
        let out = self.on_device(&what, data, timeout, |lib, comm, buf, stream| {
            lib.broadcast(comm, buf, n, DataType::Uint8, root as c_int, stream)
        })?;
        data.copy_from_slice(&out);
        Ok(())
    }

    /// `input` copied to the communicator's device, `launch` enqueued on a new stream, the stream
    /// waited for within `timeout` (NCCL's error state, a failed peer and the runtime's interrupt
    /// end the wait, naming `what`), the buffer copied back.
    fn on_device(
        &mut self,
        what: &str,
        input: &[u8],
        timeout: Duration,
        launch: impl FnOnce(&NcclLibrary, &RawComm, &DeviceBuffer, &Stream) -> Result<c_int, NcclError>,
    ) -> Result<Vec<u8>, NcclError> {
        self.wait_ready()?;
        let start = Instant::now();
        let driver = CudaDriver::global()?;
        let device = match self.device() {
            Device::Ordinal(d) => d,
            Device::Current => {
                return Err(NcclError::invalid(format!(
                    "group {}: {what} needs the communicator's device ordinal (created with Device::Current)",
                    self.group()
                )))
            }
        };
        driver.set_device(device)?;
        let mut buf = DeviceBuffer::new(driver, input.len())?;
        buf.copy_from_host(input)?;
        let stream = Stream::new(driver)?;
        let lib = self.library();
        let comm = self.raw()?;
        let mut rc = launch(lib, comm, &buf, &stream)?;
        let mut step = Duration::from_micros(100);
        // Non-blocking communicators may return ncclInProgress until the op is enqueued.
        while rc == NCCL_IN_PROGRESS {
            interrupted(what)?;
            rc = lib.comm_async_error(comm).unwrap_or_else(|e| e);
            if rc == NCCL_IN_PROGRESS && start.elapsed() >= timeout {
                return Err(NcclError::Timeout { what: format!("{what} to be enqueued"), deadline: timeout });
            }
            backoff(&mut step);
        }
        if rc != NCCL_SUCCESS {
            return Err(lib.call_error(what, rc, Some(comm)));
        }
        while !stream.is_done()? {
            interrupted(what)?;
            if let Ok(state) = lib.comm_async_error(comm) {
                if state != NCCL_SUCCESS && state != NCCL_IN_PROGRESS {
                    return Err(lib.call_error(what, state, Some(comm)));
                }
            }
            if start.elapsed() >= timeout {
                return Err(NcclError::Timeout {
                    what: format!("{what} to complete on device {device}"),
                    deadline: timeout,
                });
            }
            backoff(&mut step);
        }
        let mut out = vec![0u8; input.len()];
        buf.copy_to_host(&mut out)?;
        Ok(out)
    }
}
