//! The server's part of liveness (`runtime::liveness`, docs/faults.md): liveness counters that
//! only their rank's own connection may write, and numbered notices that wake whoever watches.
//!
//! - CLAIM `key, secret` ([`wire::Query::Claim`]): a connection claims a liveness counter, a key
//!   ending `/alive/<rank>` (one claim per connection). The first claim records the secret (and
//!   deletes a value stored under the key before: nobody owned it); a claim with the same secret
//!   moves it to the new connection (its rank reconnected); another secret is refused, naming the
//!   holder's address. Claims outlive their connections (so that a dead rank's counter cannot be
//!   taken over) and are bounded by the memory budget like data.
//! - Only the connection holding a claim writes its key and the keys under it (`<key>/...`: the
//!   rank's blame record): SET, COMPARE_SET, ADD (but ADD 0, a read), APPEND, MULTI_SET,
//!   DELETE_KEY or BARRIER of one from another connection is refused (that connection is closed).
//!   The first claim of a key also deletes what was written under it before (nobody owned it).
//! - Notices: ON_CLOSE `key` (a key ending `/alive/events`) by a connection holding a claim
//!   arms one; when the connection closes from the client's side (its process exited or was
//!   killed) while it still holds its claim, the server raises it. NOTICE `key, value` raises one
//!   now: a question (`?` first) by a claim's connection, or an event any connection posts to the
//!   job's bulletin (`!` first; `runtime::faults::bulletin`). Raising adds one to the counter
//!   `key` and sets `key/<n>` to the claimed key (or the post), so a watcher parks one WAIT on
//!   `key/<n+1>` and wakes on the next notice. No client writes a notice key or its entries: a
//!   close notice names a rank only when the rank's own connection raised it.

use super::event_loop::EventLoop;
use super::state::{is_counter, lossy, Claim};
use super::Next;
use crate::lock::Unpoisoned;
use crate::store::tcp::wire::{self, Request};

/// Most bytes of a claim's secret.
const MAX_SECRET: usize = 64;
/// Bytes charged to the memory budget per claim besides its key and secret.
const CLAIM_COST: u64 = 96;

/// Whether `key` ends `/alive/events`.
fn is_notice_key(key: &[u8]) -> bool {
    key.ends_with(b"/alive/events")
}

impl EventLoop {
    /// Why request `req` of connection `i` is refused for a key it may not write, if it is.
    pub(super) fn claim_refusal(&mut self, i: usize, req: &Request<'_>) -> Option<String> {
        let serial = self.conns.get(i).and_then(Option::as_ref)?.serial;
        let claims = &mut self.state.claims;
        let mut one = |k: &[u8]| claims.write_refusal(serial, k);
        match req {
            Request::Set(k, _) | Request::CompareSet(k, ..) | Request::Append(k, _) | Request::DeleteKey(k) => one(k),
            Request::Barrier(k, _) => one(k),
            // ADD 0 reads a counter; creating a missing one as 0 is harmless (a claim deletes it;
            // a notice counts on from it).
            Request::Add(k, delta) if *delta != 0 => one(k),
            Request::MultiSet(items) => items.iter().find_map(|(k, _)| one(k)),
            _ => None,
        }
    }

