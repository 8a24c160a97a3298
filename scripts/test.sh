#!/usr/bin/env bash
# Run every test of the project: Rust unit + integration tests (conformance vectors from
# ../shared/conformance), the C example build, and the suites the later issues add.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked --all-targets
cargo test --release --locked --no-fail-fast 2>&1 | tee target/cargo-test.log
./scripts/c-example-test.sh
