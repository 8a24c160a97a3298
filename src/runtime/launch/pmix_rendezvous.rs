//! The rendezvous through PMIx ([`super::env::Rendezvous::Pmix`]): rank 0 binds its store on an
//! ephemeral port and publishes where it listens, with the job's secret, through PMIx (put,
//! commit); one PMIx fence; every other rank reads rank 0's record. No port is derived, so two
//! jobs on one node never meet at the same one, and the secret never crosses the store.
//!
//! The record, under the key `mcore_init.store:<attempt>` of rank 0: `<port> <address>\n` and
//! then the secret's bytes (none when the user's own token, MCORE_STORE_TOKEN, is in force).
//! The other ranks read it as soon as rank 0 has committed it (asked again until then:
//! [`PmixClient::fetch_when_published`]); no fence, so that a rank that never comes does not keep the others
//! from the store, where the check-in names it.
//!
//! Then two exchanges that would otherwise cost rank 0's store requests from every rank run as
//! PMIx fences with data collection instead (docs/pmix.md, "What runs where"):
//!
//! * the check-in ([`check_in`]): every rank's host and settings fingerprint under
//!   `mcore_init.checkin:<attempt>`, one fence over the job, every rank reads every record and
//!   reaches the same verdict. Whatever the fence's status says (OpenMPI 5's server tells only
//!   one rank of a timeout), every rank checks that every record is there; when some are not, the
//!   launcher's process table says what became of those ranks ([`CheckIn::Missing`]), and only
//!   where it cannot (no table, or a missing rank still connected) the ranks check in again
//!   through the store, which names who is missing;
//! * the world communicator's exchange ([`WorldExchange`]): the store the backend is handed for
//!   it, whose sets are PMIx puts and whose reads come after one fence over the world.

use super::env::{LaunchEnv, Rendezvous};
use super::host::HostInfo;
use crate::backend::pmix::{Fence, PmixClient, PmixError, ProcEntry};
use crate::lock::Unpoisoned;
use crate::runtime::error::RuntimeError;
use crate::store::{Store, StoreError, StoreToken};
use crate::timeout::Deadline;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where rank 0's store listens and the secret its clients prove, as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreRecord {
    pub addr: String,
    pub port: u16,
    pub secret: Option<StoreToken>,
}

impl StoreRecord {
    fn encode(&self) -> Vec<u8> {
        let mut out = format!("{} {}\n", self.port, self.addr).into_bytes();
        if let Some(s) = &self.secret {
            out.extend_from_slice(s.bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Option<StoreRecord> {
        let nl = bytes.iter().position(|b| *b == b'\n')?;
        let head = std::str::from_utf8(&bytes[..nl]).ok()?;
        let (port, addr) = head.split_once(' ')?;
        let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
        if addr.is_empty() {
            return None;
        }
        Some(StoreRecord { addr: addr.to_string(), port, secret: StoreToken::new(&bytes[nl + 1..]) })
    }
}

/// The PMIx key of an attempt's record.
fn key(attempt: &str) -> String {
    format!("mcore_init.store:{attempt}")
}

/// What failed, as the store's connect errors say it: `what` names rank 0's store through PMIx.
fn failed(env: &LaunchEnv, e: PmixError, waited: Duration) -> RuntimeError {
    let what = format!(
        "the rendezvous store of rank 0 through PMIx (namespace {}, {} ranks)",
        crate::quote::quoted(&env.job_id.id),
        env.world_size
    );
    RuntimeError::StoreConnect { what, source: as_store_error(e, waited) }
}

fn client(env: &LaunchEnv) -> Result<&'static PmixClient, RuntimeError> {
    PmixClient::get().map_err(|e| failed(env, PmixError::new(e), Duration::ZERO))
}

/// Rank 0: publish `record` for `attempt` (put, commit; until `deadline`).
pub(crate) fn publish(
    env: &LaunchEnv,
    attempt: &str,
    record: &StoreRecord,
    deadline: Deadline,
) -> Result<(), RuntimeError> {
    let pmix = client(env)?;
    pmix.publish(&key(attempt), &record.encode(), deadline).map_err(|e| failed(env, e, Duration::ZERO))
}

/// Every other rank: rank 0's record for `attempt`, once rank 0 has committed it (until
/// `deadline`).
pub(crate) fn find(env: &LaunchEnv, attempt: &str, deadline: Deadline) -> Result<StoreRecord, RuntimeError> {
    let start = Instant::now();
    let pmix = client(env)?;
    let bytes = pmix.fetch_when_published(0, &key(attempt), deadline).map_err(|e| failed(env, e, start.elapsed()))?;
    StoreRecord::decode(&bytes).ok_or_else(|| {
        let head = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]).into_owned();
        let e = PmixError::new(format!("rank 0's record {} is not `<port> <address>`", crate::quote::quoted(&head)));
        failed(env, e, start.elapsed())
    })
}

