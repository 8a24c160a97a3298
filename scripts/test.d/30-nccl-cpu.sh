#!/usr/bin/env bash
# The NCCL backend against the real libnccl.so.2 on a machine without a GPU (tests/nccl_cpu.rs).
# Installs the nvidia-nccl-cu12 wheel into target/nccl-venv (reused when present) and points
# MCORE_NCCL_LIBRARY at its libnccl.so.2. When the wheel cannot be had (no network): a failure in
# CI (CI=true), a skip elsewhere.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
venv=$root/target/nccl-venv
unavailable() {
  if [ "${CI:-}" = "true" ]; then
    echo "nccl-cpu: NCCL library unavailable in CI: $1"
    echo "nccl-cpu: 0 passed, 1 failed"
    exit 1
  fi
  echo "nccl-cpu: skipped, NCCL library unavailable: $1"
  echo "nccl-cpu: 0 passed, 0 failed, 1 skipped"
  exit 0
}
lib=$(ls "$venv"/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -n1)
if [ -z "$lib" ]; then
  { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"; } || unavailable "python3 -m venv failed"
  "$venv/bin/pip" install -q --disable-pip-version-check nvidia-nccl-cu12 \
    || unavailable "pip install nvidia-nccl-cu12 failed"
  lib=$(ls "$venv"/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -n1)
  [ -n "$lib" ] || unavailable "the wheel has no nvidia/nccl/lib/libnccl.so.2"
fi
echo "nccl-cpu: nvidia-nccl-cu12 $("$venv/bin/pip" show nvidia-nccl-cu12 2>/dev/null | sed -n 's/^Version: //p') at $lib"
export MCORE_NCCL_LIBRARY=$lib MCORE_NCCL_TEST_REQUIRE=1
log=$(mktemp)
cargo test --release --locked --test nccl_cpu 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
line=$(grep -E '^test result:' "$log" | tail -n1)
rm -f "$log"
passed=$(sed -n 's/.* \([0-9]\+\) passed.*/\1/p' <<<"$line"); failed=$(sed -n 's/.* \([0-9]\+\) failed.*/\1/p' <<<"$line")
[ "$rc" -eq 0 ] || [ "${failed:-0}" -gt 0 ] || failed=1
echo "nccl-cpu: ${passed:-0} passed, ${failed:-0} failed"
[ "$rc" -eq 0 ]
