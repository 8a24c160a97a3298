//! The PMIx client, loaded at run time (`dlopen` of the launcher's own `libpmix.so.2` or the
//! system's, chosen in `choice`; no build or link dependency):
//! it sits in the backend layer beside the NCCL loader because that is where the crate's one
//! `dlopen` helper and its foreign calls live; the runtime (which forbids `unsafe`) uses it
//! through the safe [`PmixClient`] only.
//!
//! Only what the rendezvous needs is declared: `PMIx_Init`, `PMIx_Finalize`, `PMIx_Put`,
//! `PMIx_Commit`, `PMIx_Fence_nb` (with data collection), `PMIx_Get` (the job's facts, local) and
//! `PMIx_Get_nb` (what other ranks published), `PMIx_Query_info` (the launcher's process table:
//! `table.rs`), and for the layout test `PMIx_Value_load` / `PMIx_Info_load`. Every call that
//! waits on another process is non-blocking underneath and waited for here (`Call::wait`): until
//! it is over, its deadline, or the death of a rank it involves ([`interrupt_waits`]); the
//! blocking ones (`PMIx_Init`, `PMIx_Commit`, the event registration, the query) run on a thread
//! of their own and are abandoned at their deadline (`bounded`), so that no call outlives its
//! caller's wait when the server has gone away. The ABI facts (struct layouts, type codes,
//! attribute names, status codes) are those of PMIx's published `pmix_common.h` (v4.2), written
//! down in docs/pmix.md. The process's client is initialized once ([`PmixClient::get`]) and
//! finalized when the process exits, waiting at most `FINALIZE_LIMIT` (1.5 s) for it (a launcher such
//! as OpenMPI's `mpirun` treats a client that exits without finalizing as a failed process), and
//! not at all while an abandoned call is still stuck or once the server went away.
#![allow(unsafe_code)]

mod calls;
mod choice;
mod events;
mod table;
mod value;

use super::dynlib::{as_fn, DynLib};
use crate::timeout::Deadline;
use calls::{fence_done, get_done, Involves, Lent, CALLS};
pub use calls::{interrupt_waits, Fence};
pub use events::{events_registered, on_death};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
pub use table::{ProcEntry, ProcState};
use value::{key_cstring, key_text, string_of, Value};

/// Environment variable naming the PMIx library to load (then no other is tried).
pub const LIBRARY_ENV: &str = "MCORE_PMIX_LIBRARY";
/// The system's PMIx client, loaded when neither [`LIBRARY_ENV`] nor the launcher's install
/// gives one (`choice`): PMIx v4's and later's file name (Debian's libpmix2).
pub const DEFAULT_LIBRARY: &str = "libpmix.so.2";

/// `PMIX_MAX_NSLEN + 1`: a namespace is a fixed array of this many chars.
const NSPACE_LEN: usize = 256;
/// `PMIX_MAX_KEYLEN + 1`: a key is a fixed array of this many chars.
const KEY_LEN: usize = 512;

/// `pmix_status_t` codes used here.
const PMIX_SUCCESS: c_int = 0;
const PMIX_ERR_TIMEOUT: c_int = -24;
const PMIX_ERR_NOT_FOUND: c_int = -46;
const PMIX_OPERATION_SUCCEEDED: c_int = -157;
/// Said by an event handler that leaves the event to the handlers after it.
const PMIX_EVENT_NO_ACTION_TAKEN: c_int = -331;

/// The events that say a process of the job ended or cannot be reached (pmix_common.h and
/// pmix_deprecated.h of PMIx 4.2; docs/pmix.md): PMIX_ERR_PROC_ABORTED, PMIX_ERR_PROC_ABORTING,
/// PMIX_ERR_UNREACH, PMIX_ERR_LOST_CONNECTION, PMIX_PROC_TERMINATED, PMIX_EVENT_JOB_END
/// (= PMIX_ERR_JOB_TERMINATED), PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_EVENT_PROC_TERMINATED,
/// PMIX_ERR_NODE_DOWN, PMIX_ERR_PROC_KILLED_BY_CMD, PMIX_ERR_PROC_ABORTED_BY_SIG,
/// PMIX_ERR_EXIT_NONZERO_TERM.
const DEATH_EVENTS: [c_int; 12] = [-7, -9, -25, -61, -111, -145, -200, -201, -231, -400, -402, -404];
/// `PMIX_EVENT_AFFECTED_PROC`: the process an event is about (a `pmix_proc_t *`).
const PMIX_EVENT_AFFECTED_PROC: &CStr = c"pmix.evproc";

