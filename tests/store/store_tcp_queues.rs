//! QUEUE_PUSH, QUEUE_POP, QUEUE_LEN, LIST_KEYS and BARRIER on our server at the byte level, with
//! torch 2.15's libuv semantics (src/store/tcp/server/queues.rs). Real torch clients drive the
//! same queries in scripts/test.d/71-torch-store.sh; these run without torch. Ordering on one
//! connection, not timing, shows that a reply is still pending: a PING sent after a parked
//! request is answered first.

use mcore_init::store::tcp::wire::{
    Decoder, Encoder, Query, CHECK_NOT_READY, CHECK_READY, STOP_WAITING, VALIDATE_MAGIC, WAIT_CANCELED,
};
use mcore_init::store::{ServerLimits, TcpStoreServer};
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// Every read waits at most this long: a missing reply fails the test instead of hanging it.
const T: Duration = Duration::from_secs(10);

struct Raw {
    s: TcpStream,
}

impl Raw {
    fn new(server: &TcpStoreServer) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let mut r = Raw { s };
        r.send(Encoder::query(Query::Validate).u32(VALIDATE_MAGIC));
        r
    }
    fn send(&mut self, e: Encoder) {
        self.s.write_all(&e.finish()).unwrap();
    }
    fn d(&self) -> Decoder<&TcpStream> {
        Decoder::new(&self.s)
    }
    fn u8(&self) -> u8 {
        self.d().u8().unwrap()
    }
    fn i64(&self) -> i64 {
        self.d().i64().unwrap()
    }
    fn value(&self) -> Vec<u8> {
        self.d().value().unwrap()
    }
    /// PING and its echo: everything queued before it on this connection has been answered.
    fn ping(&mut self, nonce: u32) {
        self.send(Encoder::query(Query::Ping).u32(nonce));
        assert_eq!(self.d().u32().unwrap(), nonce, "a reply arrived before the PING's echo");
    }
    fn push(&mut self, q: &str, v: &[u8]) {
        self.send(Encoder::query(Query::QueuePush).bytes(q.as_bytes()).bytes(v));
    }
    fn pop(&mut self, q: &str) -> (i64, Option<Vec<u8>>) {
        self.send(Encoder::query(Query::QueuePop).bytes(q.as_bytes()));
        let n = self.i64();
        (n, (n > 0).then(|| self.value()))
    }
    fn len(&mut self, q: &str) -> i64 {
        self.send(Encoder::query(Query::QueueLen).bytes(q.as_bytes()));
        self.i64()
    }
    fn check(&mut self, keys: &[&str]) -> u8 {
        self.send(Encoder::query(Query::Check).keys(keys));
        self.u8()
    }
    fn list(&mut self) -> Vec<String> {
        self.send(Encoder::query(Query::ListKeys));
        let n = self.i64();
        let mut v: Vec<String> = (0..n).map(|_| String::from_utf8(self.value()).unwrap()).collect();
        v.sort();
        v
    }
    fn barrier(&mut self, key: &str, world: i64) {
        self.send(Encoder::query(Query::Barrier).bytes(key.as_bytes()).i64(world));
    }
    fn get(&mut self, key: &str) -> Vec<u8> {
        self.send(Encoder::query(Query::Get).bytes(key.as_bytes()));
        self.value()
    }
    /// Whether the server closed this connection (end of stream within the read timeout).
    fn closed(&self) -> bool {
        matches!(self.d().u8(), Err(mcore_init::store::tcp::wire::ReadError::Eof))
    }
}

#[test]
fn queue_push_pop_len_are_fifo_and_apart_from_keys() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let mut c = Raw::new(&server);
    assert_eq!(c.len("/q"), 0);
    assert_eq!(c.pop("/q"), (0, None), "popping nothing replies only the length 0");
    assert_eq!(c.check(&["/q"]), CHECK_NOT_READY);
    c.push("/q", b"a");
    c.push("/q", b"");
    c.push("/q", b"c\0");
    assert_eq!(c.len("/q"), 3);
    assert_eq!(c.check(&["/q"]), CHECK_READY, "a non-empty queue is present for CHECK");
    assert_eq!(c.pop("/q"), (3, Some(b"a".to_vec())), "the length before the pop, then the oldest item");
    assert_eq!(c.pop("/q"), (2, Some(Vec::new())));
    assert_eq!(c.pop("/q"), (1, Some(b"c\0".to_vec())));
    assert_eq!(c.pop("/q"), (0, None));
    assert_eq!(c.check(&["/q"]), CHECK_NOT_READY);
    // A queue is no key: not in LIST_KEYS or GETNUMKEYS, GET gives nothing.
    c.push("/both", b"item");
    c.send(Encoder::query(Query::Set).bytes(b"/both").bytes(b"value"));
    assert_eq!(c.get("/both"), b"value");
    assert_eq!(c.list(), ["/both"]);
    c.send(Encoder::query(Query::GetNumKeys));
    assert_eq!(c.i64(), 1);
    assert_eq!(c.pop("/both"), (1, Some(b"item".to_vec())));
}

