//! `mcore-backend-probe`: a test worker for communicator backends (a Cargo example, never
//! installed; tests find it under `target/<profile>/examples/`). One process per rank; each
//! rendezvous through a file store directory, creates a communicator for every listed group it
//! belongs to (plus `world`), checks an allreduce of its global rank against the sum the
//! membership predicts, runs a barrier, destroys, and prints one JSON line. Exit 1 on any error.
//!
//! ```text
//! mcore-backend-probe [--backend gloo|PLUGIN.so] --store-dir DIR --rank R --world-size N
//!                     [--timeout-ms T] [--group NAME=0,1 ...]
//! ```
//! Without `--backend`, the first plugin of `MCORE_BACKEND_PLUGIN` is used.

// The tools' argument helpers, included by path: this worker is no part of the library.
#[allow(dead_code)]
#[path = "../../src/bin/common/cli.rs"]
mod cli;

use mcore_init::backend::{self, BackendError, GroupInfo};
use mcore_init::store::{FileStore, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    backend: Option<String>,
    store_dir: String,
    rank: u32,
    world_size: u32,
    timeout: Duration,
    groups: Vec<(String, Vec<u32>)>,
}

fn parse_ranks(name: &str, text: &str) -> Result<Vec<u32>, String> {
    text.split(',').map(|r| r.trim().parse::<u32>().map_err(|_| format!("--group {name}: bad rank '{r}'"))).collect()
}

fn parse_args() -> Result<Args, String> {
    let mut it = cli::utf8_args(std::env::args_os().skip(1))?.into_iter();
    let (mut backend, mut store_dir, mut rank, mut world, mut timeout_ms) = (None, None, None, None, 30_000u64);
    let mut groups = Vec::new();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--backend" => backend = Some(value()?),
            "--store-dir" => store_dir = Some(value()?),
            "--rank" => rank = Some(value()?.parse::<u32>().map_err(|e| format!("--rank: {e}"))?),
            "--world-size" => world = Some(value()?.parse::<u32>().map_err(|e| format!("--world-size: {e}"))?),
            "--timeout-ms" => timeout_ms = value()?.parse().map_err(|e| format!("--timeout-ms: {e}"))?,
            "--group" => {
                let v = value()?;
                let (name, ranks) = v.split_once('=').ok_or(format!("--group wants NAME=r,r,...; got '{v}'"))?;
                groups.push((name.to_string(), parse_ranks(name, ranks)?));
            }
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    let world_size = world.ok_or("--world-size is required")?;
    let rank = rank.ok_or("--rank is required")?;
    if rank >= world_size {
        return Err(format!("--rank {rank} must be below --world-size {world_size}"));
    }
    groups.insert(0, ("world".to_string(), (0..world_size).collect()));
    Ok(Args {
        backend,
        store_dir: store_dir.ok_or("--store-dir is required")?,
        rank,
        world_size,
        timeout: mcore_init::timeout::from_millis(timeout_ms),
        groups,
    })
}

fn run(a: &Args) -> Result<Vec<String>, BackendError> {
    let backend = match &a.backend {
        Some(spec) => backend::resolve(spec)?,
        None => backend::load_plugins_from_env()?.into_iter().next().ok_or_else(|| {
            BackendError::InvalidArgument(format!("no --backend given and {} is empty", backend::PLUGIN_ENV))
        })?,
    };
    let mut report = Vec::new();
    let mut comms = Vec::new();
    for (name, ranks) in &a.groups {
        if !ranks.contains(&a.rank) {
            continue;
        }
        let info = GroupInfo::new(name.clone(), ranks.clone(), a.rank, a.timeout)?;
        // One directory per group: the group's private key space.
        let store: Arc<dyn Store> = Arc::new(
            FileStore::new(std::path::Path::new(&a.store_dir).join(name), a.timeout)
                .map_err(|e| BackendError::InvalidArgument(e.to_string()))?,
        );
        let start = Instant::now();
        let mut comm = backend.create_group(&info, store)?;
        let mut data = [i64::from(a.rank), 1];
        comm.allreduce_sum_i64(&mut data)?;
        let want = [ranks.iter().map(|&r| i64::from(r)).sum::<i64>(), ranks.len() as i64];
        if data != want {
            return Err(BackendError::InvalidArgument(format!(
                "group '{name}': allreduce gave {data:?}, membership predicts {want:?}"
            )));
        }
        comm.barrier()?;
        report.push(format!(
            "\"{name}\":{{\"rank\":{},\"size\":{},\"sum\":{},\"seconds\":{:.3}}}",
            comm.rank(),
            comm.size(),
            data[0],
            start.elapsed().as_secs_f64()
        ));
        comms.push(comm);
    }
    for comm in comms {
        comm.destroy()?;
    }
    Ok(report)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mcore-backend-probe: {e}");
            std::process::exit(2);
        }
    };
    match run(&args) {
        Ok(groups) => {
            println!(
                "{{\"rank\":{},\"world_size\":{},\"ok\":true,\"groups\":{{{}}}}}",
                args.rank,
                args.world_size,
                groups.join(",")
            );
        }
        Err(e) => {
            eprintln!("mcore-backend-probe rank {}: {e}", args.rank);
            println!("{{\"rank\":{},\"ok\":false}}", args.rank);
            std::process::exit(1);
        }
    }
}
