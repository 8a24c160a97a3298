//! Who is still alive: a heartbeat per rank through the rendezvous store, read when something
//! fails, so that the error names the rank that died or froze rather than a live peer that was
//! itself waiting.
//!
//! Each rank bumps a counter (`alive/<rank>`, under the attempt's prefix) on a connection of its
//! own whose replies are bounded by [`REPLY_LIMIT`] (its claim, by the time the initialization
//! has left).
//! A rank killed or stopped (SIGKILL, SIGSTOP, a hung host) stops bumping; a rank stuck in a
//! collective that waits for it does not, since the heartbeat runs on its own thread. The same
//! connection notices a store host that stopped answering (its process frozen or gone): every
//! later question is then answered "the store's host stopped answering" at once instead of each
//! store call waiting out its own timeout.
//!
//! When the store is ours (not torchrun's agent's) nothing is sent while nothing happens. The
//! heartbeat connection *claims* this rank's counter (`wire::Query::Claim`: from then on only
//! this connection writes it, and a client that claimed it first, posing as this rank, fails the
//! start naming its address) and arms a close notice (`wire::Query::OnClose`): should the
//! connection close without a goodbye (the kernel closes a killed process's sockets at once), the
//! server posts this rank's death to the job's bulletin (`super::bulletin`). The same connection
//! is the watcher, the bulletin's reader: it parks one WAIT on the next entry's key; woken, it
//! reads the entries, reports the ranks that died to the attempt's one dead list
//! (`super::interrupt::Interrupt::died`, which moves the interrupt and, armed, pulls its levers),
//! answers questions, and parks again. Its requests are
//! sequential: a bump goes out between two parks, and another thread that needs the connection
//! (a question, a blame record) wakes the parked WAIT (`TcpStore::wake`, a CANCEL_WAIT: the
//! connection stays open, so no notice fires) and has it while the watcher holds off. So a rank
//! holds two connections to the store's host: its rendezvous pool's and this one. A rank asking who is
//! silent ([`Liveness::silent`]) posts a question: every live rank's watcher wakes and bumps its
//! counter once, a frozen one does not. So the idle cost is one parked WAIT per rank, renewed
//! every [`IDLE_RENEW`]; while an initialization runs (a deadline is set,
//! [`Liveness::set_deadline`]) the watcher parks for [`PROBE_PERIOD`] only and bumps the counter
//! each time, which tells it whether the store's host still answers. The host is taken for gone
//! only once it has not answered until the deadline (without one: for
//! [`Liveness::set_idle_patience`]): a pause shorter than the time left fails nothing. After init
//! a store call through [`Liveness::guard`] that returns within [`BUSY_PROBE_AFTER`] costs the
//! watcher nothing (its long park is ended, by a local check, only once a call has been in flight
//! that long; then it probes until the call returns, not after); a call that gets no answer has
//! the host checked (one heartbeat, and a fresh connection if that gets no reply), as does a
//! question ([`Liveness::silent`]) and the watcher's own parked WAIT.
//!
//! Where the store is torchrun's agent's (it cannot tell us of a closed connection), each rank
//! bumps its counter every [`HEARTBEAT_PERIOD`], rank 0 reads every heartbeat each second and
//! posts to the bulletin the death of the ranks whose heartbeat stood still for
//! [`AGENT_SILENT_AFTER`] (5 s) after beating once, and every rank reads the bulletin every
//! [`WATCH_PERIOD`]: slower, and a frozen rank counts as dead there.

