//! The rng C API through its `extern "C"` functions, error paths included.

use mcore_init::ffi::error::mcore_last_error_message;
use mcore_init::ffi::mcore_status;
use mcore_init::ffi::rng::*;
use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};

fn last_error() -> String {
    unsafe { CStr::from_ptr(mcore_last_error_message()) }.to_string_lossy().into_owned()
}

fn coords(rank: u32, tp_rank: u32) -> mcore_rng_coords {
    let mut c = std::mem::MaybeUninit::<mcore_rng_coords>::uninit();
    assert_eq!(unsafe { mcore_rng_coords_default(c.as_mut_ptr()) }, mcore_status::Ok);
    let mut c = unsafe { c.assume_init() };
    c.world_size = 8;
    c.rank = rank;
    c.tp_rank = tp_rank;
    c.pp_rank = rank / 4;
    c
}

struct Tracker(*mut mcore_rng_tracker);

impl Tracker {
    fn new(c: &mcore_rng_coords) -> Self {
        let t = unsafe { mcore_rng_tracker_create(c) };
        assert!(!t.is_null(), "{}", last_error());
        Tracker(t)
    }
    fn seed(&self, policy: &CStr, seed: i64) -> mcore_status {
        unsafe { mcore_rng_tracker_seed(self.0, policy.as_ptr(), seed, false, null(), 0) }
    }
    fn state(&self, name: &CStr) -> Result<mcore_rng_state, (mcore_status, String)> {
        let mut s = mcore_rng_state::default();
        match unsafe { mcore_rng_tracker_get_state(self.0, name.as_ptr(), &mut s) } {
            mcore_status::Ok => Ok(s),
            e => Err((e, last_error())),
        }
    }
    fn save(&self) -> Vec<u8> {
        let mut need = 0usize;
        assert_eq!(unsafe { mcore_rng_tracker_save(self.0, null_mut(), 0, &mut need) }, mcore_status::BufferTooSmall);
        assert!(need > 16);
        let mut buf = vec![0u8; need];
        let mut len = 0usize;
        assert_eq!(unsafe { mcore_rng_tracker_save(self.0, buf.as_mut_ptr(), buf.len(), &mut len) }, mcore_status::Ok);
        assert_eq!(len, need);
        buf
    }
    fn restore(&self, blob: &[u8], flags: u32) -> mcore_status {
        unsafe { mcore_rng_tracker_restore(self.0, blob.as_ptr(), blob.len(), flags) }
    }
    fn cpu(&self, name: &CStr, n: usize) -> Vec<u32> {
        let mut v = vec![0u32; n];
        assert_eq!(
            unsafe { mcore_rng_tracker_cpu_fill_u32(self.0, name.as_ptr(), v.as_mut_ptr(), n) },
            mcore_status::Ok
        );
        v
    }
    fn fork(&self, name: &CStr, count: u64) -> mcore_rng_state {
        let mut s = mcore_rng_state::default();
        assert_eq!(
            unsafe { mcore_rng_tracker_fork(self.0, name.as_ptr(), count, &mut s) },
            mcore_status::Ok,
            "{}",
            last_error()
        );
        s
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        unsafe { mcore_rng_tracker_destroy(self.0) }
    }
}

#[test]
fn state_struct_is_16_bytes() {
    assert_eq!(std::mem::size_of::<mcore_rng_state>(), 16);
    assert_eq!(std::mem::align_of::<mcore_rng_state>(), 8);
}

