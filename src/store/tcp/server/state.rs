//! The store's data and its parked waiters: keys and values, the queues, the liveness claims and
//! notice keys, the waiters' slab and the index of waiters by key, with the bytes each holds
//! charged to the memory budget. Data only: the requests that change it are served by the event
//! loop's parts (`dispatch`, `queues`, `claims`), which import this file and never the reverse.

use super::{ENTRY_COST, WAITER_COST, WAIT_KEY_COST};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

/// A WAIT parked until its keys exist.
pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) conn: usize,
    /// Keys missing when it parked (shared with the index); listed under each in
    /// `State::waiting` until created.
    pub(super) keys: Vec<Arc<[u8]>>,
    /// How many of `keys` are still missing.
    pub(super) missing: usize,
}

/// The parked waiters in a slab: an id is its slot (low 32 bits) and a count of the waiters
/// parked before it (high 32 bits, so an id recurs only after 4 billion WAITs). Growing it copies
/// a vector once in a while; a hash table of 250,000 waiters took tens of milliseconds to rehash.
#[derive(Default)]
pub(super) struct Waiters {
    pub(super) slots: Vec<Option<Waiter>>,
    pub(super) free: Vec<u32>,
    pub(super) count: u32,
}

impl Waiters {
    /// The id the next [`Waiters::insert`] must use.
    pub(super) fn next_id(&mut self) -> u64 {
        self.count = self.count.wrapping_add(1);
        let slot = self.free.last().map_or(self.slots.len() as u64, |s| u64::from(*s));
        (u64::from(self.count) << 32) | (slot & 0xFFFF_FFFF)
    }
    /// Store `w` under `id` (from [`Waiters::next_id`], nothing inserted in between).
    pub(super) fn insert(&mut self, id: u64, w: Waiter) {
        let slot = (id & 0xFFFF_FFFF) as usize;
        if self.free.last().is_some_and(|s| *s as usize == slot) {
            self.free.pop();
            self.slots[slot] = Some(w);
        } else {
            self.slots.push(Some(w));
        }
    }
    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut Waiter> {
        self.slots.get_mut((id & 0xFFFF_FFFF) as usize)?.as_mut().filter(|w| w.id == id)
    }
    pub(super) fn remove(&mut self, id: u64) -> Option<Waiter> {
        let slot = (id & 0xFFFF_FFFF) as usize;
        let s = self.slots.get_mut(slot)?;
        if s.as_ref()?.id != id {
            return None;
        }
        self.free.push(slot as u32);
        s.take()
    }
}

/// Hashing of waiter ids (numbered by the server, so no client chooses them): a multiply, far
/// cheaper than SipHash when a table of 250,000 waiters grows or is walked.
#[derive(Default, Clone, Copy)]
pub(super) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(super) type Ids = std::hash::BuildHasherDefault<IdHasher>;

/// Who holds a claimed liveness counter (see `claims`).
pub(super) struct Claim {
    pub(super) secret: Vec<u8>,
    /// The holding connection's serial (`Conn::serial`) and address.
    pub(super) serial: u64,
    pub(super) peer: SocketAddr,
}

/// The claims and the notice keys (see `claims`).
#[derive(Default)]
pub(super) struct Claims {
    pub(super) held: HashMap<Vec<u8>, Claim>,
    pub(super) notice_keys: HashSet<Vec<u8>>,
    /// Keys written under a liveness counter nobody has claimed yet (`<counter>/...`), by
    /// counter: its first claim deletes them (whoever wrote them did not own it).
    pub(super) unowned: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    /// Bytes charged for them.
    pub(super) bytes: u64,
}

impl Claims {
    /// Whether `key` is a notice key or one of its numbered entries (written by the server only).
    fn is_notice(&self, key: &[u8]) -> bool {
        if self.notice_keys.is_empty() {
            return false;
        }
        let parent = key.iter().rposition(|b| *b == b'/').map(|at| &key[..at]);
        self.notice_keys.contains(key) || parent.is_some_and(|p| self.notice_keys.contains(p))
    }