/// The process's PMIx client when this rank's initialization may exchange through it: the
/// rendezvous is PMIx's and the ranks are PMIx's own (not a recovered world's, renumbered).
pub(crate) fn usable(env: &LaunchEnv) -> Option<&'static PmixClient> {
    if env.rendezvous != Rendezvous::Pmix {
        return None;
    }
    let c = PmixClient::get().ok()?;
    (c.facts().rank == env.rank && c.facts().job_size == env.world_size).then_some(c)
}

/// A timeout or failure of PMIx as the store says it (so that errors read as the store's do): a
/// wait ended by the death of a rank it involved as a store closed by that death (a lost peer,
/// as a backend reads it: what recovery acts on), never as an I/O error.
fn as_store_error(e: PmixError, waited: Duration) -> StoreError {
    if !e.dead.is_empty() {
        StoreError::Closed(e.message)
    } else if e.timed_out {
        StoreError::Timeout { keys: vec![format!("<{e}>")], waited }
    } else {
        StoreError::Io(e.message)
    }
}

/// One rank's check-in record: `<hostname> <address>\n<fingerprint>`.
fn checkin_record(host: &HostInfo, fingerprint: &[u8]) -> Vec<u8> {
    let mut out = format!("{} {}\n", host.hostname, host.addr).into_bytes();
    out.extend_from_slice(fingerprint);
    out
}

/// A check-in record read back: the host (`<hostname> <address>`) and the fingerprint.
fn parse_checkin(bytes: &[u8]) -> Option<(String, Vec<u8>)> {
    let nl = bytes.iter().position(|b| *b == b'\n')?;
    Some((String::from_utf8_lossy(&bytes[..nl]).into_owned(), bytes[nl + 1..].to_vec()))
}

/// How long the reads of the records after a fence may take: what is left of `until`, at least
/// 0.2 s (a record that is there comes at once, even to a rank whose fence timed out; the rest
/// of the deadline is the launcher's, to say what became of the ranks whose records are not).
fn after_fence(until: Deadline) -> Duration {
    until.left().max(Duration::from_millis(200))
}

/// How the check-in through PMIx ended.
#[derive(Debug)]
pub(crate) enum CheckIn {
    /// Every rank's (host, fingerprint), by rank.
    All(Vec<(String, Vec<u8>)>),
    /// These ranks' records are not there after the fence (which said why: `fence`); the
    /// launcher's process table, when it answered (`Err`: why not).
    Missing { ranks: Vec<u32>, fence: Option<PmixError>, table: Result<Vec<ProcEntry>, PmixError> },
}

/// The check-in through PMIx: publish this rank's host and `fingerprint` for `attempt`, one
/// fence over the job (until `until`), then every rank's (host, fingerprint), each checked
/// whatever the fence said; those not there are [`CheckIn::Missing`], with the launcher's process
/// table (asked within `deadline`, after `until`). An error when a call failed: one ended by the
/// death of a rank names it ([`PmixError::dead`]).
pub(crate) fn check_in(
    pmix: &'static PmixClient,
    attempt: &str,
    (host, fingerprint): (&HostInfo, &[u8]),
    until: Deadline,
    deadline: Deadline,
) -> Result<CheckIn, PmixError> {
    let key = format!("mcore_init.checkin:{attempt}");
    pmix.publish(&key, &checkin_record(host, fingerprint), until)?;
    let fence = match pmix.start_fence(None, until.left())?.wait(until) {
        Ok(()) => None,
        Err(e) if !e.dead.is_empty() => return Err(e),
        Err(e) => Some(e),
    };
    let (mut records, mut missing) = (Vec::new(), Vec::new());
    let ranks: Vec<u32> = (0..pmix.facts().job_size).collect();
    for (r, got) in ranks.iter().zip(pmix.fetch_fenced(&ranks, &key, after_fence(until))?) {
        match got {
            Some(bytes) => {
                records.push(parse_checkin(&bytes).ok_or_else(|| {
                    PmixError::new(format!("rank {r}'s check-in record under {key} has no host line"))
                })?)
            }
            None => missing.push(*r),
        }
    }
    if missing.is_empty() {
        return Ok(CheckIn::All(records));
    }
    Ok(CheckIn::Missing { ranks: missing, fence, table: pmix.process_table(deadline) })
}