#[test]
fn megatron_seeding_and_fork() {
    let t = Tracker::new(&coords(5, 1));
    assert_eq!(t.seed(c"megatron", 1234), mcore_status::Ok, "{}", last_error());
    // rank 5 is pp_rank 1: s = 1334, model = s + 2718 + tp_rank
    assert_eq!(t.state(c"model-parallel-rng").unwrap(), mcore_rng_state { seed: 1334 + 2719, offset: 0 });
    assert_eq!(t.state(c"default").unwrap(), mcore_rng_state { seed: 1334, offset: 0 });
    assert_eq!(t.fork(c"model-parallel-rng", 5), mcore_rng_state { seed: 4053, offset: 0 });
    assert_eq!(t.fork(c"model-parallel-rng", 1), mcore_rng_state { seed: 4053, offset: 8 });
    assert_eq!(t.state(c"model-parallel-rng").unwrap().offset, 12);
    let new = mcore_rng_state { seed: 7, offset: 40 };
    assert_eq!(unsafe { mcore_rng_tracker_set_state(t.0, c"model-parallel-rng".as_ptr(), &new) }, mcore_status::Ok);
    assert_eq!(t.state(c"model-parallel-rng").unwrap(), new);
    assert_eq!(unsafe { mcore_rng_tracker_reset(t.0) }, mcore_status::Ok);
    let (st, msg) = t.state(c"model-parallel-rng").unwrap_err();
    assert_eq!(st, mcore_status::NotFound);
    assert_eq!(msg, "cuda rng state model-parallel-rng is not added");
}

#[test]
fn error_paths_name_the_bad_value() {
    let t = Tracker::new(&coords(0, 0));
    assert_eq!(unsafe { mcore_rng_tracker_add(t.0, c"a".as_ptr(), 10) }, mcore_status::Ok);
    assert_eq!(unsafe { mcore_rng_tracker_add(t.0, c"b".as_ptr(), 10) }, mcore_status::AlreadyExists);
    assert_eq!(last_error(), "seed 10 already exists");
    assert_eq!(unsafe { mcore_rng_tracker_add(t.0, c"a".as_ptr(), 11) }, mcore_status::AlreadyExists);
    assert_eq!(last_error(), "cuda rng state a already exists");
    // the failed duplicate-name add burnt seed 11
    assert_eq!(unsafe { mcore_rng_tracker_add(t.0, c"c".as_ptr(), 11) }, mcore_status::AlreadyExists);
    let mut s = mcore_rng_state::default();
    assert_eq!(unsafe { mcore_rng_tracker_fork(t.0, c"nope".as_ptr(), 4, &mut s) }, mcore_status::NotFound);
    assert!(last_error().contains("nope"), "{}", last_error());
    assert_eq!(unsafe { mcore_rng_tracker_fork(t.0, null(), 4, &mut s) }, mcore_status::InvalidArgument);
    assert_eq!(last_error(), "name is NULL");
    assert_eq!(unsafe { mcore_rng_tracker_fork(t.0, c"a".as_ptr(), 4, null_mut()) }, mcore_status::InvalidArgument);
    assert_eq!(unsafe { mcore_rng_tracker_add(null_mut(), c"a".as_ptr(), 1) }, mcore_status::InvalidArgument);
    assert_eq!(last_error(), "tracker is NULL");
    assert_eq!(t.seed(c"megatron", 0), mcore_status::InvalidArgument);
    assert_eq!(last_error(), "Seed (0) should be a positive integer.");
    assert_eq!(t.seed(c"shardd:x", 1), mcore_status::InvalidArgument);
    assert!(last_error().contains("'shardd:x'"), "{}", last_error());
    let mut out = [0u32; 4];
    assert_eq!(
        unsafe { mcore_rng_tracker_cpu_fill_u32(t.0, c"ghost".as_ptr(), out.as_mut_ptr(), 4) },
        mcore_status::NotFound
    );
    assert!(last_error().contains("ghost"), "{}", last_error());
    assert_eq!(unsafe { mcore_rng_philox_fill_u32(1, 0, 0, null_mut(), 3) }, mcore_status::InvalidArgument);
    assert!(last_error().contains("length is 3"), "{}", last_error());
    assert_eq!(unsafe { mcore_rng_philox_fill_u32(1, 0, 0, null_mut(), 0) }, mcore_status::Ok);
    assert!(unsafe { mcore_rng_tracker_create(null()) }.is_null());
    assert_eq!(last_error(), "coords is NULL");
    let mut small = coords(0, 0);
    small.struct_size = 8;
    assert!(unsafe { mcore_rng_tracker_create(&small) }.is_null());
    assert!(last_error().contains("mcore_rng_coords struct_size 8 "), "{}", last_error());
    unsafe { mcore_rng_tracker_destroy(null_mut()) };
}

