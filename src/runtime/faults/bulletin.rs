//! The job's bulletin: every event the ranks of an attempt must hear of, numbered in the store
//! under the attempt's prefix — `alive/events` counts them, `alive/events/<n>` holds the n-th.
//! A reader parks one WAIT on the next number, so any event wakes it and an idle job sends
//! nothing. One writer ([`Bulletin::post`] and the close notices and questions armed here) and
//! one reader ([`Reader`]: the liveness watcher's, which reports deaths to the attempt's
//! interrupt and answers questions; and the [`Bulletin`]'s own, which keeps the rest for whoever
//! waits: a health check, a spare standing by).
//!
//! Where the store is ours, the server numbers every entry (`wire::Query::Notice`): a rank's
//! death is its liveness connection's close notice (the entry names its claimed counter), a
//! question names the asker after `?`, and a posted event is stored after `!`; no client writes
//! the entries, so no client can pose as a close notice. Where it is not (torchrun's agent's, an
//! in-process store), a writer numbers its entry itself, ADD then SET, and a death is posted by
//! rank 0's scan of the heartbeats. A reader there looks for the next entry at the watcher's
//! period, and skips a number whose writer died between its ADD and its SET once a later one
//! is numbered and [`HOLE_PATIENCE`] has passed.

use crate::lock::Unpoisoned;
use crate::runtime::faults::interrupt::Cause;
use crate::runtime::launch::env::LaunchEnv;
use crate::runtime::launch::store_setup::StoreHandles;
use crate::store::{PrefixStore, Store, StoreError, TcpStore, TcpStorePool};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The bulletin's counter (under the attempt's prefix); `alive/events/<n>` holds the n-th entry.
pub const EVENTS_KEY: &str = "alive/events";
/// The most entries one read takes.
const MAX_READ: u64 = 4096;
/// Where writers number the entries: how long a missing entry must stay missing, with a later
/// one numbered, before a reader skips it.
pub const HOLE_PATIENCE: Duration = Duration::from_secs(2);

/// An event of the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A rank is dead, and how that was found.
    Died(u32, Cause),
    /// A rank asks every watcher to bump its heartbeat (see `liveness::Liveness::silent`).
    Question,
    /// A recovery began, suspecting these ranks (the first request stands).
    RecoveryRequested(Vec<u32>),
    /// The layout's ranks tear their runtime down: the job ends, spares leave.
    Ended,
}

fn entry(n: u64) -> String {
    format!("{EVENTS_KEY}/{n}")
}

/// Arm `conn`'s close notice (see `wire::Query::OnClose`): should it close without a goodbye,
/// our server posts the death of the rank whose counter it claimed, under `prefix`.
pub(crate) fn arm_close_notice(conn: &TcpStore, prefix: &str) -> Result<(), StoreError> {
    conn.on_close(&format!("{prefix}/{EVENTS_KEY}"))
}

/// Withdraw `conn`'s close notice before it is let go (the withdrawal goes ahead of the close):
/// its rank is not dying.
pub(crate) fn withdraw_close_notice(conn: &TcpStore) -> Result<(), StoreError> {
    conn.on_close("")
}

/// Ask every watcher under `prefix` to bump its heartbeat: a question, posted on `conn`, which
/// holds a claim.
pub(crate) fn ask(conn: &TcpStore, prefix: &str) -> Result<(), StoreError> {
    conn.notice(&format!("{prefix}/{EVENTS_KEY}"), b"")
}

