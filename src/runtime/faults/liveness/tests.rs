//! Unit tests of the heartbeat mode (in-process stores; the notice mode with our server is in
//! tests/runtime/liveness_notices.rs).

use super::*;
use crate::runtime::faults::Faults;
use crate::store::MemoryStore;

/// Ranks 0, 1 and 2 beating in one in-process store.
fn three_beating() -> (Arc<dyn Store>, Liveness, Liveness, Liveness) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(Duration::from_secs(5)));
    let on = |r| Liveness::on(store.clone(), r, "rank 0".into());
    let (a, b, c) = (on(0), on(1), on(2));
    std::thread::sleep(HEARTBEAT_PERIOD * 2);
    (store, a, b, c)
}

#[test]
fn a_rank_whose_heartbeat_stops_is_named_and_live_ones_are_not() {
    let (_, a, b, c) = three_beating();
    let (a, b) = (Faults::of(a, 0, 3), Faults::of(b, 1, 3));
    drop(c); // rank 2 dies
    assert_eq!(a.liveness().unwrap().silent(&[1, 2, 3]).unwrap(), vec![2, 3], "3 never beat, 2 stopped");
    let text = a.who_is_gone_among(&[0, 1, 2]).unwrap();
    assert!(text.contains("rank(s) 2 stopped answering"), "{text}");
    assert_eq!(a.who_is_gone_among(&[0, 1]), None);
    // Rank 1 fails naming 2 (recorded), then goes: rank 0 is told of 2, not of 1.
    assert!(b.who_is_gone_among(&[1, 2]).unwrap().contains("rank(s) 2 stopped"));
    drop(b);
    let text = a.who_is_gone_among(&[0, 1]).unwrap();
    assert!(text.starts_with("rank(s) 2 stopped answering"), "{text}");
    assert!(text.contains("rank(s) 1 failed waiting for it"), "{text}");
    // After a recovery both numbers are given.
    a.number_as_before(vec![0, 4, 5]);
    let text = a.who_is_gone_among(&[0, 2]).unwrap();
    assert!(text.starts_with("rank(s) 2 (before the recovery: 5) stopped answering"), "{text}");
}

#[test]
fn where_the_store_is_not_ours_rank_0_names_a_rank_whose_heartbeat_stood_still() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(Duration::from_secs(5)));
    let host = || "torchrun's agent at 127.0.0.1:1".to_string();
    let a = Liveness::on_watching(store.clone(), 0, 4, host());
    let b = Liveness::on_watching(store.clone(), 1, 4, host());
    let c = Liveness::on_watching(store.clone(), 2, 4, host());
    // Rank 3 never starts: not named (it is found at check-in instead).
    let epoch = b.interrupt().epoch();
    std::thread::sleep(HEARTBEAT_PERIOD * 3);
    drop(c); // rank 2 dies
    let deadline = Instant::now() + AGENT_SILENT_AFTER + Duration::from_secs(10);
    while b.dead().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(b.dead(), vec![2]);
    assert_eq!(b.interrupt().epoch(), epoch + 1, "the death moved the interrupt once");
    let b = Faults::of(b, 1, 4);
    let text = b.who_is_gone_among(&[0, 1, 2, 3]).unwrap();
    assert!(text.starts_with("rank(s) 2 stopped answering: no heartbeat in the store for 5 s"), "{text}");
    // Live ranks are never named.
    assert!(!a.dead().contains(&1) && !b.dead().contains(&0));
}

