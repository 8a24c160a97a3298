//! Topology benchmark (not a test): one rank's view and the full layout of every kind for
//! 1,024 / 65,536 / 1,048,576 ranks (tp=8 pp=16 cp=2 ep=8 etp=1, two distributed-optimizer
//! instances, dp scaled). Run: `cargo bench --bench topology`; results in docs/benchmarks/topology.md.

use mcore_init::topology::{Topology, TopologyConfig};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Counts live and peak heap bytes.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A cheap deterministic spread of ranks.
fn sample_ranks(world: u32, n: u32) -> Vec<u32> {
    (0..n).map(|i| ((u64::from(i) * 2_654_435_761) % u64::from(world)) as u32).collect()
}

fn main() {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("cores available: {cores}");
    println!(
        "| world | view µs (indices) | view + all member lists µs | full layout s | groups | ranks listed | peak heap MiB | heap/rank B |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for world in [1u32 << 10, 1 << 16, 1 << 20] {
        let cfg =
            TopologyConfig { tp: 8, pp: 16, cp: 2, ep: 8, etp: Some(1), dist_opt_instances: 2, ..Default::default() };
        let t = Topology::new(cfg, world).expect("valid layout");

        // One rank's view: its group (index, rank, size) in every kind.
        let ranks = sample_ranks(world, 20_000);
        let start = Instant::now();
        for &r in &ranks {
            black_box(t.rank_view(black_box(r)).unwrap());
        }
        let view_us = start.elapsed().as_secs_f64() * 1e6 / ranks.len() as f64;

        // The view plus every member list (dominated by the instance group, world/2 ranks).
        let few = &ranks[..50];
        let start = Instant::now();
        for &r in few {
            let v = t.rank_view(r).unwrap();
            for m in &v.groups {
                black_box(m.members());
            }
        }
        let members_us = start.elapsed().as_secs_f64() * 1e6 / few.len() as f64;

        // Full layout: every group of every kind, materialized as one flat rank list per kind.
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let start = Instant::now();
        let mut layout: Vec<(Vec<u32>, Vec<usize>)> = Vec::new();
        let (mut groups, mut listed) = (0u64, 0usize);
        for kind in t.kinds() {
            let mut flat = Vec::with_capacity(world as usize);
            let mut offsets = Vec::new();
            for g in t.groups(kind) {
                offsets.push(flat.len());
                flat.extend(g.unwrap().iter());
                groups += 1;
            }
            listed += flat.len();
            layout.push((flat, offsets));
        }
        let full_s = start.elapsed().as_secs_f64();
        let peak = PEAK.load(Ordering::Relaxed) - base;
        black_box(&layout);
        drop(layout);
        println!(
            "| {world} | {view_us:.2} | {members_us:.1} | {full_s:.3} | {groups} | {listed} | {:.1} | {:.1} |",
            peak as f64 / (1 << 20) as f64,
            peak as f64 / f64::from(world)
        );
    }
    println!("peak RSS of the whole run: {} MiB", peak_rss_kib() / 1024);
}
