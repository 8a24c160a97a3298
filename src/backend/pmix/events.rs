//! PMIx's events about ended processes of this job, reported to the runtime's one dead list,
//! and the loss of the connection to the server, which ends every wait.

use super::value::{key_text, string_of};
use super::*;
use crate::lock::Unpoisoned;
use std::sync::Mutex;

/// Where PMIx death events are reported: the runtime's one dead list (`runtime::faults`).
type DeathSink = Box<dyn Fn(u32, String) + Send + Sync>;
/// The sink, and what the launcher reported so far (the rank, what it said): a death reported
/// before the runtime's attempt set its sink (a rank killed right after `PMIx_Init`, before the
/// others' attempt began) is told to the sink when it is set. Not a dead list: nothing reads it
/// but the sinks.
static ON_DEATH: Mutex<Deaths> = Mutex::new(Deaths { sink: None, heard: Vec::new() });

/// See [`ON_DEATH`].
struct Deaths {
    sink: Option<DeathSink>,
    heard: Vec<(u32, String)>,
}

/// Report the ranks of this job that a PMIx event says ended (the rank, and what the event said)
/// to `sink`: those reported already at once, the others as they come (`None`: to nobody). Set
/// once per initialization attempt by the runtime.
pub fn on_death(sink: Option<DeathSink>) {
    let mut d = ON_DEATH.locked();
    if let Some(s) = &sink {
        for (rank, what) in &d.heard {
            s(*rank, what.clone());
        }
    }
    d.sink = sink;
}

/// Whether the handler of [`DEATH_EVENTS`] is registered ([`events_registered`]).
static EVENTS_ON: AtomicBool = AtomicBool::new(false);

/// Whether this process's PMIx client listens for the launcher's death events (whether the
/// launcher sends them is its own setting: docs/pmix.md).
pub fn events_registered() -> bool {
    EVENTS_ON.load(Ordering::SeqCst)
}

/// `PMIX_ERR_LOST_CONNECTION` and its older code `PMIX_ERR_LOST_CONNECTION_TO_SERVER`: about
/// no rank of this job, they say the server is gone.
const LOST_CONNECTION: [c_int; 2] = [-61, -101];
/// `PMIX_ERR_PROC_ABORTED_BY_SIG`, `PMIX_ERR_EXIT_NONZERO_TERM`.
const ABORTED_BY_SIGNAL: c_int = -402;
const EXIT_NONZERO: c_int = -404;
/// `PMIX_EXIT_CODE`: the exit code of the process an event is about (an int).
const PMIX_EXIT_CODE: &CStr = c"pmix.exit.code";

/// What an event with `status` and `exit_code` says of a process's end, as the launcher
/// reported it: the signal or the exit status when the event carries it, and PMIx's words.
pub(super) fn ended(status_words: &str, status: c_int, exit_code: Option<c_int>) -> String {
    match (status, exit_code) {
        (ABORTED_BY_SIGNAL, Some(code)) => {
            format!("killed by signal {}; PMIx event {status_words}", table::signal_of(code))
        }
        (EXIT_NONZERO, Some(code)) => format!("exited with status {code}; PMIx event {status_words}"),
        (_, Some(code)) => format!("PMIx event {status_words}, exit code {code}"),
        (_, None) => format!("PMIx event {status_words}"),
    }
}

