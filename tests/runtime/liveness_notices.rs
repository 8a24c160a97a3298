//! Liveness through our server's notices (src/runtime/liveness/, docs/faults.md), with real
//! connections to a real `TcpStoreServer`: a rank's death wakes every watcher at once, a
//! question is answered by every live rank, and a client posing as a rank (a forged close notice,
//! writes to its counter, a claim of it) changes nothing.

use mcore_init::runtime::faults::interrupt::Interrupt;
use mcore_init::runtime::faults::liveness::Liveness;
use mcore_init::runtime::faults::Faults;
use mcore_init::runtime::LaunchEnv;
use mcore_init::store::tcp::auth::TokenCell;
use mcore_init::store::tcp::wire::{Encoder, Query, VALIDATE_MAGIC};
use mcore_init::store::{Store, TcpStore, TcpStoreServer};
use std::io::{Read, Write};
use std::net::TcpStream;

use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
const PREFIX: &str = "job/0";

fn env(rank: u32, world: u32, port: u16) -> LaunchEnv {
    let vars = [
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", world.to_string()),
        ("LOCAL_RANK", rank.to_string()),
        ("LOCAL_WORLD_SIZE", world.to_string()),
        ("MASTER_ADDR", "127.0.0.1".to_string()),
        ("MASTER_PORT", port.to_string()),
    ];
    LaunchEnv::from_lookup(&|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap()
}

fn start(rank: u32, world: u32, port: u16) -> Liveness {
    Liveness::start(&env(rank, world, port), PREFIX, T, TokenCell::default(), Interrupt::new()).unwrap()
}

/// A raw connection that claims rank `rank`'s counter and arms its close notice, as a rank's
/// heartbeat connection does; dropping it is that rank being killed.
fn rank_connection(port: u16, rank: u32) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let counter = format!("/{PREFIX}/alive/{rank}");
    s.write_all(&Encoder::query(Query::Validate).u32(VALIDATE_MAGIC).finish()).unwrap();
    s.write_all(&Encoder::query(Query::Claim).bytes(counter.as_bytes()).bytes(b"secret").finish()).unwrap();
    let events = format!("/{PREFIX}/alive/events");
    s.write_all(&Encoder::query(Query::OnClose).bytes(events.as_bytes()).bytes(b"").finish()).unwrap();
    let mut ok = [9u8; 1];
    s.set_read_timeout(Some(T)).unwrap();
    s.read_exact(&mut ok).unwrap();
    assert_eq!(ok[0], 0, "the claim of rank {rank}'s counter was refused");
    s
}

fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_killed_rank_is_named_by_every_watcher_at_once_and_live_ranks_answer_questions() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port();
    let ranks: Vec<Liveness> = (0..3).map(|r| start(r, 4, port)).collect();
    let epoch = ranks[1].interrupt().epoch();
    // Rank 3's heartbeat connection, then its process killed (the kernel closes the socket).
    let three = rank_connection(port, 3);
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    drop(three);
    for l in &ranks {
        until("a watcher did not learn of rank 3's death", || l.dead() == vec![3]);
    }
    println!("every watcher named rank 3 {:.3} s after its connection closed", killed.elapsed().as_secs_f64());
    assert_eq!(ranks[1].interrupt().epoch(), epoch + 1, "the death moved the interrupt once");
    // A question: the live ranks answer, rank 3 (dead) and rank 7 (never started) do not.
    assert_eq!(ranks[0].silent(&[1, 2, 3, 7]).unwrap(), vec![3, 7]);
    let mut ranks = ranks.into_iter();
    let zero = Faults::of(ranks.next().unwrap(), 0, 4);
    let text = zero.who_is_gone_among(&[0, 1, 2, 3]).unwrap();
    assert!(text.contains("rank(s) 3") && text.contains("died"), "{text}");
    // A rank that leaves (drop: its notice withdrawn first) is not named.
    let two = ranks.nth(1).unwrap();
    drop(two);
    std::thread::sleep(Duration::from_millis(300));
    let c = TcpStore::connect("127.0.0.1", port, T).unwrap();
    assert_eq!(c.add(&format!("{PREFIX}/alive/events"), 0).unwrap(), 2, "only rank 3's death and the question");
}

