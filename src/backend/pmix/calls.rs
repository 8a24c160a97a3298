//! The non-blocking calls (fences, gets of other ranks' records): what each lends PMIx until it
//! calls back, its outcome until it is waited for, the ranks it involves, and the interrupt that
//! ends the waits of those that involve a rank found dead.

use super::value::Value;
use super::*;
use crate::lock::{Unpoisoned, UnpoisonedWait};
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};

/// What a non-blocking call lends PMIx until it calls back (`PMIx_Fence_nb` and `PMIx_Get_nb`
/// keep pointers to their arguments, not copies).
pub(super) struct Lent {
    pub(super) procs: Vec<RawProc>,
    pub(super) info: Vec<RawInfo>,
    pub(super) key: Option<CString>,
    /// Nobody waits for it any more.
    pub(super) abandoned: bool,
}

// SAFETY: plain data and owned buffers (the info holds no pointer: bools and ints).
unsafe impl Send for Lent {}

/// How a non-blocking call ended: PMIx's status and, for a get, the value.
pub(super) struct Outcome {
    pub(super) status: c_int,
    pub(super) value: Option<Value>,
}

/// The ranks of this job a call waits on: a call ends when one of them is found dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Involves {
    /// A get of one rank's record, a fence over a set.
    Ranks(Vec<u32>),
    /// A fence over the whole job.
    Every,
}

impl Involves {
    /// Those of `dead` (ascending) that the call involves.
    fn among(&self, dead: &[u32]) -> Vec<u32> {
        match self {
            Involves::Every => dead.to_vec(),
            Involves::Ranks(r) => dead.iter().copied().filter(|d| r.contains(d)).collect(),
        }
    }
}

/// The non-blocking calls started ([`PmixClient::start_fence`], [`PmixClient::fetch_fenced`]):
/// each one's arguments until PMIx calls back, then its outcome until it is waited for; the
/// ranks whose death ends the waits that involve them ([`interrupt_waits`]); whether the server
/// is gone (every wait ends).
pub(super) struct Calls {
    pub(super) next: usize,
    pub(super) lent: BTreeMap<usize, Lent>,
    pub(super) done: BTreeMap<usize, Outcome>,
    pub(super) dead: Vec<u32>,
    pub(super) server_gone: bool,
}

/// [`Calls`] and the condition its waiters wait on; the process's is [`CALLS`] (the unit tests
/// make their own).
pub(super) struct Registry {
    pub(super) calls: Mutex<Calls>,
    pub(super) changed: Condvar,
}

pub(super) static CALLS: Registry = Registry::new();

