//! The queries torch 2.15's libuv server added after the key-value ones: QUEUE_PUSH, QUEUE_POP,
//! QUEUE_LEN, LIST_KEYS and BARRIER (docs/wire-protocol.md, "Queues, key listing, barrier").
//! Kept apart from the key-value handlers of `server.rs`, which call [`EventLoop::handle_extended`]
//! for these and [`State::present`] for CHECK and WAIT.
//!
//! Semantics (those of torch's `LibUVStoreDaemon`, checked against torch 2.15's own server):
//! - Queues are named like keys but live apart from them: a queue is not a key for GET,
//!   GETNUMKEYS, DELETE_KEY or LIST_KEYS. CHECK and WAIT take a non-empty queue for a present key,
//!   so torch's blocking `queue_pop` (WAIT on the name, then QUEUE_POP) sleeps until an item exists.
//!   (torch's WAIT on several keys counts a non-empty queue among them as missing when it parks,
//!   so only a push releases it; ours waits only for the keys that are missing.)
//! - QUEUE_PUSH appends and releases at most one WAIT parked on the name: the oldest first, each
//!   passed-over waiter counting the name as present (a waiter on several keys is released only
//!   once all are), until one has nothing left missing. Waking one per item means N blocked
//!   pops and one push give one pop an item and leave the others waiting.
//! - QUEUE_POP replies `i64` the length before the pop, then the oldest item if there was one;
//!   QUEUE_LEN replies `i64`. An emptied queue is forgotten.
//! - LIST_KEYS replies `i64 n` then n keys: every stored key as the server holds it (leading "/"
//!   of torch's client included, barrier counters and `init/` included; no queues); torch's
//!   client keeps those under its own prefix and strips it.
//! - BARRIER key, `i64 world_size`: adds one to the ASCII counter under key (creating it at 1; a
//!   value that is not an integer closes the connection, as torch's `stoll` failing does); at
//!   `count >= world_size` replies STOP_WAITING and releases every waiter parked on key (earlier
//!   arrivals, and WAITs on key); below, the client is parked on key until then, and nothing is
//!   released: not even a WAIT for the counter parked before the first arrival created it (torch
//!   writes the counter without waking anyone), which the barrier's completion releases. The counter is
//!   never reset (torch's neither): reusing a key passes at once. CANCEL_WAIT and a closed
//!   connection drop a parked barrier arrival like a parked WAIT; its count stays (as in torch).
//!   As in torch, whose server wakes every client listed under a key it writes, a SET, ADD,
//!   APPEND, successful COMPARE_SET or MULTI_SET of a counter key releases the arrivals parked on
//!   it ([`EventLoop::written`]); the arrivals themselves write the counter without that.
//!   (torch also wakes the key's waiters on a COMPARE_SET that stores nothing, even of a missing
//!   key, releasing WAITs for a key that does not exist; ours does not.)
//!
//! Queue items count towards [`super::ServerLimits::max_store_bytes`] with the queue's name and
//! [`ITEM_OVERHEAD`] bytes per item, so a flood of empty items is bounded too.

use super::{EventLoop, Next, State};
use crate::store::tcp::wire::{self, Encoder, Request};
use std::collections::{HashMap, VecDeque};

/// Bytes charged per queued item beyond its length (its slot in the queue).
pub(super) const ITEM_OVERHEAD: u64 = 32;

/// The queues, by name.
#[derive(Default)]
pub(super) struct Queues {
    map: HashMap<Vec<u8>, VecDeque<Vec<u8>>>,
}

impl Queues {
    fn len(&self, name: &[u8]) -> usize {
        self.map.get(name).map_or(0, VecDeque::len)
    }
}

impl State {
    /// Whether CHECK and WAIT take `key` as present: a stored key, or a queue holding an item.
    pub(super) fn present(&self, key: &[u8]) -> bool {
        self.map.contains_key(key) || self.queues.len(key) > 0
    }

    /// An item was pushed to queue `name`: release at most one waiter parked on it (see the module
    /// docs) and return its connection.
    fn release_one(&mut self, name: &[u8]) -> Option<usize> {
        let ids = self.waiting.get_mut(name)?;
        let mut released = None;
        let mut passed = 0;
        for id in ids.iter() {
            passed += 1;
            let Some(w) = self.waiters.get_mut(id) else { continue };
            w.missing -= 1;
            if w.missing == 0 {
                released = Some((*id, w.conn));
                break;
            }
        }
        ids.drain(..passed);
        if ids.is_empty() {
            self.waiting.remove(name);
        }
        let (id, conn) = released?;
        self.waiters.remove(&id);
        Some(conn)
    }
}

fn lossy(k: &[u8]) -> String {
    String::from_utf8_lossy(k).into_owned()
}

