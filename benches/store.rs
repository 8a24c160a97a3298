//! TCP store latency over loopback: set (no reply), get (WAIT + GET), add, check, a 1 MiB
//! set+get, and an 8-client add+wait rendezvous. `cargo bench --bench store`.

use mcore_init::store::{Store, TcpStore};
use std::hint::black_box;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(30);

/// Median of 5 runs of `iters` iterations, in µs per iteration.
fn bench(iters: u32, mut f: impl FnMut(u32)) -> f64 {
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for i in 0..iters {
                f(i);
            }
            t.elapsed().as_secs_f64() * 1e6 / f64::from(iters)
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[2]
}

fn main() {
    let (server, s) = TcpStore::host("127.0.0.1", 0, T).unwrap();
    s.set("k", b"value").unwrap();
    let us = bench(20_000, |_| s.set("k", b"value").unwrap());
    // A set has no reply: follow the batch with one round trip so the server has caught up.
    s.num_keys().unwrap();
    println!("set (no reply, pipelined)        {us:8.2} µs/op");
    let us = bench(10_000, |_| {
        black_box(s.get("k").unwrap());
    });
    println!("get (WAIT + GET, 2 round trips)  {us:8.2} µs/op");
    let us = bench(10_000, |_| {
        black_box(s.add("c", 1).unwrap());
    });
    println!("add (1 round trip)               {us:8.2} µs/op");
    let us = bench(10_000, |_| {
        black_box(s.check(&["k", "c"]).unwrap());
    });
    println!("check 2 keys (1 round trip)      {us:8.2} µs/op");
    let big = vec![1u8; 1 << 20];
    let us = bench(50, |_| {
        s.set("big", &big).unwrap();
        black_box(s.get("big").unwrap());
    });
    println!("set + get 1 MiB                  {us:8.2} µs/op");

    let port = server.port();
    let clients: Vec<TcpStore> = (0..8).map(|_| TcpStore::connect("127.0.0.1", port, T).unwrap()).collect();
    let mut next_round = 0u32;
    let us = bench(200, |_| {
        next_round += 1;
        let key = format!("round/{next_round}");
        let done = format!("{key}/done");
        std::thread::scope(|sc| {
            for c in &clients {
                let (key, done) = (&key, &done);
                sc.spawn(move || {
                    if c.add(key, 1).unwrap() == 8 {
                        c.set(done, b"1").unwrap();
                    }
                    c.wait(&[done.as_str()], T).unwrap();
                });
            }
        });
    });
    println!("8-client add+wait rendezvous     {us:8.2} µs/round (incl. spawning 8 threads)");
}
