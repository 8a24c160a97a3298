//! The byte format of PyTorch c10d's TCPStore (docs/wire-protocol.md): a `u8` query type followed by
//! fields in host (little-endian) byte order; strings and blobs are `u64` length + bytes.
//! Decoding enforces the libuv server's limits so a hostile peer cannot make us allocate freely.

use crate::store::StoreError;
use std::io::{ErrorKind, Read};

/// Longest key accepted (bytes).
pub const MAX_KEY_LEN: u64 = 8 * 1024;
/// Longest value accepted (bytes).
pub const MAX_VALUE_LEN: u64 = 8 * 1024 * 1024;
/// Most keys in one request.
pub const MAX_KEYS: u64 = 128 * 1024;
/// Magic number of the VALIDATE query.
pub const VALIDATE_MAGIC: u32 = 0x3C85_F7CE;

/// `QueryType` of c10d (`TCPStoreBackend.hpp`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    Validate = 0,
    Set = 1,
    CompareSet = 2,
    Get = 3,
    Add = 4,
    Check = 5,
    Wait = 6,
    GetNumKeys = 7,
    DeleteKey = 8,
    Append = 9,
    MultiGet = 10,
    MultiSet = 11,
    CancelWait = 12,
    Ping = 13,
    QueuePush = 14,
    QueuePop = 15,
    QueueLen = 16,
    ListKeys = 17,
    Barrier = 18,
    /// Not torch's: this project's extensions (0x80 and up), sent only to our own server (torch's
    /// closes the connection on them); see `runtime::faults::liveness` and docs/wire-protocol.md.
    /// `key, value` (value unused, sent empty): when this connection closes from the client's
    /// side (the process exited or was killed) while it holds its [`Query::Claim`], the server
    /// raises a notice on `key` naming the claimed key (see [`Query::Notice`]); an empty key
    /// withdraws it. Needs a claim. No reply.
    OnClose = 0x80,
    /// `key, secret`: this connection claims the liveness counter `key` (ending `/alive/<rank>`):
    /// only it may write the key from now on. The same secret moves the claim to a new
    /// connection (a rank that reconnected); another secret is refused. Reply: `u8`
    /// [`CLAIM_OK`], or [`CLAIM_TAKEN`] followed by the holder's address (`u64` length + bytes),
    /// or, for the counter of one of the ranks of the job whose store this is (default mode),
    /// [`CLAIM_SESSION`] followed by the job's secret (`u64` length + bytes).
    Claim = 0x81,
    /// `key, value` (key ending `/alive/events`): raise a notice on it now. An empty value is a
    /// question to every rank watching, naming this connection's claimed key after a `?` (needs
    /// a claim); another is an event posted to the job's bulletin, stored after a `!` (any
    /// connection; the server writes it, so no client can pose as its close notices). A notice
    /// is numbered: the server adds one to the counter `key` and sets `key/<n>` to it. No reply.
    Notice = 0x82,
}

/// [`Query::Claim`] granted.
pub const CLAIM_OK: u8 = 0;
/// [`Query::Claim`] refused: another connection holds the key with another secret.
pub const CLAIM_TAKEN: u8 = 1;
/// [`Query::Claim`] granted on one of the job's rank counters: the job's secret follows, which
/// the rank's later connections prove (see `TcpStoreServer::expect_ranks`).
pub const CLAIM_SESSION: u8 = 2;

impl Query {
    /// The query for a type byte; `None` for types this implementation does not serve.
    pub fn from_u8(b: u8) -> Option<Query> {
        use Query::*;
        const ALL: [Query; 22] = [
            Validate, Set, CompareSet, Get, Add, Check, Wait, GetNumKeys, DeleteKey, Append, MultiGet, MultiSet,
            CancelWait, Ping, QueuePush, QueuePop, QueueLen, ListKeys, Barrier, OnClose, Claim, Notice,
        ];
        ALL.into_iter().find(|q| *q as u8 == b)
    }
}