    /// Whether connection `serial` may write `key`; why not otherwise. A claim owns its counter
    /// and the keys under it (`<counter>/...`, the rank's blame record); a write under a counter
    /// nobody claimed yet is noted, for the first claim to delete.
    pub(super) fn write_refusal(&mut self, serial: u64, key: &[u8]) -> Option<String> {
        if self.is_notice(key) {
            return Some(format!("a write to '{}', a liveness notice only the server writes", lossy(key)));
        }
        if let Some(c) = self.held.get(key) {
            let peer = (c.serial != serial).then_some(c.peer)?;
            return Some(format!("a write to '{}', the liveness counter of the connection of {peer}", lossy(key)));
        }
        let parent = key.iter().rposition(|b| *b == b'/').map(|at| &key[..at]).filter(|p| is_counter(p))?;
        match self.held.get(parent) {
            Some(c) if c.serial != serial => {
                Some(format!("a write to '{}', under the liveness counter of the connection of {}", lossy(key), c.peer))
            }
            Some(_) => None,
            None => {
                let under = self.unowned.entry(parent.to_vec()).or_default();
                if !under.iter().any(|k| k == key) {
                    self.bytes += (parent.len() + key.len()) as u64 + 48;
                    under.push(key.to_vec());
                }
                None
            }
        }
    }

    /// Whether connection `serial` still holds the claim on `key`.
    pub(super) fn holds(&self, key: &[u8], serial: u64) -> bool {
        self.held.get(key).is_some_and(|c| c.serial == serial)
    }
}

/// Whether `key` ends `/alive/<digits>` (a liveness counter).
pub(super) fn is_counter(key: &[u8]) -> bool {
    let Some(at) = key.iter().rposition(|b| *b == b'/') else { return false };
    let digits = &key[at + 1..];
    !digits.is_empty() && digits.len() <= 10 && digits.iter().all(u8::is_ascii_digit) && key[..at].ends_with(b"/alive")
}

/// A key as text for a message, its first 200 bytes.
pub(super) fn lossy(k: &[u8]) -> String {
    String::from_utf8_lossy(&k[..k.len().min(200)]).into_owned()
}

/// The queues of QUEUE_PUSH and QUEUE_POP, by name (see `queues`).
#[derive(Default)]
pub(super) struct Queues {
    pub(super) map: HashMap<Vec<u8>, VecDeque<Vec<u8>>>,
}

impl Queues {
    pub(super) fn len(&self, name: &[u8]) -> usize {
        self.map.get(name).map_or(0, VecDeque::len)
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) map: HashMap<Vec<u8>, Vec<u8>>,
    /// Bytes of all keys and values in `map`, and of the queues (see `queues`).
    pub(super) bytes: u64,
    /// QUEUE_* state; LIST_KEYS and BARRIER are served there too.
    pub(super) queues: Queues,
    /// Liveness counters held by their ranks' connections, and notice keys (see `claims`).
    pub(super) claims: Claims,
    pub(super) waiters: Waiters,
    /// Key -> ids of the waiters parked on it: a WAIT under each key missing when it parked, a
    /// BARRIER arrival under its (existing) counter key (see `queues`). An ordered set: a
    /// canceled or closed waiter leaves in time logarithmic in the others, and a QUEUE_PUSH
    /// releases the oldest waiter first (ids grow with each park, see [`Waiters`]).
    pub(super) waiting: HashMap<Arc<[u8]>, BTreeSet<u64>>,
    /// Bytes charged for the parked waiters and their index.
    pub(super) wait_bytes: u64,
    /// Waiters one of whose keys was created, not yet counted (see [`EventLoop::backlogs`]).
    pub(super) woken: VecDeque<u64>,
    /// Waiters canceled or closed, not yet removed from the index (see [`EventLoop::backlogs`]).
    pub(super) doomed: Vec<u64>,
}

