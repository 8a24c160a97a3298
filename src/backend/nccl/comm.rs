//! `NcclComm`: one communicator, created with a deadline (non-blocking init or split, polled with
//! `ncclCommGetAsyncError`, aborted on expiry), destroyed or aborted exactly once. Several can be
//! created together: inits inside one `ncclGroupStart`/`ncclGroupEnd` ([`NcclComm::init_together`]),
//! splits one after another on the parent while the children initialize
//! ([`NcclComm::split_start`]); [`NcclComm::wait_ready`] then waits for each.
//!
//! Out-parameters NCCL may write after the call returned (a non-blocking split's child) live in a
//! heap [`CommSlot`] and are read only once the operation completed.
#![forbid(unsafe_code)]

use super::config::{NcclConfig, RawConfig};
use super::error::NcclError;
use super::loader::cuda::CudaDriver;
use super::loader::nccl::{CommSlot, NcclLibrary, RawComm, NCCL_IN_PROGRESS, NCCL_SPLIT_NOCOLOR, NCCL_SUCCESS};
use super::unique_id::NcclUniqueId;
use super::version::Feature;
use crate::backend::debug_log;
use crate::lock::Unpoisoned;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Which CUDA device the communicator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// Make this ordinal's primary context current first (`cudaSetDevice`).
    Ordinal(i32),
    /// Use whatever device is current on the calling thread (the caller set it).
    Current,
}

/// A live communicator of one group. Created by a non-blocking call, it may still be
/// initializing: [`NcclComm::wait_ready`] waits for that (every other use waits first).
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
    /// Set while its creation may still be running.
    pending: Option<Pending>,
    /// Whether splits through the runtime seam return children still initializing (inherited).
    split_together: bool,
    /// Whether it shares resources with its parent or a child (a split with `splitShare`, or
    /// `NCCL_COMM_SPLIT_SHARE_RESOURCES=1`): NCCL refuses to suspend it.
    shares: AtomicBool,
}

/// `NCCL_COMM_SPLIT_SHARE_RESOURCES`: when set, NCCL takes it instead of the config's `splitShare`.
pub const SPLIT_SHARE_ENV: &str = "NCCL_COMM_SPLIT_SHARE_RESOURCES";
/// `NCCL_DISABLE_MEM_MANAGER=1`: NCCL refuses every `ncclCommSuspend`.
pub const DISABLE_MEM_MANAGER_ENV: &str = "NCCL_DISABLE_MEM_MANAGER";
/// `MCORE_NCCL_SUSPEND_MODE=recreate`: suspend releases every communicator (NCCL aborts it) and
/// resume creates it again, even where NCCL could suspend it in place: for cuda-checkpoint, which
/// needs no communicator alive across a checkpoint (docs/backends.md).
pub const SUSPEND_MODE_ENV: &str = "MCORE_NCCL_SUSPEND_MODE";
/// `NCCL_CUMEM_ENABLE=0`: NCCL's buffers are not cuMem allocations; a suspend frees little.
pub const CUMEM_ENV: &str = "NCCL_CUMEM_ENABLE";

/// Whether a split with `config` makes a child sharing its parent's resources.
fn split_shares(config: &NcclConfig) -> bool {
    match std::env::var(SPLIT_SHARE_ENV) {
        Ok(v) => v.trim() == "1",
        Err(_) => config.split_share,
    }
}

/// A creation not yet seen complete: the call, what it creates, and its deadline.
#[derive(Debug)]
struct Pending {
    call: &'static str,
    what: String,
    start: Instant,
    timeout: Duration,
    /// The (size, rank) the caller expects of a split's child, checked once it is ready.
    expect: Option<(u32, u32)>,
}

impl std::fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NcclComm({} rank {}/{} on {:?})", self.group, self.rank, self.size, self.device)
    }
}

/// How long to sleep between polls: grows from 100 µs to 10 ms.
pub(super) fn backoff(step: &mut Duration) {
    std::thread::sleep(*step);
    *step = (*step * 2).min(Duration::from_millis(10));
}

