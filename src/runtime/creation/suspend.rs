//! Suspending and resuming a set of the runtime's live communicators, selected by grid and kind.
//!
//! A communicator whose backend can suspend itself (NCCL 2.29.7+'s `ncclCommSuspend`, a plugin's
//! `suspend` slot) is suspended in place: it keeps its ranks and gives its device memory back;
//! resume takes the memory back. Any other is released (recreate mode) and on resume created
//! again with the same members, name and options, through the store under keys of its own for
//! each resume, within a deadline; a member that never came is named. Either way, while
//! suspended the slot of the group holds a [`SuspendedComm`], so every use of it (the raw handle,
//! an all-reduce, a barrier) is an error naming its kinds. A communicator shared by several
//! kinds (aliases) is suspended and resumed once, and suspending any of its kinds suspends it.
//! A grid's suspend touches only what that grid alone uses: a communicator it shares with
//! another grid (colocated grids, equal members) that is still running stays up, and the report
//! names it in [`SuspendReport::kept_shared`]; it is suspended with the last of its grids.
//!
//! Both calls are collective over the members of every communicator they touch: every rank calls
//! them with the same kinds, as it initialized. The state lives behind each group's own mutex,
//! held during that communicator's suspend or resume only.

use super::groups::{create_comms, grid_prefix, lock_comm, verify_group, GroupError, LiveGroup};
use super::plan::Grid;
use crate::backend::{
    CommError, CommErrorKind, CommMemory, CommOptions, Communicator, GroupInfo, GroupRequest, SuspendedComm,
};
use crate::runtime::error::RuntimeError;
use crate::runtime::lifecycle::init::with_runtime;
use crate::runtime::lifecycle::runtime_state::Runtime;
use crate::runtime::meeting::explain::{Behind, Explainer, Waited};
use crate::runtime::meeting::keys;
use crate::runtime::meeting::meet::{MeetError, Meeting};
use crate::store::{PrefixStore, Store};
use crate::timeout::Deadline;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which communicators a [`suspend`] or [`resume`] is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SuspendRequest {
    /// Kind keys (`tensor_model_parallel`, `data_parallel_with_cp_all_gather`, ...); `None`:
    /// every kind of this rank.
    pub kinds: Option<Vec<String>>,
    /// The grid the kinds belong to (`None`: the default grid, the first). A communicator that a
    /// colocated grid shares (equal members) stays up while that grid runs (see the module docs).
    pub grid: Option<String>,
    /// Bound of a recreate-mode resume (`None`: the runtime's init timeout).
    pub timeout: Option<Duration>,
}

impl SuspendRequest {
    /// Every kind of the default grid.
    pub fn all() -> Self {
        SuspendRequest::default()
    }

    /// The kinds named by `keys`.
    pub fn kinds<S: Into<String>>(keys: impl IntoIterator<Item = S>) -> Self {
        SuspendRequest { kinds: Some(keys.into_iter().map(Into::into).collect()), ..Default::default() }
    }
}

/// How a communicator was suspended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuspendMode {
    /// By its backend, in place (it keeps its ranks).
    Native,
    /// Released, created again on resume.
    Recreate,
}

impl std::fmt::Display for SuspendMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SuspendMode::Native => "native",
            SuspendMode::Recreate => "recreate",
        })
    }
}

/// What happened to one communicator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommTransition {
    /// The communicator's name (`<kind>/<index>` of the first kind sharing it).
    pub name: String,
    /// Every kind of this rank sharing it, comma-separated.
    pub kinds: String,
    pub mode: SuspendMode,
    /// Device memory before the suspend (or after the resume), when the backend reports it.
    pub memory: Option<CommMemory>,
    /// Its memory while suspended, when the backend reports it (released: `None`).
    pub memory_suspended: Option<CommMemory>,
    /// Bytes the suspend gave back, when the backend reports its memory: native, what it held
    /// before less what it holds suspended; recreate, everything it held. `None` for a resume.
    pub freed: Option<u64>,
    /// Why a suspend recreates instead of suspending natively (a member's backend refused or
    /// cannot, named); `None` when native, and for a resume.
    pub reason: Option<String>,
    pub took: Duration,
}

/// What a [`suspend`] or [`resume`] did: one entry per distinct communicator, in plan order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SuspendReport {
    pub communicators: Vec<CommTransition>,
    /// Communicators verified after a resume (0 for a suspend, or with verification off).
    pub verified: usize,
    /// Suspend only: communicators of the selected kinds left up because a grid that is not
    /// suspended shares them, in plan order.
    pub kept_shared: Vec<SharedComm>,
    pub took: Duration,
}