/// `pmix_data_type_t` codes used here.
const PMIX_BOOL: u16 = 1;
const PMIX_STRING: u16 = 3;
const PMIX_SIZE: u16 = 4;
const PMIX_INT: u16 = 6;
const PMIX_UINT16: u16 = 13;
const PMIX_UINT32: u16 = 14;
const PMIX_UINT64: u16 = 15;
const PMIX_BYTE_OBJECT: u16 = 27;
const PMIX_PROC: u16 = 22;
const PMIX_INFO: u16 = 24;
const PMIX_PROC_INFO: u16 = 38;
const PMIX_DATA_ARRAY: u16 = 39;

/// `pmix_scope_t`: share with every process of the job, on this node and others.
const PMIX_GLOBAL: u8 = 3;
/// `PMIX_RANK_WILDCARD`: job-level information.
const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;

/// Attribute names (`pmix_common.h`).
const PMIX_JOB_SIZE: &CStr = c"pmix.job.size";
const PMIX_LOCAL_SIZE: &CStr = c"pmix.local.size";
const PMIX_LOCAL_RANK: &CStr = c"pmix.lrank";
const PMIX_HOSTNAME: &CStr = c"pmix.hname";
const PMIX_NODEID: &CStr = c"pmix.nodeid";
const PMIX_COLLECT_DATA: &CStr = c"pmix.collect";
const PMIX_TIMEOUT: &CStr = c"pmix.timeout";
const PMIX_OPTIONAL: &CStr = c"pmix.optional";

/// `pmix_proc_t`: a namespace and a rank.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawProc {
    nspace: [c_char; NSPACE_LEN],
    rank: u32,
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawBytes {
    bytes: *mut c_char,
    size: usize,
}

/// The members of `pmix_value_t`'s data union read or written here; `_whole` gives the union
/// its full size (its largest member, `pmix_envar_t`, is two pointers and a char: 24 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
union RawData {
    flag: bool,
    string: *mut c_char,
    size: usize,
    integer: c_int,
    uint16: u16,
    uint32: u32,
    uint64: u64,
    bo: RawBytes,
    /// `pmix_proc_t *proc` (type `PMIX_PROC`).
    proc_: *mut RawProc,
    /// `pmix_proc_info_t *pinfo` (type `PMIX_PROC_INFO`).
    pinfo: *mut table::RawProcInfo,
    /// `pmix_data_array_t *darray` (type `PMIX_DATA_ARRAY`).
    darray: *mut table::RawDataArray,
    _whole: [u64; 3],
}

/// `pmix_value_t`: a type code and the data union.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawValue {
    kind: u16,
    data: RawData,
}

/// `pmix_info_t`: a key, directive flags and a value.
#[repr(C)]
struct RawInfo {
    key: [c_char; KEY_LEN],
    flags: u32,
    value: RawValue,
}

// The layouts of pmix_common.h on LP64 Linux (docs/pmix.md); the unit tests check them against
// the library itself.
const _: () = assert!(std::mem::size_of::<RawProc>() == 260);
const _: () = assert!(std::mem::size_of::<RawValue>() == 32);
const _: () = assert!(std::mem::size_of::<RawInfo>() == 552);

impl RawInfo {
    fn new(key: &CStr, value: RawValue) -> RawInfo {
        let mut info = RawInfo { key: [0; KEY_LEN], flags: 0, value };
        for (d, s) in info.key.iter_mut().zip(key.to_bytes()) {
            *d = *s as c_char;
        }
        info
    }

    fn flag(key: &CStr, on: bool) -> RawInfo {
        RawInfo::new(key, RawValue { kind: PMIX_BOOL, data: RawData { flag: on } })
    }

    /// `PMIX_TIMEOUT` in whole seconds, rounded down so that the server ends the call before the
    /// caller's deadline (Debian's mpirun 4.1.4 answered a process-table query only after a fence
    /// it still held, rounded up past the deadline, timed out), and at least 1 (0 would mean no
    /// limit).
    fn timeout(within: Duration) -> RawInfo {
        let secs = within.as_secs().clamp(1, i32::MAX as u64);
        RawInfo::new(PMIX_TIMEOUT, RawValue { kind: PMIX_INT, data: RawData { integer: secs as c_int } })
    }
}

