#!/usr/bin/env bash
# GPU tests of the NCCL backend. Run on a machine with an NVIDIA GPU and driver:
#   scripts/gpu-tests.sh                 # NCCL found on the machine, else a pip wheel
#   MCORE_NCCL_LIBRARY=/path/libnccl.so.2 scripts/gpu-tests.sh
# NCCL is taken from, in order: MCORE_NCCL_LIBRARY; a libnccl.so.2 the dynamic loader knows
# (ldconfig), or in the usual CUDA folders, or in a site-packages of the python3 on PATH (e.g.
# torch's nvidia-nccl wheel); else the wheel matching the driver's CUDA major version
# (nvidia-nccl-cu12 or nvidia-nccl-cu13; NCCL_WHEEL overrides) is installed into target/nccl-venv.
#
# 1. tests/backends/nccl_gpu.rs (all #[ignore]d, so CPU machines skip them): init, split, creation together,
#    allreduce on device memory, a deadline that aborts, 2 ranks on one GPU.
# 2. mcore-selftest --backend nccl under mcore-launch: worlds of 1, 2, 4 and 8 ranks on GPU 0, and
#    one rank per GPU when there are several; each with the split and the per-group strategy, each
#    concurrent (the default) and one by one (MCORE_NCCL_CONCURRENT=0); and a run with a per-kind
#    communicator config (Megatron's YAML). Every group is verified by an all-reduce on device
#    memory. Several ranks share one GPU with NCCL_MULTI_RANK_GPU_ENABLE=1 on NCCL >= 2.30, and
#    with their own NCCL_HOSTID (plus NCCL_SOCKET_IFNAME=lo) on older NCCL, which then connects
#    them as if they were on different hosts.
# 3. A table of communicator creation times per group kind and in total, split vs per group, one
#    by one vs concurrent, in target/gpu-tests/summary.md (slowest rank).
# 4. Recovery (docs/recovery.md): 8 ranks tp 2 pp 2 on GPU 0, split strategy, rank 3 SIGKILLed
#    after init; the 4 survivors shrink the world with ncclCommShrink (NCCL >= 2.27; below, they
#    create a new world) and verify every group of the new layout, 3 ranks leave.
#
# 5. Several grids (docs/grids.md), groups made after init (docs/groups-after-init.md) and
#    suspend/resume of a grid (docs/backends.md): 8 ranks on GPU 0, a trainer tp2 pp2 with a
#    rollout tp4 colocated and side by side, with after-init groups, each strategy; then the
#    rollout grid suspended and resumed, every communicator verified; then both grids recovered
#    after a rank is killed.
# 6. Groups joined from unique-id bytes (docs/id-groups.md): an mcore_init trainer in C
#    (examples/c/id_group_trainer.c, no mcore_initialize) mints NCCL's id and joins as rank 0 with
#    vLLM's warm-up; a foreign peer built only on NCCL's API (scripts/gpu/id_peer_cupy.py, CuPy's
#    binding, the libnccl CuPy loads: the trainer is pointed at the same file) joins as rank 1;
#    rank 0 broadcasts 16 MiB whose bytes the peer checks. Then vLLM's nccl_m2n layout with T = 2
#    (trainer ranks 0 and 1, the CuPy peer rank 2), and a trainer whose peer never comes (deadline
#    5 s: TIMEOUT naming the group within 7 s). Every rank is its own process; on one GPU each gets
#    its own NCCL_HOSTID (with NCCL_SOCKET_IFNAME=lo), with 3 GPUs or more one GPU each.
#
# MCORE_GPU_SECTIONS="1 2 3 4 5 6" (the default) picks the sections to run (3 reads 2's logs).
#
# Prebuilt (a GPU machine without Rust): MCORE_GPU_BIN=DIR runs DIR/mcore-launch, DIR/mcore-selftest
# and DIR/nccl_gpu (the test binary of tests/backends/nccl_gpu.rs) instead of calling cargo;
# scripts/gpu-stage.sh builds that folder. MCORE_GPU_OUT=DIR writes the logs and summary.md there
# (default target/gpu-tests); MCORE_GPU_TIMEOUT=S is each selftest's init timeout (default 120).
#
# Without a CUDA driver it stops at once, saying why (exit status 2). Pointed at the
# libnccl test double (MCORE_NCCL_LIBRARY=.../libnccl_double.so with its libcuda.so.1 link on
# LD_LIBRARY_PATH and MCORE_NCCL_DOUBLE_DIR set) it runs end to end without a GPU: a check of this
# script's own logic, not of NCCL.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${MCORE_GPU_OUT:-target/gpu-tests}
bin=${MCORE_GPU_BIN:-}
init_timeout=${MCORE_GPU_TIMEOUT:-120}
mkdir -p "$out"
pass=0; fail=0
check() { if "$@"; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $*"; fi; }
sections=" ${MCORE_GPU_SECTIONS:-1 2 3 4 5 6} "
section() { case "$sections" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L | tee "$out/gpus.txt"
else
  echo "gpu-tests: nvidia-smi not found (continuing)"; : >"$out/gpus.txt"
fi
gpus=$(grep -c '^GPU ' "$out/gpus.txt" || true); [ "${gpus:-0}" -ge 1 ] || gpus=1

# The driver's CUDA version code (e.g. 13000), 0 when there is no usable driver.
cuda_code=$(python3 - <<'PY' 2>/dev/null || echo 0
import ctypes
try:
    lib = ctypes.CDLL("libcuda.so.1")
    v = ctypes.c_int(0)
    print(v.value if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 else 0)
except OSError:
    print(0)
PY
)
cuda_major=$((cuda_code / 1000))
echo "gpu-tests: CUDA driver version code ${cuda_code:-0} (major $cuda_major)"
if [ "$cuda_code" -eq 0 ]; then
  echo "gpu-tests: no CUDA driver (libcuda.so.1) could be loaded: this machine has no usable GPU; nothing to run"
  exit 2
fi

# A libnccl.so.2 already on the machine, or nothing.
find_nccl() {
  local p
  p=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
  [ -n "$p" ] && [ -e "$p" ] && { echo "$p"; return; }
  for p in /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/lib64/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2 \
           /usr/local/nccl/lib/libnccl.so.2 /opt/nccl/lib/libnccl.so.2; do
    [ -e "$p" ] && { echo "$p"; return; }
  done
  python3 - <<'PY' 2>/dev/null
import os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
for d in dirs:
    for sub in ("nvidia/nccl/lib", "nvidia/cu13/lib"):
        p = os.path.join(d, sub, "libnccl.so.2")
        if os.path.exists(p):
            print(p)
            raise SystemExit
PY
}

if [ -z "${MCORE_NCCL_LIBRARY:-}" ]; then
  lib=$(find_nccl)
  if [ -n "$lib" ]; then
    echo "gpu-tests: using the machine's $lib"
  else
    venv=$PWD/target/nccl-venv
    if [ -n "${NCCL_WHEEL:-}" ]; then wheel=$NCCL_WHEEL
    elif [ "$cuda_major" -ge 13 ]; then wheel=nvidia-nccl-cu13
    else wheel=nvidia-nccl-cu12
    fi
    sub=nccl; [ "$wheel" = nvidia-nccl-cu13 ] && sub=cu13
    lib=$(ls "$venv"/lib/python3*/site-packages/nvidia/$sub/lib/libnccl.so.2 2>/dev/null | head -n1 || true)
    if [ -z "$lib" ]; then
      echo "gpu-tests: no libnccl.so.2 on this machine; installing $wheel (driver CUDA major $cuda_major)"
      { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"; } && "$venv/bin/pip" install -q --disable-pip-version-check "$wheel"
      lib=$(ls "$venv"/lib/python3*/site-packages/nvidia/$sub/lib/libnccl.so.2 2>/dev/null | head -n1 || true)
    fi
    [ -n "$lib" ] || { echo "gpu-tests: could not get $wheel's libnccl.so.2"; exit 1; }
  fi
  export MCORE_NCCL_LIBRARY=$lib
fi
version=$(python3 -c "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); v=ctypes.c_int(); l.ncclGetVersion(ctypes.byref(v)); print(v.value)" "$MCORE_NCCL_LIBRARY" 2>/dev/null || echo 0)
echo "gpu-tests: MCORE_NCCL_LIBRARY=$MCORE_NCCL_LIBRARY (NCCL code $version), $gpus GPU(s)"
if [ "$version" -ge 23000 ]; then
  shared_env=(NCCL_MULTI_RANK_GPU_ENABLE=1); shared_how="NCCL_MULTI_RANK_GPU_ENABLE=1"
else
  shared_env=(NCCL_SOCKET_IFNAME=lo); shared_how="NCCL_HOSTID=host-RANK per rank (NCCL < 2.30)"
fi
echo "gpu-tests: ranks sharing GPU 0 use $shared_how"

if section 1; then
  echo "== 1. tests/backends/nccl_gpu.rs"
  if [ -n "$bin" ]; then
    check "$bin/backends" nccl_gpu:: --ignored --skip _child --test-threads=1 --nocapture
  else
    check cargo test --release --locked --test backends nccl_gpu:: -- --ignored --skip _child --test-threads=1 --nocapture
  fi
fi

if [ -z "$bin" ]; then
  cargo build --release --locked --quiet --bins
  bin=./target/release
fi
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
# run NAME NPROC SHARED [env...] -- selftest args: logs to $out/NAME.log, JSON lines to
# $out/NAME.jsonl. SHARED=1: the ranks share GPU 0 (each gets its own NCCL_HOSTID before 2.30).
# Every rank must report ok, or $expect_ok of them when set (ranks killed on purpose report nothing).
run() {
  local name=$1 nproc=$2 shared=$3; shift 3
  local want=${expect_ok:-$nproc}
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local prog=("$bin/mcore-selftest")
  if [ "$shared" = 1 ] && [ "$nproc" -gt 1 ]; then
    envs+=("${shared_env[@]}")
    # mcore-launch gives every rank its RANK; NCCL_HOSTID must differ per rank on NCCL < 2.30.
    [ "$version" -ge 23000 ] || prog=(bash -c 'NCCL_HOSTID="host-$RANK" exec "$0" "$@"' "$bin/mcore-selftest")
  fi
  echo "-- $name: $nproc rank(s): ${envs[*]} $*"
  if env ${envs[@]+"${envs[@]}"} "$bin/mcore-launch" --nproc "$nproc" --timeout $((init_timeout * 2 + 60)) -- \
       "${prog[@]}" --json --backend nccl --timeout "$init_timeout" "$@" >"$out/$name.log" 2>&1 \
     && [ "$(grep -c '"ok":true' "$out/$name.log")" = "$want" ]; then
    sed -n 's/^[^{]*\]: \({.*}\)$/\1/p' "$out/$name.log" >"$out/$name.jsonl"
    pass=$((pass+1))
  else
    tail -n 30 "$out/$name.log"; echo "FAIL: $name"; fail=$((fail+1))
  fi
}
rm -f "$out"/*.jsonl
section 2 && echo "== 2. mcore-selftest --backend nccl"
section 2 && for s in split per-group; do
  for c in together one-by-one; do
    cenv=MCORE_NCCL_CONCURRENT=1; [ "$c" = one-by-one ] && cenv=MCORE_NCCL_CONCURRENT=0
    run "world1-$s-$c" 1 1 "$cenv" -- --comm-strategy "$s"
    run "shared2-$s-$c" 2 1 "$cenv" -- --tp 2 --device 0 --comm-strategy "$s"
    run "shared4-$s-$c" 4 1 "$cenv" -- --tp 2 --pp 2 --device 0 --comm-strategy "$s" --seed 1234
    run "shared8-$s-$c" 8 1 "$cenv" -- --tp 2 --pp 2 --cp 2 --device 0 --comm-strategy "$s"
    if [ "$gpus" -ge 2 ]; then
      tp=2; pp=$(( gpus >= 4 ? 2 : 1 ))
      run "pergpu-$s-$c" "$gpus" 0 "$cenv" -- --tp "$tp" --pp "$pp" --comm-strategy "$s"
    fi
  done
done
section 2 && run "shared4-config" 4 1 -- --tp 2 --pp 2 --device 0 --comm-config "$out/nccl_comm.yaml"

section 3 && echo "== 3. creation times per group kind (slowest rank): split vs per group, one by one vs concurrent"
section 3 && python3 - "$out" "$version" "$shared_how" <<'PY' | tee "$out/summary.md"
import json, os, sys
out, version, shared_how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"NCCL code {version}; ranks sharing a GPU: {shared_how}")
cols = [("split", "one-by-one"), ("split", "together"), ("per-group", "one-by-one"), ("per-group", "together")]
def load(name):
    path = os.path.join(out, name + ".jsonl")
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []
for setup in ("world1", "shared2", "shared4", "shared8", "pergpu"):
    runs = {c: load(f"{setup}-{c[0]}-{c[1]}") for c in cols}
    have = [c for c in cols if runs[c]]
    if not have:
        continue
    n = len(runs[have[0]])
    print(f"\n### {setup}: {n} rank(s), milliseconds\n")
    print("| kind | " + " | ".join(f"{s} {c}" for s, c in have) + " |")
    print("| --- |" + " ---: |" * len(have))
    kinds = list(dict.fromkeys(runs[have[0]][0]["kinds"]))  # layout order
    for k in kinds:
        print(f"| {k} | " + " | ".join(f"{max(l['create_s'].get(k, 0) for l in runs[c]) * 1e3:.1f}" for c in have) + " |")
    def row(label, f):
        print(f"| {label} | " + " | ".join(f(runs[c]) for c in have) + " |")
    row("(world communicator)", lambda ls: f"{max(l['phases_s']['world'] for l in ls) * 1e3:.1f}" if ls[0]["strategy"] == "split" else "-")
    row("**all communicators**", lambda ls: f"**{max(l['phases_s']['groups'] for l in ls) * 1e3:.1f}**")
    row("init total (verification included)", lambda ls: f"{max(l['init_seconds'] for l in ls) * 1e3:.1f}")
    row("communicators per rank", lambda ls: str(ls[0]["communicators"]))
print("\nPer kind: one by one, the kind's own creation (split collective or init); concurrent, from the")
print("kind's start until this rank saw its communicator ready (all kinds are in flight together).")
PY
if section 4; then
  echo "== 4. recovery: rank 3 of 8 killed, the world shrunk (ncclCommShrink) or, before NCCL 2.27, made anew"
  from=shrink; [ "$version" -ge 22700 ] || from=new
  expect_ok=7 run "recovery-$from" 8 1 -- --tp 2 --pp 2 --device 0 --comm-strategy split --fail-rank 3
  got=$(grep -c "\"world_from\":\"$from\"" "$out/recovery-$from.log" || true)
  echo "recovery: $got of 4 survivors report \"world_from\":\"$from\" (NCCL code $version)"
  check [ "$got" = 4 ]
fi

if section 5; then
  echo "== 5. several grids, groups made after init, suspend/resume of a grid (8 ranks on GPU 0)"
  for s in split per-group; do
    run "grids-colocated-$s" 8 1 -- --tp 2 --pp 2 --grid rollout:tp=4 --device 0 --comm-strategy "$s" \
      --seed 1234 --group ws:0,4 --group pair:2,6
    run "grids-side-$s" 8 1 -- --tp 2 --pp 2 --local-world-size 4 --grid rollout:tp=4,rank-offset=4,local-world-size=4 \
      --device 0 --comm-strategy "$s" --group ws:0,4
  done
  run "grids-suspend-rollout" 8 1 -- --tp 2 --pp 2 --grid rollout:tp=4 --device 0 --suspend-resume rollout:all
  # Recovery of both grids: rank 3 killed; the trainer drops replica {2, 3, 6, 7}, the rollout
  # (tp 2, dp 4) the same ranks; 4 survivors re-form both grids, 3 ranks leave.
  expect_ok=7 run "grids-recovery" 8 1 -- --tp 2 --pp 2 --grid rollout:tp=2 --device 0 --comm-strategy split --fail-rank 3
  got=$(grep -c '"recovered":true' "$out/grids-recovery.log" || true)
  echo "grids-recovery: $got of 4 survivors recovered both grids"
  check [ "$got" = 4 ]
  python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in sorted(f[:-6] for f in os.listdir(out) if f.startswith("grids-") and f.endswith(".jsonl")):
    ls = [json.loads(l) for l in open(os.path.join(out, name + ".jsonl"))]
    ls = [l for l in ls if "init_seconds" in l]  # a recovery's leaving ranks report no init
    init = max(l["init_seconds"] for l in ls)
    comms = sorted({l["communicators"] for l in ls})
    extra = [k for k in ("after_init_groups", "suspend_resume") if k in ls[0]]
    print(f"{name}: {len(ls)} ranks ok, init max {init:.2f} s, communicators/rank {comms}; {', '.join(extra)}")
PY
fi

if section 6; then
  echo "== 6. groups joined from unique-id bytes: a C trainer and a CuPy peer (NCCL's own API)"
  trainer=$bin/id_group_trainer
  if [ ! -x "$trainer" ]; then
    # Built here against the release library, found through a soname link beside it.
    mkdir -p "$out/c" && cdir=$(cd "$out/c" && pwd)
    ln -sf "$PWD/target/release/libmcore_init.so" "$cdir/libmcore_init.so.0.1"
    cc -std=c11 -O2 -Iinclude examples/c/id_group_trainer.c -L"$cdir" -l:libmcore_init.so.0.1 \
      -Wl,-rpath,"$cdir" -o "$cdir/id_group_trainer" && trainer=$cdir/id_group_trainer
  fi
  # The peer's libnccl: the trainer must load the same file (NCCL refuses a peer of another version).
  cupy_nccl=$(python3 - <<'PY' 2>/dev/null
from cupy.cuda import nccl
nccl.get_version()
print(next(l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l))
PY
)
  if [ ! -x "$trainer" ]; then
    echo "FAIL: cannot build examples/c/id_group_trainer.c"; fail=$((fail+1))
  elif [ -z "$cupy_nccl" ]; then
    echo "FAIL: CuPy with its NCCL binding is not importable by python3 (pip install cupy-cuda12x)"; fail=$((fail+1))
  else
    echo "id-groups: CuPy's libnccl is $cupy_nccl; the trainer uses it too"
    # idrun NAME WORLD TRAINERS: trainer ranks [0, TRAINERS) in C, peers [TRAINERS, WORLD) in CuPy.
    idrun() {
      local name=$1 world=$2 trainers=$3 r dev pids=() rcs=0
      local idf=$out/$name.id; rm -f "$idf"
      for ((r = 0; r < world; r++)); do
        dev=0; [ "$gpus" -ge "$world" ] && dev=$r
        if [ "$r" -lt "$trainers" ]; then
          env MCORE_NCCL_LIBRARY="$cupy_nccl" LOCAL_RANK=$dev NCCL_HOSTID=host-$r NCCL_SOCKET_IFNAME=lo \
            "$trainer" "$r" "$world" "$idf" 60000 $((16 << 20)) >"$out/$name.$r.log" 2>&1 &
        else
          env NCCL_HOSTID=host-$r NCCL_SOCKET_IFNAME=lo \
            timeout 120 python3 scripts/gpu/id_peer_cupy.py "$r" "$world" "$idf" 60 $((16 << 20)) "$dev" \
            >"$out/$name.$r.log" 2>&1 &
        fi
        pids+=($!)
      done
      for r in "${!pids[@]}"; do wait "${pids[$r]}" || rcs=$((rcs + 1)); cat "$out/$name.$r.log"; done
      check [ "$rcs" = 0 ]
    }
    idrun id-pair 2 1
    idrun id-m2n-t2 3 2
    rm -f "$out/id-lonely.id"
    start=$(date +%s.%N)
    MCORE_NCCL_LIBRARY="$cupy_nccl" NCCL_SOCKET_IFNAME=lo "$trainer" 0 2 "$out/id-lonely.id" 5000 16 >"$out/id-lonely.log" 2>&1
    rc=$?
    took=$(python3 -c "import sys,time; print(f'{time.time() - float(sys.argv[1]):.2f}')" "$start")
    cat "$out/id-lonely.log"
    echo "id-lonely: exit status $rc after $took s (deadline 5 s)"
    check [ "$rc" = 3 ]
    check grep -q "all 2 ranks of group weight_sync" "$out/id-lonely.log"
    check python3 -c "import sys; sys.exit(float(sys.argv[1]) >= 7)" "$took"
  fi
fi

echo "gpu-tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