impl Registry {
    pub(super) const fn new() -> Registry {
        Registry {
            calls: Mutex::new(Calls {
                next: 0,
                lent: BTreeMap::new(),
                done: BTreeMap::new(),
                dead: Vec::new(),
                server_gone: false,
            }),
            changed: Condvar::new(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Calls> {
        self.calls.locked()
    }

    /// Call `id` is over (on PMIx's progress thread): its arguments are released and its
    /// outcome kept, unless nobody waits for it any more.
    pub(super) fn over(&self, id: usize, outcome: Outcome) {
        let mut c = self.lock();
        if c.lent.remove(&id).is_some_and(|a| !a.abandoned) {
            c.done.insert(id, outcome);
        }
        drop(c);
        self.changed.notify_all();
    }

    /// See [`interrupt_waits`].
    pub(super) fn interrupt(&self, dead: &[u32]) {
        let mut sorted = dead.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        self.lock().dead = sorted;
        self.changed.notify_all();
    }

    /// The server is gone (its connection lost): every wait ends, now and later.
    pub(super) fn server_gone(&self) {
        self.lock().server_gone = true;
        self.changed.notify_all();
    }

    /// Lend `lent` to PMIx and start the call with `go` (given where the lent arguments are,
    /// and the call's id as its cbdata); PMIx's status when it refused to start (no callback
    /// comes then). `involves`: the ranks whose death ends its wait. `done_at_once`: the status
    /// that says the call is over without a callback, if the call has one.
    pub(super) fn start(
        &'static self,
        what: String,
        lent: Lent,
        involves: Involves,
        done_at_once: Option<c_int>,
        go: impl FnOnce(Args, *mut c_void) -> c_int,
    ) -> Result<Call, (String, c_int)> {
        // The buffers stay where they are (a Vec's or CString's heap data does not move with
        // the Lent) until the callback releases them.
        let args = Args {
            procs: if lent.procs.is_empty() { std::ptr::null() } else { lent.procs.as_ptr() },
            nprocs: lent.procs.len(),
            info: lent.info.as_ptr(),
            ninfo: lent.info.len(),
            key: lent.key.as_ref().map_or(std::ptr::null(), |k| k.as_ptr()),
        };
        let id = {
            let mut c = self.lock();
            c.next += 1;
            let id = c.next;
            c.lent.insert(id, lent);
            id
        };
        // Not under the lock: the callback (on PMIx's progress thread) takes it.
        let rc = go(args, id as *mut c_void);
        let call = Call { id, what, involves, registry: self };
        if rc == PMIX_SUCCESS {
            return Ok(call);
        }
        let mut c = self.lock();
        c.lent.remove(&id);
        if Some(rc) != done_at_once {
            drop(c);
            return Err((call.what.clone(), rc));
        }
        c.done.insert(id, Outcome { status: PMIX_SUCCESS, value: None });
        Ok(call)
    }
}

/// `pmix_op_cbfunc_t` of a fence.
pub(super) unsafe extern "C" fn fence_done(status: c_int, cbdata: *mut c_void) {
    CALLS.over(cbdata as usize, Outcome { status, value: None });
}

/// `pmix_value_cbfunc_t` of a get: the value is copied (the library releases its own).
pub(super) unsafe extern "C" fn get_done(status: c_int, kv: *mut RawValue, cbdata: *mut c_void) {
    // SAFETY: PMIx hands a valid value (or NULL).
    let value = unsafe { kv.as_ref() }.filter(|_| status == PMIX_SUCCESS).map(|v| unsafe { Value::copy_of(v) });
    CALLS.over(cbdata as usize, Outcome { status, value });
}

/// The ranks of this job (PMIx's numbering) found `dead`: every wait for a PMIx call
/// (`Call::wait`) that involves one of them (a fence over a set or the whole job that has it, a
/// get of its record) ends at once, failing as a failure of those ranks ([`PmixError::dead`]:
/// the call might wait for them until its timeout, or, for a get of a record the dead rank never
/// published, longer); the others go on. The runtime sets it from its one dead list as it
/// interrupts its backend's calls, and clears it (`&[]`) with them.
pub fn interrupt_waits(dead: &[u32]) {
    CALLS.interrupt(dead);
}

/// Where a call's lent arguments are (see [`Registry::start`]).
pub(super) struct Args {
    pub(super) procs: *const RawProc,
    pub(super) nprocs: usize,
    pub(super) info: *const RawInfo,
    pub(super) ninfo: usize,
    pub(super) key: *const c_char,
}

/// A non-blocking call started: [`Call::wait`] waits for it; dropped, it is left running and
/// its outcome is dropped when it comes.
pub(super) struct Call {
    pub(super) id: usize,
    /// What it waits for, as errors say it.
    pub(super) what: String,
    pub(super) involves: Involves,
    pub(super) registry: &'static Registry,
}

impl Call {
    /// Wait until the call is over (its outcome), `deadline` passes, a rank it involves is found
    /// dead ([`interrupt_waits`]) or the server is gone: then an error naming what it waited for
    /// and why it stopped (with the dead ranks, for a death).
    pub(super) fn wait(&self, deadline: Deadline) -> Result<Outcome, PmixError> {
        let mut c = self.registry.lock();
        loop {
            if let Some(outcome) = c.done.remove(&self.id) {
                return Ok(outcome);
            }
            let dead = self.involves.among(&c.dead);
            let why = if !dead.is_empty() {
                let ranks: Vec<String> = dead.iter().map(u32::to_string).collect();
                Some(format!("rank(s) {} it involves were found dead", ranks.join(", ")))
            } else if c.server_gone {
                Some("the connection to the launcher's PMIx server was lost".to_string())
            } else if deadline.passed() {
                Some("the deadline passed".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                let timed_out = dead.is_empty() && !c.server_gone;
                return Err(PmixError {
                    message: format!("{} failed: not over when {why}", self.what),
                    timed_out,
                    dead,
                });
            }
            c = self.registry.changed.wait_up_to(c, deadline.left());
        }
    }
}

impl Drop for Call {
    /// A call not over is left running; its outcome is dropped when it comes.
    fn drop(&mut self) {
        let mut c = self.registry.lock();
        c.done.remove(&self.id);
        if let Some(a) = c.lent.get_mut(&self.id) {
            a.abandoned = true;
        }
    }
}

/// A fence started by [`PmixClient::start_fence`].
pub struct Fence {
    pub(super) call: Call,
    pub(super) client: &'static PmixClient,
}

impl Fence {
    /// Wait until the fence is over, `deadline` passes, or a rank it involves is found dead
    /// ([`interrupt_waits`]).
    pub fn wait(self, deadline: Deadline) -> Result<(), PmixError> {
        match self.call.wait(deadline)?.status {
            PMIX_SUCCESS => Ok(()),
            rc => Err(self.client.fail(&self.call.what, rc)),
        }
    }
}