use crate::lock::Unpoisoned;
use crate::runtime::faults::bulletin::{self, Event, Reader};
use crate::runtime::faults::interrupt::{Cause, Death, Interrupt};
use crate::runtime::faults::verdict;
use crate::runtime::launch::env::LaunchEnv;
use crate::store::tcp::auth::TokenCell;
use crate::store::{PrefixStore, Store, StoreError, TcpStore};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// While an initialization runs, how often the watcher bumps this rank's counter (and so checks
/// that the store's host answers).
pub const PROBE_PERIOD: Duration = Duration::from_millis(500);
/// After init, how long the watcher's WAIT stays parked before it is renewed.
pub const IDLE_RENEW: Duration = Duration::from_secs(60);
/// After init (no deadline), how long the store's host may not answer before it is taken for gone,
/// unless [`Liveness::set_idle_patience`] says otherwise (the runtime gives its timeout).
pub const IDLE_PATIENCE: Duration = Duration::from_secs(30);
/// After init, how long a store call through [`Liveness::guard`] must have been in flight before
/// the watcher checks the host every [`PROBE_PERIOD`] until it returns (a call that returns
/// sooner, nearly every call, costs the watcher nothing).
pub const BUSY_PROBE_AFTER: Duration = Duration::from_secs(1);
/// Where the store is torchrun's agent's, how often a rank bumps its heartbeat.
pub const HEARTBEAT_PERIOD: Duration = Duration::from_millis(200);
/// The longest a heartbeat (or a liveness read) waits for the store's reply.
pub const REPLY_LIMIT: Duration = Duration::from_secs(1);
/// How long a rank's heartbeat must stand still before the rank is called silent.
pub const SILENT_AFTER: Duration = Duration::from_millis(450);
/// The most ranks one question reads (two store requests each).
const MAX_READ: usize = 4096;
/// Where the store is not ours, how often a rank reads the bulletin.
pub const WATCH_PERIOD: Duration = Duration::from_millis(100);
/// Where the store is not ours (torchrun's agent's, which cannot tell us of a closed connection):
/// how long a rank's heartbeat must stand still, after it beat at least once, before rank 0 posts
/// its death to the bulletin. Longer than [`SILENT_AFTER`]: a frozen process cannot be told from a
/// dead one here, and a loaded host may starve a heartbeat for a moment.
pub const AGENT_SILENT_AFTER: Duration = Duration::from_secs(5);
/// How often rank 0 reads every heartbeat where the store is torchrun's agent's.
const AGENT_SCAN_PERIOD: Duration = Duration::from_secs(1);
/// Above this many ranks rank 0 does not scan heartbeats (one request per rank per scan).
const AGENT_SCAN_MAX: u32 = 1024;

fn key(rank: u32) -> String {
    format!("alive/{rank}")
}

/// A heartbeat connection: the view the heartbeat uses, and the connection under it when it left
/// a close notice.
type Connection = (Arc<dyn Store>, Option<Arc<TcpStore>>);

/// Opens a fresh heartbeat connection (None: the store's host did not answer one in time).
type Reconnect = Box<dyn Fn() -> Option<Connection> + Send + Sync>;

struct Shared {
    store: Mutex<Arc<dyn Store>>,
    /// The liveness connection, when it left a close notice (withdrawn before it is let go); the
    /// watcher parks on it.
    noticed: Mutex<Option<Arc<TcpStore>>>,
    /// Threads other than the watcher using the connection now: the watcher does not park
    /// while there are any (see [`Shared::borrow`]).
    borrowers: AtomicUsize,
    /// A missed reply is taken for the host's death only when a fresh connection's handshake
    /// gets no answer either (a loaded host answers that; a frozen one does not).
    reconnect: Option<Reconnect>,
    stop: AtomicBool,
    /// Why the store's host is taken for gone (a heartbeat got no reply in time), when it is.
    store_silent: Mutex<Option<String>>,
    /// "rank 0 at ADDR:PORT" or "torchrun's agent at ADDR:PORT".
    store_host: String,
    /// The ranks the last question found silent, and when.
    last_silent: Mutex<Option<(Instant, Vec<u32>)>>,
    /// After a recovery: each rank's number before it (index: the rank now), so that messages
    /// give both.
    before_recovery: Mutex<Vec<u32>>,
    /// Run once when the store's host is found gone: ends the calls blocked on it.
    on_gone: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    /// Where the ranks found dead are reported: the attempt's one interrupt and dead list.
    interrupt: Arc<Interrupt>,
    /// How deaths are found: our server's close notices, or (the store is not ours) rank 0's
    /// reading of every heartbeat; `None`: not looked for.
    finder: Option<Finder>,
    /// The deadline of the initialization running, if one is (see [`Liveness::set_deadline`]).
    deadline: Mutex<Option<Instant>>,
    /// The attempt's prefix (the notices name `/<prefix>/alive/<rank>`).
    prefix: String,
    /// Since when the store's host has answered nothing the watcher asked, if it has not.
    quiet_since: Mutex<Option<Instant>>,
    /// See [`IDLE_PATIENCE`].
    idle_patience: Mutex<Duration>,
    /// This rank.
    rank: u32,
    /// Store calls through [`Liveness::guard`] in flight, and since when there have been any.
    busy: AtomicUsize,
    busy_since: Mutex<Option<Instant>>,
}

