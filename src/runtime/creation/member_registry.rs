//! The groups this rank made after init (see `runtime::member_groups`): one [`MemberEntry`] per
//! live name, each creating, ready, failed or destroyed, and the generation of every name so that
//! a destroyed name can be made again under fresh store keys.

use super::groups::{GroupError, SharedComm};
use crate::backend::{CommError, CommErrorKind, CommOptions, Communicator};
use crate::lock::{Unpoisoned, UnpoisonedWait};
use crate::timeout::Deadline;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// How long past its deadline a wait for a group's creation goes on before it reports the
/// creation as stuck (the creation itself is bounded by the deadline).
pub(crate) const WAIT_GRACE: Duration = Duration::from_secs(2);

/// A creation that runs when first waited for (a backend that creates in the caller's thread).
pub(crate) type Job = Box<dyn FnOnce() -> Result<Box<dyn Communicator>, GroupError> + Send>;

/// Where one group's creation stands.
pub(crate) enum State {
    Creating,
    Ready(SharedComm),
    Failed(GroupError),
    Destroyed,
}

/// A creation's state, and whether the creation is inside the backend right now (making the
/// communicator, or dropping one made for a group destroyed meanwhile).
struct Stage {
    state: State,
    in_backend: bool,
}

/// One group made after init, as this rank sees it.
pub struct MemberEntry {
    pub name: String,
    /// Its global ranks, ascending.
    pub members: Vec<u32>,
    /// This rank's index in `members`.
    pub group_rank: u32,
    pub options: CommOptions,
    /// How many times this rank made a group of this name and these members before.
    pub generation: u64,
    /// The creation's deadline.
    pub deadline: Deadline,
    stage: Mutex<Stage>,
    changed: Condvar,
    job: Mutex<Option<Job>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.locked()
}

impl MemberEntry {
    pub(crate) fn new(
        name: String,
        members: Vec<u32>,
        group_rank: u32,
        options: CommOptions,
        generation: u64,
        deadline: Deadline,
    ) -> MemberEntry {
        MemberEntry {
            name,
            members,
            group_rank,
            options,
            generation,
            deadline,
            stage: Mutex::new(Stage { state: State::Creating, in_backend: false }),
            changed: Condvar::new(),
            job: Mutex::new(None),
        }
    }

    fn error(&self, kind: CommErrorKind, message: String) -> GroupError {
        GroupError { group: self.name.clone(), members: self.members.clone(), error: CommError::new(kind, message) }
    }

    /// Run `job` at the first wait instead of in the background.
    pub(crate) fn defer(&self, job: Job) {
        *lock(&self.job) = Some(job);
    }

    /// The creation is about to call the backend: false when the group was destroyed meanwhile
    /// (the creation then ends without a communicator). Until [`MemberEntry::finish`], the
    /// runtime's teardown waits for this creation ([`MemberEntry::wait_out_of_backend`]).
    pub(crate) fn enter_backend(&self) -> bool {
        let mut stage = lock(&self.stage);
        if matches!(stage.state, State::Destroyed) {
            return false;
        }
        stage.in_backend = true;
        true
    }

    /// The creation ended with `made`: the group is ready or failed (a group destroyed meanwhile
    /// drops its communicator at once, before the creation counts as out of the backend).
    pub(crate) fn finish(&self, made: Result<Box<dyn Communicator>, GroupError>) {
        let unused = {
            let mut stage = lock(&self.stage);
            if matches!(stage.state, State::Creating) {
                stage.state = match made {
                    Ok(comm) => State::Ready(Arc::new(Mutex::new(comm))),
                    Err(e) => State::Failed(e),
                };
                None
            } else {
                Some(made)
            }
        };
        drop(unused);
        lock(&self.stage).in_backend = false;
        self.changed.notify_all();
    }

    /// Wait (at most until the deadline plus [`WAIT_GRACE`]) until no creation of this group is
    /// inside the backend: after the runtime's teardown, nothing calls the backend any more.
    pub(crate) fn wait_out_of_backend(&self) {
        let limit = self.deadline.instant() + WAIT_GRACE;
        let mut stage = lock(&self.stage);
        while stage.in_backend {
            let now = Instant::now();
            if now >= limit {
                return;
            }
            stage = self.changed.wait_up_to(stage, limit - now);
        }
    }

    /// Whether the creation ended (ready, failed or destroyed).
    pub fn is_done(&self) -> bool {
        !matches!(lock(&self.stage).state, State::Creating)
    }

