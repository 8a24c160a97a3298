//! The one rendezvous of the runtime: a [`Meeting`] of some ranks in a key space of its own,
//! bounded by a [`Deadline`].
//!
//! A member *arrives* (`<space>/here/<rank>`, with a payload), then either *gathers* every
//! member's payload (one WAIT for all arrival keys, one multi-get) or meets at a *barrier* (an
//! ADD on `<space>/count`; the arrival that completes the count sets `<space>/done`, which every
//! member waits on). A wait parks in the store until the key is set. A meeting that watches the
//! attempt's interrupt ([`Meeting::watching`]) fails at once, naming the dead as died, when a
//! member it waits for is known dead; a fault (the interrupt's epoch moving: its levers end the
//! parked wait while armed, or, disarmed, a [`WATCH_SLICE`] ends) makes it look again, and a wait
//! for the living goes on.
//!
//! A meeting that fails explains itself once ([`Missing`]): the members that did not come, with
//! their hosts, what they were waited for, and for how long, in the one wording of
//! [`did_not_come`].
//!
//! Store work per member: a gather costs one SET, one WAIT and one multi-get; a barrier one SET,
//! one ADD and one WAIT; reading the end's value one more multi-get (a read after a wait never
//! waits again: [`Store::multi_get_existing`]). Finding who is missing (failure paths only) costs
//! one multi-get, whatever the number of members.

use super::keys;
use crate::runtime::faults::interrupt::Interrupt;
use crate::runtime::faults::verdict::{did_not_come, died_among, still_waiting};
use crate::runtime::launch::host::describe;
use crate::store::{Store, StoreError};
use crate::timeout::Deadline;
use std::fmt;
use std::time::{Duration, Instant};

/// After init (the interrupt disarmed, so no lever ends a park), how long a watching meeting's
/// wait parks before it looks at the dead list again: a death is named within this of its
/// notice. One WAIT renewed per slice, only while the meeting waits for someone.
const WATCH_SLICE: Duration = Duration::from_millis(250);

/// A long wait speaks (issue 46): after [`SPEAK_AFTER`] one line on stderr, then one every
/// [`SPEAK_EVERY`], naming what it waits for, the ranks missing with their hosts and the time
/// left; and from [`WORDS_AFTER`] on, the process's `wait_words` say it if a signal stops it.
struct Speaker {
    rank: u32,
    started: Instant,
    next: Instant,
    words_set: bool,
}

/// See [`Speaker`].
const SPEAK_AFTER: Duration = Duration::from_secs(10);
const SPEAK_EVERY: Duration = Duration::from_secs(30);
const WORDS_AFTER: Duration = Duration::from_secs(1);
const SPEAK_LISTS: usize = 256;

impl Speaker {
    fn new(rank: u32) -> Speaker {
        let now = Instant::now();
        Speaker { rank, started: now, next: now + WORDS_AFTER, words_set: false }
    }

    /// How long a park may last before this speaks next (at least 1 ms).
    fn until_next(&self) -> Duration {
        self.next.saturating_duration_since(Instant::now()).max(Duration::from_millis(1))
    }

    fn maybe_speak(&mut self, m: &Meeting, deadline: Deadline) {
        let now = Instant::now();
        if now < self.next {
            return;
        }
        let waited = now.duration_since(self.started);
        let line = still_waiting(self.rank, &m.still_missing(), &m.what, waited, deadline.left());
        crate::wait_words::set(Some(format!("mcore_init: stopped by a signal; {line}")));
        self.words_set = true;
        if waited >= SPEAK_AFTER {
            eprintln!("mcore_init: {line}");
            self.next = now + SPEAK_EVERY;
        } else {
            self.next = self.started + SPEAK_AFTER;
        }
    }
}

/// Clears the process's wait words when a wait that set them ends.
struct Quiet;

impl Drop for Quiet {
    fn drop(&mut self) {
        if crate::wait_words::get().is_some() {
            crate::wait_words::set(None);
        }
    }
}

