//! The launcher's process table (`PMIx_Query_info` of `PMIX_QUERY_PROC_TABLE`): each rank's
//! state, exit code and host as the launcher knows them, to name the ranks that never came.
//!
//! The answer's shape differs between servers: Debian's OpenMPI 4.1.4 (PMIx 4.2) returns a data
//! array of `pmix_proc_info_t`, OpenMPI 5.0.11 (OpenPMIx 5) a data array of `pmix_info_t` each
//! holding one `pmix_proc_info_t`. Both are read here; nothing of the library's is kept.

use super::value::string_of;
use super::*;

/// `PMIX_QUERY_PROC_TABLE`.
const PMIX_QUERY_PROC_TABLE: &CStr = c"pmix.qry.ptable";
/// `PMIX_NSPACE`: the qualifier naming the job.
const PMIX_NSPACE: &CStr = c"pmix.nspace";

/// `pmix_proc_info_t`.
#[repr(C)]
pub(super) struct RawProcInfo {
    pub(super) proc_: RawProc,
    pub(super) hostname: *mut c_char,
    pub(super) executable: *mut c_char,
    pub(super) pid: libc::pid_t,
    pub(super) exit_code: c_int,
    pub(super) state: u8,
}

/// `pmix_data_array_t`.
#[repr(C)]
pub(super) struct RawDataArray {
    pub(super) kind: u16,
    pub(super) size: usize,
    pub(super) array: *mut c_void,
}

/// `pmix_query_t`.
#[repr(C)]
pub(super) struct RawQuery {
    keys: *mut *mut c_char,
    qualifiers: *mut RawInfo,
    nqual: usize,
}

const _: () = assert!(std::mem::size_of::<RawProcInfo>() == 296);
const _: () = assert!(std::mem::size_of::<RawDataArray>() == 24);
const _: () = assert!(std::mem::size_of::<RawQuery>() == 24);

/// A process's state as the launcher's table gives it (`pmix_proc_state_t`, pmix_common.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcState {
    /// Started, or about to be, and not connected: it never called `PMIx_Init` (which
    /// `mcore_initialize` does first under PMIx).
    NotConnected,
    /// Connected to the server (it called `PMIx_Init`).
    Connected,
    /// Ended by a signal (the table's exit code).
    Signaled(i32),
    /// Exited (with this status), or ended otherwise after it ran (`TERMINATED` and the error
    /// states the table reports with an exit code).
    Exited(i32),
    /// Another state, by its code.
    Other(u8),
}

impl ProcState {
    /// From the table's state code and exit code.
    pub fn of(state: u8, exit_code: i32) -> ProcState {
        match state {
            // UNDEF .. RUNNING: prepped, launching, restarting, marked for termination, running.
            0..=5 => ProcState::NotConnected,
            6 => ProcState::Connected,
            // ABORTED_BY_SIG, KILLED_BY_CMD.
            54 | 51 => ProcState::Signaled(signal_of(exit_code)),
            // TERMINATED and the error states past it (aborted, exited without finalizing,
            // exited non-zero, failed to start or launch, ...).
            20..=63 => ProcState::Exited(exit_code),
            other => ProcState::Other(other),
        }
    }
}

impl std::fmt::Display for ProcState {
    /// What became of the process, in the words a user reads.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProcState::NotConnected => {
                f.write_str("never started mcore_init (its process was started but never connected to PMIx)")
            }
            ProcState::Connected => f.write_str("connected to PMIx (it runs and started mcore_init)"),
            // OpenMPI 5's table gives 0 for a process it saw killed (the event gives 137).
            ProcState::Signaled(0) => f.write_str("was killed by a signal"),
            ProcState::Signaled(sig) => write!(f, "died with signal {sig}"),
            ProcState::Exited(code) => write!(f, "exited with status {code}"),
            ProcState::Other(code) => write!(f, "in PMIx process state {code}"),
        }
    }
}

impl ProcState {
    /// Whether the process has ended.
    pub fn ended(&self) -> bool {
        matches!(self, ProcState::Signaled(_) | ProcState::Exited(_))
    }
}

/// The signal that ended a process, from the exit code the launcher reports with it: a shell's
/// 128 + N (OpenMPI gives 137 for SIGKILL), or N itself.
pub(super) fn signal_of(exit_code: i32) -> i32 {
    if exit_code > 128 {
        exit_code - 128
    } else {
        exit_code
    }
}

/// One rank's line of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcEntry {
    pub rank: u32,
    pub state: ProcState,
    /// Its host (empty when the launcher did not say).
    pub hostname: String,
    pub pid: i32,
}

