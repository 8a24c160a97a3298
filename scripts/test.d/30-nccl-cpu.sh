#!/usr/bin/env bash
# The NCCL backend against the real libnccl.so.2 on a machine without a GPU (tests/backends/nccl_cpu.rs).
# Installs the nvidia-nccl-cu12 wheel into target/nccl-venv (reused when present) and points
# MCORE_NCCL_LIBRARY at its libnccl.so.2. When the wheel cannot be had (no network): a failure in
# CI (CI=true), a skip elsewhere.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
root=$PWD
venv=$root/target/nccl-venv
unavailable() {
  if [ "${CI:-}" = "true" ]; then
    echo "nccl-cpu: NCCL library unavailable in CI: $1"
    suite_bad "NCCL library unavailable in CI"
    suite_end nccl-cpu
    exit 1
  fi
  echo "nccl-cpu: skipped, NCCL library unavailable: $1"
  suite_end nccl-cpu ", 1 skipped"
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
cargo test --release --locked --test backends nccl_cpu:: 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
suite_count_cargo "tests/backends/nccl_cpu.rs" "$log" "$rc"
rm -f "$log"
suite_end nccl-cpu
