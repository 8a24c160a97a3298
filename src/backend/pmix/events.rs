//! PMIx's events about ended processes of this job, reported to the runtime's one dead list.

use super::value::{key_text, string_of};
use super::*;
use crate::lock::Unpoisoned;
use std::sync::Mutex;

/// Where PMIx death events are reported: the runtime's one dead list (`runtime::faults`).
type DeathSink = Box<dyn Fn(u32, String) + Send + Sync>;
static ON_DEATH: Mutex<Option<DeathSink>> = Mutex::new(None);

/// Report the ranks of this job that a PMIx event says ended (the rank, and what the event said)
/// to `sink` from now on (`None`: to nobody). Set once per initialization attempt by the runtime.
pub fn on_death(sink: Option<DeathSink>) {
    *ON_DEATH.locked() = sink;
}

/// `pmix_notification_fn_t` for [`DEATH_EVENTS`]: note the affected rank of this job (the
/// `PMIX_EVENT_AFFECTED_PROC` info, else the event's source) and report it to the runtime's dead
/// list ([`on_death`], whose interrupt ends the waits that involve it), say it at debug level, and
/// leave the event to other handlers.
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
    let mine = CLIENT.get().and_then(|c| c.as_ref().ok());
    let of_this_job = |p: *const RawProc| -> Option<u32> {
        // SAFETY: PMIx hands valid procs (or NULL).
        let p = unsafe { p.as_ref() }?;
        (mine.is_some_and(|c| c.me.nspace == p.nspace) && p.rank < PMIX_RANK_WILDCARD).then_some(p.rank)
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
    if crate::backend::debug_log() {
        let what = mine.map(|c| c.lib.describe(status)).unwrap_or_else(|| status.to_string());
        eprintln!("mcore_init: PMIx event {what} about rank {affected:?}");
    }
    if let Some(rank) = affected.filter(|r| mine.is_some_and(|c| c.me.rank != *r)) {
        let what = mine.map(|c| c.lib.describe(status)).unwrap_or_else(|| format!("PMIx event {status}"));
        if let Some(sink) = ON_DEATH.locked().as_ref() {
            sink(rank, what);
        }
    }
    if let Some(done) = done {
        // SAFETY: PMIx's own continuation, with its cbdata.
        unsafe { done(PMIX_EVENT_NO_ACTION_TAKEN, std::ptr::null_mut(), 0, None, std::ptr::null_mut(), cbdata) };
    }
}

impl PmixClient {
    /// Register [`on_death_event`] for [`DEATH_EVENTS`] (blocking: no completion callback). A
    /// library that refuses is said at debug level; deaths are then found by the store's liveness
    /// alone (as they are anyway where the launcher sends no event: docs/pmix.md).
    pub(super) fn register_death_events(&self) {
        let mut codes = DEATH_EVENTS;
        // SAFETY: a valid array of codes, no info; the handler is a plain extern "C" function.
        let rc = unsafe {
            (self.lib.register_event)(
                codes.as_mut_ptr(),
                codes.len(),
                std::ptr::null_mut(),
                0,
                Some(on_death_event),
                None,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 && crate::backend::debug_log() {
            eprintln!("mcore_init: no PMIx event handler for deaths: {}", self.lib.describe(rc));
        }
    }
}
