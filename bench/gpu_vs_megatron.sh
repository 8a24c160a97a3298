#!/usr/bin/env bash
# Side by side on one GPU, in one run: Megatron-Core on torch's NCCL against mcore-selftest
# --backend nccl, 8 ranks tp2 pp2 cp2, all sharing GPU 0, the same libnccl.so.2 (torch's) on
# both sides.
#
#   bench/gpu_vs_megatron.sh [--reps N] [--bin DIR] [--out DIR]
#
# Megatron side: bench/megatron_baseline.py --backend nccl: init_process_group("nccl") +
# initialize_model_parallel + one all-reduce on every NCCL group it keeps, from the first line of
# init_process_group (import time excluded) to the device synchronize and a barrier.
# Our side: mcore_init's initialize (rendezvous, one communicator per kind, the all-reduce that
# verifies each), as mcore-selftest's init_seconds reports it; once per strategy (auto, split,
# per-group). The headline column is from the moment the last rank began init to the moment the
# last rank was ready (CLOCK_BOOTTIME, shared by all ranks), so the ranks' different start times
# (Python imports vary by seconds) are left out; the slowest rank's own init time is beside it.
# The table gives the median of --reps runs.
#
# Needs: python3 with torch (CUDA) and megatron-core importable (MCORE_BENCH_SITE=DIR is put first
# on PYTHONPATH), mcore-launch and mcore-selftest in --bin (default target/release).
# Several ranks share one GPU with NCCL_MULTI_RANK_GPU_ENABLE=1 on NCCL >= 2.30, else with one
# NCCL_HOSTID per rank and NCCL_SOCKET_IFNAME=lo (the same on both sides).
set -uo pipefail
cd "$(dirname "$0")/.."
reps=3; bin=target/release; out=target/gpu-vs-megatron
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "gpu_vs_megatron: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
[ -n "${MCORE_BENCH_SITE:-}" ] && export PYTHONPATH=$MCORE_BENCH_SITE${PYTHONPATH:+:$PYTHONPATH}
read -r nccl_lib nccl_code mcore_ver < <(python3 - <<'PY'
import glob, os, site, torch
v = torch.cuda.nccl.version()
code = v[0] * 10000 + v[1] * 100 + v[2]
lib = ""
for d in site.getsitepackages():
    hits = sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib", "libnccl.so.2")))
    if hits:
        lib = hits[0]
        break
try:
    from importlib.metadata import version
    mv = version("megatron-core")
except Exception:
    mv = "missing"
print(lib or "none", code, mv)
PY
)
echo "gpu_vs_megatron: torch's NCCL $nccl_code at $nccl_lib; megatron-core $mcore_ver; $reps rep(s)"
[ -e "$nccl_lib" ] || { echo "gpu_vs_megatron: torch's libnccl.so.2 not found"; exit 1; }
export MCORE_NCCL_LIBRARY=$nccl_lib

# shared_env RANK: the variables that let ranks share GPU 0 with this NCCL.
shared_env() {
  if [ "$nccl_code" -ge 23000 ]; then echo NCCL_MULTI_RANK_GPU_ENABLE=1
  else echo "NCCL_HOSTID=host-$1 NCCL_SOCKET_IFNAME=lo"; fi
}
world=8; layout=(--tp 2 --pp 2 --cp 2)
port=$((29600 + RANDOM % 1000))

megatron_run() {  # $1: output jsonl
  local pids=() r
  port=$((port + 1))
  for ((r = 0; r < world; r++)); do
    env $(shared_env $r) RANK=$r LOCAL_RANK=$r WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 240 python3 bench/megatron_baseline.py --backend nccl --device 0 "${layout[@]}" \
      >"$1.rank$r" 2>"$1.rank$r.err" &
    pids+=($!)
  done
  local ok=1
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || { ok=0; echo "megatron rank $r failed:"; tail -n 5 "$1.rank$r.err"; }; done
  cat "$1".rank? | grep '^{' >"$1"
  [ "$ok" = 1 ]
}

ours_run() {  # $1: strategy, $2: output jsonl
  port=$((port + 1))
  local prog=("$bin/mcore-selftest")
  [ "$nccl_code" -ge 23000 ] || prog=(bash -c 'NCCL_HOSTID="host-$RANK" NCCL_SOCKET_IFNAME=lo exec "$0" "$@"' "$bin/mcore-selftest")
  local env1=(); [ "$nccl_code" -ge 23000 ] && env1=(NCCL_MULTI_RANK_GPU_ENABLE=1)
  env ${env1[@]+"${env1[@]}"} "$bin/mcore-launch" --nproc $world --master-port $port --timeout 200 -- \
    "${prog[@]}" --json --backend nccl --device 0 --timeout 90 "${layout[@]}" --comm-strategy "$1" >"$2.log" 2>&1
  local rc=$?
  sed -n 's/^[^{]*\]: \({.*}\)$/\1/p' "$2.log" >"$2"
  [ $rc = 0 ] && [ "$(grep -c '"ok":true' "$2")" = $world ] || { echo "ours $1 failed:"; tail -n 20 "$2.log"; return 1; }
}

fails=0
for ((i = 1; i <= reps; i++)); do
  megatron_run "$out/megatron-$i.jsonl" || fails=$((fails + 1))
  for s in auto split per-group; do ours_run "$s" "$out/ours-$s-$i.jsonl" || fails=$((fails + 1)); done
done

python3 - "$out" "$reps" "$nccl_code" "$mcore_ver" <<'PY' | tee "$out/table.md"
import json, os, statistics, sys
out, reps, code, mver = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def runs(prefix):
    got = []
    for i in range(1, reps + 1):
        p = os.path.join(out, f"{prefix}-{i}.jsonl")
        lines = [json.loads(l) for l in open(p)] if os.path.exists(p) else []
        if len(lines) == 8:
            got.append(lines)
    return got
def med(xs):
    return statistics.median(xs) if xs else float("nan")
def span(r):  # the last rank to begin init -> the last rank ready (the launch's skew left out)
    return max(l["ready_boottime_s"] for l in r) - max(l["init_start_boottime_s"] for l in r)
def cols(r, own):
    return (f"{len(r)} | {med([span(x) for x in r]):.3f} | {med([max(l[own] for l in x) for x in r]):.3f} | "
            f"{med([max(l['ready_since_process_start_s'] for l in x) for x in r]):.3f}")
print(f"8 ranks tp2 pp2 cp2 on GPU 0, NCCL code {code} (torch's) on both sides, megatron-core {mver}; "
      f"median of the runs that completed (of {reps})\n")
print("| side | runs | last rank in to all ready, s | slowest rank's own init, s | ready since process start, s | communicators |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
m = runs("megatron")
meg = med([span(r) for r in m])
print(f"| Megatron-Core (init_process_group + initialize_model_parallel + all-reduce per group) | "
      f"{cols(m, 'init_total_s')} | {m[0][0]['nccl_groups_allreduced'] if m else '-'} NCCL groups |")
ratios = {}
for s in ("auto", "split", "per-group"):
    r = runs(f"ours-{s}")
    ratios[s] = meg / med([span(x) for x in r]) if r else float("nan")
    strat = r[0][0]["strategy"] if r else "-"
    print(f"| mcore_init {s} ({strat}) | {cols(r, 'init_seconds')} | {r[0][0]['communicators'] if r else '-'} |")
print()
print("Megatron / ours, last rank in to all ready: " + ", ".join(f"{s} {v:.2f}x" for s, v in ratios.items()))
PY
echo "gpu_vs_megatron: $fails failed run(s)"
[ "$fails" -eq 0 ]
