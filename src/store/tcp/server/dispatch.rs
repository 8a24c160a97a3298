//! The request dispatch: one arm per query, each calling the store's semantics.

use super::event_loop::{Conn, EventLoop};
use super::{Next, BACKLOG_SHARE, ENTRY_COST};
use crate::store::tcp::wire::{self, Request};

impl EventLoop {
    /// Serve one request of connection `i`.
    pub(super) fn handle(&mut self, i: usize, req: Request<'_>) -> Next {
        let max_bytes = self.limits.max_store_bytes;
        let over = |what: &str, key: &[u8], total: u64| {
            Next::Close(format!(
                "{what} to key '{}' would make the store hold {total} bytes, over its limit of {max_bytes} bytes",
                String::from_utf8_lossy(key)
            ))
        };
        if let Some(why) = self.claim_refusal(i, &req) {
            return Next::Close(why);
        }
        match req {
            Request::Validate(m) if m == wire::VALIDATE_MAGIC => {}
            Request::Validate(m) => return Next::Close(format!("bad VALIDATE magic {m:#x}")),
            Request::Ping(nonce) => self.reply(i, &nonce.to_le_bytes()),
            Request::Set(k, v) => {
                let total = self.state.bytes_with(k, v.len());
                if total > max_bytes {
                    return over("SET", k, total);
                }
                if let Some(why) = self.growth_refusal(i, total) {
                    return Next::Close(why);
                }
                self.set(k, v.to_vec());
            }
            Request::CompareSet(k, expected, desired) => {
                let now = match self.state.map.get(k) {
                    None if expected.is_empty() => None,
                    None => Some(expected.to_vec()),
                    Some(cur) if cur.as_slice() == expected => None,
                    Some(cur) => Some(cur.clone()),
                };
                let now = match now {
                    Some(v) => v,
                    None => {
                        let total = self.state.bytes_with(k, desired.len());
                        if total > max_bytes {
                            return over("COMPARE_SET", k, total);
                        }
                        if let Some(why) = self.growth_refusal(i, total) {
                            return Next::Close(why);
                        }
                        self.set(k, desired.to_vec());
                        desired.to_vec()
                    }
                };
                return self.reply_with(i, 8 + now.len(), false, |_, w| put_value(w, Some(&now)));
            }
            Request::Get(k) => {
                let len = 8 + self.state.map.get(k).map_or(0, Vec::len);
                return self.reply_with(i, len, true, |s, w| put_value(w, s.map.get(k)));
            }
            Request::Add(k, delta) => {
                let cur = match self.state.map.get(k) {
                    None => 0,
                    // Not a counter: no error reply exists; close the connection.
                    Some(v) => match parse_counter(v) {
                        Some(n) => n,
                        None => {
                            return Next::Close(format!(
                                "ADD to key '{}' whose value is not an integer",
                                String::from_utf8_lossy(k)
                            ))
                        }
                    },
                };
                let Some(now) = cur.checked_add(delta) else {
                    return Next::Close(format!("ADD {delta} to key '{}' overflows", String::from_utf8_lossy(k)));
                };
                let v = now.to_string().into_bytes();
                let total = self.state.bytes_with(k, v.len());
                if total > max_bytes {
                    return over("ADD", k, total);
                }
                if let Some(why) = self.growth_refusal(i, total) {
                    return Next::Close(why);
                }
                self.set(k, v);
                self.reply(i, &now.to_le_bytes());
            }
            Request::Check(keys) => {
                let ready = keys.iter().all(|k| self.state.present(k));
                self.reply(i, &[if ready { wire::CHECK_READY } else { wire::CHECK_NOT_READY }]);
            }
            Request::Wait(keys) => {
                let mut missing: Vec<&[u8]> = keys.into_iter().filter(|k| !self.state.present(k)).collect();
                missing.sort();
                missing.dedup();
                if missing.is_empty() {
                    self.reply(i, &[wire::STOP_WAITING]);
                } else {
                    let parked = self.conns[i].as_ref().map_or(0, |c| c.wait_keys);
                    let max = self.limits.max_parked_keys;
                    if parked + missing.len() > max {
                        return Next::Close(format!(
                            "a WAIT for {} missing keys on top of {parked} parked, over the limit of {max} parked WAIT \
                             keys per connection",
                            missing.len()
                        ));
                    }
                    if let Some(why) = self.refusal(i, self.state.park_cost(&missing) as usize, false) {
                        return Next::Close(why);
                    }
                    let id = self.state.park(i, &missing);
                    if let Some(c) = self.conns[i].as_mut() {
                        c.waits.insert(id);
                        c.wait_keys += missing.len();
                    }
                }
            }
            Request::CancelWait => {
                // In order on this connection: a STOP_WAITING of a wait that fired is queued before.
                let waits = self.conns[i].as_mut().map(|c| {
                    c.wait_keys = 0;
                    std::mem::take(&mut c.waits)
                });
                // Removed from the index a share per turn; a wake-up of theirs is dropped as they
                // are no longer among the connection's waits.
                self.state.doomed.extend(waits.unwrap_or_default());
                self.reply(i, &[wire::WAIT_CANCELED]);
            }
            Request::GetNumKeys => {
                let n = self.state.map.len() as i64;
                self.reply(i, &n.to_le_bytes());
            }
            Request::DeleteKey(k) => {
                let n = i64::from(self.state.remove(k));
                self.reply(i, &n.to_le_bytes());
            }
            Request::Append(k, v) => {
                if let Err(why) = self.append(k, v, i) {
                    return Next::Close(why);
                }
            }
            Request::OnClose(k, _) => {
                let was = self.conns[i].as_ref().map_or(0, Conn::on_close_len);
                if k.len() > was {
                    if let Some(why) = self.refusal(i, k.len() - was, false) {
                        return Next::Close(why);
                    }
                }
                return self.arm_notice(i, k);
            }
            Request::Claim(k, secret) => return self.claim(i, k, secret),
            Request::Notice(k, v) => return self.notice(i, k, v),
            Request::MultiGet(keys) => {
                // The reply's size first: one too big is refused before anything is built.
                let len =
                    keys.iter().map(|k| 8 + self.state.map.get(*k).map_or(0, Vec::len)).fold(0, usize::saturating_add);
                return self.reply_with(i, len, true, |s, w| keys.iter().for_each(|k| put_value(w, s.map.get(*k))));
            }
            Request::MultiSet(items) => {
                // All or nothing: check the bytes the whole request would leave first.
                let mut total = self.state.bytes;
                for (k, v) in &items {
                    total = total.saturating_add((k.len() + v.len()) as u64);
                }
                if total > max_bytes {
                    let k = items.first().map_or(&[][..], |x| x.0);
                    return over("MULTI_SET", k, total);
                }
                if let Some(why) = self.growth_refusal(i, total) {
                    return Next::Close(why);
                }
                for (k, v) in items {
                    self.set(k, v.to_vec());
                }
            }
            req @ (Request::QueuePush(..)
            | Request::QueuePop(_)
            | Request::QueueLen(_)
            | Request::ListKeys
            | Request::Barrier(..)) => return self.handle_extended(i, req),
        }
        Next::Continue
    }

