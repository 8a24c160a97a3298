#!/usr/bin/env bash
# Hygiene that keeps the tree as docs/architecture.md describes it: formatted (rustfmt.toml),
# clippy-clean with warnings as errors, API docs that build with warnings as errors, and the
# cargo tests of tests/hygiene: imports run one way with no circle (layers.rs), the committed
# C headers match the code (header_drift.rs), no function in src/runtime over 80 lines and no
# source file over 1,000 (size.rs).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
suite_check_log fmt target/hygiene-fmt.log cargo fmt --all --check
suite_check_log clippy target/hygiene-clippy.log cargo clippy --release --locked --all-targets -- -D warnings
suite_check_log doc target/hygiene-doc.log env RUSTDOCFLAGS="-D warnings" cargo doc --release --locked --no-deps
log=target/hygiene-tests.log
cargo test --release --locked --test hygiene >"$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then tail -n 40 "$log"; fi
suite_count_cargo "tests/hygiene" "$log" "$rc"
suite_end hygiene