/// A communicator a suspend left up: a running grid shares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedComm {
    pub name: String,
    /// Every kind of this rank sharing it (`<grid>:<kind>`), comma-separated.
    pub kinds: String,
    /// The grids sharing it that are still running.
    pub running_grids: Vec<String>,
}

/// Suspend the communicators of the kinds `req` names on this rank (all kinds when it names
/// none). Already suspended ones are left as they are (not reported).
pub fn suspend(req: &SuspendRequest) -> Result<SuspendReport, RuntimeError> {
    with_runtime(|rt| suspend_on(rt, req))?
}

/// Resume the suspended communicators of the kinds `req` names (all when it names none), then
/// verify each (when the runtime verifies) with the all-reduce the plan predicts.
pub fn resume(req: &SuspendRequest) -> Result<SuspendReport, RuntimeError> {
    with_runtime(|rt| resume_on(rt, req))?
}

/// One distinct communicator's memory ([`memory`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommMemoryEntry {
    pub name: String,
    /// Every kind of this rank sharing it, comma-separated.
    pub kinds: String,
    /// What its backend reports (`None`: unknown, or released while suspended).
    pub memory: Option<CommMemory>,
    pub suspended: bool,
}

/// The memory of every distinct communicator of this rank, in plan order.
pub fn memory() -> Result<Vec<CommMemoryEntry>, RuntimeError> {
    with_runtime(|rt| {
        distinct(rt, None, None)
            .into_iter()
            .map(|(g, kinds)| {
                let mut comm = lock_comm(&g.comm).map_err(|e| group_error(g, e))?;
                let suspended = comm.suspension().is_some();
                let memory = comm.memory().and_then(Result::ok);
                Ok(CommMemoryEntry { name: g.comm_name.clone(), kinds, memory, suspended })
            })
            .collect()
    })?
}

fn group_error(g: &LiveGroup, error: CommError) -> RuntimeError {
    RuntimeError::Group(GroupError { group: g.comm_name.clone(), members: g.plan.members.clone(), error })
}

/// The grid `req` names (the default grid when none) and the kinds it names in it (`None`: all),
/// checked against that grid's layout: an unknown grid or kind is an error naming it and what
/// there is.
fn selected<'a>(rt: &'a Runtime, req: &SuspendRequest) -> Result<(&'a Grid, Option<Vec<String>>), RuntimeError> {
    let grid = rt.grid_named(req.grid.as_deref())?;
    let Some(kinds) = &req.kinds else { return Ok((grid, None)) };
    if kinds.is_empty() {
        return Err(RuntimeError::InvalidArgument(
            "no kinds were named to suspend or resume (name at least one, or ask for all)".into(),
        ));
    }
    let layout_kinds = grid.topology.kinds();
    let known: Vec<String> =
        layout_kinds.iter().flat_map(|k| [k.key().into_owned(), format!("{}_all_gather", k.key())]).collect();
    for k in kinds {
        if !known.contains(k) {
            let list: Vec<String> = layout_kinds.iter().map(|k| k.key().into_owned()).collect();
            return Err(RuntimeError::InvalidArgument(format!(
                "kind {} is not a kind of this layout (grid {}; its kinds: {})",
                crate::quote::quoted(k),
                grid.name,
                list.join(", ")
            )));
        }
    }
    Ok((grid, Some(kinds.clone())))
}

/// Each distinct communicator of this rank with a group of a selected kind (`None`: all) of
/// `grid` (`None`: every grid), once, in plan order, with every kind of this rank sharing it
/// (`<grid>:<kind>` when the job has several grids).
fn distinct<'a>(rt: &'a Runtime, grid: Option<&Grid>, kinds: Option<&[String]>) -> Vec<(&'a LiveGroup, String)> {
    let mut out: Vec<(&LiveGroup, String)> = Vec::new();
    for g in &rt.groups {
        let in_grid = grid.map_or(true, |grid| g.plan.grid == grid.tag);
        let chosen = in_grid && kinds.map_or(true, |ks| ks.iter().any(|k| *k == g.plan.kind.to_string()));
        if !chosen || out.iter().any(|(o, _)| Arc::ptr_eq(&o.comm, &g.comm)) {
            continue;
        }
        let sharing: Vec<String> = rt
            .groups
            .iter()
            .filter(|o| Arc::ptr_eq(&o.comm, &g.comm))
            .map(|o| format!("{}{}", grid_prefix(&o.plan.grid), o.plan.kind))
            .collect();
        out.push((g, sharing.join(", ")));
    }
    out
}