/// How a rank's death is found (see module docs).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Finder {
    /// Our server posts a close notice to the bulletin when a heartbeat connection closes.
    CloseNotice,
    /// Rank 0 reads the `world` ranks' heartbeats and posts the death of those standing still for
    /// [`AGENT_SILENT_AFTER`].
    Heartbeats { world: u32 },
}

/// Why [`Liveness::start`] failed.
#[derive(Debug)]
pub enum StartError {
    /// The store did not answer a liveness connection (the init goes on without one).
    Unreachable(String),
    /// Another client claimed this rank's liveness counter first, posing as this rank.
    Posed(String),
}

impl Shared {
    fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store.locked())
    }

    fn conn(&self) -> Option<Arc<TcpStore>> {
        self.noticed.locked().clone()
    }

    /// End the watcher's parked WAIT (or its next one), keeping the connection.
    fn wake(&self) {
        if let Some(c) = self.conn() {
            c.wake();
        }
    }

    /// The liveness store for a thread other than the watcher: the watcher's park is ended and
    /// it holds off until the [`Borrowed`] is dropped.
    fn borrow(&self) -> Borrowed<'_> {
        self.borrowers.fetch_add(1, Ordering::SeqCst);
        self.wake();
        Borrowed { shared: self, store: self.store() }
    }

    /// After a missed reply: a fresh connection when the host still answers one.
    fn reconnected(&self) -> bool {
        // The old connection's watcher unparked: its notice is withdrawn on it.
        let _held = self.borrow();
        match self.reconnect.as_ref().and_then(|r| r()) {
            Some((fresh, noticed)) => {
                self.withdraw_notice();
                *self.noticed.locked() = noticed;
                *self.store.locked() = fresh;
                true
            }
            None => false,
        }
    }

    /// Withdraw the heartbeat connection's close notice before it is let go (it goes in order,
    /// ahead of the close): this rank is not dying.
    fn withdraw_notice(&self) {
        if let Some(conn) = self.noticed.locked().take() {
            let _ = bulletin::withdraw_close_notice(&conn);
        }
    }

    fn note_store_failure(&self, why: String) {
        *self.store_silent.locked() = Some(why);
        let on_gone = self.on_gone.locked().take();
        if let Some(f) = on_gone {
            f();
        }
        self.interrupt.moved();
    }

    /// Ranks found dead (each with how), with their hosts read from `view` now, while the store
    /// surely answers (the failures they cause may be explained when it is gone), reported to the
    /// attempt's dead list.
    fn found_dead(&self, view: &dyn Store, found: BTreeMap<u32, Cause>) {
        let known = self.interrupt.dead();
        let deaths = found.into_iter().filter(|(r, _)| !known.contains(r)).map(|(r, cause)| {
            let host = crate::runtime::launch::host::label_of(view, r);
            (r, Death { cause, host })
        });
        self.interrupt.died(deaths.collect::<Vec<_>>());
    }

    /// After init, a store call failed (`e`) without an answer from the host (a reply that never
    /// came, a connection lost): whether the host answers a heartbeat, or a fresh connection when
    /// that gets no reply. Found gone, it is so from now on (this call's error and every later
    /// one name it). While an initialization runs the watcher probes the host itself, with the
    /// deadline's patience (a pause shorter than the time left fails nothing).
    fn check_host_after(&self, e: &StoreError) {
        if self.deadline().is_some() || !matches!(e, StoreError::Io(_) | StoreError::Closed(_)) {
            return;
        }
        let got = self.borrow().add(&key(self.rank), 1);
        if let Err(again) = got {
            if !self.reconnected() {
                self.note_store_failure(format!(
                    "a store call got no answer ({e}), nor a heartbeat ({again}), nor a new connection"
                ));
            }
        }
    }

    /// Whether the watcher checks the host every [`PROBE_PERIOD`]: while an initialization runs,
    /// and while a store call has been in flight for [`BUSY_PROBE_AFTER`] (no longer than that).
    fn probing(&self) -> bool {
        self.deadline().is_some() || self.busy_since.locked().is_some_and(|t| t.elapsed() >= BUSY_PROBE_AFTER)
    }

    fn deadline(&self) -> Option<Instant> {
        *self.deadline.locked()
    }

    /// How long the host has answered nothing, once that is too long: past the initialization's
    /// deadline (a shorter pause must fail nothing), or [`IDLE_PATIENCE`] without one.
    fn host_quiet_too_long(&self) -> Option<f64> {
        let since = (*self.quiet_since.locked())?;
        let now = Instant::now();
        let patience = *self.idle_patience.locked();
        let limit = self.deadline().unwrap_or(since + patience).max(since + REPLY_LIMIT);
        (now >= limit).then(|| now.duration_since(since).as_secs_f64())
    }

    fn gone_text(&self, why: &str) -> String {
        verdict::store_host_gone(&self.store_host, why)
    }
}