#[test]
fn a_push_releases_one_parked_wait_per_item() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let (mut w1, mut w2, mut p) = (Raw::new(&server), Raw::new(&server), Raw::new(&server));
    w1.send(Encoder::query(Query::Wait).keys(&["/jobs"]));
    w1.ping(1); // parked: the PING is answered, the WAIT is not
    w2.send(Encoder::query(Query::Wait).keys(&["/jobs"]));
    w2.ping(2);
    p.push("/jobs", b"one");
    assert_eq!(w1.u8(), STOP_WAITING, "the oldest waiter is released first");
    w2.ping(3); // still parked: one item released one waiter
    assert_eq!(w1.pop("/jobs"), (1, Some(b"one".to_vec())));
    p.push("/jobs", b"two");
    assert_eq!(w2.u8(), STOP_WAITING);
    assert_eq!(w2.pop("/jobs"), (1, Some(b"two".to_vec())));
    // A WAIT on a non-empty queue returns at once; on several keys, once all are present.
    p.push("/jobs", b"three");
    w1.send(Encoder::query(Query::Wait).keys(&["/jobs"]));
    assert_eq!(w1.u8(), STOP_WAITING);
    w2.send(Encoder::query(Query::Wait).keys(&["/jobs2", "/k"]));
    p.push("/jobs2", b"x");
    w2.ping(4);
    p.send(Encoder::query(Query::Set).bytes(b"/k").bytes(b"1"));
    assert_eq!(w2.u8(), STOP_WAITING);
}

#[test]
fn a_canceled_waiter_does_not_take_the_wake_up() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let (mut canceled, mut live, mut p) = (Raw::new(&server), Raw::new(&server), Raw::new(&server));
    canceled.send(Encoder::query(Query::Wait).keys(&["/q"]));
    canceled.send(Encoder::query(Query::CancelWait));
    assert_eq!(canceled.u8(), WAIT_CANCELED);
    live.send(Encoder::query(Query::Wait).keys(&["/q"]));
    live.ping(2);
    p.push("/q", b"x");
    assert_eq!(live.u8(), STOP_WAITING, "the push went to the one waiter left");
    canceled.ping(3);
}

#[test]
fn list_keys_lists_every_stored_key_as_stored() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let mut c = Raw::new(&server);
    assert!(c.list().is_empty());
    c.send(Encoder::query(Query::Set).bytes(b"/a").bytes(b"1"));
    c.send(Encoder::query(Query::Add).bytes(b"init/").i64(1));
    assert_eq!(c.i64(), 1);
    c.barrier("/bar", 1);
    assert_eq!(c.u8(), STOP_WAITING);
    c.push("/queue", b"x");
    assert_eq!(c.list(), ["/a", "/bar", "init/"]);
    c.send(Encoder::query(Query::DeleteKey).bytes(b"/a"));
    assert_eq!(c.i64(), 1);
    assert_eq!(c.list(), ["/bar", "init/"]);
}

#[test]
fn barrier_counts_arrivals_and_releases_all_at_world_size() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let (mut a, mut b, mut c, mut w) = (Raw::new(&server), Raw::new(&server), Raw::new(&server), Raw::new(&server));
    a.barrier("/b", 3);
    a.ping(1); // parked
    assert_eq!(w.get("/b"), b"1", "the counter is an ASCII key");
    w.send(Encoder::query(Query::Wait).keys(&["/b"]));
    assert_eq!(w.u8(), STOP_WAITING, "the counter key exists after the first arrival");
    b.barrier("/b", 3);
    b.ping(2);
    a.ping(3);
    c.barrier("/b", 3);
    assert_eq!(c.u8(), STOP_WAITING, "the last arrival is answered at once");
    assert_eq!(a.u8(), STOP_WAITING);
    assert_eq!(b.u8(), STOP_WAITING);
    assert_eq!(w.get("/b"), b"3");
    // The counter is never reset: the key passes at once from now on (as torch's).
    a.barrier("/b", 3);
    assert_eq!(a.u8(), STOP_WAITING);
    assert_eq!(w.get("/b"), b"4");
    // A world of one, or less, passes.
    a.barrier("/one", 1);
    assert_eq!(a.u8(), STOP_WAITING);
    a.barrier("/zero", 0);
    assert_eq!(a.u8(), STOP_WAITING);
}