fn suspend_on(rt: &Runtime, req: &SuspendRequest) -> Result<SuspendReport, RuntimeError> {
    let start = Instant::now();
    let (grid, kinds) = selected(rt, req)?;
    let deadline = Deadline::at(start + crate::timeout::clamp(req.timeout.unwrap_or(rt.timeout)));
    let mut report = SuspendReport::default();
    for (g, kinds) in distinct(rt, Some(grid), kinds.as_deref()) {
        let t = Instant::now();
        let running_grids = running_sharers(rt, grid, g)?;
        if !running_grids.is_empty() {
            report.kept_shared.push(SharedComm { name: g.comm_name.clone(), kinds, running_grids });
            continue;
        }
        let mut slot = lock_comm(&g.comm).map_err(|e| group_error(g, e))?;
        if slot.suspension().is_some() {
            continue;
        }
        let memory = slot.memory().and_then(Result::ok);
        // Native or recreate: the same on every member (suspend is collective).
        let refused = match slot.suspend_vote() {
            Some(vote) => agree(rt, g, &kinds, vote, deadline)?,
            None => None,
        };
        let (mode, native, memory_suspended, reason) = match refused.map_or_else(|| slot.suspend(), Err) {
            Ok(()) => {
                let after = slot.memory().and_then(Result::ok);
                (SuspendMode::Native, true, after, None)
            }
            Err(e) if matches!(e.kind, CommErrorKind::Unsupported | CommErrorKind::VersionTooOld) => {
                (SuspendMode::Recreate, false, None, Some(e.message))
            }
            Err(e) => return Err(group_error(g, e.context(format!("suspending the communicator of kind {kinds}")))),
        };
        let freed = match (native, memory, memory_suspended) {
            (true, Some(before), Some(after)) => Some(before.total.saturating_sub(after.total)),
            (false, Some(before), _) => Some(before.total),
            _ => None,
        };
        let stand_in: Box<dyn Communicator> =
            Box::new(SuspendedComm { kinds: kinds.clone(), native: None, memory_before: memory });
        let old = std::mem::replace(&mut *slot, stand_in);
        let state = slot.suspension().expect("the stand-in was just put there");
        if native {
            state.native = Some(old);
        } else {
            // Recreate mode: released now (dropping destroys it; NCCL's aborts), so a handle
            // cached from it is stale: the generation says so.
            crate::runtime::lifecycle::comm_generation::comm_handles_released();
            drop(old);
        }
        drop(slot);
        report.communicators.push(CommTransition {
            name: g.comm_name.clone(),
            kinds,
            mode,
            memory,
            memory_suspended,
            freed,
            reason,
            took: t.elapsed(),
        });
    }
    report.took = start.elapsed();
    Ok(report)
}

/// The grids other than `grid` that share `g`'s communicator and are still running: a grid runs
/// while any communicator of its own (one it shares with no group of `grid`) is up, or when it
/// has none on this rank. Every member of the communicator has the same groups sharing it, so
/// every member decides alike.
fn running_sharers(rt: &Runtime, grid: &Grid, g: &LiveGroup) -> Result<Vec<String>, RuntimeError> {
    let mut running: Vec<String> = Vec::new();
    let sharers = rt.groups.iter().filter(|o| Arc::ptr_eq(&o.comm, &g.comm) && o.plan.grid != grid.tag);
    for other in sharers {
        let name = grid_prefix(&other.plan.grid).trim_end_matches(':').to_string();
        if running.contains(&name) {
            continue;
        }
        let shared_with_grid =
            |c: &LiveGroup| rt.groups.iter().any(|o| o.plan.grid == grid.tag && Arc::ptr_eq(&o.comm, &c.comm));
        let mut own_up = None;
        for c in rt.groups.iter().filter(|c| c.plan.grid == other.plan.grid && !shared_with_grid(c)) {
            let up = lock_comm(&c.comm).map_err(|e| group_error(c, e))?.suspension().is_none();
            own_up = Some(own_up.unwrap_or(false) || up);
        }
        if own_up.unwrap_or(true) {
            running.push(name);
        }
    }
    Ok(running)
}

