//! Unit tests of the one explanation of a failed creation (in-process stores; the backend of
//! the creation test is a test double that fails).

use super::*;
use crate::backend::{CommErrorKind, CommFactory, CommOptions, Communicator, GroupInfo};
use crate::runtime::launch::host::{publish, HostInfo};
use crate::runtime::meeting::keys;
use crate::runtime::meeting::progress::mark;
use crate::store::MemoryStore;
use crate::timeout::Deadline;
use std::sync::Arc;

fn host(name: &str, addr: &str) -> HostInfo {
    HostInfo { hostname: name.into(), addr: addr.parse().unwrap(), why: String::new() }
}

fn at_step(members: &[u32], step: u64) -> Waited<'_> {
    Waited { members, behind: Behind::Step(step) }
}

#[test]
fn members_below_the_step_are_named_with_their_hosts() {
    let s = MemoryStore::new(Duration::from_secs(1));
    mark(&s, 0, 3).unwrap();
    mark(&s, 1, 2).unwrap();
    mark(&s, 2, 5).unwrap();
    // rank 3 never marked anything
    let text = Explainer::new(&s, 0).explain_message(&at_step(&[0, 1, 2, 3], 3), "timed out");
    assert_eq!(text, "timed out; rank(s) 1, 3 did not come to this group");
    assert_eq!(Explainer::new(&s, 2).explain_message(&at_step(&[0, 2], 3), "failed"), "failed");
    // A member that published its host is named with it.
    publish(&s, 3, &host("n1", "10.0.0.2")).unwrap();
    assert_eq!(
        Explainer::new(&s, 0).explain_message(&at_step(&[1, 3], 3), "x"),
        "x; rank(s) 1; 3 on host 'n1' (10.0.0.2) did not come to this group"
    );
    // All arrived: the members' hosts are named.
    mark(&s, 3, 3).unwrap();
    assert_eq!(
        Explainer::new(&s, 0).explain_message(&at_step(&[0, 3], 3), "y"),
        "y; the group's ranks are 0; 3 on host 'n1' (10.0.0.2)"
    );
}

#[test]
fn a_member_stuck_behind_a_dead_rank_passes_the_blame_on() {
    let s = MemoryStore::new(Duration::from_secs(1));
    // Rank 3 died before step 2; rank 1 waited for it at step 2 and failed; rank 0 waits
    // for rank 1 at step 3.
    mark(&s, 3, 1).unwrap();
    mark(&s, 1, 2).unwrap();
    mark(&s, 0, 3).unwrap();
    let text = Explainer::new(&s, 1).explain_message(&at_step(&[1, 3], 2), "timed out");
    assert_eq!(text, "timed out; rank(s) 3 did not come to this group");
    let text = Explainer::new(&s, 0).explain_message(&at_step(&[0, 1], 3), "timed out");
    assert_eq!(text, "timed out; rank(s) 1 failed at an earlier group, waiting for rank(s) 3");
    // Rank 0 passes on rank 3, not rank 1, to whoever waits for it in turn.
    assert_eq!(record_of(&s, 0), Some(vec![3]));
}

/// Test double: a backend whose every creation fails at once, as one whose peers never
/// connect does.
struct Refused;

impl CommFactory for Refused {
    fn name(&self) -> &str {
        "refused-double"
    }
    fn create_group(
        &self,
        g: &GroupInfo,
        _: &CommOptions,
        _: Arc<dyn Store>,
    ) -> Result<Box<dyn Communicator>, CommError> {
        Err(CommError::new(CommErrorKind::Timeout, format!("{}: peers never connected", g.name)))
    }
}

