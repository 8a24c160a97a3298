#!/usr/bin/env bash
# The GPU run, on the GPU machine, from what scripts/gpu-stage.sh prepared (no Rust, no network):
#   scripts/gpu-run.sh OUTDIR
# 1. scripts/gpu-tests.sh with the prebuilt binaries (every test; summary.md);
# 2. bench/gpu_vs_megatron.sh (Megatron-Core on torch's NCCL side by side with ours, table.md).
# OUTDIR gets run.log, summary.md, table.md and logs.tgz (every log): at most 4 files.
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
outdir=${1:?usage: scripts/gpu-run.sh OUTDIR}
stage=target/gpu-stage
work=target/gpu-run; rm -rf "$work"; mkdir -p "$work" "$outdir"
{
  echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "NCCL", torch.cuda.nccl.version())'
  site=/tmp/mcore-bench-site
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$stage"/wheels/*.whl \
    && export MCORE_BENCH_SITE=$site
  echo "== gpu-tests.sh"
  MCORE_GPU_BIN=$stage/bin MCORE_GPU_OUT=$work/gpu-tests MCORE_GPU_TIMEOUT=${MCORE_GPU_TIMEOUT:-60} \
    timeout 330 scripts/gpu-tests.sh; echo "gpu-tests.sh exit $?"
  echo "== gpu_vs_megatron.sh"
  timeout 200 bench/gpu_vs_megatron.sh --reps "${MCORE_GPU_REPS:-3}" --bin "$stage/bin" --out "$work/vs-megatron"
  echo "gpu_vs_megatron.sh exit $?"
} 2>&1 | tee "$outdir/run.log"
cp "$work/gpu-tests/summary.md" "$outdir/" 2>/dev/null
cp "$work/vs-megatron/table.md" "$outdir/" 2>/dev/null
tar czf "$outdir/logs.tgz" -C "$work" .