/// `pmix_notification_fn_t` for [`DEATH_EVENTS`]: note the affected rank of this job (the
/// `PMIX_EVENT_AFFECTED_PROC` info, else the event's source) and report it, with its exit code
/// when the event carries one, to the runtime's dead list ([`on_death`], whose interrupt ends the
/// waits that involve it), say it at debug level, and leave the event to other handlers. A lost
/// connection about no rank of this job ends every wait: the server is gone.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn on_death_event(
    _id: usize,
    status: c_int,
    source: *const RawProc,
    info: *mut RawInfo,
    ninfo: usize,
    _results: *mut RawInfo,
    _nresults: usize,
    done: Option<EventDoneFn>,
    cbdata: *mut c_void,
) {
    let mine = ME.get();
    let of_this_job = |p: *const RawProc| -> Option<u32> {
        // SAFETY: PMIx hands valid procs (or NULL).
        let p = unsafe { p.as_ref() }?;
        (mine.is_some_and(|(me, _)| me.nspace == p.nspace) && p.rank < PMIX_RANK_WILDCARD).then_some(p.rank)
    };
    let infos: &[RawInfo] = if info.is_null() || ninfo == 0 {
        &[]
    } else {
        // SAFETY: PMIx hands `ninfo` infos at `info`.
        unsafe { std::slice::from_raw_parts(info, ninfo) }
    };
    let affected = infos
        .iter()
        // SAFETY: the union member read is the one the type code names.
        .find(|i| string_of(&i.key) == key_text(PMIX_EVENT_AFFECTED_PROC) && i.value.kind == PMIX_PROC)
        .and_then(|i| of_this_job(unsafe { i.value.data.proc_ }))
        .or_else(|| of_this_job(source));
    let exit_code = infos
        .iter()
        // SAFETY: the union member read is the one the type code names.
        .find(|i| string_of(&i.key) == key_text(PMIX_EXIT_CODE) && i.value.kind == PMIX_INT)
        .map(|i| unsafe { i.value.data.integer });
    let words = mine.map_or_else(|| status.to_string(), |(_, error_string)| describe_with(*error_string, status));
    if crate::backend::debug_log() {
        eprintln!("mcore_init: PMIx event {words} about rank {affected:?} (exit code {exit_code:?})");
    }
    if affected.is_none() && LOST_CONNECTION.contains(&status) {
        SERVER_GONE.store(true, Ordering::SeqCst);
        calls::CALLS.server_gone();
    }
    if let Some(rank) = affected.filter(|r| mine.is_some_and(|(me, _)| me.rank != *r)) {
        let what = ended(&words, status, exit_code);
        let mut d = ON_DEATH.locked();
        if let Some(sink) = &d.sink {
            sink(rank, what.clone());
        }
        // The first word of each rank's end is kept (later events about it add nothing).
        if !d.heard.iter().any(|(r, _)| *r == rank) {
            d.heard.push((rank, what));
        }
    }
    if let Some(done) = done {
        // SAFETY: PMIx's own continuation, with its cbdata.
        unsafe { done(PMIX_EVENT_NO_ACTION_TAKEN, std::ptr::null_mut(), 0, None, std::ptr::null_mut(), cbdata) };
    }
}

impl PmixClient {
    /// Register [`on_death_event`] for [`DEATH_EVENTS`] and [`LOST_CONNECTION`] (blocking: no
    /// completion callback; abandoned at `deadline`). A library that refuses is said at debug
    /// level; deaths are then found by the store's liveness alone (as they are anyway where the
    /// launcher sends no event: docs/pmix.md).
    pub(super) fn register_death_events(&self, deadline: Deadline) {
        let mut codes: Vec<c_int> = DEATH_EVENTS.iter().chain(&LOST_CONNECTION[1..]).copied().collect();
        let register = self.lib.register_event;
        // SAFETY: a valid array of codes (owned by the call), no info; the handler is a plain
        // extern "C" function.
        let registered = bounded("PMIx_Register_event_handler", deadline, move || unsafe {
            register(
                codes.as_mut_ptr(),
                codes.len(),
                std::ptr::null_mut(),
                0,
                Some(on_death_event),
                None,
                std::ptr::null_mut(),
            )
        });
        let why = match registered {
            Ok(rc) if rc >= 0 => {
                EVENTS_ON.store(true, Ordering::SeqCst);
                return;
            }
            Ok(rc) => self.lib.describe(rc),
            Err(e) => e.message,
        };
        if crate::backend::debug_log() {
            eprintln!("mcore_init: no PMIx event handler for deaths: {why}");
        }
    }
}
