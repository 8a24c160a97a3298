#!/usr/bin/env bash
# Recovery of a 16-rank Gloo job (tp 2 pp 2) after one rank dies, side by side in one run:
#   mcore: mcore-launch ... mcore-selftest --fail-rank 5: rank 5 is SIGKILLed after init, the 15
#          others agree, 12 re-form the planned layout (dp 4 -> 3) and verify every group.
#          Time = the slowest survivor's reinitialize (from just after the kill to its verified
#          new layout).
#   mcore + spare: the same with 17 processes and --spares 1: rank 16 stands by and takes rank 5's
#          place, so the job keeps its 16 ranks (as torchrun's restart does). Time = the slowest
#          of the 16 re-formed ranks' reinitialize.
#   torchrun: torchrun --max-restarts 1 --no-python running mcore-selftest on the same layout; in
#          the first attempt rank 5 exits right after init (MCORE_SELFTEST_EXIT_AFTER_INIT); the
#          agent stops every worker and starts all 16 again. Time = from rank 5's exit to the last
#          restarted rank done (init + verification of every group), read from timestamps; also the
#          agent's own part (rank 5's exit to the first restarted process) and, as a floor for any
#          restart, a fresh init of the 16 ranks under mcore-launch (init_seconds of the mcore run).
# Usage: bench/recovery_vs_torchrun.sh [REPEATS=3]; needs target/torchrun-venv (scripts/torchrun-venv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
venv=${MCORE_TORCHRUN_VENV:-target/torchrun-venv}
export LD_LIBRARY_PATH="$PWD/target/gloo-plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cargo build --release --locked --bin mcore-launch --bin mcore-selftest >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
selftest=$PWD/target/release/mcore-selftest
cat >"$tmp/worker.sh" <<SH
#!/usr/bin/env bash
[ "\$TORCHELASTIC_RESTART_COUNT" = 1 ] && date +%s.%N >"$tmp/start_\$RANK"
if [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "\$RANK" = 5 ]; then
  MCORE_SELFTEST_EXIT_AFTER_INIT=5 "$selftest" --tp 2 --pp 2 --backend gloo --json >/dev/null 2>&1
  date +%s.%N >"$tmp/fail_time"; exit 3
fi
"$selftest" --tp 2 --pp 2 --backend gloo --json >/dev/null 2>&1; rc=\$?
[ "\$TORCHELASTIC_RESTART_COUNT" = 1 ] && date +%s.%N >"$tmp/ready_\$RANK"
exit \$rc
SH
chmod +x "$tmp/worker.sh"
for i in $(seq "$reps"); do
  ./target/release/mcore-launch --nproc 16 --timeout 120 -- "$selftest" --tp 2 --pp 2 --backend gloo --fail-rank 5 --json \
    >"$tmp/mcore.out" 2>/dev/null
  mc=$(python3 -c '
import json, sys
rows = [json.loads(l.split(": ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("[rank ") and ": {" in l]
rec = [r for r in rows if r.get("recovered")]
assert len(rec) == 12 and all(r["world_size"] == 12 for r in rec), rows
print("%.3f %.3f" % (max(r["recovery_seconds"] for r in rec), max(r["init_seconds_before"] for r in rec)))' "$tmp/mcore.out")
  read -r mc fresh <<<"$mc"
  ./target/release/mcore-launch --nproc 17 --timeout 120 -- "$selftest" --tp 2 --pp 2 --backend gloo --spares 1 \
    --fail-rank 5 --json >"$tmp/spare.out" 2>/dev/null
  sp=$(python3 -c '
import json, sys
rows = [json.loads(l.split(": ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("[rank ") and ": {" in l]
rec = [r for r in rows if r.get("recovered")]
assert len(rec) == 16 and all(r["world_size"] == 16 for r in rec), rows
print("%.3f" % max(r["recovery_seconds"] for r in rec))' "$tmp/spare.out")
  rm -f "$tmp"/ready_* "$tmp"/start_* "$tmp/fail_time"
  MCORE_INIT_TIMEOUT=60 timeout 300 "$venv/bin/torchrun" --nnodes 1 --nproc-per-node 16 --max-restarts 1 \
    --master-addr 127.0.0.1 --master-port $((29600 + i)) --no-python "$tmp/worker.sh" >"$tmp/torchrun.out" 2>&1
  n=$(ls "$tmp"/ready_* | wc -l); [ "$n" = 16 ] || { cat "$tmp/torchrun.out"; echo "torchrun: $n/16 ranks restarted"; exit 1; }
  tr=$(python3 -c '
import glob, sys
t = lambda pat: [float(open(p).read()) for p in glob.glob(sys.argv[1] + pat)]
fail = t("/fail_time")[0]
print("%.3f %.3f" % (max(t("/ready_*")) - fail, min(t("/start_*")) - fail))' "$tmp")
  read -r tr gap <<<"$tr"
  echo "run $i: mcore recovery ${mc} s (12 ranks re-formed) | with a spare ${sp} s (16 ranks) | torchrun restart ${tr} s (16 ranks restarted; agent's own" \
    "stop+respawn ${gap} s) | a fresh mcore init of the 16 ranks (mcore-launch, same run) ${fresh} s"
done
