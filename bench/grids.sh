#!/usr/bin/env bash
# Several grids (issue #26): init of 16 Gloo ranks with one grid (trainer tp2 pp2) against two
# colocated grids (trainer tp2 pp2 + rollout engine tp4 on the same 16 ranks) plus the weight-sync
# group {0, 8, 12} made after init by its members (and, when given, extra mcore-selftest flags), in
# alternating runs; and the
# communicators each rank holds against Megatron-Core 0.19.2's for the same two layouts (its own
# conformance vectors cfg0130 and cfg0132: every group, NCCL and Gloo, it creates with the rank
# as a member).
#
# Usage: bench/grids.sh [--reps N] [--extra "FLAGS"]   (builds the release tools and the Gloo plugin)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=5
EXTRA=""
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS="$2"; shift 2 ;;
    --extra) EXTRA="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "grids.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
cargo build --release --locked --quiet --bins
. scripts/lib/suite.sh
plugin=$(gloo_plugin) || { echo "grids.sh: cannot build the Gloo plugin" >&2; exit 1; }
out=$(mktemp -d)
one=(--tp 2 --pp 2)
two=(--tp 2 --pp 2 --grid rollout:tp=4 --group ws:0,8,12)
for i in $(seq "$REPS"); do
  for side in one two; do
    if [ "$side" = one ]; then flags=("${one[@]}"); else flags=("${two[@]}"); fi
    # shellcheck disable=SC2086
    ./target/release/mcore-launch --nproc 16 --timeout 120 -- ./target/release/mcore-selftest --json \
      --backend "$plugin" "${flags[@]}" $([ "$side" = two ] && echo "$EXTRA") >"$out/$side.$i.log"
  done
done
python3 - "$out" "$REPS" <<'PY'
import gzip, json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def runs(side):
    for i in range(1, reps + 1):
        lines = [json.loads(l.split("]: ", 1)[1]) for l in open(f"{out}/{side}.{i}.log") if "]: {" in l]
        assert len(lines) == 16 and all(l["ok"] for l in lines), f"{side} run {i}: not every rank ok"
        yield lines
res = {s: list(runs(s)) for s in ("one", "two")}
# From process start until every grid's groups are verified and, on its members, the group made
# after init is ready too.
def ready_of(l):
    return l["ready_since_process_start_s"] + max((g["ready_s"] for g in l.get("after_init_groups", [])), default=0.0)
ready = {s: [max(ready_of(l) for l in r) for r in res[s]] for s in res}
init = {s: [max(l["init_seconds"] for l in r) for r in res[s]] for s in res}
comms = {s: sorted({l["communicators"] for l in res[s][0]}) for s in res}
groups = {s: sorted({l["groups"] for l in res[s][0]}) for s in res}
vectors = json.load(gzip.open("tests/data/conformance/v0.19.2/megatron_groups.json.gz"))
by_id = {c["config"]["id"]: c for c in vectors["configs"]}
def megatron(ids, rank):
    return sum(1 for i in ids for v in by_id[i]["groups_by_global"].values() if any(rank in g for g in v["ranks"]))
meg_one = sorted({megatron(["cfg0130"], r) for r in range(16)})
meg_two = sorted({megatron(["cfg0130", "cfg0132"], r) for r in range(16)})
med = statistics.median
print(f"| grids | ready max s ({reps} runs) | median | init max s median | groups / rank | communicators / rank | Megatron-Core 0.19.2's / rank |")
print("| --- | --- | --- | --- | --- | --- | --- |")
print(f"| one (tp2 pp2) | {', '.join(f'{x:.3f}' for x in ready['one'])} | {med(ready['one']):.3f} | {med(init['one']):.3f} | {groups['one']} | {comms['one']} | {meg_one} |")
print(f"| two (+ rollout tp4, + group {{0, 8, 12}} after init) | {', '.join(f'{x:.3f}' for x in ready['two'])} | {med(ready['two']):.3f} | {med(init['two']):.3f} | {groups['two']} | {comms['two']} | {meg_two} |")
print(f"two / one (ready median): {med(ready['two']) / med(ready['one']):.2f}x")
PY
rm -rf "$out"