impl std::fmt::Display for ProcEntry {
    /// "rank 5 (host 'n1', pid 4242) died with signal 9".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rank {} (", self.rank)?;
        if !self.hostname.is_empty() {
            write!(f, "host {}, ", crate::quote::quoted(&self.hostname))?;
        }
        write!(f, "pid {}) {}", self.pid, self.state)
    }
}

/// # Safety
/// `p` must point to a valid `pmix_proc_info_t`.
unsafe fn entry_of(p: &RawProcInfo) -> ProcEntry {
    let hostname = if p.hostname.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string of the library's.
        unsafe { CStr::from_ptr(p.hostname) }.to_string_lossy().into_owned()
    };
    ProcEntry { rank: p.proc_.rank, state: ProcState::of(p.state, p.exit_code), hostname, pid: p.pid }
}

/// The entries of a value of the answer, whichever shape it has (see the module docs); those
/// of namespace `nspace` only.
///
/// # Safety
/// `v` must be a valid `pmix_value_t` of the library's.
pub(super) unsafe fn entries_of(v: &RawValue, nspace: &[c_char; NSPACE_LEN], out: &mut Vec<ProcEntry>) {
    // SAFETY (each arm): the union member read is the one the type code names; arrays are
    // `size` elements of the type the data array names.
    match v.kind {
        PMIX_PROC_INFO => {
            if let Some(p) = unsafe { v.data.pinfo.as_ref() } {
                if p.proc_.nspace == *nspace {
                    out.push(unsafe { entry_of(p) });
                }
            }
        }
        PMIX_DATA_ARRAY => {
            let Some(d) = (unsafe { v.data.darray.as_ref() }) else { return };
            if d.array.is_null() {
                return;
            }
            match d.kind {
                PMIX_PROC_INFO => {
                    let ps = unsafe { std::slice::from_raw_parts(d.array as *const RawProcInfo, d.size) };
                    out.extend(ps.iter().filter(|p| p.proc_.nspace == *nspace).map(|p| unsafe { entry_of(p) }));
                }
                PMIX_INFO => {
                    for i in unsafe { std::slice::from_raw_parts(d.array as *const RawInfo, d.size) } {
                        unsafe { entries_of(&i.value, nspace, out) };
                    }
                }
                _ => {}
            }
        }
        _ => {}
    }
}

impl PmixClient {
    /// The launcher's table of this job's processes (`PMIx_Query_info`, blocking: abandoned at
    /// `deadline`), by rank; an error when the launcher does not answer it (Slurm's PMIx may not).
    pub fn process_table(&'static self, deadline: Deadline) -> Result<Vec<ProcEntry>, PmixError> {
        let (query, free) = (self.lib.query, self.lib.value_destruct);
        let nspace = self.me.nspace;
        let asked = bounded("PMIx_Query_info(pmix.qry.ptable)", deadline, move || {
            let mut keys = [PMIX_QUERY_PROC_TABLE.as_ptr() as *mut c_char, std::ptr::null_mut()];
            let name = CString::new(string_of(&nspace)).unwrap_or_default();
            let mut quals = [RawInfo::new(
                PMIX_NSPACE,
                RawValue { kind: PMIX_STRING, data: RawData { string: name.as_ptr() as *mut c_char } },
            )];
            let mut q = RawQuery { keys: keys.as_mut_ptr(), qualifiers: quals.as_mut_ptr(), nqual: 1 };
            let (mut results, mut n): (*mut RawInfo, usize) = (std::ptr::null_mut(), 0);
            // SAFETY: one query whose keys and qualifier live until the call returns; PMIx
            // allocates the results, released below as PMIX_INFO_FREE does.
            let rc = unsafe { query(&mut q, 1, &mut results, &mut n) };
            let mut out = Vec::new();
            if !results.is_null() {
                for i in unsafe { std::slice::from_raw_parts_mut(results, n) } {
                    if string_of(&i.key) == PMIX_QUERY_PROC_TABLE.to_string_lossy() {
                        unsafe { entries_of(&i.value, &nspace, &mut out) };
                    }
                    unsafe { free(&mut i.value) };
                }
                unsafe { libc::free(results.cast()) };
            }
            (rc, out)
        })?;
        match asked {
            (PMIX_SUCCESS, mut out) if !out.is_empty() => {
                out.sort_by_key(|e| e.rank);
                out.dedup_by_key(|e| e.rank);
                Ok(out)
            }
            (PMIX_SUCCESS, _) => {
                Err(PmixError::new("PMIx_Query_info(pmix.qry.ptable) gave no process of this job".into()))
            }
            (rc, _) => Err(self.fail("PMIx_Query_info(pmix.qry.ptable)", rc)),
        }
    }
}
