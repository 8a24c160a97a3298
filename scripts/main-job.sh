#!/usr/bin/env bash
# The main job: build the library and tools, then print a sample layout with mcore-topo.
# (The runtime issue turns this into a real 8-rank init on Gloo.)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked --bins
./target/release/mcore-topo --world-size 16 --tp 2 --pp 2 --cp 2
