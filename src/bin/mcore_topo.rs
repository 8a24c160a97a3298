//! `mcore-topo`: print a parallel layout (placeholder until the topology engine lands).
fn main() {
    eprintln!("mcore-topo: topology engine not built yet");
    std::process::exit(2);
}
