//! The CUDA driver (`libcuda.so.1`) loaded at run time: device selection, device memory and a
//! stream, enough to run one collective for verification. Types follow cudarc's `driver::sys`.
//!
//! NCCL's bundled CUDA runtime uses the driver context current on the calling thread, so making a
//! device's primary context current here is `cudaSetDevice`.

use super::{as_fn, c_text, DynLib};
use crate::backend::nccl::error::NcclError;
use crate::lock::Unpoisoned;
use cudarc::driver::sys;
use once_cell::sync::OnceCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Mutex;

/// File names tried, in order.
pub(crate) const CUDA_DRIVER_NAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];
const CUDA_SUCCESS: c_int = 0;
const CUDA_ERROR_NOT_READY: c_int = 600;

type InitFn = unsafe extern "C" fn(c_uint) -> c_int;
type IntOutFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type DeviceGetFn = unsafe extern "C" fn(*mut sys::CUdevice, c_int) -> c_int;
type CtxRetainFn = unsafe extern "C" fn(*mut sys::CUcontext, sys::CUdevice) -> c_int;
type CtxSetFn = unsafe extern "C" fn(sys::CUcontext) -> c_int;
type MemAllocFn = unsafe extern "C" fn(*mut sys::CUdeviceptr, usize) -> c_int;
type MemFreeFn = unsafe extern "C" fn(sys::CUdeviceptr) -> c_int;
type HtoDFn = unsafe extern "C" fn(sys::CUdeviceptr, *const c_void, usize) -> c_int;
type DtoHFn = unsafe extern "C" fn(*mut c_void, sys::CUdeviceptr, usize) -> c_int;
type StreamCreateFn = unsafe extern "C" fn(*mut sys::CUstream, c_uint) -> c_int;
type StreamFn = unsafe extern "C" fn(sys::CUstream) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;
/// `cuMemGetInfo_v2(&free, &total)`.
type MemGetInfoFn = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;

struct Fns {
    init: InitFn,
    driver_version: IntOutFn,
    device_count: IntOutFn,
    device_get: DeviceGetFn,
    ctx_retain: CtxRetainFn,
    ctx_set_current: CtxSetFn,
    mem_alloc: MemAllocFn,
    mem_free: MemFreeFn,
    htod: HtoDFn,
    dtoh: DtoHFn,
    stream_create: StreamCreateFn,
    stream_query: StreamFn,
    stream_destroy: StreamFn,
    error_string: ErrorStringFn,
    /// Optional: only reports read it.
    mem_get_info: Option<MemGetInfoFn>,
}

/// The loaded and initialized (`cuInit`) CUDA driver.
pub struct CudaDriver {
    lib: DynLib,
    fns: Fns,
    /// Retained primary contexts by ordinal (kept for the process's life).
    contexts: Mutex<HashMap<c_int, usize>>,
}

static DRIVER: OnceCell<&'static CudaDriver> = OnceCell::new();

fn sym<F: Copy>(lib: &DynLib, name: &str) -> Result<F, NcclError> {
    let p = lib.address(name).map_err(|detail| NcclError::MissingSymbol {
        library: "CUDA driver".into(),
        path: lib.path.clone(),
        symbol: name.into(),
        detail,
    })?;
    // SAFETY: every call site pairs `name` with the type of the driver's declaration of it.
    Ok(unsafe { as_fn::<F>(p) })
}