type InitFn = unsafe extern "C" fn(*mut RawProc, *mut RawInfo, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const RawInfo, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut RawValue) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
/// `pmix_op_cbfunc_t`.
type OpCallback = unsafe extern "C" fn(c_int, *mut c_void);
type FenceNbFn =
    unsafe extern "C" fn(*const RawProc, usize, *const RawInfo, usize, Option<OpCallback>, *mut c_void) -> c_int;
/// `pmix_event_notification_cbfunc_fn_t`.
type EventDoneFn = unsafe extern "C" fn(c_int, *mut RawInfo, usize, Option<OpCallback>, *mut c_void, *mut c_void);
/// `pmix_notification_fn_t`.
type EventHandlerFn = unsafe extern "C" fn(
    usize,
    c_int,
    *const RawProc,
    *mut RawInfo,
    usize,
    *mut RawInfo,
    usize,
    Option<EventDoneFn>,
    *mut c_void,
);
/// `pmix_hdlr_reg_cbfunc_t`.
type RegisteredFn = unsafe extern "C" fn(c_int, usize, *mut c_void);
type RegisterEventFn = unsafe extern "C" fn(
    *mut c_int,
    usize,
    *mut RawInfo,
    usize,
    Option<EventHandlerFn>,
    Option<RegisteredFn>,
    *mut c_void,
) -> c_int;
/// `PMIx_Query_info` (blocking; run by [`bounded`]).
type QueryFn = unsafe extern "C" fn(*mut table::RawQuery, usize, *mut *mut RawInfo, *mut usize) -> c_int;
type GetFn = unsafe extern "C" fn(*const RawProc, *const c_char, *const RawInfo, usize, *mut *mut RawValue) -> c_int;
/// `pmix_value_cbfunc_t`.
type ValueCallback = unsafe extern "C" fn(c_int, *mut RawValue, *mut c_void);
type GetNbFn = unsafe extern "C" fn(
    *const RawProc,
    *const c_char,
    *const RawInfo,
    usize,
    Option<ValueCallback>,
    *mut c_void,
) -> c_int;
type ValueDestructFn = unsafe extern "C" fn(*mut RawValue);
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type VersionFn = unsafe extern "C" fn() -> *const c_char;
#[cfg(test)]
type ValueLoadFn = unsafe extern "C" fn(*mut RawValue, *const std::ffi::c_void, u16) -> c_int;
#[cfg(test)]
type InfoLoadFn = unsafe extern "C" fn(*mut RawInfo, *const c_char, *const std::ffi::c_void, u16) -> c_int;

/// The loaded library's entry points.
struct Library {
    init: InitFn,
    finalize: FinalizeFn,
    put: PutFn,
    commit: CommitFn,
    fence_nb: FenceNbFn,
    register_event: RegisterEventFn,
    get: GetFn,
    get_nb: GetNbFn,
    query: QueryFn,
    value_destruct: ValueDestructFn,
    error_string: ErrorStringFn,
    version: VersionFn,
    #[cfg(test)]
    lib: DynLib,
}

impl Library {
    /// Open `path` and resolve every entry point, or say which one is missing (a PMIx older
    /// than v4 lacks some).
    fn open(path: &str) -> Result<Library, String> {
        let lib = DynLib::open(path).map_err(|e| format!("cannot load the PMIx library {path}: {e}"))?;
        fn sym<F: Copy>(lib: &DynLib, name: &str) -> Result<F, String> {
            let p = lib.address(name).map_err(|e| {
                format!("the PMIx library {} has no {name} (a PMIx v4 client is needed): {e}", lib.path)
            })?;
            // SAFETY: every call site pairs `name` with the type of its declaration in pmix.h.
            Ok(unsafe { as_fn::<F>(p) })
        }
        Ok(Library {
            init: sym(&lib, "PMIx_Init")?,
            finalize: sym(&lib, "PMIx_Finalize")?,
            put: sym(&lib, "PMIx_Put")?,
            commit: sym(&lib, "PMIx_Commit")?,
            fence_nb: sym(&lib, "PMIx_Fence_nb")?,
            register_event: sym(&lib, "PMIx_Register_event_handler")?,
            get: sym(&lib, "PMIx_Get")?,
            get_nb: sym(&lib, "PMIx_Get_nb")?,
            query: sym(&lib, "PMIx_Query_info")?,
            value_destruct: sym(&lib, "PMIx_Value_destruct")?,
            error_string: sym(&lib, "PMIx_Error_string")?,
            version: sym(&lib, "PMIx_Get_version")?,
            #[cfg(test)]
            lib,
        })
    }