/// See [`Shared::borrow`].
struct Borrowed<'a> {
    shared: &'a Shared,
    store: Arc<dyn Store>,
}

impl std::ops::Deref for Borrowed<'_> {
    type Target = dyn Store + 'static;
    fn deref(&self) -> &(dyn Store + 'static) {
        self.store.as_ref()
    }
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        self.shared.borrowers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// This rank's heartbeat and the questions asked of everyone's (see module docs). Stops on drop.
pub struct Liveness {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Liveness {
    /// Connect a heartbeat connection to the store at MASTER_ADDR:MASTER_PORT of `env` and start
    /// bumping this rank's counter under `prefix`. The connection, its claim and every reply of
    /// the start may take `connect_within` (the time the initialization has left: a store host
    /// loaded by everyone's connecting answers late, and a rank that gives up early would go on
    /// without liveness); later replies, [`REPLY_LIMIT`]. When the store is
    /// our server (not torchrun's agent) the connection leaves a close notice, so that the others
    /// learn of this rank's death at once (see module docs); each connection first proves the
    /// token `token` holds then, if any (the user's, or the job's own secret).
    pub fn start(
        env: &LaunchEnv,
        prefix: &str,
        connect_within: Duration,
        token: TokenCell,
        interrupt: Arc<Interrupt>,
    ) -> Result<Liveness, StartError> {
        let who = if env.use_agent_store { "torchrun's agent" } else { "rank 0" };
        let store_host = format!("{who} at {}:{}", env.master_addr, env.master_port);
        let (notices, rank, port) = (!env.use_agent_store, env.rank, env.master_port);
        let addr = env.master_addr.clone();
        let attempt = prefix.to_string();
        // The rank reached the store before it starts its heartbeat: a refused connection means
        // the store's process is gone, and is not retried.
        let connect = {
            let (prefix, token) = (attempt.clone(), token.clone());
            move |within: Duration| -> Result<Result<Connection, String>, StoreError> {
                let conn = TcpStore::reconnect_with_token(&addr, port, within, token.get().as_ref())?;
                let conn = Arc::new(conn.with_reply_timeout(within));
                let noticed = if notices {
                    if let Err(holder) = claim_counter(&conn, &prefix, rank, &token)? {
                        return Ok(Err(holder));
                    }
                    bulletin::arm_close_notice(&conn, &prefix)?;
                    Some(Arc::clone(&conn))
                } else {
                    None
                };
                conn.set_reply_timeout(REPLY_LIMIT);
                Ok(Ok((Arc::new(PrefixStore::new(&prefix, conn)) as Arc<dyn Store>, noticed)))
            }
        };
        let conn = connect(connect_within)
            .map_err(|e| {
                StartError::Unreachable(format!(
                    "no liveness for this initialization ({e}): the store at {store_host} did not answer its \
                     liveness connection within the {:.1} s left; a peer's death will not be named here",
                    connect_within.as_secs_f64()
                ))
            })?
            .map_err(|holder| StartError::Posed(posed(rank, &store_host, &holder)))?;
        let reconnect: Reconnect = Box::new(move || connect(REPLY_LIMIT).ok().and_then(Result::ok));
        let finder = if notices { Finder::CloseNotice } else { Finder::Heartbeats { world: env.world_size } };
        // The watcher starts with the connection in place: one that found none would open another
        // (and the claim would move to it, its close notice left behind at the stop).
        Ok(Self::with(conn, Some(reconnect), rank, store_host, Some(finder), attempt, interrupt))
    }