impl State {
    /// Whether CHECK and WAIT take `key` as present: a stored key, or a queue holding an item.
    pub(super) fn present(&self, key: &[u8]) -> bool {
        self.map.contains_key(key) || self.queues.len(key) > 0
    }

    /// Bytes the store would hold with `key` set to a value of `len` bytes.
    pub(super) fn bytes_with(&self, key: &[u8], len: usize) -> u64 {
        match self.map.get(key) {
            Some(v) => self.bytes - v.len() as u64 + len as u64,
            None => self.bytes + (key.len() + len) as u64,
        }
    }

    /// Bytes charged to the memory budget for the data and the waiters.
    pub(super) fn charged(&self) -> u64 {
        self.bytes + ENTRY_COST * self.map.len() as u64 + self.wait_bytes + self.claims.bytes
    }

    /// Set `key`. When it was missing, its waiters move to [`State::woken`], served a share per
    /// turn of the loop (those parked on an existing key, BARRIER arrivals, are released by
    /// [`EventLoop::written`]).
    pub(super) fn insert(&mut self, key: &[u8], value: Vec<u8>) {
        self.bytes = self.bytes_with(key, value.len());
        if let Some(v) = self.map.get_mut(key) {
            *v = value;
            return;
        }
        self.map.insert(key.to_vec(), value);
        let Some(ids) = self.waiting.remove(key) else { return };
        self.wait_bytes -= key.len() as u64;
        self.woken.extend(ids);
    }

    /// One of waiter `id`'s keys was created: the (connection, key count) of the waiter if that
    /// was its last missing key (it is then forgotten).
    pub(super) fn key_created(&mut self, id: u64) -> Option<(usize, usize)> {
        let w = self.waiters.get_mut(id)?;
        w.missing -= 1;
        if w.missing > 0 {
            return None;
        }
        let w = self.waiters.remove(id)?;
        self.wait_bytes -= WAITER_COST + WAIT_KEY_COST * w.keys.len() as u64;
        Some((w.conn, w.keys.len()))
    }

    pub(super) fn remove(&mut self, key: &[u8]) -> bool {
        match self.map.remove(key) {
            Some(v) => {
                self.bytes -= (key.len() + v.len()) as u64;
                true
            }
            None => false,
        }
    }

    /// Bytes parking a waiter for `missing` would charge.
    pub(super) fn park_cost(&self, missing: &[&[u8]]) -> u64 {
        let new_keys: u64 = missing.iter().filter(|k| !self.waiting.contains_key(**k)).map(|k| k.len() as u64).sum();
        WAITER_COST + WAIT_KEY_COST * missing.len() as u64 + new_keys
    }

    /// Park a waiter for `missing` keys (not empty, no duplicates); returns its id.
    pub(super) fn park(&mut self, conn: usize, missing: &[&[u8]]) -> u64 {
        let id = self.waiters.next_id();
        self.wait_bytes += self.park_cost(missing);
        let mut keys = Vec::with_capacity(missing.len());
        for k in missing {
            let shared = match self.waiting.get_key_value(*k) {
                Some((shared, _)) => shared.clone(),
                None => Arc::from(*k),
            };
            self.waiting.entry(shared.clone()).or_default().insert(id);
            keys.push(shared);
        }
        self.waiters.insert(id, Waiter { id, conn, keys, missing: missing.len() });
        id
    }

    /// Forget waiter `id` (canceled, or its connection closed), in time proportional to its keys.
    pub(super) fn unpark(&mut self, id: u64) {
        let Some(w) = self.waiters.remove(id) else { return };
        self.wait_bytes -= WAITER_COST + WAIT_KEY_COST * w.keys.len() as u64;
        // Keys created since have no set left (or a new one without this id).
        for k in w.keys {
            if let Some(ids) = self.waiting.get_mut(&k) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.waiting.remove(&k);
                    self.wait_bytes -= k.len() as u64;
                }
            }
        }
    }
}