fn select(device: Device) -> Result<(), NcclError> {
    match device {
        Device::Ordinal(d) => CudaDriver::global()?.set_device(d),
        Device::Current => Ok(()),
    }
}

/// One look at `comm`'s state: `Ok(true)` once it left `ncclInProgress` successfully, `Ok(false)`
/// while it is in progress within `timeout` of `start`, else the error naming `what` (the caller
/// decides what to abort).
fn poll_state(
    lib: &NcclLibrary,
    comm: &RawComm,
    what: &str,
    call: &str,
    timeout: Duration,
    start: Instant,
) -> Result<bool, NcclError> {
    interrupted(&format!("{call} of {what}"))?;
    match lib.comm_async_error(comm) {
        Ok(NCCL_SUCCESS) => Ok(true),
        Ok(NCCL_IN_PROGRESS) if start.elapsed() < timeout => Ok(false),
        Ok(NCCL_IN_PROGRESS) => Err(NcclError::Timeout { what: format!("{call} of {what}"), deadline: timeout }),
        Ok(state) => Err(lib.call_error(&format!("{call} for {what}"), state, Some(comm))),
        Err(rc) => Err(lib.call_error(&format!("ncclCommGetAsyncError for {what}"), rc, Some(comm))),
    }
}

/// Set while the runtime interrupts this process's waits (see [`interrupt`]).
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// A peer failed (`on`): every wait of this backend's polling loops ends with
/// [`NcclError::Interrupted`] (the communicator waited on is aborted, as on a timeout), and so does
/// every wait that starts, until turned off. Only sets a flag: safe from any thread while the
/// waits run (`ncclCommAbort` is called by the waiting thread, never under its feet).
pub fn interrupt(on: bool) {
    INTERRUPTED.store(on, Ordering::SeqCst);
}

/// `Err` naming `what` while the waits are interrupted (see [`interrupt`]).
pub(super) fn interrupted(what: &str) -> Result<(), NcclError> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err(NcclError::Interrupted { what: what.to_string() });
    }
    Ok(())
}

/// Wait until `comm` leaves `ncclInProgress` or `timeout` passes; on error or expiry the
/// communicator is aborted and the error names `what`.
fn wait_ready(
    lib: &'static NcclLibrary,
    comm: RawComm,
    what: &str,
    call: &str,
    timeout: Duration,
    start: Instant,
) -> Result<RawComm, NcclError> {
    let mut step = Duration::from_micros(100);
    loop {
        match poll_state(lib, &comm, what, call, timeout, start) {
            Ok(true) => return Ok(comm),
            Ok(false) => backoff(&mut step),
            Err(e) => {
                lib.comm_abort(comm);
                return Err(match e {
                    NcclError::Timeout { what, deadline } => {
                        NcclError::Timeout { what: format!("{what} (communicator aborted)"), deadline }
                    }
                    other => other,
                });
            }
        }
    }
}

/// The communicator a creating call wrote into `slot`, waiting (within the deadline) for NCCL to
/// write it when the call returned before doing so. An error code ends it at once, and so does
/// an error `parent` reports meanwhile (a communicator made from another: its errors name the
/// parent's state); a slot never written is left to leak (see `CommSlot`).
#[allow(clippy::too_many_arguments)]
fn written_comm(
    lib: &NcclLibrary,
    rc: c_int,
    mut slot: CommSlot,
    what: &str,
    call: &str,
    timeout: Duration,
    start: Instant,
    parent: Option<&RawComm>,
) -> Result<RawComm, NcclError> {
    if rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS {
        let comm = slot.take_written().ok();
        let e = lib.call_error(&format!("{call} for {what}"), rc, parent.or(comm.as_ref()));
        if let Some(c) = comm {
            lib.comm_abort(c);
        }
        return Err(e);
    }
    let mut step = Duration::from_micros(100);
    loop {
        slot = match slot.take_written() {
            Ok(comm) => return Ok(comm),
            Err(pending) => pending,
        };
        if let Some(p) = parent {
            match lib.comm_async_error(p) {
                Ok(NCCL_SUCCESS | NCCL_IN_PROGRESS) => {}
                Ok(state) | Err(state) => return Err(lib.call_error(&format!("{call} for {what}"), state, Some(p))),
            }
        }
        interrupted(&format!("{call} to hand out the communicator of {what}"))?;
        if start.elapsed() >= timeout {
            return Err(NcclError::Timeout {
                what: format!("{call} to hand out the communicator of {what}"),
                deadline: timeout,
            });
        }
        backoff(&mut step);
    }
}

