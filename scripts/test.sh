#!/usr/bin/env bash
# Run the project's tests (docs/BENCHMARKS.md, "Test command", has the times):
#   scripts/test.sh        every test, both tiers (what CI's .ci/run runs)
#   scripts/test.sh fast   Rust unit and integration tests (`cargo test`: conformance vectors read
#                          from tests/data/conformance), then the fast suites of scripts/test.d/:
#                          single-process and short multi-process ones
#   scripts/test.sh slow   the slow suites: faults, recovery and scale, the launchers (Slurm,
#                          mpirun, PMIx, two hosts), the wheel, torch
# A suite is slow when its header has the line `# tier: slow`; every other suite is fast.
#
# Two lanes run side by side: the suites whose header has the line `# lane: wait` (and `cargo
# test`), which mostly wait on real processes and deadlines, beside the others, which mostly
# compute (builds). Each lane runs its suites one after another in name order, the fast tier's
# first; suites that share files under target/ are in one lane (10 and 34: target/c-examples;
# 40 and 50: target/stage; `cargo test` and 31: the HCCL doubles; 70 and 71: the torch venv).
# Each lane picks its ports from its own range outside the kernel's ephemeral range
# (MCORE_PORT_RANGE, scripts/lib/ports.py), so a port one suite picked cannot be taken by the
# other lane before its store binds it. MCORE_TEST_LANES=1 runs everything in one lane.
#
# Each suite's output goes to its log in target/suite-logs/ (and to its lane's log there,
# lane-wait.log and lane-compute.log); the terminal gets one line when a suite starts and one
# when it ends, with its checks ("=== NAME: P passed, F failed": the suite's own count,
# scripts/lib/suite.sh, or cargo test's) and its wall time, CPU time and the load average. What failed is repeated at the end (the tail of each failed
# suite's log). The last line is "N passed, N failed", alone: every check of every suite that
# ran and every cargo test (scripts/lib/counts.sh; a suite that died before counting is one
# failure).
set -euo pipefail
cd "$(dirname "$0")/.."
tier=${1:-all}
case "$tier" in
  all | fast | slow) ;;
  *) echo "usage: $0 [fast|slow]   (no argument: both tiers)" >&2; exit 2 ;;
esac
./scripts/setup.sh
cargo build --release --locked --all-targets
logs=target/suite-logs
mkdir -p "$logs"
rm -f "$logs"/.failed-* "$logs"/.counts-* "$logs"/lane-*.log
# Every suite uses the Gloo plugin: built once here, before two lanes could build it at once
# (20-gloo-plugin builds it again: a no-op then).
. scripts/lib/suite.sh
. scripts/lib/counts.sh
gloo_plugin_build "$logs/gloo-plugin-build.log" || { cat "$logs/gloo-plugin-build.log"; exit 1; }

# Each lane's ports: below the ports mcore-init derives for Slurm and mpirun jobs (20000-31999,
# src/runtime/launch/env.rs) and outside the kernel's ephemeral range.
read -r eph_lo _ </proc/sys/net/ipv4/ip_local_port_range
lanes=${MCORE_TEST_LANES:-2}
if [ "$lanes" != 1 ] && [ "$eph_lo" -lt 20000 ]; then
  echo "=== the kernel's ephemeral ports start at $eph_lo (below 20000): one lane"
  lanes=1
fi
declare -A range=([compute]=10000-14999 [wait]=15000-19999)

