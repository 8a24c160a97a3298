//! The store's optional shared secret (`MCORE_STORE_TOKEN` / `MCORE_STORE_TOKEN_FILE`): a server
//! given a [`StoreToken`] serves a connection only after its client proved it holds the same
//! token, before any key is read or written. Challenge-response; the token never crosses the wire.
//!
//! The exchange, before anything of torch's protocol (whose first request is VALIDATE, query
//! type 0, so that no torch client can start it by accident):
//!
//! 1. client → server: [`HELLO_TYPE`] (`0xA5`, no query type of torch's), the magic
//!    [`HELLO_MAGIC`] (`u32` LE) and the version [`VERSION`] (`u8`): 6 bytes.
//! 2. server → client: [`AUTH_CHALLENGE`] and a 32-byte nonce, fresh per connection (ChaCha20
//!    seeded from the OS). A server without a token answers [`AUTH_NOT_WANTED`] instead and
//!    closes the connection: a client configured with a token fails at once, not at its timeout.
//! 3. client → server: HMAC-SHA256(token, [`LABEL`] ‖ nonce), 32 bytes.
//! 4. server → client: [`AUTH_OK`], then the connection is an ordinary TCPStore connection
//!    (VALIDATE, PING, ...); or [`AUTH_REFUSED`] and the server closes it.
//!
//! Any other first byte (a torch client's VALIDATE, our client without a token) is answered with
//! the 4 bytes [`AUTH_REQUIRED`] and the server closes its side: our client reads them as its
//! PING reply and reports that the store wants a token; torch's client fails its PING. Either
//! refusal is logged once per second on the server's stderr, naming the client's address.
//!
//! What this does not do: encrypt or sign the requests after the exchange (someone who can
//! inject into an authenticated TCP connection is not stopped), or prove the server's identity
//! to the client.

use crate::lock::Unpoisoned;
use hmac::{Hmac, Mac};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use sha2::Sha256;
use std::fmt;
use std::sync::{Arc, Mutex};

/// First byte of the client's hello (torch's query types are 0-18).
pub const HELLO_TYPE: u8 = 0xA5;
/// Magic of the hello, "MCAU" read as a little-endian `u32`.
pub const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"MCAU");
/// Version of the exchange.
pub const VERSION: u8 = 1;
/// Length of the server's nonce and of the client's proof.
pub const NONCE_LEN: usize = 32;
/// What the HMAC covers before the nonce (binds the proof to this protocol and version).
pub const LABEL: &[u8] = b"mcore_init store auth v1\0";
/// The server accepted the proof.
pub const AUTH_OK: u8 = 1;
/// The server refused the proof (then closes the connection).
pub const AUTH_REFUSED: u8 = 0;
/// The server's answer to the hello: a nonce follows.
pub const AUTH_CHALLENGE: u8 = 2;
/// The answer of a server without a token to a hello (then it closes the connection).
pub const AUTH_NOT_WANTED: u8 = 3;
/// Sent, as the only 4 bytes, to a client that did not start with the hello: "MCAR".
pub const AUTH_REQUIRED: u32 = u32::from_le_bytes(*b"MCAR");
/// Sent instead of [`AUTH_REQUIRED`] by a store whose job's initialization is over and that now
/// serves only the job's own ranks (the job's secret, not a user's token): "MCAS". Our client
/// takes it for a store that may be going away (the previous initialization's, in a destroy and
/// re-init) and retries until its deadline.
pub const AUTH_CLOSED: u32 = u32::from_le_bytes(*b"MCAS");
/// Most bytes of the job id that follows [`AUTH_CLOSED`] (a `u64` length, then the bytes).
pub const MAX_JOB_LABEL: usize = 256;
/// Environment variable holding the token itself.
pub const TOKEN_ENV: &str = "MCORE_STORE_TOKEN";
/// Environment variable naming a file whose content (less one trailing newline) is the token.
pub const TOKEN_FILE_ENV: &str = "MCORE_STORE_TOKEN_FILE";
/// Most bytes of the file named by [`TOKEN_FILE_ENV`]: a regular file, read by
/// [`crate::input_file::read_bounded`] (a FIFO, a device or a larger file is an error at once).
pub const MAX_TOKEN_BYTES: usize = 4096;

/// A shared secret; its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreToken(Arc<[u8]>);

impl fmt::Debug for StoreToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreToken(<{} bytes>)", self.0.len())
    }
}

impl StoreToken {
    /// A token of these bytes; `None` when empty (an empty secret protects nothing).
    pub fn new(secret: &[u8]) -> Option<StoreToken> {
        (!secret.is_empty()).then(|| StoreToken(secret.into()))
    }