fn resume_on(rt: &Runtime, req: &SuspendRequest) -> Result<SuspendReport, RuntimeError> {
    let start = Instant::now();
    let (grid, kinds) = selected(rt, req)?;
    let timeout = req.timeout.unwrap_or(rt.timeout);
    if timeout.is_zero() {
        return Err(RuntimeError::InvalidArgument("resume timeout must be > 0".into()));
    }
    let deadline = Deadline::at(start + crate::timeout::clamp(timeout));
    // A peer found dead meanwhile ends the creations and verifications below at once.
    let _deaths = rt.faults.arm();
    let mut report = SuspendReport::default();
    let mut resumed: Vec<&LiveGroup> = Vec::new();
    // Native ones resume in place; released ones are created again after (together where the
    // backend creates together), each member going through them in the same plan order.
    let mut released: Vec<(&LiveGroup, String)> = Vec::new();
    for (g, kinds) in distinct(rt, Some(grid), kinds.as_deref()) {
        let t = Instant::now();
        let mut slot = lock_comm(&g.comm).map_err(|e| group_error(g, e))?;
        let Some(state) = slot.suspension() else { continue };
        let Some(mut native) = state.native.take() else {
            released.push((g, kinds));
            continue;
        };
        if let Err(e) = native.resume() {
            // Left released (the stand-in stays): a later resume creates it again.
            drop(native);
            return Err(group_error(g, e.context(format!("resuming the communicator of kind {kinds}"))));
        }
        *slot = native;
        let memory = slot.memory().and_then(Result::ok);
        drop(slot);
        resumed.push(g);
        report.communicators.push(transition(g, kinds, SuspendMode::Native, memory, t));
    }
    let t = Instant::now();
    let made = if rt.backend.creates_together() && released.len() > 1 {
        recreate_all(rt, &released, deadline, true)?
    } else {
        // One by one, each arriving in its meeting just before it is created.
        let one = |r| recreate_all(rt, std::slice::from_ref(r), deadline, false);
        released.iter().map(one).collect::<Result<Vec<_>, _>>()?.into_iter().flatten().collect()
    };
    for ((g, kinds), comm) in released.into_iter().zip(made) {
        let mut slot = lock_comm(&g.comm).map_err(|e| group_error(g, e))?;
        *slot = comm;
        let memory = slot.memory().and_then(Result::ok);
        drop(slot);
        resumed.push(g);
        report.communicators.push(transition(g, kinds, SuspendMode::Recreate, memory, t));
    }
    if rt.args.verify {
        for g in &resumed {
            verify_group(g, rt.env.rank).map_err(|e| {
                RuntimeError::Group(GroupError {
                    error: CommError { message: format!("after resume: {}", e.error.message), ..e.error },
                    ..e
                })
            })?;
        }
        report.verified = resumed.len();
    }
    report.took = start.elapsed();
    Ok(report)
}

fn transition(
    g: &LiveGroup,
    kinds: String,
    mode: SuspendMode,
    memory: Option<CommMemory>,
    t: Instant,
) -> CommTransition {
    CommTransition {
        name: g.comm_name.clone(),
        kinds,
        mode,
        memory,
        memory_suspended: None,
        freed: None,
        reason: None,
        took: t.elapsed(),
    }
}

/// What one recreate-mode creation is given: the group (what is left of `deadline`), its kind's
/// options, its meeting's key space for this resume (`resume/<name>/<n>`, where this rank has
/// arrived) and the backend's store under it.
struct Prepared {
    info: GroupInfo,
    options: CommOptions,
    space: String,
    store: Arc<dyn Store>,
}

fn prepare(rt: &Runtime, g: &LiveGroup, kinds: &str, deadline: Deadline) -> Result<Prepared, RuntimeError> {
    let space = rt.key_spaces.next(&keys::resume(&g.comm_name));
    let store = rt.faults.backend_store(Arc::new(PrefixStore::new(&space, rt.base.clone())));
    let fail = |e: CommError| recreate_error(g, kinds, e);
    meeting(rt, g, &space, deadline)
        .arrive(b"1")
        .map_err(|e| fail(CommError::new(CommErrorKind::Store, e.to_string())))?;
    let left = deadline.left();
    let host = rt.host.addr.to_string();
    let info = GroupInfo::new(g.comm_name.clone(), g.plan.members.clone(), rt.env.rank, left)
        .map(|i| i.with_host_addr(Some(&host)).with_device(rt.args.device))
        .map_err(|e| fail(e.into()))?;
    Ok(Prepared { info, options: g.plan.kind.options(&rt.args.comm_config), space, store })
}

