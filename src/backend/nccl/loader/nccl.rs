//! `NcclLibrary`: `libnccl.so.2` opened once, its symbols as typed function pointers, and a safe
//! method per call.

use super::cuda::{DeviceBuffer, Stream};
use super::{as_fn, c_text, DynLib};
use crate::backend::nccl::config::{ConfigStruct, RawConfig};
use crate::backend::nccl::error::NcclError;
use crate::backend::nccl::search::{Candidate, LibrarySearch, NCCL_SONAME};
use crate::backend::nccl::unique_id::NcclUniqueId;
use crate::backend::nccl::version::{Feature, NcclVersion};
use cudarc::nccl::sys;
use once_cell::sync::OnceCell;
use std::ffi::{c_char, c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, Ordering};

/// `ncclSuccess`.
pub(crate) const NCCL_SUCCESS: c_int = 0;
/// `ncclInProgress`: a non-blocking call has not finished yet.
pub(crate) const NCCL_IN_PROGRESS: c_int = 7;
/// `NCCL_SPLIT_NOCOLOR`: this rank joins no child of the split.
pub(crate) const NCCL_SPLIT_NOCOLOR: c_int = -1;
/// `NCCL_SHRINK_DEFAULT`: shrink a parent with no operation in flight.
pub(crate) const NCCL_SHRINK_DEFAULT: c_int = 0x00;
/// `NCCL_SHRINK_ABORT`: first terminate the parent's operations in flight (a peer failed), then
/// shrink; the parent's resources are not freed (abort it afterwards).
pub(crate) const NCCL_SHRINK_ABORT: c_int = 0x01;
/// `NCCL_SUSPEND_MEM` (nccl.h 2.29.7): a suspend releases the communicator's dynamic device memory.
pub(crate) const NCCL_SUSPEND_MEM: c_int = 0x01;
/// `ncclCommMemStat_t` values (nccl.h 2.29.7): bytes that a suspend can release, whether the
/// memory is suspended (0 or 1), bytes it keeps, and all bytes NCCL tracks.
pub(crate) const NCCL_STAT_GPU_MEM_SUSPEND: c_int = 0;
pub(crate) const NCCL_STAT_GPU_MEM_SUSPENDED: c_int = 1;
pub(crate) const NCCL_STAT_GPU_MEM_PERSIST: c_int = 2;
pub(crate) const NCCL_STAT_GPU_MEM_TOTAL: c_int = 3;

// Signatures of cudarc's `nccl::sys` functions, with results read as `c_int` (see the module doc).
type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type GetUniqueIdFn = unsafe extern "C" fn(*mut sys::ncclUniqueId) -> c_int;
type InitRankConfigFn =
    unsafe extern "C" fn(*mut sys::ncclComm_t, c_int, sys::ncclUniqueId, c_int, *mut ConfigStruct) -> c_int;
/// `ncclCommInitRankScalable(newcomm, nranks, myrank, nId, commIds, config)` (2.23+).
type InitRankScalableFn =
    unsafe extern "C" fn(*mut sys::ncclComm_t, c_int, c_int, c_int, *mut sys::ncclUniqueId, *mut ConfigStruct) -> c_int;
/// `ncclSetEncryption(const ncclEncryptionConfig_t*)` (2.32.3+).
type SetEncryptionFn = unsafe extern "C" fn(*const EncryptionConfig) -> c_int;
/// `ncclParamGetAllParameterKeys(const char*** table, int* len)` (2.30.7+).
type ParamKeysFn = unsafe extern "C" fn(*mut *const *const c_char, *mut c_int) -> c_int;
/// `ncclParamGetParameter(key, const char** value, int* len)` (2.30.7+).
type ParamGetFn = unsafe extern "C" fn(*const c_char, *mut *const c_char, *mut c_int) -> c_int;
type SplitFn = unsafe extern "C" fn(sys::ncclComm_t, c_int, c_int, *mut sys::ncclComm_t, *mut ConfigStruct) -> c_int;
/// `ncclCommShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags)`
/// (nccl.h of 2.27 and later).
type ShrinkFn =
    unsafe extern "C" fn(sys::ncclComm_t, *mut c_int, c_int, *mut sys::ncclComm_t, *mut ConfigStruct, c_int) -> c_int;
type CommFn = unsafe extern "C" fn(sys::ncclComm_t) -> c_int;
/// `ncclCommSuspend(comm, flags)` (2.29.7).
type CommFlagsFn = unsafe extern "C" fn(sys::ncclComm_t, c_int) -> c_int;
/// `ncclCommMemStats(comm, stat, *value)` (2.29.7; the stat enum passed as an int).
type MemStatsFn = unsafe extern "C" fn(sys::ncclComm_t, c_int, *mut u64) -> c_int;
type VoidFn = unsafe extern "C" fn() -> c_int;
type CommIntFn = unsafe extern "C" fn(sys::ncclComm_t, *mut c_int) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type LastErrorFn = unsafe extern "C" fn(sys::ncclComm_t) -> *const c_char;
/// `ncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream)`.
type BroadcastFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    c_int,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> c_int;
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    sys::ncclDataType_t,
    sys::ncclRedOp_t,
    sys::ncclComm_t,
    sys::cudaStream_t,
) -> c_int;

