#!/usr/bin/env bash
# Init benchmark: time from process start to "all Megatron groups ready" and store round trips
# per rank, Megatron-Core (initialize_model_parallel on torch Gloo) against ours
# (mcore-launch + mcore-selftest), at tp=2 pp=2 cp=2 ep=2 on 8 ranks (dp=1) and 16 ranks (dp=2).
#
# Usage: bench/run_init_bench.sh [--reps N] [--worlds "8 16"] [--sides "megatron ours"] [--out DIR] [--ep N]
# Env:   MCORE_BENCH_VENV  venv with torch (default target/torchrun-venv, made by scripts/torchrun-venv.sh); created with
#                          torch==2.15.0 from PyPI when it has no torch (about 5.4 GB).
#        MCORE_BENCH_SITE  optional folder for megatron-core (pip --target, put on PYTHONPATH),
#                          for a venv that must stay untouched; default: inside the venv.
#        MCORE_BENCH_MEGATRON  megatron-core version (default 0.19.2; 0.16.1 on Python < 3.12,
#                          which 0.17+ requires); installed with --no-deps + numpy, packaging.
# Results: DIR (default target/init-bench/<UTC time>) holds one log per run, one summary JSON
# per side and world, and table.md (also printed).
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=5
WORLDS="8 16"
SIDES="megatron ours"
OUT="target/init-bench/$(date -u +%Y%m%dT%H%M%SZ)"
TP=2 PP=2 CP=2 EP=2
RUN_TIMEOUT_S=600
VENV="${MCORE_BENCH_VENV:-$PWD/target/torchrun-venv}"
SITE="${MCORE_BENCH_SITE:-}"

while [ $# -gt 0 ]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --worlds) WORLDS="$2"; shift 2 ;;
        --sides) SIDES="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --ep) EP="$2"; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "run_init_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$REPS" in ''|*[!0-9]*|0) echo "run_init_bench.sh: --reps must be a whole number >= 1, got '$REPS'" >&2; exit 2 ;; esac
mkdir -p "$OUT"
PY="$VENV/bin/python"

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# One Megatron world: WORLD ranks started by a plain loop (no launcher agent, no agent store),
# rank 0 serving the TCPStore. $1 world, $2 log, rest: extra worker flags.
megatron_world() {
    local world="$1" log="$2"; shift 2
    local port; port="$(free_port)"
    local pids=() r status=0
    : > "$log"
    for ((r = 0; r < world; r++)); do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
            timeout "$RUN_TIMEOUT_S" "$PY" bench/megatron_baseline.py \
                --tp $TP --pp $PP --cp $CP --ep $EP "$@" > "$log.rank$r" 2> "$log.rank$r.err" &
        pids+=($!)
    done
    for r in "${!pids[@]}"; do
        wait "${pids[$r]}" || { status=$?; echo "megatron rank $r failed ($status), see $log.rank$r.err" >&2; }
    done
    for ((r = 0; r < world; r++)); do cat "$log.rank$r" >> "$log"; done
    return $status
}

GLOO_PLUGIN_DIR=target/gloo-plugin   # where scripts/test.d/20-gloo-plugin.sh builds it
# mcore-selftest prints JSON by default, or only with --json once its help mentions that flag.
SELFTEST_JSON=()
ours_world() {
    local world="$1" log="$2"
    LD_LIBRARY_PATH="$PWD/$GLOO_PLUGIN_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    timeout "$RUN_TIMEOUT_S" target/release/mcore-launch --nproc "$world" -- \
        target/release/mcore-selftest --tp $TP --pp $PP --cp $CP --ep $EP --backend gloo "${SELFTEST_JSON[@]}" \
        > "$log" 2> "$log.err"
}