#[test]
fn writing_a_barrier_counter_releases_its_parked_arrivals_as_torch_does() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let (mut a, mut b, mut w) = (Raw::new(&server), Raw::new(&server), Raw::new(&server));
    a.barrier("/b", 5);
    a.ping(1);
    b.barrier("/b", 5);
    a.ping(2); // the second arrival wrote the counter without releasing the first
    b.ping(3);
    w.send(Encoder::query(Query::Set).bytes(b"/b").bytes(b"7"));
    assert_eq!(a.u8(), STOP_WAITING);
    assert_eq!(b.u8(), STOP_WAITING);
    // APPEND to an existing counter releases too; a later arrival reads the written value.
    a.barrier("/c", 5);
    a.ping(4);
    w.send(Encoder::query(Query::Append).bytes(b"/c").bytes(b"0"));
    assert_eq!(a.u8(), STOP_WAITING);
    assert_eq!(w.get("/c"), b"10");
    a.barrier("/c", 12);
    a.ping(5);
    assert_eq!(w.get("/c"), b"11");
}

#[test]
fn a_wait_for_a_counter_parked_before_the_first_arrival_waits_for_completion() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let (mut a, mut b, mut w) = (Raw::new(&server), Raw::new(&server), Raw::new(&server));
    w.send(Encoder::query(Query::Wait).keys(&["/b"]));
    w.ping(1);
    a.barrier("/b", 2);
    a.ping(2);
    w.ping(3); // the first arrival created the counter but released nothing (as torch's)
    assert_eq!(b.check(&["/b"]), CHECK_READY);
    b.barrier("/b", 2);
    assert_eq!(b.u8(), STOP_WAITING);
    assert_eq!(a.u8(), STOP_WAITING);
    assert_eq!(w.u8(), STOP_WAITING, "the completion released the WAIT too");
}

#[test]
fn a_canceled_barrier_arrival_stays_counted() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let (mut a, mut b, mut c) = (Raw::new(&server), Raw::new(&server), Raw::new(&server));
    a.barrier("/b", 2);
    a.send(Encoder::query(Query::CancelWait));
    assert_eq!(a.u8(), WAIT_CANCELED);
    assert_eq!(c.get("/b"), b"1");
    b.barrier("/b", 2);
    assert_eq!(b.u8(), STOP_WAITING, "the canceled arrival counts");
    a.ping(1); // no late STOP_WAITING for the canceled arrival
               // A parked arrival whose client disconnects is dropped without disturbing the others.
    let mut gone = Raw::new(&server);
    gone.barrier("/b2", 3);
    gone.ping(2);
    drop(gone);
    a.barrier("/b2", 3);
    b.barrier("/b2", 3);
    assert_eq!(b.u8(), STOP_WAITING);
    assert_eq!(a.u8(), STOP_WAITING);
}

#[test]
fn barrier_on_a_non_counter_closes_only_that_connection() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let (mut a, mut b) = (Raw::new(&server), Raw::new(&server));
    a.send(Encoder::query(Query::Set).bytes(b"/text").bytes(b"abc"));
    a.barrier("/text", 2);
    assert!(a.closed(), "no error reply exists: the connection closes (torch's stoll fails the same way)");
    assert_eq!(b.get("/text"), b"abc");
}

#[test]
fn queued_items_count_towards_the_store_limit() {
    let limits = ServerLimits { max_store_bytes: 300, ..ServerLimits::default() };
    let server = TcpStoreServer::bind_with_limits("127.0.0.1", 0, limits).unwrap();
    let mut c = Raw::new(&server);
    // Each item costs its length plus 32; the queue's name once: 2 + 3 * (50 + 32) = 248.
    for _ in 0..3 {
        c.push("/q", &[7u8; 50]);
    }
    assert_eq!(c.len("/q"), 3);
    // Popping frees its bytes: one more push fits again.
    assert_eq!(c.pop("/q").0, 3);
    c.push("/q", &[7u8; 50]);
    assert_eq!(c.len("/q"), 3);
    // 248 + 82 > 300: refused, the connection closed, the queue unchanged.
    c.push("/q", &[7u8; 50]);
    assert!(c.closed());
    let mut d = Raw::new(&server);
    assert_eq!(d.len("/q"), 3);
    // Empty items are bounded too (32 bytes each).
    d.push("/e", b"");
    assert_eq!(d.len("/e"), 1);
    d.push("/e", b"");
    assert!(d.closed(), "248 + 2 + 32 + 32 > 300");
}