struct Fns {
    get_version: GetVersionFn,
    get_unique_id: GetUniqueIdFn,
    get_error_string: ErrorStringFn,
    comm_abort: CommFn,
    comm_destroy: CommFn,
    comm_get_async_error: CommIntFn,
    comm_count: CommIntFn,
    comm_user_rank: CommIntFn,
    all_reduce: AllReduceFn,
    group_start: VoidFn,
    group_end: VoidFn,
    // Newer than NCCL 2.0: present from the version `Feature` names.
    comm_init_rank_config: Option<InitRankConfigFn>,
    comm_split: Option<SplitFn>,
    comm_shrink: Option<ShrinkFn>,
    comm_finalize: Option<CommFn>,
    get_last_error: Option<LastErrorFn>,
    comm_suspend: Option<CommFlagsFn>,
    comm_resume: Option<CommFn>,
    comm_mem_stats: Option<MemStatsFn>,
    comm_init_rank_scalable: Option<InitRankScalableFn>,
    set_encryption: Option<SetEncryptionFn>,
    param_keys: Option<ParamKeysFn>,
    param_get: Option<ParamGetFn>,
    broadcast: Option<BroadcastFn>,
}

/// `ncclEncryptionConfig_t` of NCCL 2.32.3 (`size`, `magic`, `version` as its initializer sets
/// them, then `mode` and the NUL-terminated pre-shared key).
#[repr(C)]
pub(crate) struct EncryptionConfig {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    pub mode: c_int,
    pub psk: *const c_char,
}

/// `NCCL_ENCRYPTION_MODE_PSK`.
pub(crate) const NCCL_ENCRYPTION_MODE_PSK: c_int = 1;
/// NCCL's minimum pre-shared key length (`ncclSetEncryption` refuses shorter ones).
pub const MIN_PSK_BYTES: usize = 32;
/// The start of the message with which a TLS-less NCCL (NVIDIA's PyPI build of 2.32.3) fails
/// every connection once a key is set; only such a build carries it.
pub const NO_TLS_MARKER: &[u8] = b"NCCL was built without TLS support";
/// How errors name a TLS-less NCCL.
const NO_TLS: &str = "this NCCL was built without TLS";
/// What to do about it.
const NO_TLS_FIX: &str = "Fix: unset MCORE_NCCL_PSK_FILE (NCCL's sockets then stay unencrypted), or load an NCCL \
     built with TLS support (OpenSSL 3) through MCORE_NCCL_LIBRARY";

/// A pre-shared key NCCL accepts: at least [`MIN_PSK_BYTES`] bytes, no NUL byte.
fn check_psk(psk: &str) -> Result<(), NcclError> {
    if psk.len() < MIN_PSK_BYTES {
        return Err(NcclError::invalid(format!(
            "the NCCL encryption key (MCORE_NCCL_PSK_FILE) is {} bytes; NCCL requires a pre-shared key of at least \
             {MIN_PSK_BYTES} bytes",
            psk.len()
        )));
    }
    if psk.contains('\0') {
        return Err(NcclError::invalid("the NCCL encryption key contains a NUL byte"));
    }
    Ok(())
}

/// NCCL's error text `detail`, with a TLS-less build's late connection failure named and the
/// fix given.
fn explain_no_tls(detail: String) -> String {
    let marker = String::from_utf8_lossy(NO_TLS_MARKER);
    if detail.contains(marker.as_ref()) || detail.contains("requested without TLS support") {
        format!("{NO_TLS}, and a pre-shared key is configured: {detail}. {NO_TLS_FIX}")
    } else {
        detail
    }
}

/// The loaded NCCL library. Obtain it with [`NcclLibrary::global`] (once per process, from the
/// environment) or [`NcclLibrary::load`]; it is never unloaded.
pub struct NcclLibrary {
    lib: DynLib,
    fns: Fns,
    version: NcclVersion,
    /// Whether the process had the library loaded before this loader bound it.
    shared: bool,
    /// [`NcclLibrary::built_without_tls`], once asked.
    no_tls: OnceCell<bool>,
}

/// A communicator handle owned by exactly one Rust value; only this module creates one.
#[derive(Debug)]
pub struct RawComm(NonNull<sys::ncclComm>);

// SAFETY: NCCL communicators may be used from any thread (one at a time, which `&mut`/ownership
// of the Rust owner guarantees).
unsafe impl Send for RawComm {}

impl RawComm {
    pub fn as_ptr(&self) -> *mut c_void {
        self.0.as_ptr().cast()
    }
}

/// Heap storage for the `ncclComm_t` out-parameter of a call that may write it after returning:
/// a non-blocking `ncclCommSplit` returns `ncclSuccess` and writes the child ~20 ms later from
/// NCCL's own thread (an `ncclCommInitRankConfig` writes before returning, but nothing here relies
/// on that). The slot is freed only once NCCL is done with it ([`CommSlot::take_written`],
/// [`CommSlot::take_completed`]); dropped before that, it is leaked, so that a write that comes
/// even later lands in live memory instead of corrupting the heap.
#[derive(Debug)]
pub struct CommSlot(Option<Box<AtomicPtr<sys::ncclComm>>>);

impl CommSlot {
    fn new() -> Self {
        CommSlot(Some(Box::new(AtomicPtr::new(std::ptr::null_mut()))))
    }