#[test]
fn megatron_seed_collision_reported() {
    // W=216 tp=8 ep=18 etp=6: rank 102 has tp_rank 6, ep_rank 17, etp_rank 0 -> model == expert
    let mut c = coords(102, 6);
    c.world_size = 216;
    c.pp_rank = 0;
    c.ep_rank = 17;
    c.etp_rank = 0;
    let t = Tracker::new(&c);
    assert_eq!(t.seed(c"megatron", 1234), mcore_status::AlreadyExists);
    assert_eq!(last_error(), "seed 3958 already exists");
}

#[test]
fn checkpoint_round_trip_and_rejections() {
    let t = Tracker::new(&coords(5, 1));
    assert_eq!(t.seed(c"megatron", 42), mcore_status::Ok);
    t.cpu(c"default", 3);
    t.fork(c"data-parallel-rng", 9);
    let blob = t.save();
    let want = (t.cpu(c"default", 20), t.fork(c"data-parallel-rng", 4), t.fork(c"default", 4));
    assert_eq!(t.restore(&blob, 0), mcore_status::Ok, "{}", last_error());
    assert_eq!((t.cpu(c"default", 20), t.fork(c"data-parallel-rng", 4), t.fork(c"default", 4)), want);

    // too small a buffer reports the size
    let mut len = 0usize;
    let mut tiny = [0u8; 4];
    assert_eq!(unsafe { mcore_rng_tracker_save(t.0, tiny.as_mut_ptr(), 4, &mut len) }, mcore_status::BufferTooSmall);
    assert_eq!(len, blob.len());

    let mut bad = blob.clone();
    bad[30] ^= 0xff;
    assert_eq!(t.restore(&bad, 0), mcore_status::Corrupt);
    assert!(last_error().contains("checksum"), "{}", last_error());
    assert_eq!(t.restore(&blob, 8), mcore_status::InvalidArgument);
    assert!(last_error().contains("0x8"), "{}", last_error());

    let other = Tracker::new(&coords(7, 1));
    assert_eq!(other.restore(&blob, MCORE_RNG_RESTORE_REDERIVE), mcore_status::WrongRank);
    let msg = last_error();
    assert!(msg.contains("rank 5") && msg.contains("rank 7"), "{msg}");

    // same rank, new layout
    let moved = Tracker::new(&coords(5, 3));
    assert_eq!(moved.restore(&blob, 0), mcore_status::WrongRank);
    assert!(last_error().contains("tp_rank 1 in the checkpoint, 3 here"), "{}", last_error());
    assert_eq!(moved.seed(c"megatron", 42), mcore_status::Ok);
    assert_eq!(moved.restore(&blob, MCORE_RNG_RESTORE_REDERIVE), mcore_status::Ok, "{}", last_error());
    let m = moved.state(c"model-parallel-rng").unwrap();
    assert_eq!(m.seed, 42 + 100 + 2718 + 3);
}