/// The members of `g` meeting in `space` to re-create its communicator.
fn meeting<'a>(rt: &'a Runtime, g: &LiveGroup, space: &str, deadline: Deadline) -> Meeting<'a> {
    let what = format!("this resume of communicator '{}'", g.comm_name);
    Meeting::new(rt.base.as_ref(), space, &what, g.plan.members.clone(), rt.env.rank, deadline)
        .watching(rt.faults.interrupt())
}

fn recreate_error(g: &LiveGroup, kinds: &str, e: CommError) -> RuntimeError {
    group_error(g, e.context(format!("re-creating the communicator of kind {kinds} on resume")))
}

/// Recreate mode: the communicators of `released` created again with their members, names and
/// options within `deadline` (together or one by one: the one creation call, [`create_comms`]),
/// each ready; a failure names the members that never arrived in the
/// resume's meeting, or that are stuck behind another rank.
fn recreate_all(
    rt: &Runtime,
    released: &[(&LiveGroup, String)],
    deadline: Deadline,
    together: bool,
) -> Result<Vec<Box<dyn Communicator>>, RuntimeError> {
    let prepared = released.iter().map(|(g, kinds)| prepare(rt, g, kinds, deadline)).collect::<Result<Vec<_>, _>>()?;
    let requests: Vec<GroupRequest<'_>> = prepared.iter().map(|p| (&p.info, &p.options, p.store.clone())).collect();
    // A member that never arrived in a resume's meeting is behind (the one explanation).
    let meetings: Vec<Meeting<'_>> =
        released.iter().zip(&prepared).map(|((g, _), p)| meeting(rt, g, &p.space, deadline)).collect();
    let waited: Vec<Waited<'_>> = released
        .iter()
        .zip(&meetings)
        .map(|((g, _), m)| Waited { members: &g.plan.members, behind: Behind::Absent(m) })
        .collect();
    let records = rt.faults.records(&rt.base);
    let explainer =
        Explainer::new(rt.base.as_ref(), rt.env.rank).recording_in(records.as_ref()).watching(rt.faults.interrupt());
    create_comms(rt.backend.as_ref(), &requests, &waited, &explainer, together, true)
        .map_err(|(i, e)| recreate_error(released[i].0, &released[i].1, e))
}

/// The members' agreement on suspending `g` natively, from each one's
/// [`Communicator::suspend_vote`]: a meeting of `g`'s members in a fresh space of
/// [`keys::suspend`] where each arrives with its vote and gathers all of them within `deadline`.
/// `Some(error)` (`Unsupported`, naming the first refusing member and why) when any member's
/// backend would refuse: then every member recreates. Members that never voted are named.
fn agree(
    rt: &Runtime,
    g: &LiveGroup,
    kinds: &str,
    vote: Result<(), String>,
    deadline: Deadline,
) -> Result<Option<CommError>, RuntimeError> {
    let space = rt.key_spaces.next(&keys::suspend(&g.comm_name));
    let what = format!("this suspend of communicator '{}'", g.comm_name);
    let m = Meeting::new(rt.base.as_ref(), &space, &what, g.plan.members.clone(), rt.env.rank, deadline);
    let mine = match &vote {
        Ok(()) => "native".to_string(),
        Err(why) => format!("recreate: {why}"),
    };
    let votes = m.arrive(mine.as_bytes()).and_then(|()| m.gather()).map_err(|e| {
        let kind = match e {
            MeetError::Missing(_) => CommErrorKind::Timeout,
            MeetError::Store(_) => CommErrorKind::Store,
        };
        group_error(
            g,
            CommError::new(kind, e.to_string())
                .context(format!("agreeing how to suspend the communicator of kind {kinds}")),
        )
    })?;
    for (&member, v) in g.plan.members.iter().zip(&votes) {
        if let Some(why) = String::from_utf8_lossy(v).strip_prefix("recreate: ") {
            let who = if member == rt.env.rank { "this rank".to_string() } else { format!("rank {member}") };
            return Ok(Some(CommError::new(CommErrorKind::Unsupported, format!("{who}: {why}"))));
        }
    }
    Ok(None)
}