impl EventLoop {
    /// Serve QUEUE_PUSH, QUEUE_POP, QUEUE_LEN, LIST_KEYS or BARRIER from connection `i`.
    pub(super) fn handle_extended(&mut self, i: usize, req: Request<'_>) -> Next {
        let max_bytes = self.limits.max_store_bytes;
        match req {
            Request::QueuePush(name, item) => {
                let new_queue = !self.state.queues.map.contains_key(name);
                let add = item.len() as u64 + ITEM_OVERHEAD + if new_queue { name.len() as u64 } else { 0 };
                let total = self.state.bytes.saturating_add(add);
                if total > max_bytes {
                    return Next::Close(format!(
                        "QUEUE_PUSH to queue '{}' would make the store hold {total} bytes, over its limit of {max_bytes} bytes",
                        lossy(name)
                    ));
                }
                self.state.bytes = total;
                self.state.queues.map.entry(name.to_vec()).or_default().push_back(item.to_vec());
                if let Some(conn) = self.state.release_one(name) {
                    self.release(conn);
                }
            }
            Request::QueuePop(name) => {
                let len = self.state.queues.len(name);
                let mut msg = Encoder::default().i64(len as i64);
                if let Some(q) = self.state.queues.map.get_mut(name) {
                    if let Some(item) = q.pop_front() {
                        self.state.bytes -= item.len() as u64 + ITEM_OVERHEAD;
                        msg = msg.bytes(&item);
                    }
                    if q.is_empty() {
                        self.state.queues.map.remove(name);
                        self.state.bytes -= name.len() as u64;
                    }
                }
                self.reply(i, &msg.finish());
            }
            Request::QueueLen(name) => {
                let n = self.state.queues.len(name) as i64;
                self.reply(i, &n.to_le_bytes());
            }
            Request::ListKeys => {
                let e = Encoder::default().i64(self.state.map.len() as i64);
                let msg = self.state.map.keys().fold(e, |e, k| e.bytes(k)).finish();
                self.reply(i, &msg);
            }
            Request::Barrier(key, world_size) => return self.barrier(i, key, world_size),
            other => return Next::Close(format!("internal error: {other:?} is not a queue or barrier query")),
        }
        Next::Continue
    }

    fn barrier(&mut self, i: usize, key: &[u8], world_size: i64) -> Next {
        let cur = match self.state.map.get(key) {
            None => 0,
            Some(v) => match std::str::from_utf8(v).ok().and_then(|s| s.parse::<i64>().ok()) {
                Some(n) => n,
                None => return Next::Close(format!("BARRIER on key '{}' whose value is not an integer", lossy(key))),
            },
        };
        let Some(count) = cur.checked_add(1) else {
            return Next::Close(format!("BARRIER on key '{}' overflows its counter", lossy(key)));
        };
        let v = count.to_string().into_bytes();
        let total = self.state.bytes_with(key, v.len());
        if total > self.limits.max_store_bytes {
            return Next::Close(format!(
                "BARRIER on key '{}' would make the store hold {total} bytes, over its limit of {} bytes",
                lossy(key),
                self.limits.max_store_bytes
            ));
        }
        if count >= world_size {
            // Re-create the key so that setting it releases everything parked on it.
            self.state.remove(key);
            self.set(key, v);
            self.reply(i, &[wire::STOP_WAITING]);
        } else {
            // Not `set`: an arrival releases nothing, neither the arrivals before it nor (as in
            // torch, whose barrier writes the counter without waking anyone) the WAITs parked
            // for the counter before the first arrival: they stay listed under it until the
            // barrier completes or the key is written.
            let parked = self.state.waiting.remove(key);
            let released = self.state.insert(key, v);
            debug_assert!(released.is_empty());
            if let Some(ids) = parked {
                self.state.waiting.insert(key.to_vec(), ids);
            }
            let id = self.state.park(i, vec![key.to_vec()]);
            if let Some(c) = self.conns[i].as_mut() {
                c.waits.push(id);
            }
        }
        Next::Continue
    }

    /// Key `key` was written (it exists): release what is still parked on it, which can only be
    /// BARRIER arrivals (a WAIT is parked only under keys missing at the time, and their creation
    /// released it), as torch's server releases every client listed under a key it writes.
    pub(super) fn written(&mut self, key: &[u8]) {
        let Some(ids) = self.state.waiting.remove(key) else { return };
        for id in ids {
            let Some(w) = self.state.waiters.get_mut(&id) else { continue };
            w.missing -= 1;
            if w.missing == 0 {
                let conn = w.conn;
                self.state.waiters.remove(&id);
                self.release(conn);
            }
        }
    }

    /// Answer STOP_WAITING to connection `conn`, whose waiter was released.
    fn release(&mut self, conn: usize) {
        if let Some(c) = self.conns[conn].as_mut() {
            let state = &self.state;
            c.waits.retain(|id| state.waiters.contains_key(id));
        }
        self.reply(conn, &[wire::STOP_WAITING]);
    }
}