#[test]
fn a_store_that_stops_answering_is_named_as_the_hosts_death() {
    /// A store whose every call fails, as a connection to a frozen host does.
    struct Frozen;
    impl Store for Frozen {
        fn set(&self, _: &str, _: &[u8]) -> Result<(), crate::store::StoreError> {
            Err(crate::store::StoreError::Io("no reply within 1.0 s".into()))
        }
        fn get(&self, _: &str) -> Result<Vec<u8>, crate::store::StoreError> {
            self.set("", b"").map(|_| vec![])
        }
        fn add(&self, _: &str, _: i64) -> Result<i64, crate::store::StoreError> {
            self.set("", b"").map(|_| 0)
        }
        fn compare_set(&self, _: &str, _: &[u8], _: &[u8]) -> Result<Vec<u8>, crate::store::StoreError> {
            self.get("")
        }
        fn check(&self, _: &[&str]) -> Result<bool, crate::store::StoreError> {
            self.set("", b"").map(|_| false)
        }
        fn wait(&self, _: &[&str], _: Duration) -> Result<(), crate::store::StoreError> {
            self.set("", b"")
        }
        fn delete_key(&self, _: &str) -> Result<bool, crate::store::StoreError> {
            self.check(&[])
        }
        fn num_keys(&self) -> Result<i64, crate::store::StoreError> {
            self.add("", 0)
        }
        fn timeout(&self) -> Duration {
            Duration::from_secs(1)
        }
    }
    let l = Liveness::on(Arc::new(Frozen), 3, "rank 0 at 127.0.0.1:1".into());
    std::thread::sleep(HEARTBEAT_PERIOD);
    let l = Faults::of(l, 3, 4);
    let text = l.who_is_gone_among(&[0, 1, 3]).unwrap();
    assert!(text.contains("the rendezvous store's host, rank 0 at 127.0.0.1:1, stopped answering"), "{text}");
    assert!(l.store_silent().is_some());
}

#[test]
fn the_one_blame_record_leads_past_silent_ranks_to_the_first_dead_but_not_to_a_live_one() {
    use crate::runtime::meeting::explain::{record, record_of};
    let (store, a, b, c) = three_beating();
    let a = Faults::of(a, 0, 3);
    // Rank 1's creation failed waiting for rank 2, which still answers, and rank 1 went: rank 1
    // is the one that stopped answering, not the live rank its record blames.
    record(&*store, 1, [2].iter());
    drop(b);
    let text = a.who_is_gone_among(&[0, 1, 2]).unwrap();
    assert!(text.starts_with("rank(s) 1 stopped answering"), "{text}");
    assert!(!text.contains("failed waiting"), "{text}");
    // Rank 0 adds to its record what it blames (rank 1), keeping what it had recorded.
    record(&*store, 0, [5].iter());
    assert_eq!(a.who_is_gone_among(&[0, 1, 2]).map(|_| ()), Some(()));
    assert_eq!(record_of(&*store, 0), Some(vec![5, 1]));
    // Once rank 2 went too, rank 1's record (written by its failed creation) leads to it.
    drop(c);
    let text = a.who_is_gone_among(&[0, 1, 2]).unwrap();
    assert!(text.starts_with("rank(s) 2 stopped answering"), "{text}");
    assert!(text.contains("rank(s) 1 failed waiting for it and went"), "{text}");
}

#[test]
fn after_init_a_store_call_without_an_answer_has_the_host_checked_and_a_timeout_does_not() {
    use crate::store::StoreError;
    use std::sync::atomic::AtomicBool;
    /// An in-process store that can be made to answer nothing, as a frozen host does (a test
    /// double for the host; the liveness and its guard are the real ones).
    struct Switch(MemoryStore, AtomicBool);
    impl crate::store::Around for Switch {
        fn around<T>(&self, _: bool, f: impl FnOnce(&dyn Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
            if self.1.load(Ordering::SeqCst) {
                return Err(StoreError::Io("no reply within 1.0 s".into()));
            }
            f(&self.0)
        }
        fn inner_timeout(&self) -> Duration {
            self.0.timeout()
        }
    }
    let store = Arc::new(Switch(MemoryStore::new(Duration::from_millis(50)), AtomicBool::new(false)));
    let l = Liveness::on(store.clone(), 3, "rank 0 at 127.0.0.1:1".into());
    let guarded = l.guard(store.clone());
    guarded.set("k", b"1").unwrap();
    // A wait that runs out while the host answers is the caller's failure, said as it is.
    match guarded.wait(&["missing"], Duration::from_millis(20)) {
        Err(StoreError::Timeout { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(l.store_silent(), None, "a host that answers is not taken for gone");
    // The host answers nothing: the call that got no answer names it, and so does every later one.
    store.1.store(true, Ordering::SeqCst);
    let first = guarded.get("k").unwrap_err().to_string();
    assert!(first.contains("the rendezvous store's host, rank 0 at 127.0.0.1:1, stopped answering"), "{first}");
    let later = guarded.set("k", b"2").unwrap_err().to_string();
    assert!(later.contains("stopped answering"), "{later}");
}
