#!/usr/bin/env bash
# GPU tests of the NCCL backend. Run on a machine with an NVIDIA GPU and driver:
#   scripts/gpu-tests.sh                 # NCCL from MCORE_NCCL_LIBRARY, else a pip wheel
#   MCORE_NCCL_LIBRARY=/path/libnccl.so.2 scripts/gpu-tests.sh
# Without a library it installs nvidia-nccl-cu12 into target/nccl-venv (as 30-nccl-cpu.sh does);
# set NCCL_WHEEL=nvidia-nccl-cu13 for CUDA 13 drivers.
#
# 1. tests/nccl_gpu.rs (all #[ignore]d, so CPU machines skip them): init, split, allreduce on
#    device memory, a deadline that aborts, 2 ranks on one GPU.
# 2. mcore-selftest --backend nccl under mcore-launch, with the split and the per-group strategy:
#    a world of 1; 2 and 4 ranks sharing GPU 0 (NCCL_MULTI_RANK_GPU_ENABLE=1, NCCL >= 2.30);
#    one rank per GPU when there are several; and a run with a per-kind communicator config
#    (Megatron's YAML). Every group is verified by an all-reduce on device memory.
# 3. A table of communicator creation times per group kind, split vs per group, in
#    target/gpu-tests/summary.md (slowest rank per kind; the split column is the kind's split
#    collective, the per-group column its own init).
set -uo pipefail
cd "$(dirname "$0")/.."
out=target/gpu-tests
mkdir -p "$out"
pass=0; fail=0
check() { if "$@"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $*"; fi; }

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L | tee "$out/gpus.txt" || { echo "gpu-tests: nvidia-smi not found (continuing)"; : >"$out/gpus.txt"; }
gpus=$(grep -c '^GPU ' "$out/gpus.txt" || true); [ "${gpus:-0}" -ge 1 ] || gpus=1
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
version=$(python3 -c "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); v=ctypes.c_int(); l.ncclGetVersion(ctypes.byref(v)); print(v.value)" "$MCORE_NCCL_LIBRARY")
echo "gpu-tests: MCORE_NCCL_LIBRARY=$MCORE_NCCL_LIBRARY (NCCL code $version), $gpus GPU(s)"

echo "== 1. tests/nccl_gpu.rs"
check cargo test --release --locked --test nccl_gpu -- --ignored --skip _child --test-threads=1 --nocapture

echo "== 2. mcore-selftest --backend nccl"
cargo build --release --locked --quiet --bins
cat >"$out/nccl_comm.yaml" <<'YAML'
# Megatron-Core's per-group NCCL communicator config format
tp:
  max_ctas: 4
  min_ctas: 1
dp:
  cga_cluster_size: 2
pp:
  net_name: Socket
YAML
# run NAME NPROC [env...] -- selftest args: logs to $out/NAME.log, JSON lines to $out/NAME.jsonl
run() {
  local name=$1 nproc=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  echo "-- $name: $nproc rank(s): $*"
  if env "${envs[@]}" ./target/release/mcore-launch --nproc "$nproc" --timeout 300 -- \
       ./target/release/mcore-selftest --json --backend nccl --timeout 120 "$@" >"$out/$name.log" 2>&1 \
     && [ "$(grep -c '"ok":true' "$out/$name.log")" = "$nproc" ]; then
    sed -n 's/^[^{]*\]: \({.*}\)$/\1/p' "$out/$name.log" >"$out/$name.jsonl"
    pass=$((pass+1))
  else
    tail -n 30 "$out/$name.log"; echo "FAIL: $name"; fail=$((fail+1))
  fi
}
rm -f "$out"/*.jsonl
for s in split per-group; do
  run "world1-$s" 1 -- --comm-strategy "$s"
  if [ "$version" -ge 23000 ]; then
    run "shared2-$s" 2 NCCL_MULTI_RANK_GPU_ENABLE=1 -- --tp 2 --device 0 --comm-strategy "$s"
    run "shared4-$s" 4 NCCL_MULTI_RANK_GPU_ENABLE=1 -- --tp 2 --pp 2 --device 0 --comm-strategy "$s" --seed 1234
  else
    echo "-- skipped: several ranks on one GPU need NCCL >= 2.30 (code 23000), this is $version"
  fi
  if [ "$gpus" -ge 2 ]; then
    tp=2; pp=$(( gpus >= 4 ? 2 : 1 ))
    run "pergpu-$s" "$gpus" -- --tp "$tp" --pp "$pp" --comm-strategy "$s"
  fi
done
if [ "$version" -ge 23000 ]; then
  run "shared4-config" 4 NCCL_MULTI_RANK_GPU_ENABLE=1 -- --tp 2 --pp 2 --device 0 --comm-config "$out/nccl_comm.yaml"
else
  run "world1-config" 1 -- --comm-config "$out/nccl_comm.yaml"
fi

echo "== 3. creation times per group kind (slowest rank), split vs per group"
python3 - "$out" <<'PY' | tee "$out/summary.md"
import glob, json, os, sys
out = sys.argv[1]
def load(name):
    path = os.path.join(out, name + ".jsonl")
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []
for setup in ("world1", "shared2", "shared4", "pergpu"):
    split, per = load(setup + "-split"), load(setup + "-per-group")
    if not split or not per:
        continue
    print(f"\n### {setup}: {len(split)} rank(s)\n")
    print("| kind | split (ms) | per group (ms) |\n| --- | ---: | ---: |")
    kinds = list(dict.fromkeys(split[0]["kinds"]))  # layout order
    for k in kinds:
        s = max(l["create_s"].get(k, 0) for l in split) * 1e3
        p = max(l["create_s"].get(k, 0) for l in per) * 1e3
        print(f"| {k} | {s:.1f} | {p:.1f} |")
    ws = max(l["phases_s"]["world"] for l in split) * 1e3
    print(f"| (world communicator) | {ws:.1f} | - |")
    gs = max(l["phases_s"]["groups"] for l in split) * 1e3
    gp = max(l["phases_s"]["groups"] for l in per) * 1e3
    print(f"| **all communicators** | **{gs:.1f}** | **{gp:.1f}** |")
    ts = max(l["init_seconds"] for l in split) * 1e3
    tp = max(l["init_seconds"] for l in per) * 1e3
    print(f"| init total (verification included) | {ts:.1f} | {tp:.1f} |")
PY
echo "gpu-tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
