#!/usr/bin/env bash
# The NCCL backend against the real libnccl.so.2 on a machine without a GPU (tests/backends/nccl_cpu.rs),
# and the Python side of groups joined from unique ids (python/tests/test_id_groups.py: ids minted by
# the real library, a libnccl loaded first with ctypes bound as shared) with the RL trainer example
# up to its init info (examples/python/rl_trainer_uid.py --cpu-only).
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
if "$venv/bin/python" -c 'import pytest' 2>/dev/null || "$venv/bin/pip" install -q --disable-pip-version-check pytest; then
  cargo build --release --locked --lib >/dev/null 2>&1 || suite_bad "nccl-cpu: cannot build libmcore_init.so"
  export MCORE_INIT_LIBRARY=$root/target/release/libmcore_init.so MCORE_REPO_ROOT=$root
  (cd python && "$venv/bin/python" -m pytest -q -rsfE -p no:cacheprovider tests/test_id_groups.py) >"$log" 2>&1
  rc=$?
  cat "$log"
  suite_count_pytest "$log" "$rc"
  out=$(cd python && "$venv/bin/python" ../examples/python/rl_trainer_uid.py --cpu-only --workers 4 2>&1)
  echo "$out"
  if echo "$out" | "$venv/bin/python" -c '
import base64, json, sys
steps = {l["step"]: l for l in map(json.loads, sys.stdin)}
info = steps["init_info"]["init_info"]
assert len(base64.b64decode(info["nccl_unique_id_b64"], validate=True)) == 128, info
assert (info["world_size"], info["rank_offset"]) == (5, 1), info
assert steps["nccl"]["version"].startswith("2."), steps["nccl"]'; then
    suite_ok "examples/python/rl_trainer_uid.py --cpu-only printed vLLM's init info"
  else
    suite_bad "examples/python/rl_trainer_uid.py --cpu-only"
  fi
else
  suite_bad "nccl-cpu: cannot install pytest into $venv"
fi
rm -f "$log"
suite_end nccl-cpu