/// A creation after init (a resume's or a group's): the members meet in a space of their own
/// before the backend creates. Rank 2 (on host n2) never arrives; rank 1 arrived at neither,
/// stuck at an earlier group waiting for rank 2 (its blame record says so).
#[test]
fn a_creation_after_init_names_who_never_arrived_and_follows_the_chain() {
    use crate::runtime::creation::groups::create_comms;
    let s = MemoryStore::new(Duration::from_secs(5));
    publish(&s, 2, &host("n2", "10.0.0.3")).unwrap();
    let space = keys::resume("tp/0") + "/0";
    let what = "this resume of communicator 'tp/0'";
    let m = Meeting::new(&s, &space, what, vec![0, 2], 0, Deadline::after(Duration::from_secs(5)));
    m.arrive(b"1").unwrap();
    let info = GroupInfo::new("tp/0", vec![0, 2], 0, Duration::from_secs(1)).unwrap();
    let options = CommOptions::default();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(Duration::from_secs(1)));
    let waited = [Waited { members: &[0, 2], behind: Behind::Absent(&m) }];
    let (i, e) =
        create_comms(&Refused, &[(&info, &options, store.clone())], &waited, &Explainer::new(&s, 0), false, true)
            .err()
            .expect("the double refuses");
    assert_eq!(i, 0);
    let text = e.message.split(" (waited").next().unwrap();
    assert_eq!(
        text,
        "tp/0: peers never connected; rank(s) 2 on host 'n2' (10.0.0.3) did not come to this resume of communicator 'tp/0'"
    );
    assert_eq!(record_of(&s, 0), Some(vec![2]), "this rank's record names whom it waited for");
    // Rank 3 waits for rank 1 in another group; rank 1 failed earlier waiting for rank 2.
    s.set(&keys::blame(1), b"2").unwrap();
    let m =
        Meeting::new(&s, "after_init/g/0", "create_group of group 'g'", vec![1, 3], 3, Deadline::after(Duration::ZERO));
    m.arrive(b"members=1,3").unwrap();
    let waited = [Waited { members: &[1, 3], behind: Behind::Absent(&m) }];
    let (_, e) = create_comms(&Refused, &[(&info, &options, store)], &waited, &Explainer::new(&s, 3), false, true)
        .err()
        .expect("the double refuses");
    assert_eq!(
        e.message,
        "tp/0: peers never connected; rank(s) 1 failed at an earlier group, waiting for rank(s) 2 on host 'n2' (10.0.0.3)"
    );
    assert_eq!(record_of(&s, 3), Some(vec![2]), "rank 3 passes the blame on to rank 2");
}

#[test]
fn only_a_step_that_lasts_is_published_and_a_fast_member_is_not_named() {
    let s: Arc<dyn Store> = Arc::new(MemoryStore::new(Duration::from_secs(1)));
    let fast = progress::Progress::start(s.clone(), 1);
    for step in 1..=20 {
        fast.mark(step);
    }
    // Rank 1 has just reached step 20, published nothing yet: rank 0 failing at step 20
    // finds it behind at first, but reads it again after the grace.
    assert_eq!(progress::behind(s.as_ref(), &[1], 20), vec![1]);
    let failing = progress::Progress::start(s.clone(), 0);
    failing.mark(20);
    let waited = Waited { members: &[0, 1], behind: Behind::Step(20) };
    let failed = crate::backend::CommError::new(crate::backend::CommErrorKind::Timeout, "failed");
    let e = Explainer::of(&failing).explain(&waited, failed);
    assert_eq!(e.message, "failed", "a merely fast member was named");
    assert_eq!(s.add(&keys::progress(1), 0).unwrap(), 20, "the step that lasted is published");
    assert_eq!(s.add(&keys::progress(0), 0).unwrap(), 20, "a failing rank publishes its step at once");
    // The end is published at once; a rank that stops (drops it) publishes nothing more.
    fast.finish();
    assert_eq!(progress::behind(s.as_ref(), &[1], 1_000), Vec::<u32>::new());
    let gone = progress::Progress::start(s.clone(), 2);
    gone.mark(3);
    drop(gone);
    std::thread::sleep(progress::PUBLISH_AFTER * 2);
    assert_eq!(s.add(&keys::progress(2), 0).unwrap(), 0);
}
