//! Cost of the NCCL primitives that run without a GPU: finding and loading libnccl.so.2, and
//! ncclGetUniqueId. Run: `MCORE_NCCL_LIBRARY=... cargo bench --bench nccl_primitives`.
//! Results: docs/benchmarks/nccl.md.

use mcore_init::backend::nccl::{LibrarySearch, NcclLibrary};
use std::time::Instant;

fn main() {
    let t = Instant::now();
    let search = LibrarySearch::from_lookup(|_| None, Vec::new);
    let n = search.python_candidates().len();
    println!(
        "asking python3 for its site-packages (last resort of the search): {:.1} ms, {n} candidates",
        t.elapsed().as_secs_f64() * 1e3
    );

    let t = Instant::now();
    let lib = match NcclLibrary::global() {
        Ok(l) => l,
        Err(e) => {
            println!("no NCCL library: {e}");
            return;
        }
    };
    println!(
        "first load (dlopen + dlsym + ncclGetVersion) of NCCL {}: {:.1} ms",
        lib.version(),
        t.elapsed().as_secs_f64() * 1e3
    );

    let n = 100;
    let _ = lib.unique_id().unwrap(); // first call initializes NCCL's bootstrap network
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(lib.unique_id().unwrap());
    }
    println!("ncclGetUniqueId: {:.1} µs per id ({n} ids)", t.elapsed().as_secs_f64() * 1e6 / n as f64);
}