    /// Heartbeat through `store` (tests: an in-process store). Deaths are not looked for.
    pub fn on(store: Arc<dyn Store>, rank: u32, store_host: String) -> Liveness {
        Self::with((store, None), None, rank, store_host, None, String::new(), Interrupt::new())
    }

    /// [`Self::on`], and with rank 0 reading the heartbeats of a world of `world` ranks to find
    /// the dead, as where the store is torchrun's agent's (tests).
    pub fn on_watching(store: Arc<dyn Store>, rank: u32, world: u32, store_host: String) -> Liveness {
        let finder = Some(Finder::Heartbeats { world });
        Self::with((store, None), None, rank, store_host, finder, String::new(), Interrupt::new())
    }

    fn with(
        (store, noticed): Connection,
        reconnect: Option<Reconnect>,
        rank: u32,
        store_host: String,
        finder: Option<Finder>,
        prefix: String,
        interrupt: Arc<Interrupt>,
    ) -> Liveness {
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            noticed: Mutex::new(noticed),
            borrowers: AtomicUsize::new(0),
            reconnect,
            stop: AtomicBool::new(false),
            store_silent: Mutex::new(None),
            store_host,
            last_silent: Mutex::new(None),
            before_recovery: Mutex::new(Vec::new()),
            on_gone: Mutex::new(None),
            interrupt,
            finder,
            deadline: Mutex::new(None),
            prefix,
            quiet_since: Mutex::new(None),
            idle_patience: Mutex::new(IDLE_PATIENCE),
            rank,
            busy: AtomicUsize::new(0),
            busy_since: Mutex::new(None),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("mcore-heartbeat".into())
            .stack_size(256 * 1024)
            .spawn(move || match s.finder {
                Some(Finder::CloseNotice) => watch_notices(&s, rank),
                _ => beat(&s, rank),
            })
            .ok();
        Liveness { shared, thread }
    }

    /// Have `f` run once when the store's host is found gone (to end the calls blocked on it:
    /// without it a call waits out its own reply timeout).
    pub fn on_store_gone(&self, f: Box<dyn Fn() + Send + Sync>) {
        *self.shared.on_gone.locked() = Some(f);
    }

    /// Where the ranks this liveness finds dead are reported.
    pub fn interrupt(&self) -> &Arc<Interrupt> {
        &self.shared.interrupt
    }

    /// While an initialization runs, its deadline: the store's host is taken for gone only once it
    /// has not answered until then, and the watcher checks every [`PROBE_PERIOD`] that it
    /// answers. `None` once it is over (idle: nothing is sent but the parked watch).
    pub fn set_deadline(&self, deadline: Option<Instant>) {
        *self.shared.deadline.locked() = deadline;
        if deadline.is_some() {
            // Parked for a minute, perhaps: probe at the initialization's pace from now on.
            self.shared.wake();
        }
    }

    /// Without a deadline, how long the store's host may answer nothing the watcher asks before it
    /// is taken for gone (default [`IDLE_PATIENCE`]; the runtime gives its timeout).
    pub fn set_idle_patience(&self, patience: Duration) {
        *self.shared.idle_patience.locked() = patience;
    }

    /// The ranks found dead so far (see module docs), ascending.
    pub fn dead(&self) -> Vec<u32> {
        self.shared.interrupt.dead()
    }

    /// Why the store's host is taken for gone, when it is.
    pub fn store_silent(&self) -> Option<String> {
        self.shared.store_silent.locked().clone()
    }