    /// `PMIx_Error_string(status)` with the number.
    fn describe(&self, status: c_int) -> String {
        describe_with(self.error_string, status)
    }

    fn version(&self) -> String {
        // SAFETY: PMIx_Get_version returns a static NUL-terminated string (or NULL).
        let p = unsafe { (self.version)() };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: see above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// `PMIx_Error_string(status)` (through `error_string`) with the number.
fn describe_with(error_string: ErrorStringFn, status: c_int) -> String {
    // SAFETY: PMIx_Error_string returns a static NUL-terminated string (or NULL).
    let p = unsafe { error_string(status) };
    let text = if p.is_null() {
        "unknown status".into()
    } else {
        // SAFETY: see above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    format!("{text} ({status})")
}

/// Why a PMIx call failed: the call, PMIx's own words for the status, whether it was a
/// timeout, and the ranks whose death ended its wait (none when something else did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmixError {
    pub message: String,
    pub timed_out: bool,
    /// The ranks known dead that the call involved ([`interrupt_waits`]): a failure of theirs.
    pub dead: Vec<u32>,
}

impl PmixError {
    /// A failure that is neither a timeout nor a death.
    pub fn new(message: String) -> PmixError {
        PmixError { message, timed_out: false, dead: Vec::new() }
    }
}

impl std::fmt::Display for PmixError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for PmixError {}

/// What PMIx says about this process and its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmixFacts {
    /// The job's namespace (identical for every rank of the job, distinct between jobs).
    pub nspace: String,
    pub rank: u32,
    /// `pmix.job.size`.
    pub job_size: u32,
    /// `pmix.lrank`.
    pub local_rank: u32,
    /// `pmix.local.size`.
    pub local_size: u32,
    /// `pmix.hname` of this process (empty when the server does not say).
    pub hostname: String,
    /// `pmix.nodeid` (None when the server does not say).
    pub node_id: Option<u32>,
    /// The client library's version and file.
    pub library: String,
}

/// This process's initialized PMIx client.
pub struct PmixClient {
    lib: Library,
    me: RawProc,
    facts: PmixFacts,
}

// SAFETY: PMIx's client API is thread-safe (its calls are serialized by the library's progress
// thread); `me` is plain data.
unsafe impl Send for PmixClient {}
unsafe impl Sync for PmixClient {}

static CLIENT: OnceLock<Result<PmixClient, String>> = OnceLock::new();
/// This process as `PMIx_Init` named it, and the library's `PMIx_Error_string`: set as soon as
/// `PMIx_Init` returns, so that an event that comes while the client is still being set up (a
/// rank killed right after its own `PMIx_Init`) is known to be about this job.
static ME: OnceLock<(RawProc, ErrorStringFn)> = OnceLock::new();
/// The process that initialized the client: a child forked after it (whose copy of the client
/// has no progress thread) must not finalize it when it exits.
static INIT_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The longest the process's exit waits for `PMIx_Finalize` (it answers in milliseconds; one
/// that does not, after a peer died with calls of this process still pending in the server, or
/// with the server gone, must not keep the process from exiting, nor past its deadline + 2 s).
const FINALIZE_LIMIT: Duration = Duration::from_millis(1500);

/// The server is known gone (a lost-connection event): it is not waited for at exit.
static SERVER_GONE: AtomicBool = AtomicBool::new(false);
/// Blocking calls running now ([`bounded`]): one still running at exit (abandoned, stuck in a
/// server that does not answer) means `PMIx_Finalize` would wait behind it.
static RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The longest `PMIx_Init` and the event registration may take, in ms ([`limit_init`]).
static INIT_LIMIT_MS: AtomicU64 = AtomicU64::new(0);

/// Bound the client's initialization (`PMIx_Init`, the event registration: blocking calls) by
/// `within` from its start: the runtime passes its init timeout before the first use of the
/// client. Unset, the store's default timeout (300 s).
pub fn limit_init(within: Duration) {
    let ms = u64::try_from(crate::timeout::clamp(within).as_millis()).unwrap_or(u64::MAX).max(1);
    INIT_LIMIT_MS.store(ms, Ordering::SeqCst);
}

fn init_deadline() -> Deadline {
    match INIT_LIMIT_MS.load(Ordering::SeqCst) {
        0 => Deadline::after(crate::store::DEFAULT_TIMEOUT),
        ms => Deadline::after(Duration::from_millis(ms)),
    }
}

/// Run `call` (a blocking PMIx call named `what`) on a thread of its own and wait for it until
/// `deadline`: its result, or an error naming the call when it is still running then (it is
/// abandoned, left to return or not: [`RUNNING`] counts it until it does).
fn bounded<T: Send + 'static>(
    what: &str,
    deadline: Deadline,
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PmixError> {
    let (tx, rx) = std::sync::mpsc::channel();
    RUNNING.fetch_add(1, Ordering::SeqCst);
    let run = std::thread::Builder::new().name("mcore-pmix-call".into()).spawn(move || {
        let out = call();
        RUNNING.fetch_sub(1, Ordering::SeqCst);
        let _ = tx.send(out);
    });
    if let Err(e) = run {
        RUNNING.fetch_sub(1, Ordering::SeqCst);
        // The closure moved into the failed spawn is gone: say so rather than guess.
        return Err(PmixError::new(format!("{what} was not run: no thread for it ({e})")));
    }
    let left = deadline.instant().saturating_duration_since(std::time::Instant::now());
    rx.recv_timeout(left).map_err(|_| PmixError {
        message: format!(
            "{what} did not return within {} (the launcher's PMIx server is gone or stuck); abandoned",
            crate::timeout::describe(left)
        ),
        timed_out: true,
        dead: Vec::new(),
    })
}

extern "C" fn finalize_at_exit() {
    if INIT_PID.load(Ordering::SeqCst) != std::process::id() {
        return;
    }
    let Some(Ok(c)) = CLIENT.get() else { return };
    let stuck = RUNNING.load(Ordering::SeqCst);
    if SERVER_GONE.load(Ordering::SeqCst) || stuck > 0 {
        if crate::backend::debug_log() {
            let why = if stuck > 0 { "a PMIx call did not return" } else { "the launcher's PMIx server is gone" };
            eprintln!("mcore_init: {why}: exiting without PMIx_Finalize");
        }
        return;
    }
    // SAFETY: an initialized client; no info.
    let finalize = move || unsafe { (c.lib.finalize)(std::ptr::null(), 0) };
    if bounded("PMIx_Finalize", Deadline::after(FINALIZE_LIMIT), finalize).is_err() {
        eprintln!(
            "mcore_init: PMIx_Finalize did not return within {} s; exiting without it (the launcher may report this \
             process as one that did not finalize)",
            FINALIZE_LIMIT.as_secs_f64()
        );
    }
}

impl PmixClient {
    /// The process's client: the library chosen (`choice`: [`LIBRARY_ENV`], else the
    /// launcher's own, else the system's) loaded and `PMIx_Init` called on first use; which one
    /// and why is said at `MCORE_LOG=debug`. The outcome (or why not) is kept for the process.
    pub fn get() -> Result<&'static PmixClient, String> {
        CLIENT
            .get_or_init(|| {
                let env = |k: &str| std::env::var(k).ok();
                let (lib, chosen, refused) = choice::load(&choice::candidates(&env, &|p| p.is_file()))?;
                if super::debug_log() {
                    let server = env("PMIX_VERSION").map_or(String::new(), |v| format!("; the server says PMIx {v}"));
                    let passed = refused.iter().map(|e| format!("; passed over: {e}")).collect::<String>();
                    eprintln!(
                        "mcore_init: PMIx client library {} ({}): {}{server}{passed}",
                        chosen.path,
                        lib.version(),
                        chosen.why
                    );
                }
                let client = PmixClient::init(lib, &chosen.path)?;
                INIT_PID.store(std::process::id(), Ordering::SeqCst);
                // SAFETY: registering a plain extern "C" function.
                unsafe { libc::atexit(finalize_at_exit) };
                Ok(client)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    fn init(lib: Library, path: &str) -> Result<PmixClient, String> {
        let deadline = init_deadline();
        let init = lib.init;
        let started = bounded("PMIx_Init", deadline, move || {
            let mut me = RawProc { nspace: [0; NSPACE_LEN], rank: 0 };
            // SAFETY: `me` is writable; no info.
            let rc = unsafe { init(&mut me, std::ptr::null_mut(), 0) };
            (rc, me)
        });
        let me = match started {
            Ok((PMIX_SUCCESS, me)) => {
                let _ = ME.set((me, lib.error_string));
                me
            }
            Ok((rc, _)) => return Err(format!("PMIx_Init of {path} failed: {}", lib.describe(rc))),
            // The abandoned call may still run in the library: it stays loaded (`DynLib` never
            // unloads).
            Err(e) => return Err(format!("{} ({path})", e.message)),
        };
        let mut client = PmixClient {
            facts: PmixFacts {
                nspace: string_of(&me.nspace),
                rank: me.rank,
                job_size: 0,
                local_rank: 0,
                local_size: 0,
                hostname: String::new(),
                node_id: None,
                library: format!("{} ({path})", lib.version()),
            },
            lib,
            me,
        };
        let facts = client.read_facts();
        match facts {
            Ok((job_size, local_rank, local_size, hostname, node_id)) => {
                client.facts.job_size = job_size;
                client.facts.local_rank = local_rank;
                client.facts.local_size = local_size;
                client.facts.hostname = hostname;
                client.facts.node_id = node_id;
                client.register_death_events(deadline);
                Ok(client)
            }
            Err(e) => {
                // SAFETY: initialized above; no info.
                unsafe { (client.lib.finalize)(std::ptr::null(), 0) };
                Err(e.message)
            }
        }
    }

    #[allow(clippy::type_complexity)]
    fn read_facts(&self) -> Result<(u32, u32, u32, String, Option<u32>), PmixError> {
        // What the server handed over at PMIx_Init: looked up locally only (a key it did not
        // hand over is not asked of the server, which could wait for it).
        let job = |key: &CStr| self.get_local(PMIX_RANK_WILDCARD, key).and_then(|v| self.integer(key, v));
        let mine = |key: &CStr| self.get_local(self.me.rank, key);
        let job_size = job(PMIX_JOB_SIZE)?;
        let local_size = job(PMIX_LOCAL_SIZE)?;
        let local_rank = mine(PMIX_LOCAL_RANK).and_then(|v| self.integer(PMIX_LOCAL_RANK, v))?;
        let hostname = mine(PMIX_HOSTNAME).ok().and_then(|v| v.text()).unwrap_or_default();
        let node_id = mine(PMIX_NODEID).ok().and_then(|v| v.number());
        Ok((job_size, local_rank, local_size, hostname, node_id))
    }

    /// What PMIx said about this process at `PMIx_Init`.
    pub fn facts(&self) -> &PmixFacts {
        &self.facts
    }

    fn fail(&self, call: &str, rc: c_int) -> PmixError {
        PmixError {
            message: format!("{call} failed: {}", self.lib.describe(rc)),
            timed_out: rc == PMIX_ERR_TIMEOUT,
            dead: Vec::new(),
        }
    }

    fn integer(&self, key: &CStr, v: Value) -> Result<u32, PmixError> {
        v.number().ok_or_else(|| {
            PmixError::new(format!(
                "PMIx_Get({}) gave a value of type {}, not a number that fits 32 bits",
                key_text(key),
                v.0.kind
            ))
        })
    }

    /// `PMIx_Get` of `key` of `rank` in this job from the client's own copy of the job's data
    /// (`PMIX_OPTIONAL`: the server is not asked, so nothing is waited for).
    fn get_local(&self, rank: u32, key: &CStr) -> Result<Value, PmixError> {
        let proc_ = RawProc { nspace: self.me.nspace, rank };
        let info = [RawInfo::timeout(Duration::from_secs(10)), RawInfo::flag(PMIX_OPTIONAL, true)];
        let mut out: *mut RawValue = std::ptr::null_mut();
        // SAFETY: valid proc, key and info; PMIx allocates `out` on success.
        let rc = unsafe { (self.lib.get)(&proc_, key.as_ptr(), info.as_ptr(), info.len(), &mut out) };
        if rc != PMIX_SUCCESS || out.is_null() {
            return Err(self.get_failed(rank, key, rc));
        }
        // SAFETY: `out` is a value PMIx allocated with malloc: copy what is read, then release it
        // as PMIX_VALUE_RELEASE does (destruct, then free).
        let v = unsafe { Value::copy_of(&*out) };
        unsafe {
            (self.lib.value_destruct)(out);
            libc::free(out.cast());
        }
        Ok(v)
    }

    fn get_failed(&self, rank: u32, key: &CStr, rc: c_int) -> PmixError {
        let mut e = self.fail(&format!("PMIx_Get({} of rank {rank})", key_text(key)), rc);
        if rc == PMIX_ERR_NOT_FOUND {
            e.message.push_str(" (not published)");
        }
        e
    }

    /// Start `PMIx_Get_nb` of `key` of `rank` in this job (asked of the server when the client
    /// does not hold it; PMIx ends it after at most `within`): `Err(status)` when PMIx refused.
    fn start_get(&self, rank: u32, key: &CStr, within: Duration) -> Result<calls::Call, c_int> {
        let what = format!("PMIx_Get({} of rank {rank})", key_text(key));
        let lent = Lent {
            procs: vec![RawProc { nspace: self.me.nspace, rank }],
            info: vec![RawInfo::timeout(within), RawInfo::flag(PMIX_OPTIONAL, false)],
            key: Some(key.to_owned()),
            abandoned: false,
        };
        let lib = &self.lib;
        // SAFETY: proc, key and info are lent until the callback; the call's id is the cbdata.
        let started = CALLS.start(what, lent, Involves::Ranks(vec![rank]), None, |a, id| unsafe {
            (lib.get_nb)(a.procs, a.key, a.info, a.ninfo, Some(get_done), id)
        });
        started.map_err(|(_, rc)| rc)
    }

    /// A get started by [`PmixClient::start_get`], waited for until `deadline` ([`Call::wait`]:
    /// the death of its rank ends it too). `Err`: the wait ended first; `Ok(Err(status))`:
    /// PMIx's answer was not a value.
    fn wait_get(call: Result<calls::Call, c_int>, deadline: Deadline) -> Result<Result<Value, c_int>, PmixError> {
        let call = match call {
            Ok(call) => call,
            Err(rc) => return Ok(Err(rc)),
        };
        let outcome = call.wait(deadline)?;
        Ok(match (outcome.status, outcome.value) {
            (PMIX_SUCCESS, Some(v)) => Ok(v),
            (PMIX_SUCCESS, None) => Err(PMIX_ERR_NOT_FOUND),
            (rc, _) => Err(rc),
        })
    }

    /// Publish `bytes` under `key` for every process of the job (`PMIx_Put` with global scope,
    /// then `PMIx_Commit`, which waits for the server: abandoned at `deadline`).
    pub fn publish(&'static self, key: &str, bytes: &[u8], deadline: Deadline) -> Result<(), PmixError> {
        let k = key_cstring(key)?;
        let mut value = RawValue {
            kind: PMIX_BYTE_OBJECT,
            data: RawData { bo: RawBytes { bytes: bytes.as_ptr() as *mut c_char, size: bytes.len() } },
        };
        // SAFETY: PMIx_Put copies the value; `bytes` outlives the call.
        let rc = unsafe { (self.lib.put)(PMIX_GLOBAL, k.as_ptr(), &mut value) };
        if rc != PMIX_SUCCESS {
            return Err(self.fail(&format!("PMIx_Put({key})"), rc));
        }
        let commit = self.lib.commit;
        // SAFETY: no arguments.
        let rc = bounded("PMIx_Commit", deadline, move || unsafe { commit() })?;
        if rc != PMIX_SUCCESS {
            return Err(self.fail("PMIx_Commit", rc));
        }
        Ok(())
    }

    /// Start a fence with data collection over `ranks` of this job (None: every rank) without
    /// waiting for it (`PMIx_Fence_nb`; PMIx ends it after at most `within`): [`Fence::wait`]
    /// waits for it (the death of a rank it involves ends the wait), or drop it to leave it
    /// running (a rank that only publishes).
    pub fn start_fence(&'static self, ranks: Option<&[u32]>, within: Duration) -> Result<Fence, PmixError> {
        let what = match ranks {
            None => format!("PMIx_Fence (every rank of namespace {})", self.facts.nspace),
            Some(r) => format!("PMIx_Fence ({} ranks of namespace {})", r.len(), self.facts.nspace),
        };
        let lent = Lent {
            procs: ranks.unwrap_or_default().iter().map(|&rank| RawProc { nspace: self.me.nspace, rank }).collect(),
            info: vec![RawInfo::flag(PMIX_COLLECT_DATA, true), RawInfo::timeout(within)],
            key: None,
            abandoned: false,
        };
        let lib = &self.lib;
        // SAFETY: the procs and info arrays are lent until the callback; the call's id is the
        // cbdata. PMIX_OPERATION_SUCCEEDED: done already, no callback.
        let involves = ranks.map_or(Involves::Every, |r| Involves::Ranks(r.to_vec()));
        let started = CALLS.start(what, lent, involves, Some(PMIX_OPERATION_SUCCEEDED), |a, id| unsafe {
            (lib.fence_nb)(a.procs, a.nprocs, a.info, a.ninfo, Some(fence_done), id)
        });
        match started {
            Ok(call) => Ok(Fence { call, client: self }),
            Err((what, rc)) => Err(self.fail(&what, rc)),
        }
    }

    /// The bytes each of `ranks` published under `key` ([`PmixClient::publish`]) and committed
    /// before a fence this rank took part in, all asked at once and waited for at most `within`
    /// (a record there comes at once); `None` for a rank whose record is not there by then (it
    /// did not take part). An error when a get failed otherwise: the death of its rank
    /// ([`interrupt_waits`]: [`PmixError::dead`]), the server gone, a refusal.
    pub fn fetch_fenced(&self, ranks: &[u32], key: &str, within: Duration) -> Result<Vec<Option<Vec<u8>>>, PmixError> {
        let k = key_cstring(key)?;
        let deadline = Deadline::after(within);
        let calls: Vec<_> = ranks.iter().map(|&r| self.start_get(r, &k, within)).collect();
        let mut out = Vec::with_capacity(ranks.len());
        for (&rank, call) in ranks.iter().zip(calls) {
            out.push(match Self::wait_get(call, deadline) {
                Ok(Ok(v)) => Some(self.bytes_of(rank, key, v)?),
                Ok(Err(PMIX_ERR_NOT_FOUND | PMIX_ERR_TIMEOUT)) => None,
                Err(e) if e.timed_out => None,
                Ok(Err(rc)) => return Err(self.get_failed(rank, &k, rc)),
                Err(e) => return Err(e),
            });
        }
        Ok(out)
    }

    /// The bytes `rank` published under `key`, which it may not have committed yet, without a
    /// fence: OpenMPI's server answers PMIX_ERR_NOT_FOUND at once rather than wait for it, so it
    /// is asked again, 10 ms later, then at intervals doubling up to 100 ms, until `deadline`
    /// (or `rank` is found dead).
    pub fn fetch_when_published(&self, rank: u32, key: &str, deadline: Deadline) -> Result<Vec<u8>, PmixError> {
        let k = key_cstring(key)?;
        let mut pause = Duration::from_millis(10);
        loop {
            let left = deadline.instant().saturating_duration_since(std::time::Instant::now());
            let within = left.max(pause);
            match Self::wait_get(self.start_get(rank, &k, within), Deadline::after(within))? {
                Ok(v) => return self.bytes_of(rank, key, v),
                Err(PMIX_ERR_NOT_FOUND) if left > pause => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                Err(rc) => return Err(self.get_failed(rank, &k, rc)),
            }
        }
    }

    fn bytes_of(&self, rank: u32, key: &str, v: Value) -> Result<Vec<u8>, PmixError> {
        v.bytes().ok_or_else(|| {
            PmixError::new(format!("PMIx_Get({key} of rank {rank}) gave a value of type {}, not bytes", v.0.kind))
        })
    }
}

#[cfg(test)]
mod tests;
