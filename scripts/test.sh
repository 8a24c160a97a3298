#!/usr/bin/env bash
# Run the project's tests (docs/BENCHMARKS.md, "Test command", has the times):
#   scripts/test.sh        every test: the fast tier, then the slow one (what CI's .ci/run runs)
#   scripts/test.sh fast   Rust unit and integration tests (`cargo test`: conformance vectors read
#                          from tests/data/conformance), then the fast suites of scripts/test.d/:
#                          single-process and short multi-process ones
#   scripts/test.sh slow   the slow suites: faults, recovery and scale, the launchers (Slurm,
#                          mpirun, PMIx, two hosts), the wheel, torch
# A suite is slow when its header has the line `# tier: slow`; every other suite is fast. Suites
# run in name order, each with its wall time and its log in target/suite-logs/; what failed is
# repeated at the end, then one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=${1:-all}
case "$tier" in
  all | fast | slow) ;;
  *) echo "usage: $0 [fast|slow]   (no argument: both tiers)" >&2; exit 2 ;;
esac
./scripts/setup.sh
cargo build --release --locked --all-targets
failed=()
logs=target/suite-logs
mkdir -p "$logs"
start=$SECONDS
# timed NAME LOG CMD...: run CMD with its output on the terminal and in LOG, then one line with its
# wall time, its CPU time (user+sys, with its children) and the load average around it. Non-zero
# when CMD failed.
timed() {
  local name=$1 log=$2 rc=0 wall user sys load0
  shift 2
  load0=$(cut -d' ' -f1 /proc/loadavg)
  { TIMEFORMAT='%R %U %S'; time "$@" 2>&1 | tee "$log"; } 2>"$logs/.time" || rc=$?
  read -r wall user sys <"$logs/.time" || true
  awk -v n="$name" -v w="$wall" -v u="$user" -v s="$sys" -v l0="$load0" -v l1="$(cut -d' ' -f1 /proc/loadavg)" \
    'BEGIN { printf "=== %s: %.0f s wall, %.0f s CPU (user+sys), load %s to %s\n", n, w, u + s, l0, l1 }'
  return "$rc"
}
if [ "$tier" != slow ]; then
  # The libnccl double's tests (tests/nccl_double/) run in this tier under AddressSanitizer
  # (scripts/test.d/32-nccl-double.sh, the same tests with ASan's checks on top): not twice.
  timed "cargo test" "$logs/cargo-test.log" cargo test --release --locked --no-fail-fast -- --skip nccl_double:: \
    || failed+=("cargo test")
fi
for want in fast slow; do
  { [ "$tier" = all ] || [ "$tier" = "$want" ]; } || continue
  for suite in scripts/test.d/*.sh; do
    [ -e "$suite" ] || continue
    grep -qx '# tier: slow' "$suite" && is=slow || is=fast
    [ "$is" = "$want" ] || continue
    echo "=== $suite ($is)"
    timed "$suite" "$logs/$(basename "$suite" .sh).log" bash "$suite" || failed+=("$suite")
  done
done
echo "=== tier $tier: $((SECONDS - start)) s after the build"
if [ "${#failed[@]}" -gt 0 ]; then
  # What failed in each suite, again at the end (CI shows the tail of a long log).
  for suite in "${failed[@]}"; do
    [ "$suite" = "cargo test" ] && continue
    echo "--- $suite failed:"
    grep -E '^(FAIL|FAILED)\b|^E  |^test .* FAILED$|panicked at' "$logs/$(basename "$suite" .sh).log" | head -n 25
  done
  echo "failed: ${failed[*]}"
  exit 1
fi
