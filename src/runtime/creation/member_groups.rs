//! Groups made after init by their members only (docs/groups-after-init.md).
//!
//! [`start_group`] is called by each member of a group and by nobody else: there is no
//! collective over the world and no split of another communicator. It returns at once with a
//! [`MemberGroup`] handle; the creation goes on in the background (a backend whose
//! `create_group` may run on any thread, see [`CommFactory::creates_in_any_thread`]), so a rank
//! may start several groups in any order while other ranks start them in another: no creation
//! waits for another, and no order between ranks can make a cycle. [`MemberGroup::wait`] (or a
//! first collective) waits for it. A backend that must create in the caller's thread creates a
//! group at its first wait; [`create_groups`] then waits in one order every rank shares (by
//! name), so the same set of groups started in any order still cannot wait in a cycle.
//!
//! The rendezvous: each member writes what it asked for (members and options) under the group's
//! own keys, `after_init/<name>/<generation>/` (a meeting (`runtime::meeting`) of the members: it arrives with its
//! record), as it starts, then gathers every member's record until the group's deadline (the
//! init timeout unless the caller gives one). A member whose record is missing at the deadline
//! is named ("did not come to create_group ..."); a record that differs is
//! named with its rank and field. Then the backend creates the communicator through a store
//! private to the group. The generation counts the groups of this name and members this rank made
//! before, so a destroyed group can be made again without meeting its old keys.

use super::groups::{create_comms, GroupError, SharedComm};
use super::member_registry::MemberEntry;
use crate::backend::{CommError, CommErrorKind, CommFactory, CommOptions, Communicator, GroupInfo};
use crate::lock::Unpoisoned;
use crate::runtime::error::RuntimeError;
use crate::runtime::faults::interrupt::Interrupt;
use crate::runtime::launch::host::format_ranks;
use crate::runtime::lifecycle::init::with_runtime;
use crate::runtime::lifecycle::runtime_state::Runtime;
use crate::runtime::meeting::explain::{Behind, Explainer, Waited};
use crate::runtime::meeting::meet::{MeetError, Meeting};
use crate::store::{PrefixStore, Store};
use crate::timeout::Deadline;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

/// The longest group name (bytes).
pub const MAX_NAME_LEN: usize = 200;

/// Options of a group made after init.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupOptions {
    /// The communicator's options (NCCL's per-communicator config; other backends take none).
    pub comm: CommOptions,
    /// Bound of the rendezvous and creation; `None` = the init timeout.
    pub timeout: Option<Duration>,
}

/// One group to make: its name, its global ranks (any order; no duplicates) and options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    pub name: String,
    pub ranks: Vec<u32>,
    pub options: GroupOptions,
}

impl GroupSpec {
    pub fn new(name: impl Into<String>, ranks: impl Into<Vec<u32>>) -> GroupSpec {
        GroupSpec { name: name.into(), ranks: ranks.into(), options: GroupOptions::default() }
    }
}

/// A handle on a group made after init (cheap to clone; every clone is the same group).
#[derive(Clone)]
pub struct MemberGroup {
    entry: Arc<MemberEntry>,
    rank: u32,
}

impl MemberGroup {
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// The group's global ranks, ascending.
    pub fn ranks(&self) -> &[u32] {
        &self.entry.members
    }

    /// This rank's index in [`MemberGroup::ranks`].
    pub fn group_rank(&self) -> u32 {
        self.entry.group_rank
    }

    /// Whether the creation has ended (ready, failed or destroyed); never waits.
    pub fn is_done(&self) -> bool {
        self.entry.is_done()
    }

    /// Wait until the communicator is ready (bounded by the group's deadline + 2 s); the error
    /// names the group, and the members that never came or disagree.
    pub fn wait(&self) -> Result<(), RuntimeError> {
        self.comm().map(drop)
    }

    fn comm(&self) -> Result<SharedComm, RuntimeError> {
        self.entry.wait().map_err(RuntimeError::Group)
    }