impl CudaDriver {
    /// The process-wide driver, loaded and `cuInit`-ed on first use; failures are not remembered.
    pub fn global() -> Result<&'static CudaDriver, NcclError> {
        DRIVER.get_or_try_init(|| Self::load().map(|d| &*Box::leak(Box::new(d)))).copied()
    }

    fn load() -> Result<CudaDriver, NcclError> {
        let mut tried = Vec::new();
        let mut lib = None;
        for name in CUDA_DRIVER_NAMES {
            match DynLib::open(name) {
                Ok(l) => {
                    lib = Some(l);
                    break;
                }
                Err(why) => tried.push((name.to_string(), why)),
            }
        }
        let Some(lib) = lib else {
            return Err(NcclError::LibraryNotFound {
                library: "the CUDA driver (libcuda.so.1)".into(),
                tried,
                hint: "NCCL communicators need an NVIDIA GPU and its driver; this machine has none".into(),
            });
        };
        let fns = match Self::resolve(&lib) {
            Ok(f) => f,
            Err(e) => {
                lib.close();
                return Err(e);
            }
        };
        let d = CudaDriver { lib, fns, contexts: Mutex::new(HashMap::new()) };
        // SAFETY: cuInit has no preconditions.
        let rc = unsafe { (d.fns.init)(0) };
        d.check("cuInit", rc)?;
        Ok(d)
    }

    fn resolve(lib: &DynLib) -> Result<Fns, NcclError> {
        Ok(Fns {
            init: sym(lib, "cuInit")?,
            driver_version: sym(lib, "cuDriverGetVersion")?,
            device_count: sym(lib, "cuDeviceGetCount")?,
            device_get: sym(lib, "cuDeviceGet")?,
            ctx_retain: sym(lib, "cuDevicePrimaryCtxRetain")?,
            ctx_set_current: sym(lib, "cuCtxSetCurrent")?,
            mem_alloc: sym(lib, "cuMemAlloc_v2")?,
            mem_free: sym(lib, "cuMemFree_v2")?,
            htod: sym(lib, "cuMemcpyHtoD_v2")?,
            dtoh: sym(lib, "cuMemcpyDtoH_v2")?,
            stream_create: sym(lib, "cuStreamCreate")?,
            stream_query: sym(lib, "cuStreamQuery")?,
            stream_destroy: sym(lib, "cuStreamDestroy_v2")?,
            error_string: sym(lib, "cuGetErrorString")?,
            mem_get_info: sym(lib, "cuMemGetInfo_v2").ok(),
        })
    }

    fn check(&self, call: &str, rc: c_int) -> Result<(), NcclError> {
        if rc == CUDA_SUCCESS {
            return Ok(());
        }
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorString writes a static string pointer (or fails for unknown codes).
        let known = unsafe { (self.fns.error_string)(rc, &mut p) } == CUDA_SUCCESS;
        // SAFETY: NULL or a static string from the driver.
        let detail = if known { unsafe { c_text(p) } } else { String::new() };
        Err(NcclError::Call { call: call.into(), code: rc, name: "CUresult".into(), detail })
    }

    /// `cuDriverGetVersion`, e.g. 12040.
    pub fn driver_version(&self) -> Result<c_int, NcclError> {
        let mut v = 0;
        // SAFETY: writes one int.
        self.check("cuDriverGetVersion", unsafe { (self.fns.driver_version)(&mut v) })?;
        Ok(v)
    }

    /// Number of visible devices.
    pub fn device_count(&self) -> Result<c_int, NcclError> {
        let mut n = 0;
        // SAFETY: writes one int.
        self.check("cuDeviceGetCount", unsafe { (self.fns.device_count)(&mut n) })?;
        Ok(n)
    }

    /// Make device `ordinal`'s primary context current on this thread (`cudaSetDevice`).
    pub fn set_device(&self, ordinal: c_int) -> Result<(), NcclError> {
        let count = self.device_count()?;
        if ordinal < 0 || ordinal >= count {
            return Err(NcclError::invalid(format!("CUDA device {ordinal} does not exist ({count} visible)")));
        }
        let mut contexts = self.contexts.locked();
        let ctx = match contexts.get(&ordinal) {
            Some(&c) => c as sys::CUcontext,
            None => {
                let mut dev: sys::CUdevice = 0;
                // SAFETY: valid ordinal, writes one device handle.
                self.check("cuDeviceGet", unsafe { (self.fns.device_get)(&mut dev, ordinal) })?;
                let mut ctx: sys::CUcontext = std::ptr::null_mut();
                // SAFETY: valid device, writes one context handle (retained for the process).
                self.check("cuDevicePrimaryCtxRetain", unsafe { (self.fns.ctx_retain)(&mut ctx, dev) })?;
                contexts.insert(ordinal, ctx as usize);
                ctx
            }
        };
        // SAFETY: a retained (never released) primary context.
        self.check("cuCtxSetCurrent", unsafe { (self.fns.ctx_set_current)(ctx) })
    }

    /// `cuMemGetInfo` of device `ordinal` (made current on this thread first): `(free, total)`
    /// bytes; `None` when the driver lacks the call.
    pub fn mem_get_info(&self, ordinal: c_int) -> Option<Result<(usize, usize), NcclError>> {
        let f = self.fns.mem_get_info?;
        Some(self.set_device(ordinal).and_then(|()| {
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: writes two size_t values.
            self.check("cuMemGetInfo_v2", unsafe { f(&mut free, &mut total) })?;
            Ok((free, total))
        }))
    }

    /// The file that was opened.
    pub fn path(&self) -> &str {
        &self.lib.path
    }
}

