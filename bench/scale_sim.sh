#!/usr/bin/env bash
# Scale simulator (issue 33 item 5; figures only, never asserted): RANKS simulated ranks as
# threads of one process (examples/scale_sim), against a store server in its own process, in a
# fresh loopback-only network namespace (`unshare -n`, so the segment counts see nothing else),
# both processes with the open-file limit raised to the hard limit. Sides:
#   ours          this project's server; each rank runs the runtime's own liveness and check-in
#                 as a real rank does (examples/scale_sim/adapter.rs), then the job is held idle
#   torch         torch's libuv TCPStore server (PyPI torch in a venv); each rank sends the
#                 requests of init_process_group + Megatron-Core's new_group per group
#   torch-on-ours that torch request pattern against this project's server
# See docs/BENCHMARKS.md ("Scale simulator") for the figures and how to read them.
#
# Usage: bench/scale_sim.sh [--ranks "1024 4096 8192"] [--reps 1] [--idle 62]
#                           [--sides "ours torch torch-on-ours"] [--gloo-dp] [--out target/scale-sim]
# Needs root (unshare -n). The torch side uses target/torchrun-venv (scripts/torchrun-venv.sh
# makes it; or MCORE_SCALE_SIM_VENV).
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS="1024 4096 8192"
REPS=1
IDLE=62
SIDES="ours torch torch-on-ours"
GLOO=""
OUT=target/scale-sim
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) RANKS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --idle) IDLE="$2"; shift 2 ;;
    --sides) SIDES="$2"; shift 2 ;;
    --gloo-dp) GLOO="--gloo-dp"; shift ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
VENV="${MCORE_SCALE_SIM_VENV:-target/torchrun-venv}"
if [[ " $SIDES " == *" torch "* ]]; then
  scripts/torchrun-venv.sh "$VENV"  # the project's one pinned torch venv (made when missing)
fi
cargo build --release --example scale_sim --example store_scale
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
export VENV IDLE GLOO
run_one() { # side ranks
  local fifos; fifos="$(mktemp -d)"
  FIFOS="$fifos" unshare -n bash -c '
    set -e
    ip link set lo up
    ulimit -n "$(ulimit -Hn)"
    B=target/release/examples
    # The server reads questions from one FIFO and answers on the other ("ready" first; ours
    # then prints the requests it served for each line it reads).
    mkfifo "$FIFOS/in" "$FIFOS/out"
    if [ "$1" = torch ]; then
      "$VENV/bin/python" -W ignore bench/torch_store_server.py 29500 <"$FIFOS/in" >"$FIFOS/out" &
    else
      "$B/store_scale" serve 29500 <"$FIFOS/in" >"$FIFOS/out" &
    fi
    SRV_PID=$!
    exec 5>"$FIFOS/in" 6<"$FIFOS/out"
    read -r line <&6
    [ "$line" = ready ] || { echo "server did not start" >&2; exit 1; }
    pattern=$1; [ "$1" = ours ] || pattern=torch
    served=--served; [ "$1" != torch ] || served=""  # our server counts what it serves
    "$B/scale_sim" "$pattern" 29500 "$2" "$SRV_PID" "$IDLE" $GLOO $served 3>&5 4<&6
    kill "$SRV_PID"; wait "$SRV_PID" 2>/dev/null || true
  ' run_one "$@"
  rm -rf "$fifos"
}
for n in $RANKS; do
  for rep in $(seq 1 "$REPS"); do
    for side in $SIDES; do
      load="$(cut -d' ' -f1 /proc/loadavg)"
      line="$(run_one "$side" "$n")"
      echo "{\"run\":\"$side\",\"rep\":$rep,\"load1\":$load,${line#\{}" | tee -a "$RESULTS"
    done
  done
done
echo "results: $RESULTS"