/// The store handed to the backend for the world communicator under PMIx: the keys this rank
/// sets before its first read are one PMIx record of its own (`mcore_init.world:<attempt>`: a
/// list of length-prefixed keys and values), put and committed; the first set or read starts
/// one fence over the world's ranks, and reads wait for it, then look in the records (rank 0's
/// first: NCCL's unique id is there). A rank that only publishes (NCCL's rank 0) starts the
/// fence and does not wait for it. What the records do not hold (a key set after the fence,
/// a counter) goes through `inner`, the world's store, as before.
pub(crate) struct WorldExchange {
    pmix: &'static PmixClient,
    inner: Arc<dyn Store>,
    key: String,
    members: Vec<u32>,
    deadline: Deadline,
    state: Mutex<Exchange>,
}

#[derive(Default)]
struct Exchange {
    /// The keys this rank published, in order.
    mine: Vec<(String, Vec<u8>)>,
    /// None: not started; Some(Some(fence)) started, not yet waited for; Some(None): over.
    fence: Option<Option<Fence>>,
    /// How it failed (every later read says the same).
    failed: Option<StoreError>,
    /// The members' records read so far (in `members` order), their keys and values.
    read: usize,
    found: HashMap<String, Vec<u8>>,
}

fn encode_pairs(pairs: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        for part in [k.as_bytes(), v.as_slice()] {
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

fn decode_pairs(mut bytes: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let mut take = || -> Option<Vec<u8>> {
        let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        let part = bytes.get(4..4 + len)?.to_vec();
        bytes = &bytes[4 + len..];
        Some(part)
    };
    let mut out = Vec::new();
    while let Some(k) = take() {
        out.push((String::from_utf8(k).ok()?, take()?));
    }
    Some(out)
}

impl WorldExchange {
    /// The exchange of `attempt`'s world communicator over `members` (ascending), until `deadline`.
    pub(crate) fn new(
        pmix: &'static PmixClient,
        inner: Arc<dyn Store>,
        attempt: &str,
        members: &[u32],
        deadline: Deadline,
    ) -> WorldExchange {
        WorldExchange {
            pmix,
            inner,
            key: format!("mcore_init.world:{attempt}"),
            members: members.to_vec(),
            deadline,
            state: Mutex::new(Exchange::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Exchange> {
        self.state.locked()
    }

    /// Publish this rank's keys and start the fence, once.
    fn begin(&self, st: &mut Exchange) -> Result<(), StoreError> {
        if st.fence.is_some() {
            return Ok(());
        }
        let everyone = self.members.len() as u32 == self.pmix.facts().job_size;
        let started = self
            .pmix
            .publish(&self.key, &encode_pairs(&st.mine), self.deadline)
            .and_then(|()| self.pmix.start_fence((!everyone).then_some(&self.members[..]), self.deadline.left()));
        match started {
            Ok(fence) => {
                st.fence = Some(Some(fence));
                Ok(())
            }
            Err(e) => {
                st.fence = Some(None);
                let e = as_store_error(e, Duration::ZERO);
                st.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Started and waited for: the records are readable.
    fn fenced(&self) -> Result<std::sync::MutexGuard<'_, Exchange>, StoreError> {
        let mut st = self.lock();
        self.begin(&mut st)?;
        if let Some(fence) = st.fence.as_mut().and_then(Option::take) {
            let start = Instant::now();
            match fence.wait(self.deadline) {
                Ok(()) => {}
                // The death of a member: a lost peer.
                Err(e) if !e.dead.is_empty() => st.failed = Some(as_store_error(e, start.elapsed())),
                // A timeout or a partial success says no more than the records do (OpenMPI 5
                // tells only one rank): those read next name who did not take part.
                Err(_) => {}
            }
        }
        match &st.failed {
            Some(e) => Err(e.clone()),
            None => Ok(st),
        }
    }

    /// `key` from the records (this rank's own first), reading members' records until found. A
    /// member whose record is not there after the fence did not take part in it: the launcher's
    /// process table says what became of it.
    fn lookup(&self, st: &mut Exchange, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some((_, v)) = st.mine.iter().find(|(k, _)| k == key) {
            return Ok(Some(v.clone()));
        }
        while !st.found.contains_key(key) && st.read < self.members.len() {
            let rank = self.members[st.read];
            st.read += 1;
            let fetched = self.pmix.fetch_fenced(&[rank], &self.key, after_fence(self.deadline));
            let Some(bytes) = fetched.map_err(|e| as_store_error(e, Duration::ZERO))?.pop().flatten() else {
                let e = StoreError::Closed(self.not_there(rank));
                st.failed = Some(e.clone());
                return Err(e);
            };
            let pairs = decode_pairs(&bytes).ok_or_else(|| {
                StoreError::Protocol(format!("rank {rank}'s record under {} is not a list of keys", self.key))
            })?;
            st.found.extend(pairs);
        }
        Ok(st.found.get(key).cloned())
    }

    /// Why `rank`'s record is not there after the fence, from the launcher's process table when
    /// it answers.
    fn not_there(&self, rank: u32) -> String {
        let state = match self.pmix.process_table(self.deadline) {
            Ok(table) => match table.iter().find(|e| e.rank == rank) {
                Some(e) => format!("the launcher's process table says: {e}"),
                None => "the launcher's process table does not list it".to_string(),
            },
            Err(e) => format!("the launcher's process table gave no answer: {e}"),
        };
        format!("rank {rank} did not take part in the PMIx fence of {} ({state})", self.key)
    }

    /// A rank that never used the exchange starts its fence now (the others' reads wait for it).
    pub(crate) fn finish(&self) {
        let mut st = self.lock();
        let _ = self.begin(&mut st);
    }
}

impl Store for WorldExchange {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let mut st = self.lock();
        if st.fence.is_some() {
            drop(st);
            return self.inner.set(key, value);
        }
        st.mine.push((key.to_string(), value.to_vec()));
        self.begin(&mut st)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        let mut st = self.fenced()?;
        match self.lookup(&mut st, key)? {
            Some(v) => Ok(v),
            None => {
                drop(st);
                self.inner.get(key)
            }
        }
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        let mut st = self.fenced()?;
        let mut rest = Vec::new();
        for k in keys {
            if self.lookup(&mut st, k)?.is_none() {
                rest.push(*k);
            }
        }
        drop(st);
        if rest.is_empty() {
            Ok(())
        } else {
            self.inner.wait(&rest, timeout)
        }
    }

    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        for k in keys {
            let mut st = self.lock();
            let known = st.fence.as_ref().is_some_and(Option::is_none) && st.failed.is_none();
            let here = if known { self.lookup(&mut st, k)?.is_some() } else { false };
            drop(st);
            if !here && !self.inner.check(&[k])? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        self.inner.add(key, delta)
    }

    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.inner.compare_set(key, expected, desired)
    }

    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        self.inner.delete_key(key)
    }

    fn num_keys(&self) -> Result<i64, StoreError> {
        self.inner.num_keys()
    }

    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bad_ones_are_refused() {
        let secret = StoreToken::new(&[0, 10, 255, b' ', b'\n']);
        for record in [
            StoreRecord { addr: "127.0.0.1".into(), port: 40123, secret: secret.clone() },
            StoreRecord { addr: "node-7.cluster".into(), port: 1, secret: None },
        ] {
            assert_eq!(StoreRecord::decode(&record.encode()), Some(record));
        }
        for bad in [&b""[..], b"40123 127.0.0.1", b"0 127.0.0.1\n", b"70000 h\n", b"40123 \n", b"x h\n"] {
            assert_eq!(StoreRecord::decode(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(key("mcore_init/none/0/3"), "mcore_init.store:mcore_init/none/0/3");
    }

    /// The world exchange's record and the check-in's: written and read back; truncated lists
    /// are refused.
    #[test]
    fn exchange_records_round_trip() {
        let pairs = vec![("0".to_string(), b"addr\0".to_vec()), ("nccl_id".to_string(), Vec::new())];
        let bytes = encode_pairs(&pairs);
        assert_eq!(decode_pairs(&bytes), Some(pairs));
        assert_eq!(decode_pairs(&bytes[..bytes.len() - 1]), None);
        assert_eq!(decode_pairs(b""), Some(Vec::new()));
        let host = HostInfo { hostname: "n1".into(), addr: [10, 0, 0, 2].into(), why: String::new() };
        let rec = checkin_record(&host, b"tp=2 x=a b");
        assert_eq!(parse_checkin(&rec), Some(("n1 10.0.0.2".to_string(), b"tp=2 x=a b".to_vec())));
        assert_eq!(parse_checkin(b"no newline"), None);
    }
}
