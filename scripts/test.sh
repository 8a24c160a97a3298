#!/usr/bin/env bash
# Run every test of the project: Rust unit + integration tests (conformance vectors read from
# tests/data/conformance), then each suite in scripts/test.d/ in name order (C examples, C++,
# Python, multi-process). Ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked --all-targets
cargo test --release --locked --no-fail-fast
failed=()
for suite in scripts/test.d/*.sh; do
  [ -e "$suite" ] || continue
  echo "=== $suite"
  bash "$suite" || failed+=("$suite")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "suites failed: ${failed[*]}"
  exit 1
fi