/// Abort the communicators NCCL handed out; slots never written leak (NCCL may still write them).
fn abort_handed_out(lib: &NcclLibrary, started: Vec<(c_int, CommSlot)>) {
    for (_, slot) in started {
        if let Ok(c) = slot.take_written() {
            lib.comm_abort(c);
        }
    }
}

/// Held around the NCCL calls that create communicators (and parse NCCL's init settings) when
/// the loaded NCCL is older than 2.32.3, whose parsing is not reentrant (NVIDIA/nccl #2361): one
/// creating call at a time per process. `None` (no serialization) from 2.32.3 on.
fn creation_lock(lib: &NcclLibrary) -> Option<std::sync::MutexGuard<'static, ()>> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if lib.version() >= Feature::ConcurrentInit.needs() {
        return None;
    }
    Some(LOCK.locked())
}

/// At `MCORE_LOG=debug`: the settings a communicator was created with, on stderr; NCCL's own
/// parameters too (once per process) where the library has the parameter API (2.30.7+).
fn debug_settings(lib: &NcclLibrary, group: &str, raw: &RawConfig) {
    if !debug_log() {
        return;
    }
    let set: Vec<String> = raw.written.iter().map(|(k, v)| format!("{k}={v}")).collect();
    eprintln!(
        "mcore_init: debug: NCCL {} communicator {group}: ncclConfig_t size {} version {}: {}",
        lib.version(),
        raw.raw.size,
        raw.raw.version,
        if set.is_empty() { "-".to_string() } else { set.join(" ") }
    );
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| match lib.parameters() {
        Some(params) => {
            let text: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            eprintln!("mcore_init: debug: NCCL {} reports its parameters: {}", lib.version(), text.join(" "));
        }
        None => eprintln!(
            "mcore_init: debug: NCCL {} has no parameter API (2.30.7+): the settings above are what was set",
            lib.version()
        ),
    });
}

fn to_c_int(v: u32, name: &str) -> Result<c_int, NcclError> {
    c_int::try_from(v).map_err(|_| NcclError::invalid(format!("{name} {v} does not fit a C int")))
}

/// One communicator of [`NcclComm::init_together`]: group name, unique id, size, rank, config and
/// deadline.
#[derive(Debug, Clone)]
pub struct InitSpec {
    pub group: String,
    pub id: NcclUniqueId,
    /// Non-empty: `ncclCommInitRankScalable` with these ids, one per root, in root order (the
    /// same list on every rank; `id` is then unused). Empty: `ncclCommInitRankConfig` with `id`.
    pub root_ids: Vec<NcclUniqueId>,
    pub nranks: u32,
    pub rank: u32,
    pub config: NcclConfig,
    pub timeout: Duration,
}

impl InitSpec {
    fn what(&self) -> String {
        format!("group {} (rank {} of {})", self.group, self.rank, self.nranks)
    }