#[test]
fn a_client_posing_as_rank_1_changes_nothing_and_one_that_claimed_first_is_named() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port();
    let zero = start(0, 3, port);
    let one = start(1, 3, port);
    // The poser: a close notice naming rank 1 (without a claim of its own), writes to
    // alive/1, a claim of it with another secret.
    let poser = TcpStore::connect("127.0.0.1", port, T).unwrap();
    let _ = poser.on_close(&format!("{PREFIX}/alive/events"));
    assert!(poser.num_keys().is_err(), "a close notice without a claim was armed");
    let poser = TcpStore::connect("127.0.0.1", port, T).unwrap();
    let _ = poser.set(&format!("{PREFIX}/alive/1"), b"1000000");
    assert!(poser.num_keys().is_err(), "a write to rank 1's counter was served");
    let poser = TcpStore::connect("127.0.0.1", port, T).unwrap();
    assert!(poser.claim(&format!("{PREFIX}/alive/1"), b"guess").unwrap().is_err());
    drop(poser);
    std::thread::sleep(Duration::from_millis(300));
    assert!(zero.dead().is_empty() && one.dead().is_empty(), "a poser made a live rank dead");
    assert_eq!(zero.silent(&[1]).unwrap(), Vec::<u32>::new(), "rank 1 is alive and answers");
    let zero = Faults::of(zero, 0, 3);
    assert_eq!(zero.who_is_gone_among(&[0, 1]), None);
    // A client that claimed rank 2's counter before rank 2 started: rank 2's start fails,
    // naming it.
    let early = TcpStore::connect("127.0.0.1", port, T).unwrap();
    early.claim(&format!("{PREFIX}/alive/2"), b"guess").unwrap().unwrap();
    let err = match Liveness::start(&env(2, 3, port), PREFIX, T, TokenCell::default(), Interrupt::new()) {
        Err(e) => format!("{e:?}"),
        Ok(_) => panic!("rank 2 started though its counter was claimed by another client"),
    };
    let at = early.local_addr().unwrap().to_string();
    assert!(err.contains("posed as rank 2") && err.contains(&at), "{err}");
}

/// Established connections to 127.0.0.1:`port` from a client side (their remote port is `port`),
/// as /proc/net/tcp lists them (the server runs in this process too: its sides are left out).
fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let remote = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[2].ends_with(&remote) && f[3] == "01"
        })
        .count()
}

#[test]
fn a_rank_holds_one_liveness_connection_that_answers_questions_and_leaves_quietly() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port();
    let zero = start(0, 2, port);
    let one = start(1, 2, port);
    // Initializing: the watcher parks for short spells and bumps between them.
    zero.set_deadline(Some(Instant::now() + T));
    one.set_deadline(Some(Instant::now() + T));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(connections_to(port), 2, "each rank's liveness holds one connection");
    // A question through rank 0's parked connection; rank 1 answers on its own.
    for _ in 0..3 {
        assert_eq!(zero.silent(&[1]).unwrap(), Vec::<u32>::new(), "rank 1 is alive and answers");
    }
    // Idle (long parks): a question still gets through, and a new deadline wakes the watcher.
    zero.set_deadline(None);
    one.set_deadline(None);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(one.silent(&[0]).unwrap(), Vec::<u32>::new(), "rank 0 is alive and answers while idle");
    let one = Faults::of(one, 1, 2);
    assert_eq!(one.who_is_gone_among(&[0, 1]), None);
    zero.set_deadline(Some(Instant::now() + T));
    assert_eq!(connections_to(port), 2, "a question or a wake opened a connection");
    // Rank 1 leaves (its liveness dropped): its notice is withdrawn, nobody is named dead.
    drop(one);
    std::thread::sleep(Duration::from_millis(500));
    assert!(zero.dead().is_empty(), "a rank that left was named dead: {:?}", zero.dead());
    assert_eq!(connections_to(port), 1);
}

