//! The rendezvous through PMIx ([`super::env::Rendezvous::Pmix`]): rank 0 binds its store on an
//! ephemeral port and publishes where it listens, with the job's secret, through PMIx (put,
//! commit); one PMIx fence; every other rank reads rank 0's record. No port is derived, so two
//! jobs on one node never meet at the same one, and the secret never crosses the store.
//!
//! The record, under the key `mcore_init.store:<attempt>` of rank 0: `<port> <address>\n` and
//! then the secret's bytes (none when the user's own token, MCORE_STORE_TOKEN, is in force).

use super::env::LaunchEnv;
use crate::backend::pmix::{PmixClient, PmixError};
use crate::runtime::error::RuntimeError;
use crate::store::{StoreError, StoreToken};
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
    let source = if e.timed_out {
        StoreError::Timeout { keys: vec![format!("<{e}>")], waited }
    } else {
        StoreError::Io(e.message)
    };
    RuntimeError::StoreConnect { what, source }
}

fn client(env: &LaunchEnv) -> Result<&'static PmixClient, RuntimeError> {
    PmixClient::get().map_err(|e| failed(env, PmixError { message: e, timed_out: false }, Duration::ZERO))
}

/// Rank 0: publish `record` for `attempt`, then meet the others at the fence (until `deadline`).
pub(crate) fn publish(
    env: &LaunchEnv,
    attempt: &str,
    record: &StoreRecord,
    deadline: Instant,
) -> Result<(), RuntimeError> {
    let start = Instant::now();
    let pmix = client(env)?;
    pmix.publish(&key(attempt), &record.encode()).map_err(|e| failed(env, e, start.elapsed()))?;
    pmix.fence(deadline.saturating_duration_since(Instant::now())).map_err(|e| failed(env, e, start.elapsed()))
}

/// Every other rank: the fence, then rank 0's record for `attempt` (until `deadline`).
pub(crate) fn find(env: &LaunchEnv, attempt: &str, deadline: Instant) -> Result<StoreRecord, RuntimeError> {
    let start = Instant::now();
    let pmix = client(env)?;
    let left = || deadline.saturating_duration_since(Instant::now());
    pmix.fence(left()).map_err(|e| failed(env, e, start.elapsed()))?;
    let bytes = pmix.fetch(0, &key(attempt), left()).map_err(|e| failed(env, e, start.elapsed()))?;
    StoreRecord::decode(&bytes).ok_or_else(|| {
        let head = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]).into_owned();
        let e = PmixError {
            message: format!("rank 0's record {} is not `<port> <address>`", crate::quote::quoted(&head)),
            timed_out: false,
        };
        failed(env, e, start.elapsed())
    })
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
}
