//! RNG micro-benchmarks: tracker fork cost (Rust and through the C API), CPU Philox and ChaCha
//! throughput, checkpoint save/restore. `cargo bench --bench rng`.

use mcore_init::ffi::rng::{
    mcore_rng_coords, mcore_rng_coords_default, mcore_rng_state, mcore_rng_tracker_create, mcore_rng_tracker_destroy,
    mcore_rng_tracker_fork, mcore_rng_tracker_seed,
};
use mcore_init::rng::philox::{fill_u32, fill_uniform};
use mcore_init::rng::{RankCoordinates, RankRng, RestoreMode, SeedPolicy, SeedRequest};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Best of 5 runs of `iters` iterations, in ns per iteration.
fn bench(iters: u64, mut f: impl FnMut()) -> f64 {
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        best = best.min(t.elapsed());
    }
    best.as_nanos() as f64 / iters as f64
}

fn main() {
    let req =
        SeedRequest { policy: SeedPolicy::Megatron, seed: 1234, data_parallel_random_init: false, positions: vec![] };
    let mut rr = RankRng::new(RankCoordinates { world_size: 8, rank: 3, tp_rank: 1, ..Default::default() });
    rr.seed(&req).unwrap();

    let ns = bench(2_000_000, || {
        black_box(rr.tracker_mut().fork(black_box("model-parallel-rng"), 1024).unwrap());
    });
    println!("tracker fork (Rust)              {ns:8.1} ns/launch");

    let mut coords = std::mem::MaybeUninit::<mcore_rng_coords>::uninit();
    unsafe { mcore_rng_coords_default(coords.as_mut_ptr()) };
    let coords = unsafe { coords.assume_init() };
    let t = unsafe { mcore_rng_tracker_create(&coords) };
    unsafe { mcore_rng_tracker_seed(t, c"megatron".as_ptr(), 1234, false, std::ptr::null(), 0) };
    let mut st = mcore_rng_state::default();
    let ns = bench(2_000_000, || {
        unsafe { mcore_rng_tracker_fork(t, c"model-parallel-rng".as_ptr(), 1024, &mut st) };
        black_box(st);
    });
    println!("tracker fork (C API, mutex)      {ns:8.1} ns/launch");
    unsafe { mcore_rng_tracker_destroy(t) };

    let mut buf = vec![0u32; 1 << 20];
    let ns = bench(20, || fill_u32(black_box(42), 0, 0, &mut buf));
    println!("CPU Philox curand()              {:8.1} M u32/s", buf.len() as f64 / ns * 1e3);
    let mut fbuf = vec![0f32; 1 << 20];
    let ns = bench(20, || fill_uniform(black_box(42), 0, 0, &mut fbuf));
    println!("CPU Philox curand_uniform()      {:8.1} M f32/s", fbuf.len() as f64 / ns * 1e3);
    let ns = bench(20, || rr.cpu_mut().fill_u32("default", &mut buf).unwrap());
    println!("ChaCha20 CPU stream u32          {:8.1} M u32/s", buf.len() as f64 / ns * 1e3);
    let mut dbuf = vec![0f64; 1 << 20];
    let ns = bench(20, || rr.cpu_mut().fill_f64("default", &mut dbuf).unwrap());
    println!("ChaCha20 CPU stream f64          {:8.1} M f64/s", dbuf.len() as f64 / ns * 1e3);

    let blob = rr.save().unwrap();
    let ns = bench(100_000, || {
        black_box(rr.save().unwrap());
    });
    println!("checkpoint save ({} B)          {ns:8.1} ns", blob.len());
    let ns = bench(100_000, || rr.restore(black_box(&blob), RestoreMode::Strict).unwrap());
    println!("checkpoint restore               {ns:8.1} ns");
}