    fn check(&self) -> Result<(c_int, c_int), NcclError> {
        if self.nranks == 0 || self.rank >= self.nranks {
            return Err(NcclError::invalid(format!(
                "group {}: rank {} is outside 0..{}",
                self.group, self.rank, self.nranks
            )));
        }
        Ok((to_c_int(self.nranks, "nranks")?, to_c_int(self.rank, "rank")?))
    }
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
        let spec = InitSpec {
            group: group.to_string(),
            id: *id,
            root_ids: Vec::new(),
            nranks,
            rank,
            config: config.clone(),
            timeout,
        };
        let mut comm = Self::init_together(lib, std::slice::from_ref(&spec), device)
            .map_err(|(_, e)| e)?
            .pop()
            .expect("one spec, one communicator");
        comm.wait_ready()?;
        Ok(comm)
    }

    /// Start every communicator of `specs` at once: their `ncclCommInitRankConfig` calls inside
    /// one `ncclGroupStart`/`ncclGroupEnd`, so NCCL runs them together. The communicators come
    /// back still initializing (non-blocking configs): [`NcclComm::wait_ready`] each. An error
    /// comes with the index of the spec it concerns; every communicator already handed out is
    /// aborted then.
    pub fn init_together(
        lib: &'static NcclLibrary,
        specs: &[InitSpec],
        device: Device,
    ) -> Result<Vec<NcclComm>, (usize, NcclError)> {
        let start = Instant::now();
        lib.require(Feature::CommInitRankConfig).map_err(|e| (0, e))?;
        let mut raw = Vec::with_capacity(specs.len());
        for (i, s) in specs.iter().enumerate() {
            let ranks = s.check().map_err(|e| (i, e))?;
            let config = s.config.to_raw(lib.version(), &format!("group {}", s.group)).map_err(|e| (i, e))?;
            raw.push((ranks, config));
        }
        if let Some(i) = specs.iter().position(|s| !s.root_ids.is_empty()) {
            lib.require(Feature::InitRankScalable).map_err(|e| (i, prefix(&specs[i].group, e)))?;
        }
        if let Some(s) = specs.first() {
            select(device).map_err(|e| (0, prefix(&s.group, e)))?;
        }
        // Below 2.32.3 NCCL parses its init settings non-reentrantly: no other thread of this
        // process may be inside a creating call meanwhile (held up to ncclGroupEnd, where NCCL
        // starts the inits of the group).
        let _serial = creation_lock(lib);
        let rc = lib.group_start();
        if rc != NCCL_SUCCESS {
            return Err((0, lib.call_error("ncclGroupStart", rc, None)));
        }
        // Start all; remember the first call that failed (the group is still ended).
        let mut started = Vec::with_capacity(specs.len());
        let mut first_error = None;
        for (i, (s, ((n, r), config))) in specs.iter().zip(raw.iter_mut()).enumerate() {
            let call = if s.root_ids.is_empty() {
                lib.comm_init_rank_config(*n, &s.id, *r, config)
            } else {
                lib.comm_init_rank_scalable(*n, *r, &s.root_ids, config)
            };
            match call {
                Ok((rc, slot)) if first_error.is_none() && rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS => {
                    first_error = Some((i, rc));
                    started.push((rc, slot));
                }
                Ok(started_one) => started.push(started_one),
                Err(e) => {
                    lib.group_end();
                    abort_handed_out(lib, started);
                    return Err((i, e));
                }
            }
        }
        let end = lib.group_end();
        drop(_serial);
        let mut out: Vec<NcclComm> = Vec::with_capacity(specs.len());
        let failure = match first_error {
            Some((i, rc)) => {
                Some((i, lib.call_error(&format!("ncclCommInitRankConfig for {}", specs[i].what()), rc, None)))
            }
            None if end != NCCL_SUCCESS && end != NCCL_IN_PROGRESS => {
                let names: Vec<&str> = specs.iter().map(|s| s.group.as_str()).collect();
                Some((0, lib.call_error(&format!("ncclGroupEnd starting groups {}", names.join(", ")), end, None)))
            }
            None => None,
        };
        if let Some(f) = failure {
            abort_handed_out(lib, started);
            return Err(f);
        }
        for (i, (s, (rc, slot))) in specs.iter().zip(started).enumerate() {
            let what = s.what();
            let call = if s.root_ids.is_empty() { "ncclCommInitRankConfig" } else { "ncclCommInitRankScalable" };
            let comm = written_comm(lib, rc, slot, &what, call, s.timeout, start, None).map_err(|e| (i, e))?;
            debug_settings(lib, &s.group, &raw[i].1);
            out.push(NcclComm {
                lib,
                raw: Some(comm),
                group: s.group.clone(),
                size: s.nranks,
                rank: s.rank,
                device,
                config: s.config.clone(),
                op_timeout: s.timeout,
                pending: Some(Pending { call, what, start, timeout: s.timeout, expect: None }),
                split_together: false,
                shares: AtomicBool::new(false),
            });
        }
        Ok(out)
    }

    /// `ncclCommSplit`, collective over this whole communicator: members pass `Some(color)`,
    /// non-members `None` (`NCCL_SPLIT_NOCOLOR`) and get `Ok(None)`. `key` orders the child's ranks.
    /// `config` `None` inherits this communicator's config. Waits until the child is ready.
    pub fn split(
        &self,
        group: &str,
        color: Option<u32>,
        key: u32,
        config: Option<&NcclConfig>,
        timeout: Duration,
    ) -> Result<Option<NcclComm>, NcclError> {
        let Some(mut child) = self.split_start(group, color, key, config, timeout)? else { return Ok(None) };
        child.wait_ready()?;
        Ok(Some(child))
    }

    /// [`NcclComm::split`] up to the end of the split collective on this (parent) communicator:
    /// the child comes back possibly still initializing ([`NcclComm::wait_ready`]), so that the
    /// next split can start while it does. The child handle is read only after the parent left
    /// `ncclInProgress`: with a non-blocking parent NCCL returns `ncclSuccess` first and writes
    /// the child later from its own thread.
    pub fn split_start(
        &self,
        group: &str,
        color: Option<u32>,
        key: u32,
        config: Option<&NcclConfig>,
        timeout: Duration,
    ) -> Result<Option<NcclComm>, NcclError> {
        let start = Instant::now();
        let parent = self.raw()?;
        let c = match color {
            Some(c) => to_c_int(c, "color")?,
            None => NCCL_SPLIT_NOCOLOR,
        };
        let k = to_c_int(key, "key")?;
        let what = format!("group {group} (split of {})", self.group);
        let mut raw_config = config.map(|c| c.to_raw(self.lib.version(), &what)).transpose()?;
        select(self.device).map_err(|e| prefix(group, e))?;
        let serial = creation_lock(self.lib);
        let (rc, slot) = self.lib.comm_split(parent, c, k, raw_config.as_mut())?;
        drop(serial);
        if let Some(rc) = raw_config.as_ref() {
            debug_settings(self.lib, group, rc);
        }
        if rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS {
            // Failed before starting: NCCL will not write the slot.
            if let Some(child) = slot.take_completed() {
                self.lib.comm_abort(child);
            }
            return Err(self.lib.call_error(&format!("ncclCommSplit for {what}"), rc, Some(parent)));
        }
        // Complete when the parent leaves ncclInProgress (a failure or the deadline leaves the
        // slot to leak: NCCL may still write it).
        let mut step = Duration::from_micros(100);
        while !poll_state(self.lib, parent, &format!("{what} on the parent"), "ncclCommSplit", timeout, start)? {
            backoff(&mut step);
        }
        let child = slot.take_completed();
        let child = match (child, color) {
            (Some(child), Some(_)) => child,
            (None, None) => return Ok(None),
            (Some(child), None) => {
                self.lib.comm_abort(child);
                return Err(NcclError::invalid(format!("ncclCommSplit gave a communicator to a non-member of {what}")));
            }
            (None, Some(_)) => {
                return Err(NcclError::invalid(format!(
                    "ncclCommSplit for {what} completed but gave this member no communicator"
                )))
            }
        };
        let pending = Pending { call: "ncclCommSplit", what, start, timeout, expect: None };
        let child = self.child(child, group, config, pending);
        if split_shares(config.unwrap_or(&self.config)) {
            child.shares.store(true, Ordering::SeqCst);
            self.shares.store(true, Ordering::SeqCst);
        }
        Ok(Some(child))
    }

    /// A communicator made from this one (split, shrink), still initializing as `pending` says;
    /// it inherits the device, and this config unless given one.
    fn child(&self, raw: RawComm, group: &str, config: Option<&NcclConfig>, pending: Pending) -> NcclComm {
        NcclComm {
            lib: self.lib,
            raw: Some(raw),
            group: group.to_string(),
            size: 0,
            rank: 0,
            device: self.device,
            config: config.unwrap_or(&self.config).clone(),
            op_timeout: pending.timeout,
            pending: Some(pending),
            split_together: self.split_together,
            shares: AtomicBool::new(false),
        }
    }

    /// `ncclCommShrink`, collective over the ranks of this communicator that are not in `exclude`
    /// (ranks of this communicator; the excluded ones must not call it): the new communicator
    /// `group` has the remaining ranks, renumbered in ascending order of their rank here (NCCL's
    /// rule). `abort_parent` ends the parent's operations in flight first (`NCCL_SHRINK_ABORT`,
    /// for a parent with a failed peer; abort the parent afterwards). `config` `None` inherits
    /// this communicator's. Waits until the new communicator is ready, within `timeout`; the
    /// child handle is read only once NCCL wrote it (see [`CommSlot`]).
    pub fn shrink(
        &self,
        group: &str,
        exclude: &[u32],
        config: Option<&NcclConfig>,
        abort_parent: bool,
        timeout: Duration,
    ) -> Result<NcclComm, NcclError> {
        let start = Instant::now();
        let parent = self.raw()?;
        let mut excluded: Vec<u32> = exclude.to_vec();
        excluded.sort_unstable();
        excluded.dedup();
        if let Some(&r) = excluded.iter().find(|&&r| r >= self.size) {
            return Err(NcclError::invalid(format!(
                "shrink of {}: excluded rank {r} is not a rank of its {} ranks",
                self.group, self.size
            )));
        }
        if excluded.binary_search(&self.rank).is_ok() {
            return Err(NcclError::invalid(format!(
                "shrink of {}: this rank ({}) is excluded, and excluded ranks must not call ncclCommShrink",
                self.group, self.rank
            )));
        }
        let list = excluded.iter().map(|&r| to_c_int(r, "excluded rank")).collect::<Result<Vec<_>, _>>()?;
        let size = self.size - excluded.len() as u32;
        let rank = self.rank - excluded.partition_point(|&r| r < self.rank) as u32;
        let what = format!("group {group} (shrink of {} without {} rank(s))", self.group, excluded.len());
        let mut raw_config = config.map(|c| c.to_raw(self.lib.version(), &what)).transpose()?;
        select(self.device).map_err(|e| prefix(group, e))?;
        let serial = creation_lock(self.lib);
        let (rc, slot) = self.lib.comm_shrink(parent, &list, raw_config.as_mut(), abort_parent)?;
        drop(serial);
        // Every remaining rank gets a communicator, so the slot is read once NCCL wrote it (early
        // or late, the parent in ncclInProgress or already out of it); a parent that reports an
        // error ends the wait with that error.
        let child = written_comm(self.lib, rc, slot, &what, "ncclCommShrink", timeout, start, Some(parent))?;
        let pending = Pending { call: "ncclCommShrink", what, start, timeout, expect: Some((size, rank)) };
        let mut comm = self.child(child, group, config, pending);
        comm.wait_ready()?;
        Ok(comm)
    }

    /// Expect a split child to have `size` ranks with this one at `rank`; checked by
    /// [`NcclComm::wait_ready`].
    pub fn expect_size_rank(&mut self, size: u32, rank: u32) {
        if let Some(p) = self.pending.as_mut() {
            p.expect = Some((size, rank));
        }
    }

    /// Wait (within its creation deadline) until the communicator is initialized; on failure or
    /// expiry it is aborted and the error names the group. A no-op once ready.
    pub fn wait_ready(&mut self) -> Result<(), NcclError> {
        let Some(p) = self.pending.take() else { return Ok(()) };
        let comm = self.raw.take().ok_or_else(|| {
            NcclError::invalid(format!("the communicator of group {} was already released", self.group))
        })?;
        let comm = wait_ready(self.lib, comm, &p.what, p.call, p.timeout, p.start)?;
        if self.size == 0 {
            let sized = self.lib.comm_size_rank(&comm);
            let (size, rank) = match sized {
                Ok(v) => v,
                Err(e) => {
                    self.lib.comm_abort(comm);
                    return Err(e);
                }
            };
            (self.size, self.rank) = (size as u32, rank as u32);
        }
        self.raw = Some(comm);
        if let Some((size, rank)) = p.expect {
            if (self.size, self.rank) != (size, rank) {
                return Err(NcclError::invalid(format!(
                    "{} gave group {} {} ranks with this one at {}, the layout says {size} at {rank}",
                    p.call, self.group, self.size, self.rank
                )));
            }
        }
        Ok(())
    }

    pub(super) fn raw(&self) -> Result<&RawComm, NcclError> {
        self.raw
            .as_ref()
            .ok_or_else(|| NcclError::invalid(format!("the communicator of group {} was already released", self.group)))
    }

    /// Whether the runtime seam's splits leave children initializing ([`NcclComm::split_start`])
    /// so that all kinds' children initialize together (set by the factory; children inherit it).
    pub fn split_together(&self) -> bool {
        self.split_together
    }

    pub fn set_split_together(&mut self, on: bool) {
        self.split_together = on;
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

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The library it was created with.
    pub fn library(&self) -> &'static NcclLibrary {
        self.lib
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
    /// that fails or expires aborts instead and reports why. After any abort (of any
    /// communicator of this process, or this one reporting an error) it is released with
    /// `ncclCommAbort` instead: a destroy could wait forever on peers that aborted (the field's
    /// rule since NCCL 2.31.2's untimed destroy barrier).
    pub fn destroy(mut self, timeout: Duration) -> Result<(), NcclError> {
        let start = Instant::now();
        let comm = self.raw.take().ok_or_else(|| NcclError::invalid("communicator already released"))?;
        let what = format!("group {}", self.group);
        let failed = !matches!(self.lib.comm_async_error(&comm), Ok(NCCL_SUCCESS | NCCL_IN_PROGRESS));
        if self.lib.any_aborted() || failed {
            if debug_log() {
                eprintln!("mcore_init: debug: {what} released with ncclCommAbort (a communicator was aborted)");
            }
            let rc = self.lib.comm_abort(comm);
            return if rc == NCCL_SUCCESS {
                Ok(())
            } else {
                Err(self.lib.call_error(&format!("ncclCommAbort for {what}"), rc, None))
            };
        }
        if let Some(rc) = self.lib.comm_finalize(&comm) {
            if rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS {
                let e = self.lib.call_error(&format!("ncclCommFinalize for {what}"), rc, Some(&comm));
                self.lib.comm_abort(comm);
                return Err(e);
            }
            let comm = wait_ready(self.lib, comm, &what, "ncclCommFinalize", timeout, start)?;
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

    /// Whether the loaded NCCL has `ncclCommSuspend`/`ncclCommResume` (2.29.7+).
    pub fn has_native_suspend(&self) -> bool {
        self.lib.has_suspend()
    }

    /// Why this communicator must be recreated rather than suspended in place, from this
    /// process's view: `MCORE_NCCL_SUSPEND_MODE=recreate`, or NCCL would refuse
    /// `ncclCommSuspend` (`ncclInvalidUsage`): `NCCL_DISABLE_MEM_MANAGER=1`, or it shares
    /// resources with its parent or a child. `None`: NCCL suspends it (where the library has the
    /// call).
    pub fn suspend_refusal(&self) -> Option<String> {
        if std::env::var(SUSPEND_MODE_ENV).is_ok_and(|v| v.trim() == "recreate") {
            return Some(format!("{SUSPEND_MODE_ENV}=recreate is set"));
        }
        if std::env::var(DISABLE_MEM_MANAGER_ENV).is_ok_and(|v| v.trim() == "1") {
            return Some(format!("{DISABLE_MEM_MANAGER_ENV}=1 is set"));
        }
        if self.shares.load(Ordering::SeqCst) {
            return Some(format!(
                "group {} shares resources with its parent or a child (split_share, or {SPLIT_SHARE_ENV}=1)",
                self.group
            ));
        }
        None
    }

    /// `ncclCommSuspend(NCCL_SUSPEND_MEM)`: release the communicator's dynamic device memory
    /// (2.29.7+; `VersionTooOld` or `MissingSymbol` before). A non-blocking communicator is
    /// waited for within the op timeout. Under `NCCL_CUMEM_ENABLE=0` a warning, once per process,
    /// says that it frees little.
    pub fn suspend(&mut self) -> Result<(), NcclError> {
        self.wait_ready()?;
        if std::env::var(CUMEM_ENV).is_ok_and(|v| v.trim() == "0") {
            super::config::warn_once_for(
                "suspend under NCCL_CUMEM_ENABLE=0".into(),
                format!(
                    "{CUMEM_ENV}=0: NCCL's buffers are not cuMem allocations, so ncclCommSuspend frees little of a \
                     communicator's memory (unset it, NCCL's default, for a suspend to give the memory back)"
                ),
            );
        }
        let comm = self.raw()?;
        let rc = self.lib.comm_suspend(comm)?;
        self.settle(rc, "ncclCommSuspend")
    }

    /// `ncclCommResume`: take back what [`NcclComm::suspend`] released.
    pub fn resume(&mut self) -> Result<(), NcclError> {
        let comm = self.raw()?;
        let rc = self.lib.comm_resume(comm)?;
        self.settle(rc, "ncclCommResume")
    }

    /// A call's code: success, an error naming the group, or `ncclInProgress` polled until the
    /// communicator is idle again within the op timeout.
    fn settle(&self, rc: c_int, call: &str) -> Result<(), NcclError> {
        let comm = self.raw()?;
        let what = format!("group {}", self.group);
        if rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS {
            return Err(self.lib.call_error(&format!("{call} for {what}"), rc, Some(comm)));
        }
        let (start, mut step) = (Instant::now(), Duration::from_micros(100));
        while !poll_state(self.lib, comm, &what, call, self.op_timeout, start)? {
            backoff(&mut step);
        }
        Ok(())
    }

    /// `ncclCommMemStats`: the device memory NCCL tracks for it; `None` before 2.29.7.
    pub fn memory(&self) -> Option<Result<[u64; 4], NcclError>> {
        use super::loader::nccl::{
            NCCL_STAT_GPU_MEM_PERSIST, NCCL_STAT_GPU_MEM_SUSPEND, NCCL_STAT_GPU_MEM_SUSPENDED, NCCL_STAT_GPU_MEM_TOTAL,
        };
        let comm = self.raw.as_ref()?;
        let mut out = [0u64; 4];
        for (slot, stat) in out.iter_mut().zip([
            NCCL_STAT_GPU_MEM_SUSPEND,
            NCCL_STAT_GPU_MEM_SUSPENDED,
            NCCL_STAT_GPU_MEM_PERSIST,
            NCCL_STAT_GPU_MEM_TOTAL,
        ]) {
            match self.lib.comm_mem_stat(comm, stat)? {
                Ok(v) => *slot = v,
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(out))
    }

    /// `ncclCommAbort`: release without waiting for peers. The communicator is unusable
    /// afterwards (a second call says it was released).
    pub fn abort(&mut self) -> Result<(), NcclError> {
        let comm = self.raw.take().ok_or_else(|| NcclError::invalid("communicator already released"))?;
        let rc = self.lib.comm_abort(comm);
        if rc == NCCL_SUCCESS {
            Ok(())
        } else {
            Err(self.lib.call_error(&format!("ncclCommAbort for group {}", self.group), rc, None))
        }
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
        NcclError::Call { call, code, name, detail } => {
            NcclError::Call { call: format!("{call} (for group {group})"), code, name, detail }
        }
        NcclError::LibraryNotFound { library, tried, hint } => {
            NcclError::LibraryNotFound { library: format!("{library}, needed by group {group},"), tried, hint }
        }
        other => other,
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