/// Members that did not come to a meeting by its deadline (or that died on the way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// What they were waited for ("the check-in", "group 'tp'", ...).
    pub what: String,
    /// The ranks, ascending.
    pub ranks: Vec<u32>,
    /// The ranks as [`describe`] names them (with the hosts they published).
    pub who: String,
    /// How long this rank waited.
    pub waited: Duration,
    /// When the ranks are known dead (the meeting watched the interrupt): what killed them, worded
    /// by the verdict ("rank(s) 5 ... died: ..."); the ranks are then a failure of theirs.
    pub died: Option<String>,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.died {
            Some(died) => {
                write!(f, "{died}; this rank had waited {:.1} s for it at {}", self.waited.as_secs_f64(), self.what)
            }
            None => write!(f, "{} (waited {:.1} s)", did_not_come(&self.who, &self.what), self.waited.as_secs_f64()),
        }
    }
}

/// Why a meeting failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MeetError {
    /// Members did not come.
    Missing(Missing),
    /// The store failed (not a timeout).
    Store(StoreError),
}

impl fmt::Display for MeetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MeetError::Missing(m) => m.fmt(f),
            MeetError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for MeetError {}

impl From<StoreError> for MeetError {
    fn from(e: StoreError) -> Self {
        MeetError::Store(e)
    }
}

/// A rendezvous of `members` in the key space `space` of `store` (see the module docs).
pub struct Meeting<'a> {
    store: &'a dyn Store,
    space: String,
    what: String,
    members: Vec<u32>,
    rank: u32,
    deadline: Deadline,
    started: Instant,
    interrupt: Option<&'a Interrupt>,
}