    fn failed(&self, what: &str, e: CommError) -> RuntimeError {
        RuntimeError::Group(GroupError {
            group: self.entry.name.clone(),
            members: self.entry.members.clone(),
            error: CommError { message: format!("{what} failed: {}", e.message), ..e },
        })
    }

    /// Sum `values` element-wise over the group, in place (waits for the creation first).
    pub fn allreduce_sum_i64(&self, values: &mut [i64]) -> Result<(), RuntimeError> {
        let comm = self.comm()?;
        let mut c = comm.locked();
        c.allreduce_sum_i64(values).map_err(|e| self.failed("all-reduce", e))
    }

    /// All-reduce `[global rank, 1]` and check the result is `[sum of the members, their number]`.
    pub fn verify(&self) -> Result<(), RuntimeError> {
        let mut values = [self.rank as i64, 1];
        self.allreduce_sum_i64(&mut values)?;
        let want = [self.entry.members.iter().map(|&m| m as i64).sum::<i64>(), self.entry.members.len() as i64];
        if values != want {
            return Err(self.failed(
                "verification",
                CommError::new(
                    CommErrorKind::Backend,
                    format!("all-reduce of [rank, 1] gave {values:?}, the members predict {want:?}"),
                ),
            ));
        }
        Ok(())
    }

    /// Destroy this group on this rank (the same as [`destroy_group`] of its name, unless the
    /// name was destroyed and made again since: that later group stays). Its communicator goes
    /// once no collective uses it; this and every other handle on it fail from then on.
    pub fn destroy(&self) {
        if with_runtime(|rt| rt.member_groups.destroy_entry(&self.entry)).is_err() {
            // No runtime any more: its teardown destroyed the group already.
            self.entry.destroy();
        }
    }

    /// The backend's own handle of the communicator (waits for the creation first).
    pub fn raw_handle(&self) -> Result<*mut c_void, RuntimeError> {
        let comm = self.comm()?;
        let c = comm.locked();
        Ok(c.raw_handle())
    }
}

fn invalid(message: String) -> RuntimeError {
    RuntimeError::InvalidArgument(message)
}

/// The name must be usable as a store key component.
fn check_name(name: &str) -> Result<(), RuntimeError> {
    if name.is_empty() {
        return Err(invalid("group name is empty".into()));
    }
    if name.len() > MAX_NAME_LEN {
        let head: String = name.chars().take(32).collect();
        return Err(invalid(format!("group name '{head}...' is longer than {MAX_NAME_LEN} bytes")));
    }
    if let Some(c) = name.chars().find(|c| c.is_control() || c.is_whitespace() || *c == '/') {
        return Err(invalid(format!("group name {name:?} contains {c:?}: use no '/', spaces or control characters")));
    }
    Ok(())
}

/// `ranks` checked (in the world, no duplicates, `rank` among them) and sorted ascending.
fn check_ranks(name: &str, ranks: &[u32], rank: u32, world: u32) -> Result<Vec<u32>, RuntimeError> {
    if ranks.is_empty() {
        return Err(invalid(format!("group '{name}' has no ranks")));
    }
    if let Some(r) = ranks.iter().find(|&&r| r >= world) {
        return Err(invalid(format!("group '{name}': rank {r} is not in the world of {world} ranks")));
    }
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(invalid(format!("group '{name}': rank {} is listed twice", w[0])));
    }
    if !sorted.contains(&rank) {
        return Err(invalid(format!(
            "group '{name}' (ranks {}): this rank {rank} is not a member; only members call create_group",
            format_ranks(&sorted)
        )));
    }
    Ok(sorted)
}

/// What a member records of its request, compared field by field with the others'.
fn record(members: &[u32], options: &CommOptions) -> String {
    let m: Vec<String> = members.iter().map(u32::to_string).collect();
    format!("members={}\noptions={options}", m.join(","))
}