/// `event` as a posted entry's text (after its `!`); a question is asked, not posted.
fn text(event: &Event) -> String {
    match event {
        Event::Died(r, Cause::HeartbeatStill(still)) => format!("died {r} {}", still.as_millis()),
        Event::Died(r, _) => format!("died {r} 0"),
        Event::Question => "question".into(),
        Event::RecoveryRequested(ranks) => {
            format!("recovery {}", ranks.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
        }
        Event::Ended => "ended".into(),
    }
}

/// Post `event` where the writers number the entries (a store not ours): ADD, then SET.
pub(crate) fn post_numbered(view: &dyn Store, event: &Event) -> Result<(), StoreError> {
    let n = view.add(EVENTS_KEY, 1)?.max(1) as u64;
    view.set(&entry(n), format!("!{}", text(event)).as_bytes())
}

/// A reader of the bulletin: where it has read up to.
pub struct Reader {
    /// `/<prefix>/alive/`, which a close notice's or a question's claimed counter begins with.
    head: Vec<u8>,
    /// Whether our server numbers the entries (else the writers do).
    server: bool,
    seen: u64,
    /// Where the writers number: the missing entry after `seen`, since when it is missing.
    hole: Option<(u64, Instant)>,
}

impl Reader {
    /// A reader from the first entry of the attempt `prefix`; `server`: our server numbers them.
    pub fn new(prefix: &str, server: bool) -> Reader {
        Reader { head: format!("/{prefix}/alive/").into_bytes(), server, seen: 0, hole: None }
    }

    /// The key of the next entry (in the attempt's view): park a WAIT on it to learn of the next
    /// event.
    pub fn next_key(&self) -> String {
        entry(self.seen + 1)
    }

    /// The events posted since the last read, in their order, read through `view` (the attempt's
    /// view of the store).
    pub fn read(&mut self, view: &dyn Store) -> Result<Vec<Event>, StoreError> {
        let values = if self.server { self.read_numbered(view)? } else { self.read_in_order(view)? };
        Ok(values.iter().filter_map(|v| self.parse(v)).collect())
    }

    /// Our server wrote each entry before it counted it: the count, then every new entry.
    fn read_numbered(&mut self, view: &dyn Store) -> Result<Vec<Vec<u8>>, StoreError> {
        let count = (view.add(EVENTS_KEY, 0)?.max(0) as u64).min(self.seen + MAX_READ);
        if count <= self.seen {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = (self.seen + 1..=count).map(entry).collect();
        let got = view.multi_get_existing(&keys.iter().map(String::as_str).collect::<Vec<_>>())?;
        self.seen = count;
        Ok(got)
    }

    /// The writers count first, then write: each entry in turn while it is there.
    fn read_in_order(&mut self, view: &dyn Store) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut got = Vec::new();
        while (got.len() as u64) < MAX_READ {
            let next = self.seen + 1;
            if view.check(&[&entry(next)])? {
                got.push(view.get(&entry(next))?);
                (self.seen, self.hole) = (next, None);
                continue;
            }
            match self.hole {
                Some((n, since)) if n == next && since.elapsed() >= HOLE_PATIENCE => {
                    if view.add(EVENTS_KEY, 0)? as u64 > next {
                        // Numbered by a writer that never wrote it, and others came after.
                        (self.seen, self.hole) = (next, None);
                        continue;
                    }
                    self.hole = Some((next, Instant::now()));
                }
                Some((n, _)) if n == next => {}
                _ => self.hole = Some((next, Instant::now())),
            }
            break;
        }
        Ok(got)
    }

    /// The event an entry holds (none for one this build does not know).
    fn parse(&self, v: &[u8]) -> Option<Event> {
        if let Some(posted) = v.strip_prefix(b"!") {
            return self.parse_posted(std::str::from_utf8(posted).ok()?);
        }
        if v.starts_with(b"?") {
            return Some(Event::Question);
        }
        // A close notice, raised by our server only: it names the dead rank's claimed counter.
        let rank = v.strip_prefix(self.head.as_slice()).and_then(|r| std::str::from_utf8(r).ok()?.parse().ok())?;
        Some(Event::Died(rank, Cause::ConnectionClosed))
    }

    fn parse_posted(&self, text: &str) -> Option<Event> {
        let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
        match word {
            "ended" => Some(Event::Ended),
            "recovery" => {
                let ranks = rest.split(',').filter(|s| !s.is_empty()).map(str::parse).collect::<Result<_, _>>();
                ranks.ok().map(Event::RecoveryRequested)
            }
            // A death posted by a client counts only where the store cannot tell one (rank 0's
            // scan of the heartbeats); on our server deaths are its close notices.
            "died" if !self.server => {
                let (rank, still) = rest.split_once(' ')?;
                let still = Duration::from_millis(still.parse().ok()?);
                Some(Event::Died(rank.parse().ok()?, Cause::HeartbeatStill(still)))
            }
            _ => None,
        }
    }
}

/// The bulletin of one attempt as its ranks' runtime sees it: the one writer of events, and the
/// events that are not deaths or questions kept for whoever waits for them.
pub struct Bulletin {
    /// The attempt's view of the store.
    view: Arc<dyn Store>,
    /// Where the store is ours: the connections that post, the server numbering.
    pool: Option<Arc<TcpStorePool>>,
    /// `<prefix>/alive/events`, as the pool's connections name it.
    key: String,
    news: Mutex<News>,
}

struct News {
    reader: Reader,
    recovery: Option<Vec<u32>>,
    ended: bool,
}

impl Bulletin {
    /// The bulletin of attempt `attempt` on `store`, as `env`'s rank reaches it.
    pub(crate) fn of(store: &StoreHandles, attempt: &str, env: &LaunchEnv) -> Bulletin {
        let pool = store.pool().filter(|_| !env.use_agent_store);
        let view: Arc<dyn Store> = Arc::new(PrefixStore::new(attempt, store.client()));
        Bulletin::over(view, pool, attempt)
    }

    /// The bulletin of attempt `prefix` in `view` (its view of the store); `pool`, where the
    /// store is ours (else the writers number the entries: tests, an in-process store).
    pub fn over(view: Arc<dyn Store>, pool: Option<Arc<TcpStorePool>>, prefix: &str) -> Bulletin {
        let reader = Reader::new(prefix, pool.is_some());
        let news = Mutex::new(News { reader, recovery: None, ended: false });
        Bulletin { view, pool, key: format!("{prefix}/{EVENTS_KEY}"), news }
    }

    /// Post `event` to every rank's reader. Once this returns the event is in the store: a read
    /// of any key that follows sees it (our server's NOTICE gets no reply; a read on the same
    /// connection after it confirms it was served).
    pub fn post(&self, event: &Event) -> Result<(), StoreError> {
        match &self.pool {
            Some(pool) => pool.notice(&self.key, text(event).as_bytes()),
            None => post_numbered(self.view.as_ref(), event),
        }
    }

    /// Read what was posted since the last look.
    pub fn look(&self) -> Result<(), StoreError> {
        let mut news = self.news.locked();
        for e in news.reader.read(self.view.as_ref())? {
            match e {
                Event::RecoveryRequested(ranks) if news.recovery.is_none() => news.recovery = Some(ranks),
                Event::Ended => news.ended = true,
                _ => {}
            }
        }
        Ok(())
    }

    /// The ranks the first recovery request named, once one was read (see [`Bulletin::look`]).
    pub fn recovery_requested(&self) -> Option<Vec<u32>> {
        self.news.locked().recovery.clone()
    }

    /// Whether the job's end was read (see [`Bulletin::look`]).
    pub fn ended(&self) -> bool {
        self.news.locked().ended
    }

    /// Park until the next event is posted or `timeout` passes, then [`Bulletin::look`]. Where
    /// the writers number the entries, at most [`HOLE_PATIENCE`] at a time (a hole is skipped
    /// only by a look).
    pub fn await_next(&self, timeout: Duration) -> Result<(), StoreError> {
        let next = self.news.locked().reader.next_key();
        let park = if self.pool.is_some() { timeout } else { timeout.min(HOLE_PATIENCE) };
        match self.view.wait(&[&next], park.max(Duration::from_millis(1))) {
            Ok(()) | Err(StoreError::Timeout { .. }) => self.look(),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn events_are_read_in_order_and_the_first_recovery_request_stands() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(Duration::from_secs(5)));
        let b = Bulletin::over(store.clone(), None, "job");
        b.post(&Event::RecoveryRequested(vec![3, 5])).unwrap();
        b.post(&Event::RecoveryRequested(vec![1])).unwrap();
        b.post(&Event::Died(2, Cause::HeartbeatStill(Duration::from_secs(5)))).unwrap();
        assert_eq!(b.recovery_requested(), None, "nothing read yet");
        b.look().unwrap();
        assert_eq!(b.recovery_requested(), Some(vec![3, 5]));
        assert!(!b.ended());
        // Another reader (a watcher) reads every event, deaths too.
        let mut r = Reader::new("job", false);
        let got = r.read(store.as_ref()).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[2], Event::Died(2, Cause::HeartbeatStill(Duration::from_secs(5))));
        b.post(&Event::Ended).unwrap();
        b.await_next(Duration::from_secs(1)).unwrap();
        assert!(b.ended());
        assert_eq!(r.read(store.as_ref()).unwrap(), vec![Event::Ended]);
    }

    #[test]
    fn a_numbered_entry_never_written_is_skipped_once_a_later_one_came_and_the_patience_passed() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(Duration::from_secs(5)));
        // A writer numbered entry 1 and died before writing it.
        store.add(EVENTS_KEY, 1).unwrap();
        let mut r = Reader::new("job", false);
        assert!(r.read(store.as_ref()).unwrap().is_empty());
        post_numbered(store.as_ref(), &Event::Ended).unwrap();
        assert!(r.read(store.as_ref()).unwrap().is_empty(), "the hole waits out its patience");
        r.hole = r.hole.map(|(n, since)| (n, since - HOLE_PATIENCE));
        assert_eq!(r.read(store.as_ref()).unwrap(), vec![Event::Ended]);
    }

    #[test]
    fn on_our_server_a_death_is_only_a_close_notice() {
        let r = Reader::new("job", true);
        assert_eq!(r.parse(b"/job/alive/4"), Some(Event::Died(4, Cause::ConnectionClosed)));
        assert_eq!(r.parse(b"?/job/alive/4"), Some(Event::Question));
        assert_eq!(r.parse(b"!died 4 5000"), None, "a client's post names nobody dead there");
        assert_eq!(r.parse(b"/other/alive/4"), None);
        assert_eq!(r.parse(b"!recovery "), Some(Event::RecoveryRequested(vec![])));
        assert_eq!(r.parse(b"!later-kind"), None);
    }
}
