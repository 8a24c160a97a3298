#!/usr/bin/env bash
# GPU tests of the NCCL backend (tests/nccl_gpu.rs, all #[ignore]d so CPU machines skip them).
# Run on a machine with an NVIDIA GPU and driver:
#   scripts/gpu-tests.sh                 # NCCL from MCORE_NCCL_LIBRARY, the loader path, or a pip wheel
#   MCORE_NCCL_LIBRARY=/path/libnccl.so.2 scripts/gpu-tests.sh
# Without a library it installs nvidia-nccl-cu12 into target/nccl-venv (as 30-nccl-cpu.sh does);
# set NCCL_WHEEL=nvidia-nccl-cu13 for CUDA 13 drivers. The 2-ranks-on-one-GPU test needs NCCL >= 2.30
# (it sets NCCL_MULTI_RANK_GPU_ENABLE=1) and skips itself on older versions.
# Later: mcore-selftest --backend nccl under mcore-launch (issue of the runtime).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L || echo "gpu-tests: nvidia-smi not found (continuing)"
if [ -z "${MCORE_NCCL_LIBRARY:-}" ]; then
  venv=$PWD/target/nccl-venv
  wheel=${NCCL_WHEEL:-nvidia-nccl-cu12}
  lib=$(ls "$venv"/lib/python3*/site-packages/nvidia/{nccl,cu13}/lib/libnccl.so.2 2>/dev/null | head -n1 || true)
  if [ -z "$lib" ]; then
    [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$wheel"
    lib=$(ls "$venv"/lib/python3*/site-packages/nvidia/{nccl,cu13}/lib/libnccl.so.2 2>/dev/null | head -n1)
  fi
  export MCORE_NCCL_LIBRARY=$lib
fi
echo "gpu-tests: MCORE_NCCL_LIBRARY=$MCORE_NCCL_LIBRARY"
cargo test --release --test nccl_gpu -- --ignored --skip _child --test-threads=1 --nocapture