/// Device memory in the current context, freed on drop.
pub struct DeviceBuffer {
    driver: &'static CudaDriver,
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl DeviceBuffer {
    /// `cuMemAlloc` of `bytes` (at least 1) in the context current on this thread.
    pub fn new(driver: &'static CudaDriver, bytes: usize) -> Result<Self, NcclError> {
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: writes one device pointer.
        driver.check("cuMemAlloc", unsafe { (driver.fns.mem_alloc)(&mut ptr, bytes.max(1)) })?;
        Ok(DeviceBuffer { driver, ptr, bytes })
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Copy `src` to the start of the buffer (synchronous).
    pub fn copy_from_host(&mut self, src: &[u8]) -> Result<(), NcclError> {
        if src.len() > self.bytes {
            return Err(NcclError::invalid(format!(
                "{} bytes do not fit a {}-byte device buffer",
                src.len(),
                self.bytes
            )));
        }
        // SAFETY: `src.len()` bytes are readable and fit the allocation.
        self.driver.check("cuMemcpyHtoD", unsafe { (self.driver.fns.htod)(self.ptr, src.as_ptr().cast(), src.len()) })
    }

    /// Copy the start of the buffer into `dst` (synchronous).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<(), NcclError> {
        if dst.len() > self.bytes {
            return Err(NcclError::invalid(format!("{} bytes exceed a {}-byte device buffer", dst.len(), self.bytes)));
        }
        // SAFETY: `dst.len()` bytes are writable and within the allocation.
        self.driver
            .check("cuMemcpyDtoH", unsafe { (self.driver.fns.dtoh)(dst.as_mut_ptr().cast(), self.ptr, dst.len()) })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAlloc and freed once; errors are ignored (nothing to do).
        let _ = unsafe { (self.driver.fns.mem_free)(self.ptr) };
    }
}

/// A CUDA stream, destroyed on drop.
pub struct Stream {
    driver: &'static CudaDriver,
    raw: sys::CUstream,
}

impl Stream {
    pub fn new(driver: &'static CudaDriver) -> Result<Self, NcclError> {
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: writes one stream handle (flags 0 = default).
        driver.check("cuStreamCreate", unsafe { (driver.fns.stream_create)(&mut raw, 0) })?;
        Ok(Stream { driver, raw })
    }

    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// `cuStreamQuery`: true when all work on the stream finished.
    pub fn is_done(&self) -> Result<bool, NcclError> {
        // SAFETY: live stream.
        let rc = unsafe { (self.driver.fns.stream_query)(self.raw) };
        if rc == CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        self.driver.check("cuStreamQuery", rc).map(|_| true)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created by cuStreamCreate and destroyed once.
        let _ = unsafe { (self.driver.fns.stream_destroy)(self.raw) };
    }
}