    /// The token from [`TOKEN_ENV`], else from the file named by [`TOKEN_FILE_ENV`]; `Ok(None)`
    /// when neither is set. Set but empty, both set, or a file that is unreadable, not a regular
    /// file or over [`MAX_TOKEN_BYTES`] is an error naming the variable.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<StoreToken>, String> {
        let direct = get(TOKEN_ENV);
        let file = get(TOKEN_FILE_ENV);
        match (direct, file) {
            (Some(_), Some(_)) => Err(format!("both {TOKEN_ENV} and {TOKEN_FILE_ENV} are set: set one")),
            (Some(t), None) => StoreToken::new(t.as_bytes())
                .map(Some)
                .ok_or_else(|| format!("{TOKEN_ENV} is set but empty: unset it or give the shared secret")),
            (None, Some(path)) => {
                let what = format!("{TOKEN_FILE_ENV}={}", crate::quote::quoted(&path));
                let bytes = crate::input_file::read_bounded(std::path::Path::new(&path), &what, MAX_TOKEN_BYTES)?;
                let mut s = bytes.as_slice();
                s = s.strip_suffix(b"\n").unwrap_or(s);
                s = s.strip_suffix(b"\r").unwrap_or(s);
                StoreToken::new(s).map(Some).ok_or_else(|| {
                    format!("{TOKEN_FILE_ENV}={} names an empty file: no secret to use", crate::quote::quoted(&path))
                })
            }
            (None, None) => Ok(None),
        }
    }

    /// A fresh random token of 32 bytes (from `/dev/urandom`): the secret a job's own ranks
    /// share once its initialization is over (see [`TokenCell`]).
    pub fn random() -> std::io::Result<StoreToken> {
        use std::io::Read;
        let mut secret = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut secret)?;
        Ok(StoreToken(secret.as_slice().into()))
    }

    /// The secret itself (to hand it to the job's own ranks; never logged).
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The proof for `nonce`: HMAC-SHA256(token, LABEL ‖ nonce).
    pub fn prove(&self, nonce: &[u8]) -> [u8; NONCE_LEN] {
        let mut mac = self.mac();
        mac.update(LABEL);
        mac.update(nonce);
        mac.finalize().into_bytes().into()
    }

    /// Whether `proof` is the proof for `nonce` (compared in constant time).
    pub fn verify(&self, nonce: &[u8], proof: &[u8]) -> bool {
        let mut mac = self.mac();
        mac.update(LABEL);
        mac.update(nonce);
        mac.verify_slice(proof).is_ok()
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC accepts any key length")
    }
}

/// The token a client's new connections prove, which can be set after the client was made: the
/// runtime's connections share one, so that once a job's initialization is over and its store
/// serves only holders of the job's own secret, every later connection (a pool growing, a
/// heartbeat reconnecting) proves it.
#[derive(Clone, Debug, Default)]
pub struct TokenCell(Arc<Mutex<Option<StoreToken>>>);

impl TokenCell {
    pub fn new(token: Option<StoreToken>) -> TokenCell {
        TokenCell(Arc::new(Mutex::new(token)))
    }

    pub fn get(&self) -> Option<StoreToken> {
        self.0.locked().clone()
    }

    /// Set the token unless one is set already (a user's token stays).
    pub fn set_if_none(&self, token: StoreToken) {
        self.0.locked().get_or_insert(token);
    }
}

/// The client's hello (step 1).
pub fn hello() -> [u8; 6] {
    let m = HELLO_MAGIC.to_le_bytes();
    [HELLO_TYPE, m[0], m[1], m[2], m[3], VERSION]
}

/// Where one server connection is in the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConnAuth {
    /// Nothing to prove (no token), or proven.
    Done,
    /// Waiting for the hello.
    Hello,
    /// Nonce sent; waiting for the proof.
    Proof([u8; NONCE_LEN]),
    /// Refused: input is discarded until the client closes.
    Refused,
    /// A server without a token, before the first byte: a hello is answered [`AUTH_NOT_WANTED`],
    /// anything else is served.
    Open,
}

/// A server without a token: what to do with a connection's first bytes (`Open` state).
pub(super) fn step_open(state: &mut ConnAuth, input: &[u8]) -> Step {
    match input.first() {
        None => Step::Need,
        Some(&HELLO_TYPE) => {
            *state = ConnAuth::Refused;
            Step::Refuse {
                reply: vec![AUTH_NOT_WANTED],
                why: "it asked to prove a token (MCORE_STORE_TOKEN is set on its side) but this store has none \
                      (unset on the host of the store)",
            }
        }
        Some(_) => {
            *state = ConnAuth::Done;
            Step::Reply { consumed: 0, reply: Vec::new() }
        }
    }
}

