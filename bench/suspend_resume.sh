#!/usr/bin/env bash
# Resume time against a fresh init of the same world, side by side in one run (docs/BENCHMARKS.md,
# "Suspend and resume"): `mcore-launch --nproc N -- mcore-selftest --suspend-resume all` over the
# Gloo plugin (recreate mode: every communicator released on suspend, created again on resume),
# RUNS times per strategy. Each rank reports its init time and its resume time; the table shows
# the slowest rank of each run (a world is ready when its slowest rank is).
# usage: bench/suspend_resume.sh [N (16)] [RUNS (3)] [BUILD dir (target/debug)]
set -euo pipefail
n=${1:-16}
runs=${2:-3}
bin=${3:-target/debug}
plugin=${MCORE_GLOO_PLUGIN:-$PWD/target/gloo-plugin/libmcore_init_gloo.so}
layout=(--tp 2 --pp 2 --cp 2 --ep 2)
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
cat >"$summary" <<'PY'
import json, sys
strategy, run, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = [json.loads(l.split("]: ", 1)[1]) for l in sys.stdin if "]: {" in l]
assert len(lines) == n and all(l["ok"] for l in lines), f"{len(lines)}/{n} ranks ok"
sr = [l["suspend_resume"] for l in lines]
assert all(s["groups_verified_after"] == l["groups"] for s, l in zip(sr, lines)), "a group was not verified"
init = max(l["init_seconds"] for l in lines)
susp = max(s["suspend_s"] for s in sr)
res = max(s["resume_s"] for s in sr)
print(f"| {strategy} | {run} | {init:.3f} | {susp:.4f} | {res:.3f} | {lines[0]['communicators']} |")
PY
echo "| strategy | run | init max s | suspend max s | resume max s (recreate) | communicators / rank |"
echo "| --- | --- | --- | --- | --- | --- |"
for strategy in split per-group; do
  for run in $(seq 1 "$runs"); do
    out=$(timeout 300 "$bin/mcore-launch" --nproc "$n" --timeout 120 -- "$bin/mcore-selftest" --json \
      --backend "$plugin" "${layout[@]}" --comm-strategy "$strategy" --suspend-resume all)
    printf '%s\n' "$out" | python3 "$summary" "$strategy" "$run" "$n"
  done
done
