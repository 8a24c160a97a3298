//! Checkpoint round trips of a rank's streams: identical draws after restore, wrong rank,
//! corrupt blob, layout change (strict and re-derive).

use mcore_init::rng::philox::fill_u32;
use mcore_init::rng::{RankCoordinates, RankRng, RestoreMode, RngError, SeedPolicy, SeedRequest};

fn coords(rank: u32, tp_rank: u32, world_size: u32) -> RankCoordinates {
    RankCoordinates {
        world_size,
        rank,
        tp_rank,
        pp_rank: 1,
        dp_rank: 0,
        layout_fingerprint: 0xfeed,
        ..Default::default()
    }
}

fn req() -> SeedRequest {
    SeedRequest { policy: SeedPolicy::Megatron, seed: 1234, data_parallel_random_init: false, positions: vec![] }
}

/// Draws from every kind of stream: kernel launches on the named Philox streams (their numbers
/// generated with the CPU Philox), the default device generator, and the CPU streams.
fn draw(rr: &mut RankRng) -> (Vec<u32>, Vec<u32>, Vec<f64>) {
    let mut philox = Vec::new();
    for name in ["model-parallel-rng", "expert-parallel-rng", "data-parallel-rng"] {
        let st = rr.tracker_mut().fork(name, 10).unwrap();
        let mut buf = [0u32; 10];
        fill_u32(st.seed, 0, st.offset, &mut buf);
        philox.extend_from_slice(&buf);
    }
    rr.tracker_mut().draw(3).unwrap();
    let g = rr.tracker().generator();
    philox.push(g.offset as u32);
    let mut cpu = vec![0u32; 9];
    rr.cpu_mut().fill_u32("default", &mut cpu).unwrap();
    let mut f = vec![0f64; 5];
    rr.cpu_mut().fill_f64("model-parallel-rng", &mut f).unwrap();
    (philox, cpu, f)
}

#[test]
fn save_draw_restore_gives_identical_draws() {
    let mut rr = RankRng::new(coords(5, 1, 8));
    rr.seed(&req()).unwrap();
    draw(&mut rr); // move every stream off its start, CPU mid-block
    let blob = rr.save().unwrap();
    let first = draw(&mut rr);
    rr.restore(&blob, RestoreMode::Strict).unwrap();
    let again = draw(&mut rr);
    assert_eq!(first, again);
    // a fresh object of the same rank restores to the same point
    let mut other = RankRng::new(coords(5, 1, 8));
    other.restore(&blob, RestoreMode::Strict).unwrap();
    assert_eq!(draw(&mut other), first);
    assert_eq!(other.request(), Some(&req()));
    // and the seed set came back: re-adding a Megatron seed still collides
    let err = other.tracker_mut().add("x", 1234 + 100).unwrap_err();
    assert_eq!(err, RngError::SeedExists(1334));
}

#[test]
fn blob_of_another_rank_is_rejected_naming_both_ranks() {
    let mut r5 = RankRng::new(coords(5, 1, 8));
    r5.seed(&req()).unwrap();
    let blob = r5.save().unwrap();
    let mut r7 = RankRng::new(coords(7, 1, 8));
    r7.seed(&req()).unwrap();
    let before = r7.save().unwrap();
    let err = r7.restore(&blob, RestoreMode::Rederive).unwrap_err();
    assert_eq!(err, RngError::WrongRank { blob_rank: 5, this_rank: 7 });
    let msg = err.to_string();
    assert!(msg.contains("rank 5") && msg.contains("rank 7"), "{msg}");
    assert_eq!(r7.save().unwrap(), before, "a failed restore changes nothing");
}

#[test]
fn corrupt_blobs_are_rejected() {
    let mut rr = RankRng::new(coords(0, 0, 8));
    rr.seed(&req()).unwrap();
    let blob = rr.save().unwrap();
    let mut bad = blob.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 1;
    let e = rr.restore(&bad, RestoreMode::Strict).unwrap_err();
    assert!(matches!(e, RngError::Corrupt(_)) && e.to_string().contains("checksum"), "{e}");
    let e = rr.restore(&blob[..blob.len() - 1], RestoreMode::Strict).unwrap_err();
    assert!(e.to_string().contains("length"), "{e}");
    let e = rr.restore(b"not a checkpoint at all", RestoreMode::Strict).unwrap_err();
    assert!(e.to_string().contains("MCORERNG"), "{e}");
    let mut v2 = blob.clone();
    v2[8] = 2;
    let e = rr.restore(&v2, RestoreMode::Strict).unwrap_err();
    assert!(e.to_string().contains("version 2"), "{e}");
}

#[test]
fn layout_change_is_an_error_unless_rederive() {
    let mut old = RankRng::new(coords(3, 1, 8));
    old.seed(&req()).unwrap();
    draw(&mut old);
    let blob = old.save().unwrap();
    let old_model = old.tracker().get("model-parallel-rng").unwrap();

    // same global rank, new layout: tp rank 1 -> 3, world 8 -> 16
    let mut new = RankRng::new(coords(3, 3, 16));
    let e = new.restore(&blob, RestoreMode::Strict).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, RngError::LayoutChanged(_)), "{msg}");
    assert!(msg.contains("world_size 8 in the checkpoint, 16 here") && msg.contains("tp_rank 1"), "{msg}");
    assert!(msg.contains("re-derive"), "{msg}");

    // re-derive needs this rank seeded first
    let e = new.restore(&blob, RestoreMode::Rederive).unwrap_err();
    assert!(e.to_string().contains("seeded first"), "{e}");

    new.seed(&req()).unwrap();
    new.restore(&blob, RestoreMode::Rederive).unwrap();
    let m = new.tracker().get("model-parallel-rng").unwrap();
    assert_eq!(m.seed, 1234 + 100 + 2718 + 3, "seed re-derived for the new tp rank");
    assert_eq!(m.offset, old_model.offset, "position kept from the checkpoint");
    assert_eq!(new.tracker().generator().offset, old.tracker().generator().offset);
    let pos = |r: &RankRng| r.cpu().states().into_iter().map(|(n, s)| (n, s.word_pos)).collect::<Vec<_>>();
    assert_eq!(pos(&new), pos(&old));

    // a different base seed cannot be re-derived from
    let mut other = RankRng::new(coords(3, 3, 16));
    other.seed(&SeedRequest { seed: 99, ..req() }).unwrap();
    let e = other.restore(&blob, RestoreMode::Rederive).unwrap_err();
    assert!(e.to_string().contains("seed 1234") && e.to_string().contains("seed 99"), "{e}");
}

#[test]
fn save_inside_a_fork_is_refused() {
    let mut rr = RankRng::new(coords(0, 0, 8));
    rr.seed(&req()).unwrap();
    let frame = rr.tracker_mut().fork_enter(None).unwrap();
    let e = rr.save().unwrap_err();
    assert!(e.to_string().contains("inside a fork of model-parallel-rng"), "{e}");
    rr.tracker_mut().fork_exit(frame).unwrap();
    assert!(rr.save().is_ok());
}