    /// Append `v` to the value of `k` (set it when missing), within the limits; the refusal
    /// otherwise. `i`: the connection asking, whose growth the memory budget must allow.
    pub(super) fn append(&mut self, k: &[u8], v: &[u8], i: usize) -> Result<(), String> {
        let cur = self.state.map.get(k).map_or(0, Vec::len);
        let len = cur as u64 + v.len() as u64;
        if len > wire::MAX_VALUE_LEN {
            return Err(format!(
                "APPEND of {} bytes to key '{}' would grow its value to {len} bytes, over the limit of {} bytes",
                v.len(),
                String::from_utf8_lossy(k),
                wire::MAX_VALUE_LEN
            ));
        }
        let total = self.state.bytes_with(k, len as usize);
        if total > self.limits.max_store_bytes {
            return Err(format!(
                "APPEND to key '{}' would make the store hold {total} bytes, over its limit of {} bytes",
                String::from_utf8_lossy(k),
                self.limits.max_store_bytes
            ));
        }
        if let Some(why) = self.growth_refusal(i, total) {
            return Err(why);
        }
        match self.state.map.get_mut(k) {
            Some(cur) => {
                cur.extend_from_slice(v);
                self.state.bytes += v.len() as u64;
                self.written(k);
            }
            None => self.set(k, v.to_vec()),
        }
        Ok(())
    }

    /// Set a key; the waiters it releases are answered by [`EventLoop::backlogs`] (WAITs for it
    /// when it was missing) or by [`EventLoop::written`] (BARRIER arrivals parked on it).
    pub(super) fn set(&mut self, k: &[u8], v: Vec<u8>) {
        self.state.insert(k, v);
        self.written(k);
    }

    /// A share of the waiters woken (answered when their last key was created) and of those
    /// canceled or closed (removed from the index), so that one SET releasing 250,000 waiters
    /// or one close of a connection with as many stalls no other client for long.
    pub(super) fn backlogs(&mut self) {
        for _ in 0..BACKLOG_SHARE {
            let Some(id) = self.state.woken.pop_front() else { break };
            let Some((conn, keys)) = self.state.key_created(id) else { continue };
            self.wake(conn, id, keys);
        }
        for _ in 0..BACKLOG_SHARE {
            let Some(id) = self.state.doomed.pop() else { break };
            self.state.unpark(id);
        }
    }

    /// Answer STOP_WAITING to connection `conn` for its waiter `id` (of `keys` keys), released.
    pub(super) fn wake(&mut self, conn: usize, id: u64, keys: usize) {
        let Some(c) = self.conns.get_mut(conn).and_then(Option::as_mut) else { return };
        // Not among the connection's waits: canceled (or its connection closed, the slot
        // reused) since; ids are never reused.
        if c.waits.remove(&id) {
            c.wait_keys -= keys;
            // One byte, never refused: a connection has at most `max_parked_keys` pending.
            self.reply(conn, &[wire::STOP_WAITING]);
        }
    }

    /// Why storing data that leaves the store holding `total` bytes of keys and values is
    /// refused by the memory budget, if it is.
    pub(super) fn growth_refusal(&self, i: usize, total: u64) -> Option<String> {
        let growth = total.saturating_sub(self.state.bytes) + ENTRY_COST;
        self.refusal(i, growth as usize, false)
    }
}

pub(super) fn parse_counter(v: &[u8]) -> Option<i64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// A value as the protocol writes it (`u64` length + bytes; a missing key reads as empty).
pub(super) fn put_value(w: &mut Vec<u8>, v: Option<&Vec<u8>>) {
    let v = v.map_or(&[][..], |v| v.as_slice());
    w.extend_from_slice(&(v.len() as u64).to_le_bytes());
    w.extend_from_slice(v);
}