    /// The ranks of `ranks` (at most the first 4096) whose heartbeat stood still for
    /// [`SILENT_AFTER`], read now and once more after that long. `Err`: the store's host does not
    /// answer (the text says so, naming it).
    pub fn silent(&self, ranks: &[u32]) -> Result<Vec<u32>, String> {
        let ranks = &ranks[..ranks.len().min(MAX_READ)];
        if let Some(quiet) = self.shared.host_quiet_too_long() {
            let why = format!("it answered nothing the watcher asked for {quiet:.1} s, until the deadline");
            self.shared.note_store_failure(why);
        }
        if let Some(why) = self.store_silent() {
            return Err(self.store_host_gone(&why));
        }
        let read = |r: u32| -> Result<i64, String> {
            let mut got = self.shared.borrow().add(&key(r), 0);
            if got.is_err() && self.shared.reconnected() {
                got = self.shared.borrow().add(&key(r), 0);
            }
            got.map_err(|e| {
                let why = format!("no answer to a liveness read ({e})");
                self.shared.note_store_failure(why.clone());
                self.store_host_gone(&why)
            })
        };
        let first = {
            let _held = self.shared.borrow();
            let first = ranks.iter().map(|&r| read(r)).collect::<Result<Vec<_>, _>>()?;
            // With our server the ranks bump their counters when asked (see module docs).
            if let Some(conn) = self.shared.conn() {
                let _ = bulletin::ask(&conn, &self.shared.prefix);
            }
            first
        };
        std::thread::sleep(SILENT_AFTER);
        let _held = self.shared.borrow();
        let mut silent = Vec::new();
        for (&r, before) in ranks.iter().zip(first) {
            if read(r)? == before {
                silent.push(r);
            }
        }
        *self.shared.last_silent.locked() = Some((Instant::now(), silent.clone()));
        Ok(silent)
    }

    /// The ranks found dead, and those a question of the last `within` found silent.
    pub fn recently_silent(&self, within: Duration) -> Vec<u32> {
        let mut silent = match self.shared.last_silent.locked().as_ref() {
            Some((at, silent)) if at.elapsed() <= within => silent.clone(),
            _ => Vec::new(),
        };
        silent.extend(self.dead().into_iter().filter(|r| !silent.contains(r)).collect::<Vec<_>>());
        silent
    }

    /// After a recovery, name ranks in both numberings: `before[r]` is rank r's number before it.
    pub fn number_as_before(&self, before: Vec<u32>) {
        *self.shared.before_recovery.locked() = before;
    }

    /// "3, 5", or after a recovery "3, 5 (before the recovery: 4, 7)".
    pub(crate) fn name_ranks(&self, ranks: &[u32]) -> String {
        let now = crate::runtime::launch::host::format_ranks(ranks);
        let before = self.shared.before_recovery.locked();
        let old: Vec<String> = ranks.iter().filter_map(|&r| before.get(r as usize)).map(u32::to_string).collect();
        if before.is_empty() || old.len() != ranks.len() {
            return now;
        }
        format!("{now} (before the recovery: {})", old.join(", "))
    }

    /// The liveness connection as a store, for what only this rank's own connection may write
    /// (its blame record, under its claimed counter): each call borrows it from the watcher.
    pub(crate) fn own_store(&self) -> Arc<dyn Store> {
        Arc::new(guard::Own(Arc::clone(&self.shared)))
    }

    /// `inner`, failing every call at once (naming the store's host) once the heartbeat has found
    /// the host gone, instead of each call waiting out its own timeout.
    pub fn guard(&self, inner: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(guard::Guarded { inner, liveness: Arc::clone(&self.shared) })
    }