    /// CLAIM `key` with `secret` for connection `i` (see the module docs).
    pub(super) fn claim(&mut self, i: usize, key: &[u8], secret: &[u8]) -> Next {
        if !is_counter(key) || secret.is_empty() || secret.len() > MAX_SECRET {
            return Next::Close(format!(
                "a CLAIM of '{}' with a secret of {} bytes (claims are of keys ending /alive/<rank>, with 1 to \
                 {MAX_SECRET} bytes of secret)",
                lossy(key),
                secret.len()
            ));
        }
        let Some((serial, peer, held)) =
            self.conns.get(i).and_then(Option::as_ref).map(|c| (c.serial, c.peer, c.claim.clone()))
        else {
            return Next::Continue;
        };
        if held.as_deref().is_some_and(|h| h != key) {
            return Next::Close(format!("a second CLAIM ('{}') on one connection", lossy(key)));
        }
        match self.state.claims.held.get_mut(key) {
            Some(c) if c.secret == secret => {
                c.serial = serial;
                c.peer = peer;
            }
            Some(c) => {
                let holder = c.peer.to_string();
                self.log.log("claim", || {
                    format!("refused client {peer} the liveness counter '{}' held by {holder}", lossy(key))
                });
                let mut reply = vec![wire::CLAIM_TAKEN];
                reply.extend_from_slice(&(holder.len() as u64).to_le_bytes());
                reply.extend_from_slice(holder.as_bytes());
                self.reply(i, &reply);
                return Next::Continue;
            }
            None => {
                let cost = CLAIM_COST + (key.len() + secret.len()) as u64;
                if let Some(why) = self.refusal(i, cost as usize, false) {
                    return Next::Close(why);
                }
                self.state.remove(key);
                // What others wrote under it before anyone owned it goes too.
                for k in self.state.claims.unowned.remove(key).unwrap_or_default() {
                    self.state.claims.bytes = self.state.claims.bytes.saturating_sub((key.len() + k.len()) as u64 + 48);
                    self.state.remove(&k);
                }
                self.state.claims.bytes += cost;
                self.state.claims.held.insert(key.to_vec(), Claim { secret: secret.to_vec(), serial, peer });
            }
        }
        if let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) {
            c.claim = Some(key.to_vec());
        }
        // A rank's own counter: its connection learns the job's secret (stored under no key).
        let secret = self.auth.as_ref().and_then(|a| a.session_secret()).filter(|_| self.is_rank_counter(key));
        match secret.map(|s| s.bytes().to_vec()) {
            Some(s) => {
                let mut reply = vec![wire::CLAIM_SESSION];
                reply.extend_from_slice(&(s.len() as u64).to_le_bytes());
                reply.extend_from_slice(&s);
                self.reply(i, &reply);
            }
            None => self.reply(i, &[wire::CLAIM_OK]),
        }
        Next::Continue
    }

    /// Whether `key` is the liveness counter of one of the job's ranks (see
    /// `TcpStoreServer::expect_ranks`); none when the server was not told the job's ranks.
    fn rank_counter(&self, key: &[u8]) -> Option<bool> {
        let ranks = self.ranks.locked();
        let (prefix, world) = ranks.as_ref()?;
        let Some(digits) = key.strip_prefix(prefix.as_slice()) else { return Some(false) };
        // Canonical digits only: `07` is another key than rank 7's, and gets no secret.
        let rank = std::str::from_utf8(digits).ok().and_then(|d| d.parse::<u32>().ok());
        Some(rank.is_some_and(|r| r < *world && r.to_string().as_bytes() == digits))
    }

    /// Whether `key` is the liveness counter of one of the job's ranks (told by the host).
    fn is_rank_counter(&self, key: &[u8]) -> bool {
        self.rank_counter(key) == Some(true)
    }

    /// Whether connection `i` is one of the job's ranks' own as far as the server can tell: it
    /// proved the job's secret (or the token) in the exchange, or it holds the claim of one of
    /// the job's rank counters (of any liveness counter on a server not told the job's ranks).
    /// Every other connection proved nothing: it is closed once the init is over
    /// ([`EventLoop::require_later_token`]) and evictable at the connection cap, whatever it
    /// parked ([`EventLoop::evict_idle`]).
    pub(super) fn job_own(&self, i: usize) -> bool {
        let Some(c) = self.conns.get(i).and_then(Option::as_ref) else { return false };
        let claimed = c.claim.as_deref().filter(|k| self.state.claims.holds(k, c.serial));
        c.proven || claimed.is_some_and(|k| self.rank_counter(k) != Some(false))
    }

    /// ON_CLOSE `key` (empty: withdraw) for connection `i`.
    pub(super) fn arm_notice(&mut self, i: usize, key: &[u8]) -> Next {
        let Some(c) = self.conns.get_mut(i).and_then(Option::as_mut) else { return Next::Continue };
        if key.is_empty() {
            c.on_close = None;
            return Next::Continue;
        }
        if c.claim.is_none() || !is_notice_key(key) {
            return Next::Close(format!(
                "an ON_CLOSE of '{}' (a notice needs a claimed liveness counter and a key ending /alive/events)",
                lossy(key)
            ));
        }
        c.on_close = Some(key.to_vec());
        if self.state.claims.notice_keys.insert(key.to_vec()) {
            self.state.claims.bytes += CLAIM_COST + key.len() as u64;
        }
        self.account(i);
        Next::Continue
    }

    /// NOTICE `key, value` by connection `i`, raised now: a question (empty `value`; needs a
    /// claim), or an event posted to the bulletin (`!value`).
    pub(super) fn notice(&mut self, i: usize, key: &[u8], value: &[u8]) -> Next {
        let claim = self.conns.get(i).and_then(Option::as_ref).and_then(|c| c.claim.clone());
        let raised = match claim {
            _ if !is_notice_key(key) => None,
            _ if !value.is_empty() => Some([b"!", value].concat()),
            Some(claim) => Some([b"?", &claim[..]].concat()),
            None => None,
        };
        let Some(raised) = raised else {
            return Next::Close(format!(
                "a NOTICE of '{}' (a notice goes on a key ending /alive/events; a question needs a claimed \
                 liveness counter)",
                lossy(key)
            ));
        };
        if let Some(why) = self.refusal(i, raised.len() + key.len() + 24, false) {
            return Next::Close(why);
        }
        if self.state.claims.notice_keys.insert(key.to_vec()) {
            self.state.claims.bytes += CLAIM_COST + key.len() as u64;
        }
        self.raise(key, raised);
        Next::Continue
    }

    /// A connection whose client went (serial `serial`, claim `claim`, notice `notice`): raise its
    /// notice if it still holds its claim (a rank that reconnected moved it: nothing to tell).
    pub(super) fn client_gone(&mut self, serial: u64, claim: Option<Vec<u8>>, notice: Option<Vec<u8>>) {
        let (Some(claim), Some(notice)) = (claim, notice) else { return };
        if self.state.claims.holds(&claim, serial) {
            self.raise(&notice, claim);
        }
    }

    /// Number the next notice on `key` and store `value` under `key/<n>`, waking its watchers.
    /// A few bytes per notice, at most one per connection's close or per question.
    fn raise(&mut self, key: &[u8], value: Vec<u8>) {
        let n = self.state.map.get(key).and_then(|v| std::str::from_utf8(v).ok()?.parse::<u64>().ok()).unwrap_or(0) + 1;
        let mut entry = key.to_vec();
        entry.push(b'/');
        entry.extend_from_slice(n.to_string().as_bytes());
        self.set(&entry, value);
        self.set(key, n.to_string().into_bytes());
    }
}