impl<'a> Meeting<'a> {
    /// A meeting of `members` (this rank `rank` among them, or not: a host may only wait) in
    /// `space`, over by `deadline`; `what` says what the members are waited for.
    pub fn new(
        store: &'a dyn Store,
        space: &str,
        what: &str,
        members: Vec<u32>,
        rank: u32,
        deadline: Deadline,
    ) -> Meeting<'a> {
        Meeting {
            store,
            space: space.to_string(),
            what: what.to_string(),
            members,
            rank,
            deadline,
            started: Instant::now(),
            interrupt: None,
        }
    }

    /// The meeting in `space` seen by one who takes no part and only ends it ([`Meeting::end`],
    /// [`Meeting::decide`]): a recovery request ends the health check running and the store
    /// host's wait for the others to leave. The `done` key is written nowhere but here.
    pub fn from_outside(store: &'a dyn Store, space: &str) -> Meeting<'a> {
        Meeting::new(store, space, "", Vec::new(), u32::MAX, Deadline::after(Duration::ZERO))
    }

    /// The same, watching the attempt's interrupt: a wait ends (failing as [`Missing`], the ranks
    /// named as died) as soon as a member it waits for is known dead, whenever that became known:
    /// before the meeting began too. A death of a rank it does not wait for ends nothing.
    pub fn watching(mut self, interrupt: &'a Interrupt) -> Meeting<'a> {
        self.interrupt = Some(interrupt);
        self
    }

    /// The deadline.
    pub fn deadline(&self) -> Deadline {
        self.deadline
    }

    fn here(&self, rank: u32) -> String {
        keys::here(&self.space, rank)
    }

    fn done_key(&self) -> String {
        keys::done(&self.space)
    }

    /// This rank is here, with `payload` (never empty: an empty value reads as not arrived, see
    /// [`Meeting::arrivals`]).
    pub fn arrive(&self, payload: &[u8]) -> Result<(), MeetError> {
        debug_assert!(!payload.is_empty(), "an arrival's payload is empty");
        Ok(self.store.set(&self.here(self.rank), payload)?)
    }

    /// This rank is here, with `payload`, and `also` set in the same request (one MULTI_SET):
    /// what the others may need to read about this rank, e.g. its host.
    pub fn arrive_with(&self, payload: &[u8], also: &[(&str, &[u8])]) -> Result<(), MeetError> {
        debug_assert!(!payload.is_empty(), "an arrival's payload is empty");
        let here = self.here(self.rank);
        let items: Vec<(&str, &[u8])> = [(here.as_str(), payload)].into_iter().chain(also.iter().copied()).collect();
        Ok(self.store.multi_set(&items)?)
    }

    /// Every member's payload, in the members' order, once all have arrived.
    pub fn gather(&self) -> Result<Vec<Vec<u8>>, MeetError> {
        let keys: Vec<String> = self.members.iter().map(|&r| self.here(r)).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        if !self.await_keys(&refs, self.deadline)? {
            return Err(self.missing_error());
        }
        Ok(self.store.multi_get_existing(&refs)?)
    }

    /// Arrive and count this arrival; the arrival that completes the count ends the meeting
    /// (sets its done key). Whether this one did.
    pub fn arrive_counted(&self) -> Result<bool, MeetError> {
        self.arrive_counted_as(b"1")
    }

    /// [`Meeting::arrive_counted`] with `payload` as the arrival (for a member someone else
    /// counts: `b"gone"` for a rank known dead). The arrival key is compare-and-set first, and
    /// only the one that set it counts: a member counted as gone that arrives after all is not
    /// counted twice. The same payload set twice for one member counts twice (the store's
    /// compare-and-set answers the same to both): count each member once.
    pub fn arrive_counted_as(&self, payload: &[u8]) -> Result<bool, MeetError> {
        if self.store.compare_set(&self.here(self.rank), b"", payload)? != payload {
            return Ok(false);
        }
        self.count_one()
    }

    /// Count those of `ranks` (members that will never come: dead, or missing from the start) that
    /// have not arrived as arrived with `b"gone"`: three requests, whatever their number (a read of
    /// who is here, one MULTI_SET of the marks, one ADD). A rank that arrives itself between the
    /// read and the marks is counted twice (the meeting ends one arrival early); one rank at a
    /// time, [`Meeting::arrive_counted_as`] counts exactly.
    pub fn count_gone(&self, ranks: &[u32]) -> Result<(), MeetError> {
        let absent = self.absent(ranks);
        if absent.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = absent.iter().map(|&r| self.here(r)).collect();
        let items: Vec<(&str, &[u8])> = keys.iter().map(|k| (k.as_str(), &b"gone"[..])).collect();
        self.store.multi_set(&items)?;
        let n = self.store.add(&keys::count(&self.space), absent.len() as i64)?;
        if n >= self.members.len() as i64 {
            self.decide(b"1")?;
        }
        Ok(())
    }

    /// Count one more arrival; whether this completed the count. The completing arrival ends the
    /// meeting unless another verdict came first ([`Meeting::decide`]): every member reads one.
    fn count_one(&self) -> Result<bool, MeetError> {
        let n = self.store.add(&keys::count(&self.space), 1)?;
        let last = n >= self.members.len() as i64;
        if last {
            self.decide(b"1")?;
        }
        Ok(last)
    }

    /// Arrive, and wait until every member has.
    pub fn barrier(&self) -> Result<(), MeetError> {
        self.arrive_counted()?;
        self.await_end().map(|_| ())
    }

    /// End the meeting with `value` (its verdict), for everyone waiting in [`Meeting::await_end`].
    pub fn end(&self, value: &[u8]) -> Result<(), MeetError> {
        Ok(self.store.set(&self.done_key(), value)?)
    }

    /// Wait for the meeting's end; its value.
    pub fn await_end(&self) -> Result<Vec<u8>, MeetError> {
        self.await_end_by(self.deadline)?.ok_or_else(|| self.missing_error())
    }

    /// Wait for the meeting's end until `deadline` (which may differ from the meeting's: a
    /// grace, say); its value, or None when `deadline` passed first.
    pub fn await_end_by(&self, deadline: Deadline) -> Result<Option<Vec<u8>>, MeetError> {
        let done = self.done_key();
        Ok(match self.await_keys(&[done.as_str()], deadline)? {
            true => self.store.multi_get_existing(&[done.as_str()])?.pop(),
            false => None,
        })
    }

    /// The first verdict of the meeting: `value` unless someone decided before (compare-and-set);
    /// the verdict that stands.
    pub fn decide(&self, value: &[u8]) -> Result<Vec<u8>, MeetError> {
        Ok(self.store.compare_set(&self.done_key(), b"", value)?)
    }

    /// Every member's payload if it has arrived, without waiting.
    pub fn arrivals(&self) -> Result<Vec<Option<Vec<u8>>>, MeetError> {
        self.arrivals_of(&self.members)
    }

    /// The payloads of `ranks` (members) that have arrived, without waiting: one request, whatever
    /// their number (a failure path at 100K ranks reads them within its deadline's bound). An
    /// arrival's payload is never empty ([`Meeting::arrive`]): empty reads as not arrived.
    fn arrivals_of(&self, ranks: &[u32]) -> Result<Vec<Option<Vec<u8>>>, MeetError> {
        if ranks.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ranks.iter().map(|&r| self.here(r)).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let got = self.store.multi_get_existing(&refs)?;
        Ok(got.into_iter().map(|v| (!v.is_empty()).then_some(v)).collect())
    }

    /// Wait (parked in the store) until `keys` exist: true, or false once `deadline` passed.
    /// A store failure ends it; so does a member it waits for known dead (see
    /// [`Meeting::watching`]).
    fn await_keys(&self, keys: &[&str], deadline: Deadline) -> Result<bool, MeetError> {
        let mut speaker = Speaker::new(self.rank);
        let _quiet = Quiet;
        loop {
            let epoch = self.interrupt.map(Interrupt::epoch);
            if let Some(e) = self.dead_missing() {
                return Err(e);
            }
            // Armed, a death ends the park (the store's busy-abort lever); disarmed (after init),
            // nothing does: park in slices and look at the dead list between them.
            let slice = match self.interrupt {
                Some(i) if !i.armed() => deadline.left().min(WATCH_SLICE),
                _ => deadline.left(),
            };
            match self.store.wait(keys, slice.min(speaker.until_next())) {
                Ok(()) => return Ok(true),
                Err(StoreError::Timeout { .. }) if deadline.passed() => return Ok(false),
                Err(StoreError::Timeout { .. }) => speaker.maybe_speak(self, deadline),
                // Ended by a fault (the epoch moved): look again; a wait for the living goes on.
                Err(_) if self.interrupt.map(Interrupt::epoch) != epoch => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The members still missing with their hosts ("rank(s) 3 on host 'n1' (10.0.0.2)"), or
    /// that every member has come (a barrier's last ones are counting), for a wait that speaks.
    /// Beyond [`SPEAK_LISTS`] members only rank 0 (the store's host in most jobs) reads who is
    /// missing; the others name how many members they wait for (a stuck job of thousands must not
    /// have each rank read every arrival every half minute).
    fn still_missing(&self) -> String {
        if self.members.len() > SPEAK_LISTS && self.rank != 0 {
            return format!("{} members (rank 0 names the missing ones)", self.members.len());
        }
        match self.missing() {
            m if m.is_empty() => "the meeting's end (every member has come)".to_string(),
            m => format!("rank(s) {}", describe(self.store, &m)),
        }
    }

    /// The members still missing that are known dead, as this meeting's failure (a local look at
    /// the dead list, then one read of the dead members' arrivals).
    fn dead_missing(&self) -> Option<MeetError> {
        let i = self.interrupt?;
        let dead = i.dead_among(&self.members);
        if dead.is_empty() {
            return None;
        }
        let gone = self.absent(&dead);
        if gone.is_empty() {
            return None;
        }
        let mut m = self.explain(gone.clone());
        let hosts =
            |r: u32| i.death(r).and_then(|d| d.host).or_else(|| crate::runtime::launch::host::label_of(self.store, r));
        m.died = Some(died_among(i, &gone, &|rs| crate::runtime::launch::host::describe_by(rs, &hosts)));
        Some(MeetError::Missing(m))
    }

    /// The members that have not arrived (one request; failure paths only).
    pub fn missing(&self) -> Vec<u32> {
        self.absent(&self.members)
    }

    /// Those of `ranks` that have not arrived, ascending (one request; failure paths only; all of
    /// them when the store fails).
    pub fn absent(&self, ranks: &[u32]) -> Vec<u32> {
        let arrived = self.arrivals_of(ranks).unwrap_or_else(|_| vec![None; ranks.len()]);
        let mut out: Vec<u32> = ranks.iter().zip(arrived).filter(|(_, a)| a.is_none()).map(|(&r, _)| r).collect();
        out.sort_unstable();
        out
    }

    /// The explanation of this meeting's failure: who is missing now.
    pub fn missing_error(&self) -> MeetError {
        self.missing_error_of(self.missing())
    }

    fn missing_error_of(&self, ranks: Vec<u32>) -> MeetError {
        MeetError::Missing(self.explain(ranks))
    }

    /// `ranks` as the members this meeting is missing.
    pub fn explain(&self, ranks: Vec<u32>) -> Missing {
        let who = describe(self.store, &ranks);
        Missing { what: self.what.clone(), ranks, who, waited: self.started.elapsed(), died: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use std::sync::Arc;

    fn meet(store: &Arc<MemoryStore>, rank: u32, n: u32, ms: u64) -> std::thread::JoinHandle<Result<(), MeetError>> {
        let store = store.clone();
        std::thread::spawn(move || {
            let deadline = Deadline::after(Duration::from_millis(ms));
            Meeting::new(store.as_ref(), "b", "the barrier", (0..n).collect(), rank, deadline).barrier()
        })
    }

    #[test]
    fn a_barrier_ends_when_the_last_member_arrives() {
        let store = Arc::new(MemoryStore::new(Duration::from_secs(5)));
        let hs: Vec<_> = (0..4).map(|r| meet(&store, r, 4, 5000)).collect();
        for h in hs {
            h.join().unwrap().unwrap();
        }
        assert_eq!(store.get("b/done").unwrap(), b"1");
    }

    #[test]
    fn a_member_that_never_comes_is_named_with_its_host() {
        let store = Arc::new(MemoryStore::new(Duration::from_secs(5)));
        let host = crate::runtime::launch::host::HostInfo {
            hostname: "n1".into(),
            addr: "10.0.0.2".parse().unwrap(),
            why: String::new(),
        };
        crate::runtime::launch::host::publish(store.as_ref(), 2, &host).unwrap();
        let hs: Vec<_> = [0, 1, 3].into_iter().map(|r| meet(&store, r, 5, 300)).collect();
        for h in hs {
            let e = h.join().unwrap().unwrap_err();
            assert_eq!(
                e.to_string().split(" (waited").next().unwrap(),
                "rank(s) 4; 2 on host 'n1' (10.0.0.2) did not come to the barrier"
            );
            let MeetError::Missing(m) = e else { panic!() };
            assert_eq!(m.ranks, [2, 4]);
        }
    }

    #[test]
    fn a_gather_returns_every_payload_in_member_order() {
        let store = Arc::new(MemoryStore::new(Duration::from_secs(5)));
        let hs: Vec<_> = (0..3u32)
            .map(|r| {
                let store = store.clone();
                std::thread::spawn(move || {
                    let m = Meeting::new(
                        store.as_ref(),
                        "g",
                        "x",
                        vec![2, 0, 1],
                        r,
                        Deadline::after(Duration::from_secs(5)),
                    );
                    m.arrive(r.to_string().as_bytes()).unwrap();
                    m.gather().unwrap()
                })
            })
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), [b"2", b"0", b"1"]);
        }
    }

    #[test]
    fn a_dead_member_counted_for_ends_the_barrier() {
        let store = MemoryStore::new(Duration::from_secs(5));
        let m = Meeting::new(&store, "l", "leaving", vec![0, 1], 0, Deadline::after(Duration::from_secs(5)));
        assert!(!m.arrive_counted().unwrap());
        let dead = Meeting::new(&store, "l", "leaving", vec![0, 1], 1, Deadline::after(Duration::from_secs(5)));
        assert!(dead.arrive_counted_as(b"gone").unwrap());
        assert_eq!(m.await_end().unwrap(), b"1");
        assert_eq!(m.missing(), Vec::<u32>::new());
        // A member counted as gone that arrives after all is not counted again.
        let late = Meeting::new(&store, "l", "leaving", vec![0, 1], 1, Deadline::after(Duration::from_secs(5)));
        assert!(!late.arrive_counted().unwrap());
        assert_eq!(store.get("l/count").unwrap(), b"2");
    }

    #[test]
    fn a_watching_meeting_fails_at_once_for_a_dead_member_and_waits_on_for_the_living() {
        use crate::runtime::faults::interrupt::{Cause, Death};
        let store = Arc::new(MemoryStore::new(Duration::from_secs(5)));
        let interrupt = Interrupt::new();
        let closed = || Death { cause: Cause::ConnectionClosed, host: Some("'n1' (10.0.0.2)".into()) };
        // Rank 3 is no member: its death ends nothing; rank 1 comes late and is waited for.
        interrupt.died([(3, closed())]);
        let late = {
            let store = store.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(400));
                store.set("m/here/1", b"1").unwrap();
            })
        };
        let m =
            Meeting::new(store.as_ref(), "m", "the meeting", vec![0, 1], 0, Deadline::after(Duration::from_secs(5)))
                .watching(&interrupt);
        m.arrive(b"0").unwrap();
        assert_eq!(m.gather().unwrap().len(), 2, "a death of a rank it does not wait for ends nothing");
        late.join().unwrap();
        // Rank 2 died before the meeting began: it fails at once, naming it as died.
        interrupt.died([(2, closed())]);
        let m =
            Meeting::new(store.as_ref(), "n", "the meeting", vec![0, 2], 0, Deadline::after(Duration::from_secs(5)))
                .watching(&interrupt);
        m.arrive(b"0").unwrap();
        let t = Instant::now();
        let MeetError::Missing(missing) = m.gather().unwrap_err() else { panic!("not a missing member") };
        assert!(t.elapsed() < Duration::from_secs(1), "waited {:?}", t.elapsed());
        assert_eq!(missing.ranks, [2]);
        let text = missing.to_string();
        assert!(text.starts_with("rank(s) 2 on host 'n1' (10.0.0.2) died: its connection"), "{text}");
        // Dying during the wait (disarmed: the meeting looks again between slices).
        let m =
            Meeting::new(store.as_ref(), "o", "the meeting", vec![0, 4], 0, Deadline::after(Duration::from_secs(5)))
                .watching(&interrupt);
        let dies = {
            let i = interrupt.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                i.died([(4, Death { cause: Cause::Launcher("aborted by signal 9".into()), host: None })]);
            })
        };
        let t = Instant::now();
        let text = m.gather().unwrap_err().to_string();
        dies.join().unwrap();
        assert!(t.elapsed() < Duration::from_secs(2), "waited {:?}", t.elapsed());
        assert!(text.starts_with("rank(s) 4 died: the launcher reported it (aborted by signal 9)"), "{text}");
    }

    /// Ranks that never come, counted together (a read, one MULTI_SET, one ADD): one that arrived
    /// first is not counted again, the count ends the meeting, and a rank counted as gone that
    /// arrives after all is not counted twice. Who is missing is read without waiting for the
    /// absent ones' keys (the store's timeout is 5 s).
    #[test]
    fn ranks_that_never_come_are_counted_together_once() {
        let store = MemoryStore::new(Duration::from_secs(5));
        let m = |r| Meeting::new(&store, "l", "leaving", vec![0, 1, 2, 3], r, Deadline::after(Duration::from_secs(5)));
        assert!(!m(1).arrive_counted().unwrap());
        assert!(!m(0).arrive_counted().unwrap());
        let start = Instant::now();
        assert_eq!(m(0).missing(), [2, 3]);
        assert!(start.elapsed() < Duration::from_secs(1), "{:?}", start.elapsed());
        m(0).count_gone(&[1, 2, 3]).unwrap();
        assert_eq!(store.get("l/count").unwrap(), b"4");
        assert_eq!(m(0).await_end().unwrap(), b"1");
        let (one, gone) = (Some(b"1".to_vec()), Some(b"gone".to_vec()));
        assert_eq!(m(0).arrivals().unwrap(), [one.clone(), one, gone.clone(), gone]);
        assert!(!m(3).arrive_counted().unwrap());
        assert_eq!(store.get("l/count").unwrap(), b"4");
    }
}