fn field<'a>(record: &'a str, name: &str) -> &'a str {
    record.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix('='))).unwrap_or("?")
}

/// Everything a creation needs, taken from the runtime (the creation outlives the borrow).
struct Creation {
    factory: Arc<dyn CommFactory>,
    /// The attempt's store; the group's own keys are under `space`
    /// (`after_init/<name>/<generation>`): its members' meeting, and the backend's under `comm`.
    base: Arc<dyn Store>,
    space: String,
    entry: Arc<MemberEntry>,
    rank: u32,
    host_addr: String,
    device: Option<u32>,
    /// The whole bound (the deadline is this long after the start), for messages.
    timeout: Duration,
    /// The attempt's interrupt: a member known dead ends the members' meeting at once.
    interrupt: Arc<Interrupt>,
    /// Where this rank writes its blame record (its liveness connection).
    records: Arc<dyn Store>,
}

impl Creation {
    fn error(&self, kind: CommErrorKind, message: String) -> GroupError {
        GroupError {
            group: self.entry.name.clone(),
            members: self.entry.members.clone(),
            error: CommError::new(kind, message),
        }
    }

    fn left(&self) -> Duration {
        self.entry.deadline.left()
    }

    /// The members' meeting: each arrives with its request.
    fn meeting(&self) -> Meeting<'_> {
        let e = &self.entry;
        let what =
            format!("create_group of group '{}' within its timeout ({:.1} s)", e.name, self.timeout.as_secs_f64());
        Meeting::new(self.base.as_ref(), &self.space, &what, e.members.clone(), self.rank, e.deadline)
            .watching(&self.interrupt)
    }

    /// Record this member's request (its arrival).
    fn arrive(&self) -> Result<(), GroupError> {
        let mine = record(&self.entry.members, &self.entry.options);
        self.meeting()
            .arrive(mine.as_bytes())
            .map_err(|e| self.error(CommErrorKind::Store, format!("recording this rank's request: {e}")))
    }

    /// Wait for every member's request, compare them with this rank's, then create.
    fn run(self) -> Result<Box<dyn Communicator>, GroupError> {
        let e = &self.entry;
        let meeting = self.meeting();
        let store_err = |what: &str, err: MeetError| self.error(CommErrorKind::Store, format!("{what}: {err}"));
        let waited = [Waited { members: &e.members, behind: Behind::Absent(&meeting) }];
        let explainer =
            Explainer::new(self.base.as_ref(), self.rank).recording_in(self.records.as_ref()).watching(&self.interrupt);
        match meeting.gather() {
            Ok(requests) => self.compare(requests.into_iter().map(Some).collect())?,
            // A member known dead: named as died, at once.
            Err(MeetError::Missing(missing)) if missing.died.is_some() => {
                return Err(self.error(CommErrorKind::PeerFailed, missing.to_string()));
            }
            Err(MeetError::Missing(missing)) => {
                // A member that asked for something else is named first.
                self.compare(meeting.arrivals().map_err(|err| store_err("reading the members' requests", err))?)?;
                // Who did not come, or is stuck behind another rank (the one explanation).
                let why = explainer.explain_message(&waited[0], "");
                let why = if why.is_empty() { missing.to_string() } else { why };
                return Err(self.error(CommErrorKind::Timeout, why));
            }
            Err(err) => return Err(store_err("waiting for the members' requests", err)),
        }
        let info = GroupInfo::new(e.name.clone(), e.members.clone(), self.rank, self.left())
            .map(|g| g.with_host_addr(Some(self.host_addr.as_str())).with_device(self.device))
            .map_err(|err| self.error(CommErrorKind::InvalidArgument, err.to_string()))?;
        let comm_store: Arc<dyn Store> = Arc::new(PrefixStore::new(&format!("{}/comm", self.space), self.base.clone()));
        let fail = |err: CommError| GroupError {
            group: e.name.clone(),
            members: e.members.clone(),
            error: err.context("creating its communicator"),
        };
        if !e.enter_backend() {
            return Err(self.error(CommErrorKind::InvalidArgument, "the group was destroyed".into()));
        }
        let request = [(&info, &e.options, comm_store)];
        let mut made = create_comms(self.factory.as_ref(), &request, &waited, &explainer, false, true)
            .map_err(|(_, err)| fail(err))?;
        made.pop().ok_or_else(|| fail(CommError::new(CommErrorKind::Backend, "no communicator was returned")))
    }

    /// The first member (of those present) whose request differs from this rank's, named with
    /// the field.
    fn compare(&self, requests: Vec<Option<Vec<u8>>>) -> Result<(), GroupError> {
        let mine = record(&self.entry.members, &self.entry.options);
        for (theirs, &m) in requests.iter().zip(&self.entry.members) {
            let Some(theirs) = theirs.as_ref().filter(|_| m != self.rank) else { continue };
            let theirs = String::from_utf8_lossy(theirs);
            for f in ["members", "options"] {
                let (a, b) = (field(&theirs, f), field(&mine, f));
                if a != b {
                    return Err(self.error(
                        CommErrorKind::Mismatch,
                        format!(
                            "rank {m} asked for {f} {a}, this rank {} for {f} {b}: every member must ask for the same",
                            self.rank
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Start making the group `name` of `ranks` (this rank among them); returns at once. Only its
/// members call this. Errors at once for a bad name or ranks, a name live already, or options the
/// backend refuses; the rendezvous's errors come from [`MemberGroup::wait`].
pub fn start_group(name: &str, ranks: &[u32], options: &GroupOptions) -> Result<MemberGroup, RuntimeError> {
    with_runtime(|rt| start_on(rt, name, ranks, options))?
}

fn start_on(rt: &Runtime, name: &str, ranks: &[u32], options: &GroupOptions) -> Result<MemberGroup, RuntimeError> {
    check_name(name)?;
    let rank = rt.env.rank;
    let members = check_ranks(name, ranks, rank, rt.env.world_size)?;
    let factory = rt.backend.clone();
    if let Some(why) = factory.per_group_unavailable() {
        return Err(invalid(format!(
            "group '{name}': groups made after init need a backend that creates groups one by one, but {why}"
        )));
    }
    factory
        .check_options(&options.comm)
        .map_err(|e| RuntimeError::Comm(e.context(format!("communicator options of group '{name}'"))))?;
    let timeout = options.timeout.unwrap_or(rt.timeout);
    if timeout.is_zero() {
        return Err(invalid(format!("group '{name}': timeout must be > 0")));
    }
    let group_rank = members.iter().position(|&m| m == rank).unwrap_or(0) as u32;
    let deadline = Deadline::after(timeout);
    let entry = rt
        .member_groups
        .insert(name, &members, |generation| {
            Arc::new(MemberEntry::new(
                name.into(),
                members.clone(),
                group_rank,
                options.comm.clone(),
                generation,
                deadline,
            ))
        })
        .map_err(invalid)?;
    let creation = Creation {
        factory: factory.clone(),
        base: rt.base.clone(),
        space: crate::runtime::meeting::keys::after_init(name, entry.generation),
        entry: entry.clone(),
        rank,
        host_addr: rt.host.addr.to_string(),
        device: rt.args.device,
        timeout,
        interrupt: rt.faults.shared_interrupt(),
        records: rt.faults.records(&rt.base),
    };
    if let Err(e) = creation.arrive() {
        rt.member_groups.destroy(name);
        return Err(RuntimeError::Group(e));
    }
    if let Err(e) = launch(&entry, creation, factory.creates_in_any_thread()) {
        rt.member_groups.destroy(name);
        return Err(invalid(format!("group '{name}': cannot start its creation thread: {e}")));
    }
    Ok(MemberGroup { entry, rank })
}

/// Record this member's arrival, then run `creation` on a thread of its own (`background`) or
/// leave it for the first wait.
fn launch(entry: &Arc<MemberEntry>, creation: Creation, background: bool) -> Result<(), String> {
    if background {
        let done = entry.clone();
        std::thread::Builder::new()
            .name(format!("mcore-group-{}", entry.name.chars().take(8).collect::<String>()))
            .spawn(move || done.finish(creation.run()))
            .map(drop)
            .map_err(|e| e.to_string())
    } else {
        entry.defer(Box::new(move || creation.run()));
        Ok(())
    }
}

/// Make the group and wait for it ([`start_group`] then [`MemberGroup::wait`]).
pub fn create_group(name: &str, ranks: &[u32], options: &GroupOptions) -> Result<MemberGroup, RuntimeError> {
    let g = start_group(name, ranks, options)?;
    g.wait()?;
    Ok(g)
}

/// Start every group of `specs`, then wait for them all, in name order (the one order every
/// rank shares, which matters for a backend that creates in the caller's thread). The first
/// failure is returned, after every creation has ended.
pub fn create_groups(specs: &[GroupSpec]) -> Result<Vec<MemberGroup>, RuntimeError> {
    let mut started = Vec::with_capacity(specs.len());
    for s in specs {
        match start_group(&s.name, &s.ranks, &s.options) {
            Ok(g) => started.push(g),
            Err(e) => {
                started.iter().for_each(|g: &MemberGroup| drop(destroy_group(g.name())));
                return Err(e);
            }
        }
    }
    let mut order: Vec<usize> = (0..started.len()).collect();
    order.sort_by(|&a, &b| started[a].name().cmp(started[b].name()));
    let mut first = None;
    for i in order {
        if let Err(e) = started[i].wait() {
            first.get_or_insert(e);
        }
    }
    match first {
        None => Ok(started),
        Some(e) => Err(e),
    }
}

/// The live group `name` made after init on this rank.
pub fn member_group(name: &str) -> Result<Option<MemberGroup>, RuntimeError> {
    with_runtime(|rt| rt.member_groups.get(name).map(|entry| MemberGroup { entry, rank: rt.env.rank }))
}

/// The names of this rank's live groups made after init, sorted.
pub fn member_group_names() -> Result<Vec<String>, RuntimeError> {
    with_runtime(|rt| rt.member_groups.names())
}

/// Destroy this rank's group `name` (the others stay); `Ok(false)` when there is none. Handles
/// on it fail from then on; its communicator goes once no collective uses it.
pub fn destroy_group(name: &str) -> Result<bool, RuntimeError> {
    with_runtime(|rt| rt.member_groups.destroy(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn names_and_ranks_are_checked_naming_the_value() {
        assert!(check_name("").unwrap_err().to_string().contains("empty"));
        assert!(check_name("a/b").unwrap_err().to_string().contains("'/'"));
        assert!(check_name("ok-name_1").is_ok());
        let long = "é".repeat(150);
        assert!(check_name(&long).unwrap_err().to_string().contains("longer than 200 bytes"));
        let e = check_ranks("g", &[0, 9], 0, 8).unwrap_err().to_string();
        assert!(e.contains("rank 9 is not in the world of 8"), "{e}");
        let e = check_ranks("g", &[3, 1, 3], 1, 8).unwrap_err().to_string();
        assert!(e.contains("rank 3 is listed twice"), "{e}");
        let e = check_ranks("g", &[1, 2], 0, 8).unwrap_err().to_string();
        assert!(e.contains("this rank 0 is not a member"), "{e}");
        assert!(check_ranks("g", &[], 0, 8).unwrap_err().to_string().contains("no ranks"));
        assert_eq!(check_ranks("g", &[5, 0, 2], 2, 8).unwrap(), vec![0, 2, 5]);
    }

    /// Test double: a backend whose `create_group` is a blocking rendezvous (each member sets
    /// its key in the group's store and waits for every member's), as Gloo's and NCCL's are;
    /// its communicators do nothing.
    struct Rendezvous;
    /// A communicator that does nothing; dropped, it counts itself in its counter, if any.
    struct NoComm(Option<Arc<std::sync::atomic::AtomicUsize>>);
    impl Drop for NoComm {
        fn drop(&mut self) {
            if let Some(dropped) = &self.0 {
                dropped.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
    impl Communicator for NoComm {
        fn allreduce_sum_i64(&mut self, _: &mut [i64]) -> Result<(), CommError> {
            Ok(())
        }
        fn barrier(&mut self) -> Result<(), CommError> {
            Ok(())
        }
        fn raw_handle(&self) -> *mut c_void {
            std::ptr::null_mut()
        }
    }
    impl CommFactory for Rendezvous {
        fn name(&self) -> &str {
            "rendezvous-double"
        }
        fn create_group(
            &self,
            g: &GroupInfo,
            _: &CommOptions,
            store: Arc<dyn Store>,
        ) -> Result<Box<dyn Communicator>, CommError> {
            store
                .set(&format!("here/{}", g.group_rank), b"1")
                .map_err(|e| CommError::new(CommErrorKind::Store, e.to_string()))?;
            let keys: Vec<String> = (0..g.global_ranks.len()).map(|r| format!("here/{r}")).collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            store.wait(&keys, g.timeout).map_err(|e| CommError::new(CommErrorKind::Timeout, e.to_string()))?;
            Ok(Box::new(NoComm(None)))
        }
    }

    /// Rank `rank`'s request for the group `name` of `members` over `base` (the [`Rendezvous`]
    /// double), within `timeout`.
    fn creation_of(
        base: &Arc<dyn Store>,
        rank: u32,
        name: &str,
        members: Vec<u32>,
        timeout: Duration,
    ) -> (Arc<MemberEntry>, Creation) {
        let gr = members.iter().position(|&x| x == rank).unwrap() as u32;
        let entry =
            Arc::new(MemberEntry::new(name.into(), members, gr, CommOptions::default(), 0, Deadline::after(timeout)));
        let creation = Creation {
            factory: Arc::new(Rendezvous),
            base: base.clone(),
            space: crate::runtime::meeting::keys::after_init(name, 0),
            entry: entry.clone(),
            rank,
            host_addr: "127.0.0.1".into(),
            device: None,
            timeout,
            interrupt: Interrupt::new(),
            records: base.clone(),
        };
        (entry, creation)
    }

    /// Ranks 0, 1, 2 each make two of the groups a = {0, 1}, b = {1, 2}, c = {0, 2}, starting
    /// them in a cyclic order (0: a, c; 1: b, a; 2: c, b) and waiting in `wait_order`: the
    /// time each rank took, or its first error.
    fn three_ranks(background: bool, by_name: bool, timeout: Duration) -> Vec<Result<Duration, String>> {
        let base: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::new(Duration::from_secs(10)));
        let members = |n: &str| match n {
            "a" => vec![0, 1],
            "b" => vec![1, 2],
            _ => vec![0, 2],
        };
        let orders = [["a", "c"], ["b", "a"], ["c", "b"]];
        let threads: Vec<_> = (0..3u32)
            .map(|rank| {
                let base = base.clone();
                std::thread::spawn(move || {
                    let start = Instant::now();
                    let mut entries = Vec::new();
                    for name in orders[rank as usize] {
                        let (entry, creation) = creation_of(&base, rank, name, members(name), timeout);
                        creation.arrive().map_err(|e| e.to_string())?;
                        launch(&entry, creation, background)?;
                        entries.push(entry);
                    }
                    if by_name {
                        entries.sort_by(|a, b| a.name.cmp(&b.name));
                    }
                    for e in &entries {
                        e.wait().map_err(|e| e.to_string())?;
                    }
                    Ok(start.elapsed())
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    #[test]
    fn groups_started_in_a_cyclic_order_all_complete_in_the_background() {
        for r in three_ranks(true, false, Duration::from_secs(5)) {
            assert!(r.as_ref().is_ok_and(|t| *t < Duration::from_secs(2)), "{r:?}");
        }
    }

    #[test]
    fn in_the_callers_thread_the_name_order_completes_where_the_start_order_would_wait_in_a_cycle() {
        for r in three_ranks(false, true, Duration::from_secs(5)) {
            assert!(r.as_ref().is_ok_and(|t| *t < Duration::from_secs(2)), "{r:?}");
        }
        // The same groups waited for in the cyclic start order: the double's rendezvous really
        // blocks, so every rank waits for another until the deadline.
        for r in three_ranks(false, false, Duration::from_millis(600)) {
            let e = r.expect_err("a cycle cannot complete");
            assert!(e.contains("creating its communicator") && e.contains("here/"), "{e}");
        }
    }

    /// Rank 2 (on host n2) never starts. Rank 1 waits for it in group x = {1, 2} and fails;
    /// rank 0 waits in vain for rank 1 (alive, but stuck in x: it never starts a) in group
    /// a = {0, 1}, and must blame rank 2, not the live rank 1.
    #[test]
    fn a_group_after_init_names_who_never_came_and_follows_the_blame_chain() {
        let base: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::new(Duration::from_secs(10)));
        let n2 = crate::runtime::launch::host::HostInfo {
            hostname: "n2".into(),
            addr: "10.0.0.3".parse().unwrap(),
            why: String::new(),
        };
        crate::runtime::launch::host::publish(base.as_ref(), 2, &n2).unwrap();
        let make = move |rank: u32, name: &str, members: Vec<u32>, timeout: Duration| {
            let (_, creation) = creation_of(&base, rank, name, members, timeout);
            creation.arrive().unwrap();
            creation.run().map(drop).unwrap_err().to_string()
        };
        let rank0 = std::thread::spawn({
            let make = make.clone();
            move || make(0, "a", vec![0, 1], Duration::from_millis(1500))
        });
        let e1 = make(1, "x", vec![1, 2], Duration::from_millis(500));
        assert!(e1.starts_with("group x (ranks 1-2): "), "{e1}");
        assert!(e1.contains("rank(s) 2 on host 'n2' (10.0.0.3) did not come to create_group of group 'x'"), "{e1}");
        let e0 = rank0.join().unwrap();
        assert!(e0.starts_with("group a (ranks 0-1): "), "{e0}");
        assert!(!e0.contains("rank(s) 1 did not come"), "blames the live rank 1: {e0}");
        assert!(
            e0.ends_with("rank(s) 1 failed at an earlier group, waiting for rank(s) 2 on host 'n2' (10.0.0.3)"),
            "{e0}"
        );
    }

    /// Test double: a backend whose creation takes `slow` (a plugin making its communicator),
    /// counting the creations it began and the communicators it dropped.
    struct Slow {
        slow: Duration,
        began: Arc<std::sync::atomic::AtomicUsize>,
        dropped: Arc<std::sync::atomic::AtomicUsize>,
    }
    impl CommFactory for Slow {
        fn name(&self) -> &str {
            "slow-double"
        }
        fn create_group(
            &self,
            _: &GroupInfo,
            _: &CommOptions,
            _: Arc<dyn Store>,
        ) -> Result<Box<dyn Communicator>, CommError> {
            self.began.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(self.slow);
            Ok(Box::new(NoComm(Some(self.dropped.clone()))))
        }
    }

    /// Rank 0's group `name` of `members`, registered in `groups` and created in the background
    /// by [`Slow`] over a store of its own (returned).
    fn slow_group(
        groups: &crate::runtime::creation::member_registry::MemberGroups,
        name: &str,
        members: Vec<u32>,
        slow: &Slow,
    ) -> (Arc<MemberEntry>, Arc<dyn Store>) {
        let base: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::new(Duration::from_secs(10)));
        let timeout = Duration::from_secs(5);
        let entry = groups
            .insert(name, &members, |g| {
                let deadline = Deadline::after(timeout);
                Arc::new(MemberEntry::new(name.into(), members.clone(), 0, CommOptions::default(), g, deadline))
            })
            .unwrap();
        let factory = Slow { slow: slow.slow, began: slow.began.clone(), dropped: slow.dropped.clone() };
        let creation = Creation {
            factory: Arc::new(factory),
            base: base.clone(),
            space: crate::runtime::meeting::keys::after_init(name, entry.generation),
            entry: entry.clone(),
            rank: 0,
            host_addr: "127.0.0.1".into(),
            device: None,
            timeout,
            interrupt: Interrupt::new(),
            records: base.clone(),
        };
        creation.arrive().unwrap();
        launch(&entry, creation, true).unwrap();
        (entry, base)
    }

    /// A group destroyed by its user while its creation runs in the backend: the runtime's
    /// teardown (`MemberGroups::close`) returns only once that creation dropped what it made. Before,
    /// the creation went on after `mcore_destroy` returned and called the backend while the
    /// process exited (Gloo's plugin then crashed in 59 of 100 runs of a C program).
    #[test]
    fn the_teardown_waits_for_a_destroyed_groups_creation_to_leave_the_backend() {
        use std::sync::atomic::Ordering::SeqCst;
        let groups = crate::runtime::creation::member_registry::MemberGroups::default();
        let slow = Slow { slow: Duration::from_millis(300), began: Default::default(), dropped: Default::default() };
        slow_group(&groups, "g", vec![0], &slow);
        let t = Instant::now();
        while slow.began.load(SeqCst) == 0 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(slow.began.load(SeqCst), 1, "the creation reached the backend");
        assert!(groups.destroy("g"));
        assert_eq!(slow.dropped.load(SeqCst), 0, "still creating");
        groups.close();
        assert_eq!(slow.dropped.load(SeqCst), 1, "the communicator was dropped before the teardown returned");
    }

    /// A group destroyed before its creation reaches the backend never calls it.
    #[test]
    fn a_group_destroyed_before_its_creation_reaches_the_backend_never_calls_it() {
        use std::sync::atomic::Ordering::SeqCst;
        let groups = crate::runtime::creation::member_registry::MemberGroups::default();
        let slow = Slow { slow: Duration::ZERO, began: Default::default(), dropped: Default::default() };
        let (entry, base) = slow_group(&groups, "h", vec![0, 1], &slow);
        let space = crate::runtime::meeting::keys::after_init("h", 0);
        // Rank 1 has not come yet: the creation waits in the members' meeting. Destroyed there,
        // then rank 1 arrives: the creation leaves the meeting and must not call the backend.
        groups.destroy_all();
        let rank1 = Meeting::new(base.as_ref(), &space, "h", vec![0, 1], 1, Deadline::after(Duration::from_secs(5)));
        rank1.arrive(record(&[0, 1], &CommOptions::default()).as_bytes()).unwrap();
        // The creation thread holds the entry until it ends.
        let t = Instant::now();
        while Arc::strong_count(&entry) > 1 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(Arc::strong_count(&entry), 1, "the creation ended");
        assert_eq!(slow.began.load(SeqCst), 0, "a destroyed group's creation called the backend");
    }

    #[test]
    fn records_compare_field_by_field() {
        let a = record(&[0, 8, 12], &CommOptions::default());
        assert_eq!(field(&a, "members"), "0,8,12");
        assert_eq!(field(&a, "options"), "-");
        let b = record(&[0, 8, 12], &CommOptions { max_ctas: Some(2), ..Default::default() });
        assert_eq!(field(&b, "options"), "max_ctas=2");
    }
}
