//! The non-blocking calls (fences, gets of other ranks' records): what each lends PMIx until it
//! calls back, its outcome until it is waited for, and the interrupt that ends their waits.

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

/// The non-blocking calls started ([`PmixClient::start_fence`], [`PmixClient::fetch`]): each
/// one's arguments until PMIx calls back, then its outcome until it is waited for; whether
/// waits are interrupted ([`interrupt_waits`]).
pub(super) struct Calls {
    pub(super) next: usize,
    pub(super) lent: BTreeMap<usize, Lent>,
    pub(super) done: BTreeMap<usize, Outcome>,
    pub(super) interrupted: bool,
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
            calls: Mutex::new(Calls { next: 0, lent: BTreeMap::new(), done: BTreeMap::new(), interrupted: false }),
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
    pub(super) fn interrupt(&self, on: bool) {
        self.lock().interrupted = on;
        self.changed.notify_all();
    }

    /// Lend `lent` to PMIx and start the call with `go` (given where the lent arguments are,
    /// and the call's id as its cbdata); PMIx's status when it refused to start (no callback
    /// comes then). `done_at_once`: the status that says the call is over without a callback,
    /// if the call has one.
    pub(super) fn start(
        &'static self,
        what: String,
        lent: Lent,
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
        let call = Call { id, what, registry: self };
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

/// While `on`, every wait for a PMIx call (`Call::wait`: a fence, a get of another rank's
/// record) ends at once, failing (a peer was found dead: the call might wait for it until its
/// timeout, or, for a get of a record the dead rank never published, longer). The runtime sets
/// it as it interrupts its backend's calls, and clears it with them.
pub fn interrupt_waits(on: bool) {
    CALLS.interrupt(on);
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
    pub(super) registry: &'static Registry,
}

impl Call {
    /// Wait until the call is over (its outcome), `deadline` passes, or waits are interrupted
    /// ([`interrupt_waits`]): then an error naming what it waited for and why it stopped.
    pub(super) fn wait(&self, deadline: Instant) -> Result<Outcome, PmixError> {
        let mut c = self.registry.lock();
        loop {
            if let Some(outcome) = c.done.remove(&self.id) {
                return Ok(outcome);
            }
            let now = Instant::now();
            if c.interrupted || now >= deadline {
                let why = if c.interrupted { "a peer was found dead" } else { "the deadline passed" };
                return Err(PmixError {
                    message: format!("{} failed: not over when {why}", self.what),
                    timed_out: !c.interrupted,
                });
            }
            c = self.registry.changed.wait_up_to(c, deadline - now);
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
    /// Wait until the fence is over, `deadline` passes, or waits are interrupted
    /// ([`interrupt_waits`]).
    pub fn wait(self, deadline: Instant) -> Result<(), PmixError> {
        match self.call.wait(deadline)?.status {
            PMIX_SUCCESS => Ok(()),
            rc => Err(self.client.fail(&self.call.what, rc)),
        }
    }
}