    fn out_ptr(&self) -> *mut sys::ncclComm_t {
        self.0.as_ref().expect("a slot is only taken by value").as_ptr()
    }

    fn read(&self) -> *mut sys::ncclComm {
        // NCCL stores the handle with a plain write from another thread; an acquire load is the
        // best a reader can do (an aligned pointer store is not torn on the platforms NCCL runs on).
        self.0.as_ref().map_or(std::ptr::null_mut(), |b| b.load(Ordering::Acquire))
    }

    /// The handle, once NCCL wrote one (it writes a slot once); else the slot back, still pending.
    pub fn take_written(mut self) -> Result<RawComm, CommSlot> {
        match NonNull::new(self.read()) {
            Some(p) => {
                drop(self.0.take());
                Ok(RawComm(p))
            }
            None => Err(self),
        }
    }

    /// The handle after the operation completed (for a split: the parent left `ncclInProgress`),
    /// `None` when NCCL gave none (a split's non-member). Frees the slot: call it only then.
    pub fn take_completed(mut self) -> Option<RawComm> {
        let p = self.read();
        drop(self.0.take());
        NonNull::new(p).map(RawComm)
    }
}

impl Drop for CommSlot {
    /// Not taken: NCCL may still write into it, so it must stay allocated (8 bytes leaked).
    fn drop(&mut self) {
        if let Some(b) = self.0.take() {
            Box::leak(b);
        }
    }
}

static GLOBAL: OnceCell<&'static NcclLibrary> = OnceCell::new();
/// Set once this process aborted any communicator (see [`NcclLibrary::any_aborted`]).
static ABORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Set once this process made a unique id (encryption must be configured before).
static ID_MADE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Resolve a required symbol or name it in the error.
fn required<F: Copy>(lib: &DynLib, name: &str) -> Result<F, NcclError> {
    let p = lib.address(name).map_err(|detail| NcclError::MissingSymbol {
        library: "NCCL library".into(),
        path: lib.path.clone(),
        symbol: name.into(),
        detail,
    })?;
    // SAFETY: every call site pairs `name` with the type of NCCL's declaration of it.
    Ok(unsafe { as_fn::<F>(p) })
}

fn optional<F: Copy>(lib: &DynLib, name: &str) -> Option<F> {
    // SAFETY: as in `required`.
    lib.address(name).ok().map(|p| unsafe { as_fn::<F>(p) })
}