    fn store_host_gone(&self, why: &str) -> String {
        self.shared.gone_text(why)
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake(); // ends the watcher's parked WAIT
        if let Some(t) = self.thread.take() {
            // The beat sleeps in short slices and waits at most REPLY_LIMIT for a reply.
            let _ = t.join();
        }
        self.shared.withdraw_notice();
    }
}

fn beat(s: &Shared, rank: u32) {
    let k = key(rank);
    let mut watch = Watch::new(&s.prefix);
    while !s.stop.load(Ordering::SeqCst) {
        let t0 = Instant::now();
        match s.store().add(&k, 1) {
            Ok(_) => *s.store_silent.locked() = None,
            // A missed reply leaves the connection unusable: a fresh one, if the host answers.
            Err(_) if s.reconnected() => continue,
            Err(e) => {
                s.note_store_failure(format!(
                    "no reply to a heartbeat within {:.1} s, nor to a new connection: {e}",
                    REPLY_LIMIT.as_secs_f64()
                ));
                return;
            }
        }
        let next = t0 + HEARTBEAT_PERIOD;
        while !s.stop.load(Ordering::SeqCst) && Instant::now() < next {
            if s.finder.is_some() && watch.due() {
                watch.look(s, rank);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A secret for this rank's claim (see module docs): 16 bytes from /dev/urandom, or from the
/// clock and the process id where that cannot be read.
/// This process's secret for its liveness claims (one per process, so that a claim made while
/// standing by, see [`claim_counter`], moves to the liveness connection later).
fn secret() -> &'static [u8] {
    static SECRET: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    SECRET.get_or_init(|| {
        use std::io::Read;
        let mut b = [0u8; 16];
        if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).is_err() {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            b[..8].copy_from_slice(&(t.as_nanos() as u64).to_le_bytes());
            b[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        }
        b.to_vec()
    })
}

/// Claim rank `rank`'s liveness counter under `prefix` on `conn` (our server only). The job's
/// secret that a claim of a rank's own counter returns (default mode) goes to `token`: this
/// rank's later connections prove it, and `conn` counts as the rank's own once the store closes
/// to outsiders. `Ok(Err(holder))`: another client, at `holder`, holds it (see [`posed`]).
pub(crate) fn claim_counter(
    conn: &TcpStore,
    prefix: &str,
    rank: u32,
    token: &TokenCell,
) -> Result<Result<(), String>, StoreError> {
    Ok(conn.claim(&format!("{prefix}/{}", key(rank)), secret())?.map(|session| {
        if let Some(s) = session {
            token.set_if_none(s);
        }
    }))
}

/// The error of a rank whose liveness counter another client (at `holder`) claimed first.
pub(crate) fn posed(rank: u32, store_host: &str, holder: &str) -> String {
    format!(
        "rank {rank}'s liveness counter in the store at {store_host} is held by another client, at {holder}: it \
         posed as rank {rank} (a client of another job, or a stray process)"
    )
}

/// The watcher, the bulletin's reader where our server numbers it (see module docs): one parked
/// WAIT on the next entry, on the liveness connection, renewed every [`IDLE_RENEW`] (every
/// [`PROBE_PERIOD`] while a deadline is set or a store call has run for [`BUSY_PROBE_AFTER`], with
/// a bump of this rank's counter that checks the host answers).
fn watch_notices(s: &Shared, rank: u32) {
    // From the first entry of the attempt: a rank that starts late learns of earlier deaths too.
    let mut reader = Reader::new(&s.prefix, true);
    while !s.stop.load(Ordering::SeqCst) {
        let Some(conn) = s.conn().filter(|c| c.is_usable()) else {
            // A missed reply left it unusable: a fresh one (the claim moves to it).
            if !s.reconnected() {
                if host_unanswered(s, "no answer to a new connection") {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        };
        if s.borrowers.load(Ordering::SeqCst) > 0 {
            // Another thread has the connection (see `Shared::borrow`).
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let park = if s.probing() { PROBE_PERIOD } else { IDLE_RENEW };
        let next = format!("{}/{}", s.prefix, reader.next_key());
        // A long park ends early (nothing sent until then) once a store call has been in flight
        // for a while: the host is checked while it runs.
        let got = match conn.wait_nudged(&[&next], park, &|| park == IDLE_RENEW && s.probing()) {
            Ok(true) => reader.read(s.store().as_ref()).map(|events| heard(s, rank, events)),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        match got {
            Ok(()) => *s.quiet_since.locked() = None,
            Err(e) => {
                if !s.reconnected() && host_unanswered(s, &format!("no reply to the watcher: {e}")) {
                    return;
                }
                continue;
            }
        }
        // Init (or the long call) may have ended during the park: then no probe (the re-park is
        // all it sends).
        if s.probing() && s.store().add(&key(rank), 1).is_err() && !s.reconnected() {
            let why = "no reply to a heartbeat, nor to a new connection";
            if host_unanswered(s, why) {
                return;
            }
        }
    }
}

/// The store's host did not answer the watcher (`why`): taken for gone once it has answered
/// nothing until the deadline (see [`Shared::host_quiet_too_long`]). Whether it is gone now.
fn host_unanswered(s: &Shared, why: &str) -> bool {
    s.quiet_since.locked().get_or_insert_with(Instant::now);
    match s.host_quiet_too_long() {
        Some(quiet) => {
            s.note_store_failure(format!("{why}; it answered nothing for {quiet:.1} s, until the deadline"));
            true
        }
        None => false,
    }
}

/// What the watcher does with the events it read: report the ranks that died (this one left
/// out) and bump this rank's counter once if asked. The rest is for whoever waits for it (see
/// `bulletin::Bulletin`).
fn heard(s: &Shared, me: u32, events: Vec<Event>) {
    let mut died: BTreeMap<u32, Cause> = BTreeMap::new();
    let mut asked = false;
    for e in events {
        match e {
            Event::Died(r, how) if r != me => {
                died.entry(r).or_insert(how);
            }
            Event::Question => asked = true,
            _ => {}
        }
    }
    if asked {
        let _ = s.store().add(&key(me), 1);
    }
    if !died.is_empty() {
        s.found_dead(s.store().as_ref(), died);
    }
}

/// Where the store is not ours: the bulletin's reader, and rank 0's reading of the heartbeats.
struct Watch {
    reader: Reader,
    last: Option<Instant>,
    /// Rank 0 reading heartbeats (see [`Finder::Heartbeats`]): each rank's counter, and since
    /// when it has not moved; when it last read them; the ranks it posted dead.
    beats: BTreeMap<u32, (i64, Instant)>,
    scanned: Option<Instant>,
    posted: Vec<u32>,
}

impl Watch {
    fn new(prefix: &str) -> Watch {
        Watch {
            reader: Reader::new(prefix, false),
            last: None,
            beats: BTreeMap::new(),
            scanned: None,
            posted: Vec::new(),
        }
    }

    fn due(&mut self) -> bool {
        let now = Instant::now();
        if self.last.is_some_and(|l| now < l + WATCH_PERIOD) {
            return false;
        }
        self.last = Some(now);
        true
    }

    /// Rank 0, where the store is not ours: read every heartbeat (each [`AGENT_SCAN_PERIOD`]) and
    /// post the death of the ranks that beat once and then stood still for
    /// [`AGENT_SILENT_AFTER`]. The only poster of deaths there.
    fn scan(&mut self, s: &Shared, me: u32, world: u32) {
        if me != 0 || world > AGENT_SCAN_MAX || self.scanned.is_some_and(|t| t.elapsed() < AGENT_SCAN_PERIOD) {
            return;
        }
        self.scanned = Some(Instant::now());
        let store = s.store();
        for r in (0..world).filter(|&r| r != me) {
            let Ok(n) = store.add(&key(r), 0) else { return };
            match self.beats.get(&r) {
                Some(&(before, since)) if before == n => {
                    if n > 0 && since.elapsed() >= AGENT_SILENT_AFTER && !self.posted.contains(&r) {
                        let died = Event::Died(r, Cause::HeartbeatStill(AGENT_SILENT_AFTER));
                        if bulletin::post_numbered(store.as_ref(), &died).is_ok() {
                            self.posted.push(r);
                        }
                    }
                }
                _ => {
                    self.beats.insert(r, (n, Instant::now()));
                }
            }
        }
    }

    /// Read the bulletin (rank 0 scans the heartbeats first).
    fn look(&mut self, s: &Shared, me: u32) {
        if let Some(Finder::Heartbeats { world }) = s.finder {
            self.scan(s, me, world);
        }
        if let Ok(events) = self.reader.read(s.store().as_ref()) {
            heard(s, me, events);
        }
    }
}

mod guard;
#[cfg(test)]
mod tests;