/// A liveness stopped right after it started (a failed init's, a recovery's) leaves as quietly as
/// one that ran: its watcher parks on the connection it started with (before, a watcher that ran
/// before `start` had stored that connection opened a second one, which took the claim and kept
/// its close notice armed: the rank was named dead as it left, and the stop waited out the
/// watcher's one-minute park on the second connection, which no wake reached).
#[test]
fn a_liveness_stopped_as_it_starts_leaves_quietly_on_its_one_connection() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port();
    let zero = start(0, 2, port);
    for round in 0..30 {
        let one = start(1, 2, port);
        if round % 2 == 0 {
            one.set_deadline(Some(Instant::now() + T));
        }
        assert!(connections_to(port) <= 2, "round {round}: rank 1's liveness opened a second connection");
        drop(one);
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(zero.dead().is_empty(), "rank 1 was named dead as it left: {:?}", zero.dead());
    assert_eq!(connections_to(port), 1);
}

/// Issue 42: a claim owns the keys under its counter (the rank's blame record,
/// `alive/<rank>/blame`). A record another client wrote before the rank claimed is deleted by the
/// claim; one written after is refused (and that client's connection closed); the rank's own
/// connection writes it.
#[test]
fn only_the_rank_writes_its_blame_record_and_its_claim_clears_a_forged_one() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port();
    let record = format!("{PREFIX}/alive/4/blame");
    let forger = TcpStore::connect("127.0.0.1", port, T).unwrap();
    forger.set(&record, b"1").unwrap();
    let owner = TcpStore::connect("127.0.0.1", port, T).unwrap();
    owner.claim(&format!("{PREFIX}/alive/4"), b"secret4").unwrap().unwrap();
    assert!(!owner.check(&[&record]).unwrap(), "the claim left the record another client wrote before it");
    owner.set(&record, b"3").unwrap();
    let _ = forger.set(&record, b"1");
    assert!(forger.num_keys().is_err(), "a write under another connection's claim was served");
    assert_eq!(owner.get(&record).unwrap(), b"3");
    // Keys under a counter nobody claims stay anyone's (the store is not only ours).
    let other = TcpStore::connect("127.0.0.1", port, T).unwrap();
    other.set(&format!("{PREFIX}/alive/9/blame"), b"5").unwrap();
    assert_eq!(other.get(&format!("{PREFIX}/alive/9/blame")).unwrap(), b"5");
}

/// After init a store call through the liveness guard that returns within BUSY_PROBE_AFTER costs
/// the watcher nothing: the server serves the calls and nothing else, during them or after (until
/// issue 42 the watcher probed the host, two requests every 0.5 s, while a call ran and for 5 s
/// after it); a longer one is probed for while it runs only.
#[test]
fn after_init_store_calls_through_the_guard_send_no_probe() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let port = server.port();
    let (zero, one) = (start(0, 2, port), start(1, 2, port));
    let pool: std::sync::Arc<dyn Store> = std::sync::Arc::new(TcpStore::connect("127.0.0.1", port, T).unwrap());
    let guarded = zero.guard(pool);
    // Init runs, then ends (`bring_up::init_over`): the watchers park for a minute.
    zero.set_deadline(Some(Instant::now() + T));
    std::thread::sleep(Duration::from_millis(600));
    zero.set_deadline(None);
    std::thread::sleep(Duration::from_millis(1200));
    let before = server.requests_served();
    for i in 0..20 {
        guarded.set(&format!("{PREFIX}/k{i}"), b"1").unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    let after = server.requests_served();
    assert_eq!(after - before, 20, "the 20 SETs and nothing else were served");
    // A call still running after BUSY_PROBE_AFTER has the watcher probe the host (it bumps its
    // counter) until the call returns, and not after.
    let beats = || TcpStore::connect("127.0.0.1", port, T).unwrap().add(&format!("{PREFIX}/alive/0"), 0).unwrap();
    let at_start = beats();
    assert!(guarded.wait(&[&format!("{PREFIX}/never")], Duration::from_millis(3000)).is_err());
    let at_end = beats();
    assert!(at_end > at_start, "no probe while a call ran 3 s ({at_start} -> {at_end})");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(beats(), at_end, "a probe after the call returned");
    drop((zero, one));
}
