//! A bounded fuzz test of the TCP store server's wire decoder (`wire::parse_request`), run in CI.
//!
//! Inputs: the kept corpus in `tests/fixtures/store_wire_corpus/` (every request torch's client
//! sent in the captured exchanges, plus hand-made edge cases: limits, truncations, unknown
//! types), mutated by a seeded generator (bit flips, interesting bytes and lengths, inserts,
//! deletes, truncations, splices). For every input the decoder must not panic, and:
//! a complete request re-encodes to exactly the bytes it consumed, and every proper prefix of
//! it is incomplete with a need no larger than its length; an incomplete input needs more bytes
//! than it has and no more than the request limit. Then a sample of the inputs goes to a live
//! server, which must still answer a fresh client afterwards.
//!
//! `MCORE_STORE_FUZZ_ITERS` sets the number of mutated inputs (default 300,000, under a second in release);
//! `MCORE_STORE_FUZZ_SEED` the seed. A failing input is written to
//! `target/store-wire-fuzz-failure.bin`: add it to the corpus once fixed.

use crate::common;

use common::Rng;
use mcore_init::store::tcp::wire::{
    parse_request, Encoder, Frame, Request, MAX_KEYS, MAX_KEY_LEN, MAX_REQUEST_LEN, MAX_VALUE_LEN, VALIDATE_MAGIC,
};
use mcore_init::store::{Store, TcpStore, TcpStoreServer};
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

fn corpus() -> Vec<Vec<u8>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/store_wire_corpus");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let c: Vec<Vec<u8>> =
        files.iter().filter(|p| p.extension().is_some_and(|e| e == "bin")).map(|p| std::fs::read(p).unwrap()).collect();
    assert!(c.len() >= 40, "corpus of {} inputs in {dir}", c.len());
    c
}

fn encode(r: &Request<'_>) -> Vec<u8> {
    use mcore_init::store::tcp::wire::Query as Q;
    let keys = |q: Q, ks: &[&[u8]]| ks.iter().fold(Encoder::query(q).u64(ks.len() as u64), |e, k| e.bytes(k)).finish();
    match r {
        Request::Validate(m) => Encoder::query(Q::Validate).u32(*m).finish(),
        Request::Ping(n) => Encoder::query(Q::Ping).u32(*n).finish(),
        Request::Set(k, v) => Encoder::query(Q::Set).bytes(k).bytes(v).finish(),
        Request::CompareSet(k, a, b) => Encoder::query(Q::CompareSet).bytes(k).bytes(a).bytes(b).finish(),
        Request::Get(k) => Encoder::query(Q::Get).bytes(k).finish(),
        Request::Add(k, d) => Encoder::query(Q::Add).bytes(k).i64(*d).finish(),
        Request::Check(ks) => keys(Q::Check, ks),
        Request::Wait(ks) => keys(Q::Wait, ks),
        Request::GetNumKeys => Encoder::query(Q::GetNumKeys).finish(),
        Request::DeleteKey(k) => Encoder::query(Q::DeleteKey).bytes(k).finish(),
        Request::Append(k, v) => Encoder::query(Q::Append).bytes(k).bytes(v).finish(),
        Request::MultiGet(ks) => keys(Q::MultiGet, ks),
        Request::MultiSet(items) => items
            .iter()
            .fold(Encoder::query(Q::MultiSet).u64(items.len() as u64), |e, (k, v)| e.bytes(k).bytes(v))
            .finish(),
        Request::CancelWait => Encoder::query(Q::CancelWait).finish(),
        Request::QueuePush(k, v) => Encoder::query(Q::QueuePush).bytes(k).bytes(v).finish(),
        Request::QueuePop(k) => Encoder::query(Q::QueuePop).bytes(k).finish(),
        Request::QueueLen(k) => Encoder::query(Q::QueueLen).bytes(k).finish(),
        Request::ListKeys => Encoder::query(Q::ListKeys).finish(),
        Request::Barrier(k, n) => Encoder::query(Q::Barrier).bytes(k).i64(*n).finish(),
        Request::OnClose(k, v) => Encoder::query(Q::OnClose).bytes(k).bytes(v).finish(),
        Request::Claim(k, v) => Encoder::query(Q::Claim).bytes(k).bytes(v).finish(),
        Request::Notice(k, v) => Encoder::query(Q::Notice).bytes(k).bytes(v).finish(),
    }
}

const LENGTHS: [u64; 10] =
    [0, 1, 2, MAX_KEY_LEN, MAX_KEY_LEN + 1, MAX_VALUE_LEN, MAX_VALUE_LEN + 1, MAX_KEYS, MAX_KEYS + 1, u64::MAX];

fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(v.len() + 1);
        let last = v.len().saturating_sub(1);
        match rng.below(8) {
            0 if !v.is_empty() => v[at.min(last)] ^= 1 << rng.below(8),
            1 if !v.is_empty() => v[at.min(last)] = [0, 1, 0x7f, 0x80, 0xff, 13, 14, 18, 19][rng.below(9)],
            2 if v.len() >= 8 => {
                let at = at.min(v.len() - 8);
                v[at..at + 8].copy_from_slice(&LENGTHS[rng.below(LENGTHS.len())].to_le_bytes());
            }
            3 => {
                let n = rng.below(16);
                v.splice(at..at, (0..n).map(|_| rng.next() as u8));
            }
            4 if !v.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(v.len());
                v.drain(at.min(v.len() - 1)..end);
            }
            5 => v.truncate(at),
            6 => {
                let from = rng.below(other.len() + 1);
                v.splice(at..at, other[from..].iter().copied());
            }
            _ => v.push(rng.next() as u8),
        }
    }
    v
}

fn check(input: &[u8]) -> Result<(), String> {
    match parse_request(input) {
        Err(_) => Ok(()),
        Ok(Frame::Incomplete(need)) => {
            if need <= input.len() || need > MAX_REQUEST_LEN {
                return Err(format!("incomplete with need {need} for {} bytes", input.len()));
            }
            Ok(())
        }
        Ok(Frame::Complete(req, n)) => {
            if n == 0 || n > input.len() {
                return Err(format!("complete with length {n} of {} bytes", input.len()));
            }
            if encode(&req) != input[..n] {
                return Err(format!("{req:?} does not re-encode to the {n} bytes it consumed"));
            }
            for cut in 0..n {
                match parse_request(&input[..cut]) {
                    Ok(Frame::Incomplete(need)) if need > cut && need <= n => {}
                    other => return Err(format!("prefix of {cut} of a {n}-byte request parsed as {other:?}")),
                }
            }
            Ok(())
        }
    }
}

fn fail(input: &[u8], why: String) -> ! {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/store-wire-fuzz-failure.bin");
    let _ = std::fs::write(path, input);
    panic!("wire decoder: {why}; input written to {path}");
}

#[test]
fn the_wire_decoder_survives_mutated_requests() {
    let corpus = corpus();
    for c in &corpus {
        if let Err(why) = check(c) {
            fail(c, why);
        }
    }
    let iters: usize = std::env::var("MCORE_STORE_FUZZ_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(300_000);
    let seed: u64 = std::env::var("MCORE_STORE_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_1234);
    let mut rng = Rng(seed | 1);
    let (mut complete, mut incomplete, mut refused) = (0, 0, 0);
    for _ in 0..iters {
        let a = &corpus[rng.below(corpus.len())];
        let b = &corpus[rng.below(corpus.len())];
        let input = mutate(&mut rng, a, b);
        if let Err(why) = check(&input) {
            fail(&input, why);
        }
        match parse_request(&input) {
            Ok(Frame::Complete(..)) => complete += 1,
            Ok(Frame::Incomplete(_)) => incomplete += 1,
            Err(_) => refused += 1,
        }
    }
    eprintln!(
        "{iters} mutated inputs (seed {seed:#x}): {complete} complete, {incomplete} incomplete, {refused} refused"
    );
    // The generator must exercise all three outcomes, or the test proves little.
    assert!(iters < 1000 || (complete > iters / 20 && incomplete > iters / 20 && refused > iters / 20));
}

/// Mutated requests on live connections: whatever one client sends, the server keeps serving.
#[test]
fn a_live_server_survives_mutated_requests() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port();
    let corpus = corpus();
    let mut rng = Rng(0xfeed_beef);
    let validate = Encoder::query(mcore_init::store::tcp::wire::Query::Validate).u32(VALIDATE_MAGIC).finish();
    for round in 0..300 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let a = &corpus[rng.below(corpus.len())];
        let b = &corpus[rng.below(corpus.len())];
        let mut msg = validate.clone();
        msg.extend(mutate(&mut rng, a, b));
        let _ = s.write_all(&msg);
        if round % 50 == 49 {
            let c = TcpStore::connect("127.0.0.1", port, Duration::from_secs(20)).unwrap();
            c.set(&format!("alive{round}"), b"1").unwrap();
            assert_eq!(c.get(&format!("alive{round}")).unwrap(), b"1");
        }
    }
    let c = TcpStore::connect("127.0.0.1", port, Duration::from_secs(20)).unwrap();
    assert!(c.num_keys().unwrap() >= 6);
}