/// What the server does with a connection's first bytes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// More bytes are needed.
    Need,
    /// Consume `consumed` bytes, send `reply`; the connection moves on (maybe to `Done`).
    Reply { consumed: usize, reply: Vec<u8> },
    /// Send `reply`, close the sending side, discard the rest: `why` is logged.
    Refuse { reply: Vec<u8>, why: &'static str },
}

/// The server's side: the token and the nonce source.
pub(super) struct ServerAuth {
    token: StoreToken,
    rng: ChaCha20Rng,
    /// The token is the job's own secret (not a user's `MCORE_STORE_TOKEN`): refusals say so, and
    /// name this job (its id, at most [`MAX_JOB_LABEL`] bytes).
    session: bool,
    job: Vec<u8>,
    /// A job's secret before its initialization is over: a client may prove it (a hello) or not
    /// (anything else is served as without a token). See [`ServerAuth::require`].
    pub optional: bool,
}

impl ServerAuth {
    /// A server side for `token`, its nonces seeded from the OS (`/dev/urandom`).
    pub fn new(token: StoreToken) -> std::io::Result<ServerAuth> {
        use std::io::Read;
        let mut seed = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut seed)?;
        Ok(ServerAuth { token, rng: ChaCha20Rng::from_seed(seed), session: false, job: Vec::new(), optional: false })
    }

    /// A server side for the job's own secret: optional until [`Self::require`].
    pub fn session(token: StoreToken, job: &[u8]) -> std::io::Result<ServerAuth> {
        let job = job[..job.len().min(MAX_JOB_LABEL)].to_vec();
        Ok(ServerAuth { session: true, job, optional: true, ..ServerAuth::new(token)? })
    }

    /// The job's own secret (none for a user's token): what a rank's claim is answered with.
    pub fn session_secret(&self) -> Option<&StoreToken> {
        self.session.then_some(&self.token)
    }

    /// From now on a new connection must prove the token.
    pub fn require(&mut self) {
        self.optional = false;
    }

    /// Where a new connection starts.
    pub fn first_state(&self) -> ConnAuth {
        if self.optional {
            ConnAuth::Open
        } else {
            ConnAuth::Hello
        }
    }

    /// Advance `state` with the unconsumed `input` of the connection.
    pub fn step(&mut self, state: &mut ConnAuth, input: &[u8]) -> Step {
        match *state {
            ConnAuth::Done | ConnAuth::Refused => Step::Need,
            // Optional: a hello goes through the exchange, anything else is served.
            ConnAuth::Open if input.first() == Some(&HELLO_TYPE) => {
                *state = ConnAuth::Hello;
                self.step(state, input)
            }
            ConnAuth::Open if self.optional => step_open(state, input),
            ConnAuth::Open => {
                *state = ConnAuth::Hello;
                self.step(state, input)
            }
            ConnAuth::Hello => {
                let h = hello();
                let n = input.len().min(h.len());
                if input[..n] != h[..n] {
                    *state = ConnAuth::Refused;
                    let why = if input[0] == HELLO_TYPE {
                        "its authentication hello has another version or magic"
                    } else if self.session {
                        "the job's initialization is over and its store serves only the job's own ranks now \
                         (MCORE_STORE_KEEP_OPEN=1 on the store's host keeps it open to every client)"
                    } else {
                        "it sent a request without proving it holds the store's token (MCORE_STORE_TOKEN): \
                         a torch client, or one of ours without the token"
                    };
                    let reply = if self.session {
                        // "MCAS", then the job's id as a blob: a rank of another job can name both.
                        let mut r = AUTH_CLOSED.to_le_bytes().to_vec();
                        r.extend_from_slice(&(self.job.len() as u64).to_le_bytes());
                        r.extend_from_slice(&self.job);
                        r
                    } else {
                        AUTH_REQUIRED.to_le_bytes().to_vec()
                    };
                    return Step::Refuse { reply, why };
                }
                if n < h.len() {
                    return Step::Need;
                }
                let mut nonce = [0u8; NONCE_LEN];
                self.rng.fill_bytes(&mut nonce);
                *state = ConnAuth::Proof(nonce);
                let mut reply = vec![AUTH_CHALLENGE];
                reply.extend_from_slice(&nonce);
                Step::Reply { consumed: h.len(), reply }
            }
            ConnAuth::Proof(nonce) => {
                if input.len() < NONCE_LEN {
                    return Step::Need;
                }
                if self.token.verify(&nonce, &input[..NONCE_LEN]) {
                    *state = ConnAuth::Done;
                    Step::Reply { consumed: NONCE_LEN, reply: vec![AUTH_OK] }
                } else {
                    *state = ConnAuth::Refused;
                    Step::Refuse {
                        reply: vec![AUTH_REFUSED],
                        why: "its proof does not match the store's token (MCORE_STORE_TOKEN differs)",
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2 (key "Jefe"): the HMAC-SHA256 in use is the standard one.
    #[test]
    fn hmac_is_rfc_4231() {
        let t = StoreToken::new(b"Jefe").unwrap();
        let mut mac = t.mac();
        mac.update(b"what do ya want for nothing?");
        let got: [u8; 32] = mac.finalize().into_bytes().into();
        let hex: String = got.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn a_proof_verifies_only_with_the_same_token_and_nonce() {
        let (a, b) = (StoreToken::new(b"secret-a").unwrap(), StoreToken::new(b"secret-b").unwrap());
        let n1 = [7u8; NONCE_LEN];
        let n2 = [8u8; NONCE_LEN];
        let p = a.prove(&n1);
        assert!(a.verify(&n1, &p));
        assert!(!a.verify(&n2, &p), "a proof is bound to its nonce");
        assert!(!b.verify(&n1, &p), "a proof is bound to its token");
        assert!(!a.verify(&n1, &p[..31]));
        assert_eq!(format!("{a:?}"), "StoreToken(<8 bytes>)");
    }

    #[test]
    fn tokens_come_from_the_variable_or_a_file() {
        let dir = std::env::temp_dir().join(format!("mcore-token-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tok");
        std::fs::write(&file, b"s3cret\n").unwrap();
        let path = file.to_string_lossy().into_owned();
        let look = |pairs: Vec<(&'static str, String)>| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        assert_eq!(StoreToken::from_lookup(&look(vec![])).unwrap(), None);
        assert_eq!(StoreToken::from_lookup(&look(vec![(TOKEN_ENV, "x".into())])).unwrap(), StoreToken::new(b"x"));
        assert_eq!(
            StoreToken::from_lookup(&look(vec![(TOKEN_FILE_ENV, path.clone())])).unwrap(),
            StoreToken::new(b"s3cret")
        );
        let e = StoreToken::from_lookup(&look(vec![(TOKEN_ENV, String::new())])).unwrap_err();
        assert!(e.contains("MCORE_STORE_TOKEN is set but empty"), "{e}");
        let e = StoreToken::from_lookup(&look(vec![(TOKEN_ENV, "x".into()), (TOKEN_FILE_ENV, path)])).unwrap_err();
        assert!(e.contains("both"), "{e}");
        let e = StoreToken::from_lookup(&look(vec![(TOKEN_FILE_ENV, "/nonexistent/tok".into())])).unwrap_err();
        assert!(e.contains("/nonexistent/tok"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_server_steps_hello_then_proof() {
        let tok = StoreToken::new(b"k").unwrap();
        let mut s = ServerAuth::new(tok.clone()).unwrap();
        let mut st = ConnAuth::Hello;
        assert_eq!(s.step(&mut st, &hello()[..3]), Step::Need);
        let Step::Reply { consumed: 6, reply } = s.step(&mut st, &hello()) else { panic!("{st:?}") };
        assert_eq!((reply.len(), reply[0]), (1 + NONCE_LEN, AUTH_CHALLENGE));
        let nonce = &reply[1..];
        assert_eq!(s.step(&mut st, &[0; 10]), Step::Need);
        let proof = tok.prove(nonce);
        assert_eq!(s.step(&mut st, &proof), Step::Reply { consumed: NONCE_LEN, reply: vec![AUTH_OK] });
        assert_eq!(st, ConnAuth::Done);

        // Two connections get different nonces; a replayed proof fails on the second.
        let mut st2 = ConnAuth::Hello;
        let Step::Reply { reply: reply2, .. } = s.step(&mut st2, &hello()) else { panic!() };
        assert_ne!(nonce, &reply2[1..]);
        assert!(matches!(s.step(&mut st2, &proof), Step::Refuse { reply, .. } if reply == [AUTH_REFUSED]));
        assert_eq!(st2, ConnAuth::Refused);

        // torch's VALIDATE first: refused with the marker.
        let mut st3 = ConnAuth::Hello;
        let validate = [0u8, 0xCE, 0xF7, 0x85, 0x3C];
        assert!(
            matches!(s.step(&mut st3, &validate), Step::Refuse { reply, .. } if reply == AUTH_REQUIRED.to_le_bytes())
        );
    }

    #[test]
    fn a_server_without_a_token_serves_torch_and_answers_a_hello_that_it_wants_none() {
        let mut st = ConnAuth::Open;
        assert_eq!(step_open(&mut st, &[]), Step::Need);
        assert_eq!(step_open(&mut st, &[0, 0xCE]), Step::Reply { consumed: 0, reply: vec![] });
        assert_eq!(st, ConnAuth::Done);
        let mut st = ConnAuth::Open;
        assert!(matches!(step_open(&mut st, &hello()), Step::Refuse { reply, .. } if reply == [AUTH_NOT_WANTED]));
        assert_eq!(st, ConnAuth::Refused);
    }
}