impl NcclLibrary {
    /// The process-wide library, loaded on first use from [`LibrarySearch::from_env`]. A failed
    /// load is not remembered: a later call tries again (e.g. after the environment changed).
    pub fn global() -> Result<&'static NcclLibrary, NcclError> {
        GLOBAL.get_or_try_init(|| Self::load(&LibrarySearch::from_env())).copied()
    }

    /// Load from the given candidates. One NCCL per process: unless the search is explicit
    /// (`MCORE_NCCL_LIBRARY`, which wins), a `libnccl.so.2` the process has loaded already (torch,
    /// CuPy, vLLM, a ctypes load) is bound by its soname without loading anything; else the first
    /// candidate that opens is used. A file that opens but lacks a required symbol is an error
    /// (not skipped). The result lives for the process; [`NcclLibrary::shared`] says whether it
    /// was loaded before.
    pub fn load(search: &LibrarySearch) -> Result<&'static NcclLibrary, NcclError> {
        let mut tried = Vec::new();
        let global = search.global_symbols;
        let leak = |l: NcclLibrary| &*Box::leak(Box::new(l));
        // Looked for before anything is opened: afterwards our own copy would answer too.
        let loaded = DynLib::open_loaded(NCCL_SONAME, global);
        if !search.explicit {
            if let Some(lib) = loaded {
                return Self::from_lib(lib, true).map(leak);
            }
        }
        if let Some((lib, shared)) = Self::first_that_opens(&search.candidates, global, &mut tried) {
            let other = loaded.and_then(|l| l.file_of("ncclGetVersion"));
            let ours = lib.file_of("ncclGetVersion");
            if let (Some(other), false) = (other, shared) {
                if Some(&other) != ours.as_ref() {
                    crate::backend::nccl::config::warn_once_for(
                        "two NCCLs".into(),
                        format!(
                            "MCORE_NCCL_LIBRARY={} loads a second NCCL into a process that has {} loaded already: a \
                             communicator of one must never be handed to code that calls the other",
                            lib.path,
                            other.display()
                        ),
                    );
                }
            }
            return Self::from_lib(lib, shared).map(leak);
        }
        if search.ask_python {
            let more = search.python_candidates();
            if let Some((lib, shared)) = Self::first_that_opens(&more, global, &mut tried) {
                return Self::from_lib(lib, shared).map(leak);
            }
        }
        Err(NcclError::LibraryNotFound { library: "NCCL (libnccl.so.2)".into(), tried, hint: search.hint() })
    }

    /// The first candidate that opens, and whether the process had it loaded already.
    fn first_that_opens(
        candidates: &[Candidate],
        global: bool,
        tried: &mut Vec<(String, String)>,
    ) -> Option<(DynLib, bool)> {
        for cand in candidates {
            let shown = cand.display();
            if let Candidate::Path(p) = cand {
                if !p.exists() {
                    tried.push((shown, "no such file".to_string()));
                    continue;
                }
            }
            if let Some(lib) = DynLib::open_loaded(&shown, global) {
                return Some((lib, true));
            }
            let opened = if global { DynLib::open_global(&shown) } else { DynLib::open(&shown) };
            match opened {
                Ok(lib) => return Some((lib, false)),
                Err(why) => tried.push((shown, why)),
            }
        }
        None
    }

    fn from_lib(lib: DynLib, shared: bool) -> Result<NcclLibrary, NcclError> {
        let fns = match Self::resolve(&lib) {
            Ok(f) => f,
            Err(e) => {
                // Closing drops only our reference: a library loaded before stays loaded.
                lib.close();
                return Err(e);
            }
        };
        let mut code: c_int = 0;
        // SAFETY: ncclGetVersion writes one int.
        let rc = unsafe { (fns.get_version)(&mut code) };
        let version = if rc == NCCL_SUCCESS { NcclVersion::from_code(code) } else { Err(NcclError::invalid("")) };
        let version = version.map_err(|_| NcclError::Call {
            call: format!("ncclGetVersion of {}", lib.path),
            code: rc,
            name: result_name(rc).into(),
            detail: format!("returned version code {code}"),
        })?;
        if version.major < 2 {
            return Err(NcclError::VersionTooOld {
                feature: "this library".into(),
                needed: "2.0".into(),
                found: version.to_string(),
            });
        }
        Ok(NcclLibrary { lib, fns, version, shared, no_tls: OnceCell::new() })
    }

    fn resolve(lib: &DynLib) -> Result<Fns, NcclError> {
        Ok(Fns {
            get_version: required(lib, "ncclGetVersion")?,
            get_unique_id: required(lib, "ncclGetUniqueId")?,
            get_error_string: required(lib, "ncclGetErrorString")?,
            comm_abort: required(lib, "ncclCommAbort")?,
            comm_destroy: required(lib, "ncclCommDestroy")?,
            comm_get_async_error: required(lib, "ncclCommGetAsyncError")?,
            comm_count: required(lib, "ncclCommCount")?,
            comm_user_rank: required(lib, "ncclCommUserRank")?,
            all_reduce: required(lib, "ncclAllReduce")?,
            group_start: required(lib, "ncclGroupStart")?,
            group_end: required(lib, "ncclGroupEnd")?,
            comm_init_rank_config: optional(lib, "ncclCommInitRankConfig"),
            comm_split: optional(lib, "ncclCommSplit"),
            comm_shrink: optional(lib, "ncclCommShrink"),
            comm_finalize: optional(lib, "ncclCommFinalize"),
            get_last_error: optional(lib, "ncclGetLastError"),
            comm_suspend: optional(lib, "ncclCommSuspend"),
            comm_resume: optional(lib, "ncclCommResume"),
            comm_mem_stats: optional(lib, "ncclCommMemStats"),
            comm_init_rank_scalable: optional(lib, "ncclCommInitRankScalable"),
            set_encryption: optional(lib, "ncclSetEncryption"),
            param_keys: optional(lib, "ncclParamGetAllParameterKeys"),
            param_get: optional(lib, "ncclParamGetParameter"),
            broadcast: optional(lib, "ncclBroadcast"),
        })
    }

    /// The version `ncclGetVersion` reported.
    pub fn version(&self) -> NcclVersion {
        self.version
    }

    /// Whether NCCL's symbols were resolved through the process's global scope
    /// ([`LibrarySearch::global_symbols`]).
    pub fn global_symbols(&self) -> bool {
        self.lib.is_global()
    }

    /// The file (or loader name) that was opened.
    pub fn path(&self) -> &str {
        &self.lib.path
    }

    /// The file the library was loaded from (`dladdr`), else what was opened.
    pub fn file(&self) -> String {
        self.lib.file_of("ncclGetVersion").map_or_else(|| self.lib.path.clone(), |p| p.display().to_string())
    }

    /// Whether the process had this library loaded before the loader bound it (another user of
    /// NCCL in the process loaded it first): a `ncclComm_t` may then pass between them.
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// Fail unless the loaded version has `feature`; also checks that its symbol is present.
    pub fn require(&self, feature: Feature) -> Result<(), NcclError> {
        self.version.require(feature)?;
        let (present, symbol) = match feature {
            Feature::CommInitRankConfig => (self.fns.comm_init_rank_config.is_some(), "ncclCommInitRankConfig"),
            Feature::CommSplit => (self.fns.comm_split.is_some(), "ncclCommSplit"),
            Feature::MultiRankGpu => (true, ""),
            Feature::CommShrink => (self.fns.comm_shrink.is_some(), "ncclCommShrink"),
            Feature::CommSuspend => {
                (self.fns.comm_suspend.is_some() && self.fns.comm_resume.is_some(), "ncclCommSuspend/ncclCommResume")
            }
            Feature::InitRankScalable => (self.fns.comm_init_rank_scalable.is_some(), "ncclCommInitRankScalable"),
            Feature::Encryption => (self.fns.set_encryption.is_some(), "ncclSetEncryption"),
            Feature::ParamApi => {
                (self.fns.param_keys.is_some() && self.fns.param_get.is_some(), "ncclParamGetParameter")
            }
            Feature::ConcurrentInit => (true, ""),
        };
        if present {
            Ok(())
        } else {
            Err(NcclError::MissingSymbol {
                library: format!("NCCL {}", self.version),
                path: self.lib.path.clone(),
                symbol: symbol.into(),
                detail: "not exported although the version should have it".into(),
            })
        }
    }

    /// `ncclGetErrorString(code)`.
    pub fn error_string(&self, code: c_int) -> String {
        // SAFETY: returns a static string for any code.
        unsafe { c_text((self.fns.get_error_string)(code)) }
    }

    /// `ncclGetLastError(comm)`: NCCL's last warning text (empty when unavailable).
    pub fn last_error(&self, comm: Option<&RawComm>) -> String {
        let Some(f) = self.fns.get_last_error else { return String::new() };
        let p = comm.map_or(std::ptr::null_mut(), |c| c.0.as_ptr());
        // SAFETY: NULL or a live communicator; the text is copied at once.
        unsafe { c_text(f(p)) }
    }

    /// An error for `call` returning `code`, with NCCL's name and last warning.
    pub fn call_error(&self, call: &str, code: c_int, comm: Option<&RawComm>) -> NcclError {
        let mut detail = self.error_string(code);
        let last = self.last_error(comm);
        if !last.is_empty() {
            detail = format!("{detail}; NCCL says: {last}");
        }
        NcclError::Call { call: call.into(), code, name: result_name(code).into(), detail: explain_no_tls(detail) }
    }

    /// `ncclGetUniqueId`: needs no GPU; starts the bootstrap root in this process.
    pub fn unique_id(&self) -> Result<NcclUniqueId, NcclError> {
        ID_MADE.store(true, Ordering::SeqCst);
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        // SAFETY: writes 128 bytes into `id`.
        let rc = unsafe { (self.fns.get_unique_id)(&mut id) };
        if rc != NCCL_SUCCESS {
            return Err(self.call_error("ncclGetUniqueId", rc, None));
        }
        Ok(NcclUniqueId::from_sys(&id))
    }

    /// `ncclCommInitRankConfig`: the returned code and the slot NCCL writes the communicator into
    /// (which may still be initializing when the code is `ncclInProgress`).
    pub fn comm_init_rank_config(
        &self,
        nranks: c_int,
        id: &NcclUniqueId,
        rank: c_int,
        config: &mut RawConfig,
    ) -> Result<(c_int, CommSlot), NcclError> {
        self.require(Feature::CommInitRankConfig)?;
        let f = self.fns.comm_init_rank_config.expect("checked by require");
        let slot = CommSlot::new();
        // SAFETY: the out-pointer is a heap slot that outlives any late write (see `CommSlot`);
        // NCCL copies the config during the call.
        let rc = unsafe { f(slot.out_ptr(), nranks, id.to_sys(), rank, &mut config.raw) };
        Ok((rc, slot))
    }

    /// `ncclCommInitRankScalable` with `ids` (one per root, the same list on every rank): the
    /// code and the slot, as [`NcclLibrary::comm_init_rank_config`].
    pub fn comm_init_rank_scalable(
        &self,
        nranks: c_int,
        rank: c_int,
        ids: &[NcclUniqueId],
        config: &mut RawConfig,
    ) -> Result<(c_int, CommSlot), NcclError> {
        self.require(Feature::InitRankScalable)?;
        let f = self.fns.comm_init_rank_scalable.expect("checked by require");
        let n = c_int::try_from(ids.len())
            .map_err(|_| NcclError::invalid(format!("{} unique ids do not fit a C int", ids.len())))?;
        if n == 0 {
            return Err(NcclError::invalid("ncclCommInitRankScalable needs at least one unique id"));
        }
        let mut list: Vec<sys::ncclUniqueId> = ids.iter().map(|i| i.to_sys()).collect();
        let slot = CommSlot::new();
        // SAFETY: `n` ids at `list` for the call; the out-pointer is a heap slot that outlives any
        // late write; NCCL copies the ids and the config during the call.
        let rc = unsafe { f(slot.out_ptr(), nranks, rank, n, list.as_mut_ptr(), &mut config.raw) };
        Ok((rc, slot))
    }

    /// `ncclSetEncryption` with a pre-shared key (2.32.3+; the error names the loaded version
    /// below it). Call before the process's first unique id. A key shorter than NCCL's minimum
    /// ([`MIN_PSK_BYTES`]) is refused first; then a library built without TLS
    /// ([`NcclLibrary::built_without_tls`]) is refused naming the fix, since NVIDIA's build
    /// accepts the key and only fails every connection later.
    pub fn set_encryption_psk(&self, psk: &str) -> Result<(), NcclError> {
        check_psk(psk)?;
        self.require(Feature::Encryption)?;
        let f = self.fns.set_encryption.expect("checked by require");
        if self.built_without_tls() {
            return Err(NcclError::invalid(format!(
                "{NO_TLS} (NCCL {} at {}, which carries NCCL's own message \"{}\"): with a pre-shared key every NCCL \
                 connection would fail. {NO_TLS_FIX}",
                self.version,
                self.file(),
                String::from_utf8_lossy(NO_TLS_MARKER),
            )));
        }
        if ID_MADE.load(Ordering::SeqCst) {
            return Err(NcclError::invalid(
                "ncclSetEncryption must come before this process's first NCCL unique id, and one was already made",
            ));
        }
        let key = std::ffi::CString::new(psk).expect("checked by check_psk");
        let cfg = EncryptionConfig {
            size: std::mem::size_of::<EncryptionConfig>(),
            magic: crate::backend::nccl::config::CONFIG_MAGIC,
            version: self.version.code(),
            mode: NCCL_ENCRYPTION_MODE_PSK,
            psk: key.as_ptr(),
        };
        // SAFETY: a config and a key alive for the call; NCCL copies the key.
        let rc = unsafe { f(&cfg) };
        if rc != NCCL_SUCCESS {
            return Err(self.call_error("ncclSetEncryption", rc, None));
        }
        Ok(())
    }

    /// Whether the loaded file was built without TLS: it carries the message NVIDIA's TLS-less
    /// builds fail connections with ([`NO_TLS_MARKER`]; found in the PyPI wheels of 2.32.3, which
    /// reference no OpenSSL library at all). Read from the file once per process (the PyPI
    /// library is ~340 MB; only asked when a key is configured; remembered per library); a file that cannot be read
    /// counts as built with TLS (a late failure is still explained, see
    /// [`NcclLibrary::call_error`]).
    pub fn built_without_tls(&self) -> bool {
        *self.no_tls.get_or_init(|| self.lib.file_contains("ncclGetVersion", NO_TLS_MARKER).unwrap_or(false))
    }

    /// NCCL's own parameters, `(key, value)` (2.30.7+ parameter API); `None` without it.
    pub fn parameters(&self) -> Option<Vec<(String, String)>> {
        self.version.require(Feature::ParamApi).ok()?;
        let (keys_fn, get) = (self.fns.param_keys?, self.fns.param_get?);
        let mut table: *const *const c_char = std::ptr::null();
        let mut n: c_int = 0;
        // SAFETY: NCCL writes a table pointer it owns and its length.
        if unsafe { keys_fn(&mut table, &mut n) } != NCCL_SUCCESS || table.is_null() || n < 0 {
            return None;
        }
        // SAFETY: `n` key pointers at `table`, valid until the next call on this thread; copied now.
        let keys: Vec<String> = (0..n as usize).map(|i| unsafe { c_text(*table.add(i)) }).collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let Ok(ck) = std::ffi::CString::new(k.as_str()) else { continue };
            let mut v: *const c_char = std::ptr::null();
            let mut len: c_int = 0;
            // SAFETY: a live key; the value is NCCL's per-thread buffer, copied at once.
            if unsafe { get(ck.as_ptr(), &mut v, &mut len) } == NCCL_SUCCESS {
                // SAFETY: NULL or a NUL-terminated string.
                out.push((k, unsafe { c_text(v) }));
            }
        }
        Some(out)
    }

    /// `ncclCommSplit(parent, color, key, &child, config)`; `color` `NCCL_SPLIT_NOCOLOR` for
    /// non-members, `config` `None` to inherit the parent's. With a non-blocking parent the child
    /// is written into the slot after the call returned: read it with
    /// [`CommSlot::take_completed`] once the parent left `ncclInProgress`.
    pub fn comm_split(
        &self,
        parent: &RawComm,
        color: c_int,
        key: c_int,
        config: Option<&mut RawConfig>,
    ) -> Result<(c_int, CommSlot), NcclError> {
        self.require(Feature::CommSplit)?;
        let f = self.fns.comm_split.expect("checked by require");
        let slot = CommSlot::new();
        let cfg = config.map_or(std::ptr::null_mut(), |c| &mut c.raw as *mut _);
        // SAFETY: live parent, a heap out-pointer that outlives any late write, NULL or a config
        // NCCL copies during the call.
        let rc = unsafe { f(parent.0.as_ptr(), color, key, slot.out_ptr(), cfg) };
        Ok((rc, slot))
    }

    /// `ncclCommShrink(parent, exclude, n, &child, config, flags)`: `exclude` are ranks of
    /// `parent`; `config` `None` inherits the parent's; `abort_parent` passes `NCCL_SHRINK_ABORT`
    /// (a peer failed: end the parent's operations in flight first), else `NCCL_SHRINK_DEFAULT`.
    /// As with a split, a non-blocking parent may have the child written into the slot after the
    /// call returned.
    pub fn comm_shrink(
        &self,
        parent: &RawComm,
        exclude: &[c_int],
        config: Option<&mut RawConfig>,
        abort_parent: bool,
    ) -> Result<(c_int, CommSlot), NcclError> {
        self.require(Feature::CommShrink)?;
        let f = self.fns.comm_shrink.expect("checked by require");
        let n = c_int::try_from(exclude.len())
            .map_err(|_| NcclError::invalid(format!("{} excluded ranks do not fit a C int", exclude.len())))?;
        // NCCL takes a non-const list; give it a copy it may reorder.
        let mut list = exclude.to_vec();
        let flags = if abort_parent { NCCL_SHRINK_ABORT } else { NCCL_SHRINK_DEFAULT };
        let slot = CommSlot::new();
        let cfg = config.map_or(std::ptr::null_mut(), |c| &mut c.raw as *mut _);
        // SAFETY: live parent, `n` ints at `list` for the call, a heap out-pointer that outlives
        // any late write, NULL or a config NCCL copies during the call.
        let rc = unsafe { f(parent.0.as_ptr(), list.as_mut_ptr(), n, slot.out_ptr(), cfg, flags) };
        Ok((rc, slot))
    }

    /// Whether the library has `ncclCommSuspend` and `ncclCommResume` (2.29.7+, both exported).
    pub fn has_suspend(&self) -> bool {
        self.require(Feature::CommSuspend).is_ok()
    }

    /// `ncclCommSuspend(comm, NCCL_SUSPEND_MEM)`: the code NCCL returned.
    pub fn comm_suspend(&self, comm: &RawComm) -> Result<c_int, NcclError> {
        self.require(Feature::CommSuspend)?;
        let f = self.fns.comm_suspend.expect("checked by require");
        // SAFETY: live communicator, flags by value.
        Ok(unsafe { f(comm.0.as_ptr(), NCCL_SUSPEND_MEM) })
    }

    /// `ncclCommResume(comm)`: the code NCCL returned.
    pub fn comm_resume(&self, comm: &RawComm) -> Result<c_int, NcclError> {
        self.require(Feature::CommSuspend)?;
        let f = self.fns.comm_resume.expect("checked by require");
        // SAFETY: live communicator.
        Ok(unsafe { f(comm.0.as_ptr()) })
    }

    /// `ncclCommMemStats(comm, stat, &value)`; `None` when the library has no such call.
    /// (A library that reports an older version than 2.29.7 is not asked, whatever it exports.)
    pub fn comm_mem_stat(&self, comm: &RawComm, stat: c_int) -> Option<Result<u64, NcclError>> {
        self.version.require(Feature::CommSuspend).ok()?;
        let f = self.fns.comm_mem_stats?;
        let mut value: u64 = 0;
        // SAFETY: live communicator; writes one uint64_t.
        let rc = unsafe { f(comm.0.as_ptr(), stat, &mut value) };
        Some(if rc == NCCL_SUCCESS { Ok(value) } else { Err(self.call_error("ncclCommMemStats", rc, Some(comm))) })
    }

    /// `ncclGroupStart`: calls up to the matching [`NcclLibrary::group_end`] are started together.
    pub fn group_start(&self) -> c_int {
        // SAFETY: no arguments; NCCL keeps a per-thread group depth.
        unsafe { (self.fns.group_start)() }
    }

    /// `ncclGroupEnd`: launches the group's calls (`ncclInProgress` while non-blocking ones run).
    pub fn group_end(&self) -> c_int {
        // SAFETY: as in `group_start`.
        unsafe { (self.fns.group_end)() }
    }

    /// `ncclCommGetAsyncError`: the communicator's state (`ncclInProgress` while initializing),
    /// or the code of the query itself when that fails.
    pub fn comm_async_error(&self, comm: &RawComm) -> Result<c_int, c_int> {
        let mut state: c_int = NCCL_SUCCESS;
        // SAFETY: live communicator; writes one enum-sized int.
        let rc = unsafe { (self.fns.comm_get_async_error)(comm.0.as_ptr(), &mut state) };
        if rc == NCCL_SUCCESS {
            Ok(state)
        } else {
            Err(rc)
        }
    }

    /// `ncclCommAbort`: frees the communicator without waiting for peers.
    pub fn comm_abort(&self, comm: RawComm) -> c_int {
        ABORTED.store(true, Ordering::SeqCst);
        // SAFETY: `comm` is owned and not used again.
        unsafe { (self.fns.comm_abort)(comm.0.as_ptr()) }
    }

    /// `ncclCommFinalize` (flushes outstanding work; may return `ncclInProgress` on a non-blocking
    /// communicator). `None` when the library has no such call (before 2.14).
    pub fn comm_finalize(&self, comm: &RawComm) -> Option<c_int> {
        // SAFETY: live communicator.
        self.fns.comm_finalize.map(|f| unsafe { f(comm.0.as_ptr()) })
    }

    /// Whether this process aborted any communicator: from then on communicators are released
    /// with abort, never destroy (NCCL 2.31.2's destroy waits, untimed, on an intra-node barrier
    /// that a communicator aborted elsewhere never reaches).
    pub fn any_aborted(&self) -> bool {
        ABORTED.load(Ordering::SeqCst)
    }

    /// `ncclCommDestroy`.
    pub fn comm_destroy(&self, comm: RawComm) -> c_int {
        // SAFETY: `comm` is owned and not used again.
        unsafe { (self.fns.comm_destroy)(comm.0.as_ptr()) }
    }

    /// `(ncclCommCount, ncclCommUserRank)`.
    pub fn comm_size_rank(&self, comm: &RawComm) -> Result<(c_int, c_int), NcclError> {
        let (mut n, mut r) = (0, 0);
        // SAFETY: live communicator; each writes one int.
        let rc = unsafe { (self.fns.comm_count)(comm.0.as_ptr(), &mut n) };
        if rc != NCCL_SUCCESS {
            return Err(self.call_error("ncclCommCount", rc, Some(comm)));
        }
        // SAFETY: as above.
        let rc = unsafe { (self.fns.comm_user_rank)(comm.0.as_ptr(), &mut r) };
        if rc != NCCL_SUCCESS {
            return Err(self.call_error("ncclCommUserRank", rc, Some(comm)));
        }
        Ok((n, r))
    }

    /// In-place `ncclAllReduce(sum)` of `count` values of `dtype` in `buf` on `stream`
    /// (enqueued only).
    pub fn all_reduce_sum(
        &self,
        comm: &RawComm,
        buf: &DeviceBuffer,
        count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<c_int, NcclError> {
        fits(buf, count, dtype)?;
        let p = buf.device_ptr() as *mut c_void;
        // SAFETY: `buf` holds `count` values of `dtype` on the communicator's device; `stream` is live.
        Ok(unsafe {
            (self.fns.all_reduce)(
                p,
                p,
                count,
                dtype.sys(),
                sys::ncclRedOp_t::ncclSum,
                comm.0.as_ptr(),
                stream.raw().cast(),
            )
        })
    }

    /// In-place `ncclBroadcast` of `count` values of `dtype` in `buf` from `root` on `stream`
    /// (enqueued only).
    pub fn broadcast(
        &self,
        comm: &RawComm,
        buf: &DeviceBuffer,
        count: usize,
        dtype: DataType,
        root: c_int,
        stream: &Stream,
    ) -> Result<c_int, NcclError> {
        fits(buf, count, dtype)?;
        let f = self.fns.broadcast.ok_or_else(|| NcclError::MissingSymbol {
            library: format!("NCCL {}", self.version),
            path: self.lib.path.clone(),
            symbol: "ncclBroadcast".into(),
            detail: "not exported".into(),
        })?;
        let p = buf.device_ptr() as *mut c_void;
        // SAFETY: as in `all_reduce_sum`; `root` is checked by NCCL.
        Ok(unsafe { f(p, p, count, dtype.sys(), root, comm.0.as_ptr(), stream.raw().cast()) })
    }
}

