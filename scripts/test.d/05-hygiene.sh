#!/usr/bin/env bash
# Hygiene that keeps the tree as docs/architecture.md describes it: formatted (rustfmt.toml),
# clippy-clean with warnings as errors, API docs that build with warnings as errors. The layer
# check (imports run one way) is the cargo test tests/layers.rs.
set -uo pipefail
cd "$(dirname "$0")/../.."
pass=0 fail=0
check() {
  local name=$1; shift
  local log=target/hygiene-$name.log
  if "$@" >"$log" 2>&1; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $name ($*); log: $log"; tail -20 "$log"; fi
}
check fmt cargo fmt --all --check
check clippy cargo clippy --release --locked --all-targets -- -D warnings
check doc env RUSTDOCFLAGS="-D warnings" cargo doc --release --locked --no-deps
echo "hygiene: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