/// `CheckResponseType::READY`.
pub const CHECK_READY: u8 = 0;
/// `CheckResponseType::NOT_READY`.
pub const CHECK_NOT_READY: u8 = 1;
/// `WaitResponseType::STOP_WAITING`.
pub const STOP_WAITING: u8 = 0;
/// `WaitResponseType::WAIT_CANCELED`.
pub const WAIT_CANCELED: u8 = 1;

/// A request or reply under construction.
#[derive(Debug, Default, Clone)]
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    /// A message starting with query type `q`.
    pub fn query(q: Query) -> Self {
        Encoder { buf: vec![q as u8] }
    }
    pub fn u8(mut self, v: u8) -> Self {
        self.buf.push(v);
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(mut self, v: i64) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A string or blob: `u64` length + bytes.
    pub fn bytes(self, v: &[u8]) -> Self {
        let mut s = self.u64(v.len() as u64);
        s.buf.extend_from_slice(v);
        s
    }
    /// A key list: `u64` count + keys.
    pub fn keys<S: AsRef<str>>(self, keys: &[S]) -> Self {
        keys.iter().fold(self.u64(keys.len() as u64), |e, k| e.bytes(k.as_ref().as_bytes()))
    }
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// How a read failed: the peer closed the stream cleanly before a message, or something else.
#[derive(Debug)]
pub enum ReadError {
    /// End of stream at a message boundary or inside one.
    Eof,
    /// A socket error (timeouts included: `WouldBlock`/`TimedOut`).
    Io(std::io::Error),
    /// A field violates a limit or is malformed.
    Protocol(String),
}

impl ReadError {
    /// Whether a socket read timeout expired.
    pub fn is_timeout(&self) -> bool {
        matches!(self, ReadError::Io(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    }

    /// As a store error, naming `peer`.
    pub fn into_store(self, peer: &str) -> StoreError {
        match self {
            ReadError::Eof => StoreError::Closed(format!("connection to {peer} closed by the peer")),
            ReadError::Io(e) => StoreError::Io(format!("reading from {peer}: {e}")),
            ReadError::Protocol(m) => StoreError::Protocol(format!("from {peer}: {m}")),
        }
    }
}

/// Readers of reply fields over any byte stream, with limits (the client's side; the server
/// parses whole requests from its buffers with [`parse_request`]).
pub struct Decoder<R: Read> {
    r: R,
}

impl<R: Read> Decoder<R> {
    pub fn new(r: R) -> Self {
        Decoder { r }
    }

    fn exact(&mut self, buf: &mut [u8]) -> Result<(), ReadError> {
        self.r.read_exact(buf).map_err(|e| match e.kind() {
            ErrorKind::UnexpectedEof => ReadError::Eof,
            _ => ReadError::Io(e),
        })
    }

    pub fn u8(&mut self) -> Result<u8, ReadError> {
        let mut b = [0u8; 1];
        self.exact(&mut b)?;
        Ok(b[0])
    }
    pub fn u32(&mut self) -> Result<u32, ReadError> {
        let mut b = [0u8; 4];
        self.exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    pub fn u64(&mut self) -> Result<u64, ReadError> {
        let mut b = [0u8; 8];
        self.exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    pub fn i64(&mut self) -> Result<i64, ReadError> {
        let mut b = [0u8; 8];
        self.exact(&mut b)?;
        Ok(i64::from_le_bytes(b))
    }

    /// A value (≤ 8 MiB): the client's reader of GET, COMPARE_SET and MULTI_GET replies.
    pub fn value(&mut self) -> Result<Vec<u8>, ReadError> {
        let n = self.u64()?;
        if let Some(m) = over_limit("value", n, MAX_VALUE_LEN) {
            return Err(ReadError::Protocol(m));
        }
        let mut v = vec![0u8; n as usize];
        self.exact(&mut v)?;
        Ok(v)
    }
}

/// The message for a length `n` over `limit`, if it is.
fn over_limit(what: &str, n: u64, limit: u64) -> Option<String> {
    (n > limit).then(|| format!("{what} of {n} bytes exceeds the limit of {limit} bytes"))
}

/// Longest request the server accepts (bytes): more than a COMPARE_SET of two 8 MiB values, and
/// a bound on what one connection may make the server buffer.
pub const MAX_REQUEST_LEN: usize = 64 * 1024 * 1024;

/// A request as the server sees it, borrowing keys and values from the receive buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Validate(u32),
    Ping(u32),
    Set(&'a [u8], &'a [u8]),
    CompareSet(&'a [u8], &'a [u8], &'a [u8]),
    Get(&'a [u8]),
    Add(&'a [u8], i64),
    Check(Vec<&'a [u8]>),
    Wait(Vec<&'a [u8]>),
    GetNumKeys,
    DeleteKey(&'a [u8]),
    Append(&'a [u8], &'a [u8]),
    MultiGet(Vec<&'a [u8]>),
    MultiSet(Vec<(&'a [u8], &'a [u8])>),
    CancelWait,
    /// Queue name, item.
    QueuePush(&'a [u8], &'a [u8]),
    QueuePop(&'a [u8]),
    QueueLen(&'a [u8]),
    ListKeys,
    /// Counter key, world size.
    Barrier(&'a [u8], i64),
    /// See [`Query::OnClose`].
    OnClose(&'a [u8], &'a [u8]),
    /// Key, secret: see [`Query::Claim`].
    Claim(&'a [u8], &'a [u8]),
    /// Key, value: see [`Query::Notice`].
    Notice(&'a [u8], &'a [u8]),
}

/// What the start of a receive buffer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A whole request and its length in bytes.
    Complete(Request<'a>, usize),
    /// The start of a request: at least this many bytes (in all) are needed before it can parse.
    Incomplete(usize),
}

/// Why a field could not be read from a buffer.
enum Short {
    Need(usize),
    Bad(String),
}

impl Short {
    /// A shortfall of `more` bytes more than this field's end: the fields still to come need at
    /// least that many (their length prefixes), so a request arriving in pieces is parsed again
    /// a few times, not once per piece.
    fn at_least(self, more: usize) -> Short {
        match self {
            Short::Need(n) => Short::Need(n.saturating_add(more)),
            bad => bad,
        }
    }
}

/// A cursor over a receive buffer that never allocates for a field before it has fully arrived.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Short> {
        let end = self.pos.checked_add(n).filter(|e| *e <= MAX_REQUEST_LEN).ok_or_else(|| {
            Short::Bad(format!("request of more than {MAX_REQUEST_LEN} bytes exceeds the server's limit"))
        })?;
        if end > self.buf.len() {
            return Err(Short::Need(end));
        }
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u32(&mut self) -> Result<u32, Short> {
        self.arr().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, Short> {
        self.arr().map(u64::from_le_bytes)
    }
    fn blob(&mut self, limit: u64, what: &str) -> Result<&'a [u8], Short> {
        let n = self.u64()?;
        if let Some(m) = over_limit(what, n, limit) {
            return Err(Short::Bad(m));
        }
        self.take(n as usize)
    }
    fn key(&mut self) -> Result<&'a [u8], Short> {
        self.blob(MAX_KEY_LEN, "key")
    }
    fn value(&mut self) -> Result<&'a [u8], Short> {
        self.blob(MAX_VALUE_LEN, "value")
    }
    fn count(&mut self) -> Result<usize, Short> {
        let n = self.u64()?;
        if n > MAX_KEYS {
            return Err(Short::Bad(format!("{n} keys in one request exceed the limit of {MAX_KEYS}")));
        }
        Ok(n as usize)
    }
    fn keys(&mut self) -> Result<Vec<&'a [u8]>, Short> {
        let n = self.count()?;
        // No capacity from the peer's count: a short buffer must not reserve 128 K slots.
        let mut v = Vec::new();
        for done in 0..n {
            v.push(self.key().map_err(|e| e.at_least(8 * (n - done - 1)))?);
        }
        Ok(v)
    }
}

/// Parse the request at the start of `buf` (the server's decoder). A protocol violation (unknown
/// query type, a field over its limit, a request over [`MAX_REQUEST_LEN`]) is an error; a
/// request not fully arrived is [`Frame::Incomplete`] with the least total length it needs.
pub fn parse_request(buf: &[u8]) -> Result<Frame<'_>, ReadError> {
    let mut c = Cursor { buf, pos: 0 };
    let parsed = (|| -> Result<Request<'_>, Short> {
        let t = c.take(1)?[0];
        let q = Query::from_u8(t).ok_or_else(|| Short::Bad(format!("unknown query type {t}")))?;
        Ok(match q {
            Query::Validate => Request::Validate(c.u32()?),
            Query::Ping => Request::Ping(c.u32()?),
            Query::Set => Request::Set(c.key()?, c.value()?),
            Query::CompareSet => Request::CompareSet(c.key()?, c.value()?, c.value()?),
            Query::Get => Request::Get(c.key()?),
            Query::Add => Request::Add(c.key()?, c.u64()? as i64),
            Query::Check => Request::Check(c.keys()?),
            Query::Wait => Request::Wait(c.keys()?),
            Query::GetNumKeys => Request::GetNumKeys,
            Query::DeleteKey => Request::DeleteKey(c.key()?),
            Query::Append => Request::Append(c.key()?, c.value()?),
            Query::MultiGet => Request::MultiGet(c.keys()?),
            Query::MultiSet => {
                let n = c.count()?;
                let mut v = Vec::new();
                for done in 0..n {
                    let more = 16 * (n - done - 1);
                    v.push((c.key().map_err(|e| e.at_least(more + 8))?, c.value().map_err(|e| e.at_least(more))?));
                }
                Request::MultiSet(v)
            }
            Query::CancelWait => Request::CancelWait,
            Query::QueuePush => Request::QueuePush(c.key()?, c.value()?),
            Query::QueuePop => Request::QueuePop(c.key()?),
            Query::QueueLen => Request::QueueLen(c.key()?),
            Query::ListKeys => Request::ListKeys,
            Query::Barrier => Request::Barrier(c.key()?, c.u64()? as i64),
            Query::OnClose => Request::OnClose(c.key()?, c.value()?),
            Query::Claim => Request::Claim(c.key()?, c.value()?),
            Query::Notice => Request::Notice(c.key()?, c.value()?),
        })
    })();
    match parsed {
        Ok(r) => Ok(Frame::Complete(r, c.pos)),
        Err(Short::Need(n)) => Ok(Frame::Incomplete(n)),
        Err(Short::Bad(m)) => Err(ReadError::Protocol(m)),
    }
}

/// Check a key a caller wants to send against the server's limit.
pub fn check_key(key: &str) -> Result<(), StoreError> {
    if key.len() as u64 > MAX_KEY_LEN {
        return Err(StoreError::InvalidArgument(format!(
            "key of {} bytes exceeds the limit of {MAX_KEY_LEN} bytes",
            key.len()
        )));
    }
    Ok(())
}

/// Check a value a caller wants to send against the server's limit.
pub fn check_value(key: &str, value: &[u8]) -> Result<(), StoreError> {
    if value.len() as u64 > MAX_VALUE_LEN {
        return Err(StoreError::InvalidArgument(format!(
            "value of {} bytes for key '{key}' exceeds the limit of {MAX_VALUE_LEN} bytes",
            value.len()
        )));
    }
    Ok(())
}

/// Check a key count against the server's limit.
pub fn check_count(n: usize) -> Result<(), StoreError> {
    if n as u64 > MAX_KEYS {
        return Err(StoreError::InvalidArgument(format!("{n} keys in one request exceed the limit of {MAX_KEYS}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_little_endian_with_u64_lengths() {
        let m = Encoder::query(Query::Add).bytes(b"/k").i64(-2).finish();
        let mut want = vec![4u8];
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(b"/k");
        want.extend_from_slice(&(-2i64).to_le_bytes());
        assert_eq!(m, want);
        let v = Encoder::query(Query::Validate).u32(VALIDATE_MAGIC).finish();
        assert_eq!(v, [0, 0xCE, 0xF7, 0x85, 0x3C]);
        let w = Encoder::query(Query::Wait).keys(&["/a", "/bc"]).finish();
        assert_eq!(w.len(), 1 + 8 + 8 + 2 + 8 + 3);
        assert_eq!(w[0], 6);
        assert_eq!(&w[1..9], &2u64.to_le_bytes());
    }

    #[test]
    fn decodes_what_it_encodes() {
        let m = Encoder::default().bytes(b"val").i64(i64::MIN).u32(7).u8(1).finish();
        let mut d = Decoder::new(m.as_slice());
        assert_eq!(d.value().unwrap(), b"val");
        assert_eq!(d.i64().unwrap(), i64::MIN);
        assert_eq!(d.u32().unwrap(), 7);
        assert_eq!(d.u8().unwrap(), 1);
        assert!(matches!(d.u8(), Err(ReadError::Eof)));
        let w = Encoder::query(Query::Wait).keys(&["/x", "/yy"]).finish();
        match parse_request(&w) {
            Ok(Frame::Complete(Request::Wait(ks), n)) => assert_eq!((ks, n), (vec![&b"/x"[..], b"/yy"], w.len())),
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_request(&w[..w.len() - 1]).unwrap(), Frame::Incomplete(w.len()));
    }

    #[test]
    fn every_query_byte_round_trips_and_unknown_is_none() {
        for b in 0..=18u8 {
            assert_eq!(Query::from_u8(b).unwrap() as u8, b);
        }
        assert_eq!(Query::from_u8(19), None);
        assert_eq!(Query::from_u8(255), None);
    }

    #[test]
    fn limits_are_protocol_errors() {
        let protocol = |m: &[u8]| match parse_request(m) {
            Err(ReadError::Protocol(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(protocol(&Encoder::query(Query::Get).u64(MAX_KEY_LEN + 1).finish()).contains("8193"));
        assert!(protocol(&Encoder::query(Query::Set).bytes(b"/k").u64(MAX_VALUE_LEN + 1).finish()).contains("value"));
        assert!(protocol(&Encoder::query(Query::Wait).u64(MAX_KEYS + 1).finish()).contains("131073 keys"));
        assert!(protocol(&[19]).contains("unknown query type 19"));
        assert!(
            protocol(&Encoder::query(Query::QueuePush).bytes(b"/q").u64(MAX_VALUE_LEN + 1).finish()).contains("value")
        );
        let big_value = Encoder::default().u64(MAX_VALUE_LEN + 1).finish();
        assert!(matches!(Decoder::new(big_value.as_slice()).value(), Err(ReadError::Protocol(_))));
        let e = ReadError::Protocol("x".into()).into_store("h:1");
        assert!(matches!(e, StoreError::Protocol(m) if m.contains("h:1")));
        assert!(check_key(&"k".repeat(8193)).is_err() && check_key(&"k".repeat(8192)).is_ok());
        assert!(check_value("k", &vec![0; (MAX_VALUE_LEN + 1) as usize]).is_err());
        assert!(check_count(131_073).is_err() && check_count(131_072).is_ok());
    }

    #[test]
    fn truncated_blob_is_eof() {
        let m = Encoder::default().u64(10).finish();
        let mut with_part = m.clone();
        with_part.extend_from_slice(b"abc");
        assert!(matches!(Decoder::new(with_part.as_slice()).value(), Err(ReadError::Eof)));
    }
}
