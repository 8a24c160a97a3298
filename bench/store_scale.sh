#!/usr/bin/env bash
# TCPStore servers at scale: our event-driven server against torch's libuv TCPStore server, one
# load generator (examples/store_scale.rs: non-blocking clients sending this project's client's
# bytes), same workload, interleaved (the side going first alternates), --reps runs per point,
# each run in its own loopback-only network namespace (`unshare -n`, lo up) with a fresh server
# and the open-file limit raised to the hard limit. See docs/benchmarks/store.md.
#
# Usage: bench/store_scale.sh [--clients "1024 4096 16384"] [--reps 5] [--workloads "load init"]
#                             [--sides "ours torch"] [--out target/store-scale]
# Needs root (unshare -n). torch comes from PyPI into a venv this script creates
# (target/torchrun-venv made by scripts/torchrun-venv.sh, or MCORE_STORE_BENCH_VENV); the CUDA wheel pulls its nvidia
# packages (several GB): `pip install --no-deps torch` cannot import.
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS="1024 4096 16384"
REPS=5
WORKLOADS="load init"
SIDES="ours torch"
OUT=target/store-scale
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --workloads) WORKLOADS="$2"; shift 2 ;;
    --sides) SIDES="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
VENV="${MCORE_STORE_BENCH_VENV:-target/torchrun-venv}"
if [[ " $SIDES " == *" torch "* ]]; then
  scripts/torchrun-venv.sh "$VENV"  # the project's one pinned torch venv (made when missing)
fi
cargo build --release --example store_scale
BIN=target/release/examples/store_scale
mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
: > "$RESULTS"
export BIN VENV
# One run: fresh namespace, fresh server on port 29500, the generator, the server stopped.
run_one() { # side workload clients
  unshare -n bash -c '
    set -e
    ip link set lo up
    ulimit -n "$(ulimit -Hn)"
    if [ "$1" = ours ]; then
      coproc SRV { exec "$BIN" serve 29500; }
    else
      coproc SRV { exec "$VENV/bin/python" -W ignore bench/torch_store_server.py 29500; }
    fi
    read -r line <&"${SRV[0]}"
    [ "$line" = ready ] || { echo "server did not start" >&2; exit 1; }
    "$BIN" load 29500 "$3" "$2" "$SRV_PID"
    kill "$SRV_PID"; wait "$SRV_PID" 2>/dev/null || true
  ' run_one "$@"
}
for n in $CLIENTS; do
  for w in $WORKLOADS; do
    for rep in $(seq 1 "$REPS"); do
      # Alternate which side goes first.
      order="$SIDES"
      if [ $((rep % 2)) -eq 0 ]; then order="$(echo "$SIDES" | tr ' ' '\n' | tac | tr '\n' ' ')"; fi
      for side in $order; do
        load="$(cut -d' ' -f1 /proc/loadavg)"
        line="$(run_one "$side" "$w" "$n")"
        echo "{\"side\":\"$side\",\"rep\":$rep,\"load1\":$load,${line#\{}" | tee -a "$RESULTS"
      done
    done
  done
done
python3 - "$RESULTS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(xs):
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.2f}" if xs else "-"
keys = sorted({(r["workload"], r["clients"]) for r in rows}, key=lambda k: (k[0] != "load", k[1]))
print("| workload | clients | side | median s (runs) | server CPU s, median | failed | requests/client mean (max non-root) | server KiB/conn | load1 |")
print("| --- | ---: | --- | --- | ---: | ---: | --- | ---: | --- |")
for w, n in keys:
    for side in ("ours", "torch"):
        rs = [r for r in rows if r["workload"] == w and r["clients"] == n and r["side"] == side]
        if not rs:
            continue
        secs = [r["seconds"] for r in rs]
        kib = [(r["rss_peak_kb"] - r["rss_before_kb"]) / n for r in rs if r["rss_peak_kb"] is not None]
        print(f"| {w} | {n} | {side} | **{statistics.median(secs):.3f}** ({', '.join(f'{s:.3f}' for s in secs)}) "
              f"| {med([r.get('server_cpu_s') for r in rs])} | {sum(r['failed'] for r in rs)} | {statistics.mean(r['requests_mean'] for r in rs):.1f} "
              f"({max(r['requests_max_non_root'] for r in rs)}) | {statistics.median(kib):.1f} "
              f"| {', '.join(str(r['load1']) for r in rs)} |")
EOF