# timed LANE NAME LOG CMD...: run CMD with its output in LOG and in the lane's log, then print
# one line with its wall time, its CPU time (user+sys, with its children) and the load average
# around it. Non-zero when CMD failed.
timed() {
  local lane=$1 name=$2 log=$3 rc=0 wall user sys load0
  shift 3
  load0=$(cut -d' ' -f1 /proc/loadavg)
  { TIMEFORMAT='%R %U %S'; time "$@" >"$log" 2>&1; } 2>"$logs/.time-$lane" || rc=$?
  read -r wall user sys <"$logs/.time-$lane" || true
  { echo "##### $name"; cat "$log"; } >>"$logs/lane-$lane.log"
  local kind=suite counted
  [ "$name" = "cargo test" ] && kind=cargo
  counted=$(log_counts "$kind" "$log" "$rc")
  echo "$counted" >>"$logs/.counts-$lane"
  echo "=== $name: ${counted% *} passed, ${counted#* } failed"
  awk -v n="$name" -v w="$wall" -v u="$user" -v s="$sys" -v l0="$load0" -v l1="$(cut -d' ' -f1 /proc/loadavg)" \
    -v r="$rc" -v lane="$lane" \
    'BEGIN { printf "=== %s: %.0f s wall, %.0f s CPU (user+sys), load %s to %s%s [%s]\n", n, w, u + s, l0, l1, (r ? ", FAILED" : ""), lane }'
  return "$rc"
}

lane_of() {
  if [ "$lanes" = 1 ]; then echo compute; elif grep -qx '# lane: wait' "$1"; then echo wait; else echo compute; fi
}

# run_lane LANE: the selected suites of LANE, the fast tier's first; what failed in .failed-LANE.
run_lane() {
  local lane=$1 want suite is start=$SECONDS
  export MCORE_PORT_RANGE=${range[$lane]}
  [ "$lanes" = 1 ] && unset MCORE_PORT_RANGE
  : >"$logs/.failed-$lane"
  if [ "$tier" != slow ] && { [ "$lanes" = 1 ] || [ "$lane" = wait ]; }; then
    # Not twice: the libnccl double's tests (tests/nccl_double/) run under AddressSanitizer in
    # 32-nccl-double.sh (the same tests with ASan's checks on top), the HCCL plugin's
    # (tests/backends/hccl_plugin.rs) in 31-hccl-plugin.sh against the doubles it has just built
    # (here they would skip, or run against doubles an earlier run left in target/hccl-plugin).
    echo "=== cargo test (fast) [$lane]"
    timed "$lane" "cargo test" "$logs/cargo-test.log" \
      cargo test --release --locked --no-fail-fast -- --skip nccl_double:: --skip hccl_plugin:: \
      || echo "cargo test" >>"$logs/.failed-$lane"
  fi
  for want in fast slow; do
    { [ "$tier" = all ] || [ "$tier" = "$want" ]; } || continue
    for suite in scripts/test.d/*.sh; do
      [ -e "$suite" ] || continue
      grep -qx '# tier: slow' "$suite" && is=slow || is=fast
      [ "$is" = "$want" ] && [ "$(lane_of "$suite")" = "$lane" ] || continue
      echo "=== $suite ($is) [$lane]"
      timed "$lane" "$suite" "$logs/$(basename "$suite" .sh).log" bash "$suite" || echo "$suite" >>"$logs/.failed-$lane"
    done
  done
  echo "=== lane $lane: $((SECONDS - start)) s"
}

start=$SECONDS
if [ "$lanes" = 1 ]; then
  run_lane compute
else
  run_lane wait &
  wait_pid=$!
  run_lane compute
  wait "$wait_pid" || true
fi
echo "=== tier $tier: $((SECONDS - start)) s after the build ($lanes lane(s))"
# The one summary line, last: every counted check of this run.
summary() {
  { cat "$logs"/.counts-* 2>/dev/null || true; } | awk '{ p += $1; f += $2 } END { printf "%d passed, %d failed\n", p, f }'
}
failed=()
for f in "$logs"/.failed-*; do
  [ -e "$f" ] || continue
  while IFS= read -r s; do failed+=("$s"); done <"$f"
done
if [ "${#failed[@]}" -gt 0 ]; then
  # What failed, again at the end (CI shows the tail of a long log).
  for suite in "${failed[@]}"; do
    if [ "$suite" = "cargo test" ]; then log=$logs/cargo-test.log; else log=$logs/$(basename "$suite" .sh).log; fi
    echo "--- $suite failed (log: $log):"
    grep -E '^(FAIL|FAILED)\b|^E  |^test .* FAILED$|panicked at' "$log" | head -n 25
    tail -n 15 "$log"
  done
  echo "failed: ${failed[*]}"
  summary
  exit 1
fi
summary
