//! The queries torch 2.15's libuv server added after the key-value ones: QUEUE_PUSH, QUEUE_POP,
//! QUEUE_LEN, LIST_KEYS and BARRIER (docs/wire-protocol.md, "Queues, key listing, barrier").
//! Kept apart from the key-value handlers of `dispatch.rs`, which call [`EventLoop::handle_extended`]
//! for these; their data (`state::Queues`) and what CHECK and WAIT take as
//! present (`State::present`) are in `state.rs`.
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
//!   A parked arrival counts towards the connection's parked keys
//!   ([`super::ServerLimits::max_parked_keys`]) and the memory budget like a WAIT for one key;
//!   released arrivals are answered by [`EventLoop::backlogs`], a share per turn, like WAITs.
//!
//! Queue items count towards [`super::ServerLimits::max_store_bytes`] and the memory budget with
//! the queue's name and [`ITEM_OVERHEAD`] bytes per item, so a flood of empty items is bounded
//! too. A QUEUE_POP or LIST_KEYS reply is sized before it is built, within the reply limits.

use super::event_loop::{Conn, EventLoop};
use super::Next;
use crate::store::tcp::wire::{self, Request};

/// Bytes charged per queued item beyond its length (its slot in the queue).
pub(super) const ITEM_OVERHEAD: u64 = 32;

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
                // The budget counts a stored key's table entry; an item's slot is ITEM_OVERHEAD.
                if let Some(why) = self.growth_refusal(i, total) {
                    return Next::Close(why);
                }
                self.state.bytes = total;
                self.state.queues.map.entry(name.to_vec()).or_default().push_back(item.to_vec());
                self.release_one(name);
            }
            Request::QueuePop(name) => {
                let len = self.state.queues.len(name);
                let item_len = self.state.queues.map.get(name).and_then(|q| q.front()).map(|v| 8 + v.len());
                // Sized first: a pop that cannot be answered takes nothing.
                if let Some(why) = self.refusal(i, 8 + item_len.unwrap_or(0), true) {
                    return Next::Close(why);
                }
                let mut msg = Vec::with_capacity(8 + item_len.unwrap_or(0));
                msg.extend_from_slice(&(len as i64).to_le_bytes());
                if let Some(q) = self.state.queues.map.get_mut(name) {
                    if let Some(item) = q.pop_front() {
                        self.state.bytes -= item.len() as u64 + ITEM_OVERHEAD;
                        msg.extend_from_slice(&(item.len() as u64).to_le_bytes());
                        msg.extend_from_slice(&item);
                    }
                    if q.is_empty() {
                        self.state.queues.map.remove(name);
                        self.state.bytes -= name.len() as u64;
                    }
                }
                self.reply(i, &msg);
                self.account(i);
            }
            Request::QueueLen(name) => {
                let n = self.state.queues.len(name) as i64;
                self.reply(i, &n.to_le_bytes());
            }
            Request::ListKeys => {
                // Sized before it is built, like a MULTI_GET's: one too big is refused.
                let len = self.state.map.keys().map(|k| 8 + k.len()).fold(8, usize::saturating_add);
                return self.reply_with(i, len, true, |s, w| {
                    w.extend_from_slice(&(s.map.len() as i64).to_le_bytes());
                    for k in s.map.keys() {
                        w.extend_from_slice(&(k.len() as u64).to_le_bytes());
                        w.extend_from_slice(k);
                    }
                });
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
        if let Some(why) = self.growth_refusal(i, total) {
            return Next::Close(why);
        }
        if count >= world_size {
            // Writing the counter releases everything parked on it (see `written`).
            self.set(key, v);
            self.reply(i, &[wire::STOP_WAITING]);
            return Next::Continue;
        }
        // Parked like a WAIT for one key, within the same limits.
        let parked = self.conns[i].as_ref().map_or(0, |c| c.wait_keys);
        let max = self.limits.max_parked_keys;
        if parked + 1 > max {
            return Next::Close(format!(
                "a BARRIER arrival on key '{}' on top of {parked} parked WAIT keys, over the limit of {max} parked \
                 WAIT keys per connection",
                lossy(key)
            ));
        }
        if let Some(why) = self.refusal(i, self.state.park_cost(&[key]) as usize, false) {
            return Next::Close(why);
        }
        // Not `set`: an arrival releases nothing, neither the arrivals before it nor (as in
        // torch, whose barrier writes the counter without waking anyone) the WAITs parked for
        // the counter before the first arrival: they stay listed under it until the barrier
        // completes or the key is written.
        let listed = self.state.waiting.remove_entry(key);
        self.state.insert(key, v);
        if let Some((k, ids)) = listed {
            self.state.waiting.insert(k, ids);
        }
        let id = self.state.park(i, &[key]);
        if let Some(c) = self.conns[i].as_mut() {
            c.waits.insert(id);
            c.wait_keys += 1;
        }
        Next::Continue
    }

    /// Key `key` was written (it exists): release what is still parked on it, which can only be
    /// BARRIER arrivals and WAITs parked before the counter's first arrival created it (a WAIT is
    /// parked only under keys missing at the time, and their creation released it), as torch's
    /// server releases every client listed under a key it writes. They are answered by
    /// [`EventLoop::backlogs`], a share per turn.
    pub(super) fn written(&mut self, key: &[u8]) {
        let Some(ids) = self.state.waiting.remove(key) else { return };
        self.state.wait_bytes -= key.len() as u64;
        self.state.woken.extend(ids);
    }

    /// An item was pushed to queue `name`: release at most one waiter parked on it (see the
    /// module docs), the oldest first. Waiters canceled or closed but not yet removed from the
    /// index (see `State::doomed`) are passed over without taking the wake-up.
    fn release_one(&mut self, name: &[u8]) {
        loop {
            let Some(ids) = self.state.waiting.get_mut(name) else { return };
            let id = ids.pop_first();
            if ids.is_empty() {
                self.state.waiting.remove(name);
                self.state.wait_bytes -= name.len() as u64;
            }
            let Some(id) = id else { return };
            let Some(conn) = self.state.waiters.get_mut(id).map(|w| w.conn) else { continue };
            let live = self.conns.get(conn).and_then(Option::as_ref).is_some_and(|c: &Conn| c.waits.contains(&id));
            if !live {
                continue;
            }
            if let Some((conn, keys)) = self.state.key_created(id) {
                self.wake(conn, id, keys);
                return;
            }
        }
    }
}