    /// Wait for the creation (running it here when it was deferred): the communicator, or why
    /// there is none. Bounded by the deadline plus [`WAIT_GRACE`].
    pub(crate) fn wait(&self) -> Result<SharedComm, GroupError> {
        let job = lock(&self.job).take();
        if let Some(job) = job {
            self.finish(job());
        }
        let limit = self.deadline.instant() + WAIT_GRACE;
        let mut stage = lock(&self.stage);
        loop {
            match &stage.state {
                State::Ready(comm) => return Ok(comm.clone()),
                State::Failed(e) => return Err(e.clone()),
                State::Destroyed => {
                    return Err(self.error(CommErrorKind::InvalidArgument, "the group was destroyed".into()))
                }
                State::Creating => {}
            }
            let now = Instant::now();
            if now >= limit {
                return Err(self.error(
                    CommErrorKind::Timeout,
                    format!(
                        "its creation did not end within its deadline plus {} s (the backend did not return)",
                        WAIT_GRACE.as_secs()
                    ),
                ));
            }
            stage = self.changed.wait_up_to(stage, limit - now);
        }
    }

    /// Destroy the group: its communicator goes once no collective uses it any more; a creation
    /// still running drops what it makes.
    pub(crate) fn destroy(&self) {
        lock(&self.job).take();
        let old = std::mem::replace(&mut lock(&self.stage).state, State::Destroyed);
        self.changed.notify_all();
        drop(old);
    }
}

/// What the registry keeps.
#[derive(Default)]
struct Registry {
    live: HashMap<String, Arc<MemberEntry>>,
    /// Every group made (destroyed ones included) while its creation still holds it: those the
    /// teardown waits for.
    made_entries: Vec<Weak<MemberEntry>>,
    /// Groups made so far per (name, members): the next one's generation.
    made: HashMap<(String, Vec<u32>), u64>,
}

/// This rank's groups made after init, by name.
#[derive(Default)]
pub struct MemberGroups {
    inner: Mutex<Registry>,
}

impl MemberGroups {
    /// Register a new group `name` of `members` made by `make(generation)`; an error when the
    /// name is live already.
    pub(crate) fn insert(
        &self,
        name: &str,
        members: &[u32],
        make: impl FnOnce(u64) -> Arc<MemberEntry>,
    ) -> Result<Arc<MemberEntry>, String> {
        let mut r = lock(&self.inner);
        if r.live.contains_key(name) {
            return Err(format!("group '{name}' exists already on this rank: destroy it first, or pick another name"));
        }
        let made = r.made.entry((name.to_string(), members.to_vec())).or_insert(0);
        let entry = make(*made);
        *made += 1;
        r.live.insert(name.to_string(), entry.clone());
        r.made_entries.retain(|e| e.strong_count() > 0);
        r.made_entries.push(Arc::downgrade(&entry));
        Ok(entry)
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<MemberEntry>> {
        lock(&self.inner).live.get(name).cloned()
    }

    /// The live groups' names, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = lock(&self.inner).live.keys().cloned().collect();
        names.sort();
        names
    }

    /// Destroy the group `name`; false when there is none.
    pub(crate) fn destroy(&self, name: &str) -> bool {
        let entry = lock(&self.inner).live.remove(name);
        entry.map(|e| e.destroy()).is_some()
    }

    /// Destroy the group of `entry`, and take it out of the registry when it is still there
    /// under its name (not a later group of the same name).
    pub(crate) fn destroy_entry(&self, entry: &Arc<MemberEntry>) {
        let mut r = lock(&self.inner);
        if r.live.get(&entry.name).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            r.live.remove(&entry.name);
        }
        drop(r);
        entry.destroy();
    }

    /// Every group made (destroyed ones whose creation still runs included), taken out.
    fn take_all(&self) -> Vec<Arc<MemberEntry>> {
        let mut r = lock(&self.inner);
        r.live.clear();
        r.made_entries.drain(..).filter_map(|e| e.upgrade()).collect()
    }

    /// Destroy every group (the runtime dropped, e.g. by a recovery: a creation still inside the
    /// backend finishes on its own thread and drops what it made).
    pub(crate) fn destroy_all(&self) {
        self.take_all().iter().for_each(|e| e.destroy());
    }

    /// The runtime's teardown: destroy every group, then wait for the creations inside the
    /// backend to leave it (each bounded by its deadline), so that no creation calls the backend
    /// after `destroy` returned, not even while the process exits.
    pub(crate) fn close(self) {
        let all = self.take_all();
        all.iter().for_each(|e| e.destroy());
        all.iter().for_each(|e| e.wait_out_of_backend());
    }
}

impl Drop for MemberGroups {
    fn drop(&mut self) {
        self.destroy_all();
    }
}