/// The NCCL data types this crate moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// `ncclUint8`: bytes.
    Uint8,
    /// `ncclInt64`.
    Int64,
    /// `ncclFloat32` (vLLM's warm-up all-reduce).
    Float32,
}

impl DataType {
    fn sys(self) -> sys::ncclDataType_t {
        match self {
            DataType::Uint8 => sys::ncclDataType_t::ncclUint8,
            DataType::Int64 => sys::ncclDataType_t::ncclInt64,
            DataType::Float32 => sys::ncclDataType_t::ncclFloat32,
        }
    }

    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            DataType::Uint8 => 1,
            DataType::Int64 => 8,
            DataType::Float32 => 4,
        }
    }
}

fn fits(buf: &DeviceBuffer, count: usize, dtype: DataType) -> Result<(), NcclError> {
    if count.checked_mul(dtype.size()).map_or(true, |b| b > buf.bytes()) {
        return Err(NcclError::invalid(format!(
            "{count} values of {dtype:?} do not fit a {}-byte device buffer",
            buf.bytes()
        )));
    }
    Ok(())
}

/// NCCL's name for a result code (cudarc's `ncclResult_t` variants).
pub fn result_name(code: c_int) -> &'static str {
    match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        8 => "ncclTimeout",
        _ => "unknown ncclResult_t",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comm_slot_yields_only_what_was_written_into_it() {
        let slot = CommSlot::new();
        let slot = slot.take_written().expect_err("nothing written yet");
        let fake = NonNull::<u64>::dangling().as_ptr().cast::<sys::ncclComm>();
        // SAFETY: the out-pointer is valid; this plays NCCL's (possibly late) write.
        unsafe { *slot.out_ptr() = fake };
        let comm = slot.take_written().expect("written");
        assert_eq!(comm.as_ptr(), fake.cast());
        assert!(CommSlot::new().take_completed().is_none(), "a non-member's slot stays NULL");
    }

    #[test]
    fn short_keys_are_refused_naming_the_rule() {
        let e = check_psk("0123456789abcdef0123456789abcde").unwrap_err().to_string();
        assert!(e.contains("is 31 bytes") && e.contains("at least 32 bytes"), "{e}");
        assert!(check_psk("0123456789abcdef0123456789abcdef").is_ok());
        assert!(check_psk("0123456789abcdef0123456789abcdef\0").unwrap_err().to_string().contains("NUL"));
    }

    #[test]
    fn a_late_no_tls_failure_is_named_with_its_fix() {
        let nccl = "internal error; NCCL says: NCCL was built without TLS support but a pre-shared key was configured";
        let e = explain_no_tls(nccl.to_string());
        assert!(e.starts_with("this NCCL was built without TLS") && e.contains(nccl), "{e}");
        assert!(e.contains("unset MCORE_NCCL_PSK_FILE"), "{e}");
        assert_eq!(explain_no_tls("remote process exited".into()), "remote process exited");
    }

    #[test]
    fn the_encryption_config_is_as_large_as_nvidias() {
        // sizeof(ncclEncryptionConfig_t) in 2.32.3's nccl.h (docs/backends.md's header table).
        assert_eq!(std::mem::size_of::<EncryptionConfig>(), 32);
    }

    #[test]
    fn shrink_flags_are_nccls() {
        // nccl.h (2.27+): NCCL_SHRINK_DEFAULT 0x00, NCCL_SHRINK_ABORT 0x01.
        assert_eq!((NCCL_SHRINK_DEFAULT, NCCL_SHRINK_ABORT), (0, 1));
    }
}