#[test]
fn policy_seeds_lists_every_stream() {
    let c = coords(6, 0); // pp_rank 1
    let mut out = [mcore_rng_named_seed { name: [0; MCORE_RNG_NAME_MAX], seed: 0 }; 4];
    let mut n = 0usize;
    let st = unsafe {
        mcore_rng_policy_seeds(c"megatron".as_ptr(), 1234, false, &c, null(), 0, out.as_mut_ptr(), 2, &mut n)
    };
    assert_eq!(st, mcore_status::BufferTooSmall);
    assert_eq!(n, 4);
    let st = unsafe {
        mcore_rng_policy_seeds(c"megatron".as_ptr(), 1234, false, &c, null(), 0, out.as_mut_ptr(), 4, &mut n)
    };
    assert_eq!(st, mcore_status::Ok, "{}", last_error());
    let got: Vec<(String, u64)> = out[..n]
        .iter()
        .map(|s| (unsafe { CStr::from_ptr(s.name.as_ptr() as *const c_char) }.to_string_lossy().into_owned(), s.seed))
        .collect();
    assert_eq!(
        got,
        [("default", 1334), ("data-parallel-rng", 1334), ("model-parallel-rng", 4052), ("expert-parallel-rng", 2358)]
            .map(|(a, b)| (a.to_string(), b))
    );
    // sharded over [pp, tp]: rank with pp 1 of 2, tp 1 of 2 -> +3
    let pos = [mcore_rng_group_position { rank: 1, size: 2 }, mcore_rng_group_position { rank: 1, size: 2 }];
    let policy = c"sharded:pipeline_model_parallel,tensor_model_parallel";
    let st = unsafe {
        mcore_rng_policy_seeds(policy.as_ptr(), 100, false, &c, pos.as_ptr(), 2, out.as_mut_ptr(), 4, &mut n)
    };
    assert_eq!(st, mcore_status::Ok, "{}", last_error());
    assert_eq!((n, out[0].seed), (1, 103));
    let st = unsafe {
        mcore_rng_policy_seeds(policy.as_ptr(), 100, false, &c, pos.as_ptr(), 1, out.as_mut_ptr(), 4, &mut n)
    };
    assert_eq!(st, mcore_status::InvalidArgument);
    assert!(last_error().contains("2 group kinds but 1"), "{}", last_error());
}

#[test]
fn philox_fill_matches_known_answer_and_uniform_map() {
    // Random123 KAT `philox4x32 10`, all-zero line: seed 0, subsequence 0, offset 0 is ctr 0, key 0.
    let mut w = [0u32; 4];
    assert_eq!(unsafe { mcore_rng_philox_fill_u32(0, 0, 0, w.as_mut_ptr(), 4) }, mcore_status::Ok);
    assert_eq!(w, [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
    // curand_uniform is x·2^-32 + 2^-33 of the same stream
    let mut f = [0f32; 6];
    let mut u = [0u32; 6];
    unsafe {
        assert_eq!(mcore_rng_philox_fill_uniform(9, 2, 5, f.as_mut_ptr(), 6), mcore_status::Ok);
        assert_eq!(mcore_rng_philox_fill_u32(9, 2, 5, u.as_mut_ptr(), 6), mcore_status::Ok);
    }
    for (x, y) in f.iter().zip(u) {
        assert_eq!(*x, y as f32 * 2f32.powi(-32) + 2f32.powi(-33));
    }
}

#[test]
fn handle_is_usable_from_many_threads() {
    let t = Tracker::new(&coords(0, 0));
    assert_eq!(t.seed(c"roll", 5), mcore_status::Ok);
    let addr = t.0 as usize;
    let handles: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let t = addr as *mut mcore_rng_tracker;
                let mut s = mcore_rng_state::default();
                let mut seen = Vec::new();
                for _ in 0..250 {
                    assert_eq!(
                        unsafe { mcore_rng_tracker_fork(t, c"model-parallel-rng".as_ptr(), 4, &mut s) },
                        mcore_status::Ok
                    );
                    seen.push(s.offset);
                }
                seen
            })
        })
        .collect();
    let mut all: Vec<u64> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    all.sort_unstable();
    // every launch got its own offset: 0, 4, ..., 3996
    assert_eq!(all, (0..1000u64).map(|i| i * 4).collect::<Vec<_>>());
    assert_eq!(t.state(c"model-parallel-rng").unwrap().offset, 4000);
}
