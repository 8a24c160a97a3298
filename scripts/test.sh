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
logs=target/suite-logs
mkdir -p "$logs"
for suite in scripts/test.d/*.sh; do
  [ -e "$suite" ] || continue
  echo "=== $suite"
  bash "$suite" 2>&1 | tee "$logs/$(basename "$suite" .sh).log" || failed+=("$suite")
done
if [ "${#failed[@]}" -gt 0 ]; then
  # What failed in each, again at the end (CI shows the tail of a long log).
  for suite in "${failed[@]}"; do
    echo "--- $suite failed:"
    grep -E '^(FAIL|FAILED)\b|^E  |^test .* FAILED$|panicked at' "$logs/$(basename "$suite" .sh).log" | head -n 25
  done
  echo "suites failed: ${failed[*]}"
  exit 1
fi