# The Megatron side's Python: a venv with torch (created when missing) and megatron-core (in the
# venv, or in $SITE on PYTHONPATH).
setup_megatron() {
    # The project's one pinned torch venv (made when missing; see scripts/torchrun-venv.sh).
    scripts/torchrun-venv.sh "$VENV" || return 1
    if [ -n "$SITE" ]; then export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"; fi
    if ! "$PY" -c 'import megatron.core' 2>/dev/null; then
        local version="${MCORE_BENCH_MEGATRON:-}"
        if [ -z "$version" ]; then
            if "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then version=0.19.2; else version=0.16.1; fi
        fi
        echo "== installing megatron-core==$version (--no-deps; numpy, packaging) into ${SITE:-$VENV}" >&2
        local target=(); [ -n "$SITE" ] && target=(--target "$SITE")
        "$PY" -m pip install --quiet --no-deps "${target[@]}" "megatron-core==$version" numpy packaging || return 1
    fi
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

sides=()
for side in $SIDES; do
    case "$side" in
        megatron)
            if ! setup_megatron || ! "$PY" -c 'import torch, megatron.core' 2>/dev/null; then
                echo "megatron side skipped: could not set up torch + megatron-core in $VENV (MCORE_BENCH_VENV); see bench/README.md" >&2
                continue
            fi
            "$PY" -c 'import sys, torch, megatron.core as m; print(f"versions: python {sys.version.split()[0]}, torch {torch.__version__}, megatron-core {m.__version__}")' 2>/dev/null | tee "$OUT/versions.txt"
            ;;
        ours)
            if [ ! -x target/release/mcore-selftest ] || [ ! -x target/release/mcore-launch ]; then
                echo "our side skipped: target/release/mcore-selftest or mcore-launch not built (cargo build --release --bins)" >&2
                continue
            fi
            if [ ! -f "$GLOO_PLUGIN_DIR/libmcore_init_gloo.so" ]; then
                echo "our side skipped: no Gloo plugin in $GLOO_PLUGIN_DIR (cmake -S backends/gloo -B $GLOO_PLUGIN_DIR && cmake --build $GLOO_PLUGIN_DIR)" >&2
                continue
            fi
            if target/release/mcore-selftest --help 2>&1 | grep -q -- '--json'; then SELFTEST_JSON=(--json); fi
            ;;
        *) echo "run_init_bench.sh: unknown side '$side' (megatron or ours)" >&2; exit 2 ;;
    esac
    sides+=("$side")
done
if [ ${#sides[@]} -eq 0 ]; then
    echo "run_init_bench.sh: nothing to run" >&2
    exit 1
fi

one_world() { # $1 side, $2 world, $3 log, rest: extra worker flags (megatron only)
    local side="$1" world="$2" log="$3"; shift 3
    { echo "load $(loadavg)"; uptime; } > "$log.load"
    if [ "$side" = megatron ]; then megatron_world "$world" "$log" "$@"; else ours_world "$world" "$log"; fi
}

summaries=()
for world in $WORLDS; do
    dp=$((world / (TP * PP * CP)))
    config="tp=$TP pp=$PP cp=$CP ep=$EP dp=$dp"
    for side in "${sides[@]}"; do
        # One untimed warm-up world per side fills the page cache, so every timed run starts alike.
        echo "== $side world=$world ($config): warm-up (load $(loadavg))" >&2
        one_world "$side" "$world" "$OUT/$side-w$world-warmup.log"
        if [ "$side" = megatron ]; then
            echo "== $side world=$world: store-counting run (load $(loadavg))" >&2
            one_world "$side" "$world" "$OUT/$side-w$world-count.log" --count-store
        fi
    done
    # Sides alternate within each repetition, so a change in machine load hits both alike.
    for ((i = 1; i <= REPS; i++)); do
        for side in "${sides[@]}"; do
            echo "== $side world=$world rep $i/$REPS (load $(loadavg))" >&2
            one_world "$side" "$world" "$OUT/$side-w$world-rep$i.log"
        done
    done
    for side in "${sides[@]}"; do
        count_logs=()
        [ "$side" = megatron ] && count_logs=(--count-logs "$OUT/$side-w$world-count.log")
        python3 bench/summarize.py run --side "$side" --world "$world" --config "$config" \
            --json "$OUT/$side-w$world.json" "$OUT/$side-w$world"-rep*.log "${count_logs[@]}"
        summaries+=("$OUT/$side-w$world.json")
    done
done

python3 bench/summarize.py table "${summaries[@]}" | tee "$OUT/table.md"
echo "results in $OUT" >&2
