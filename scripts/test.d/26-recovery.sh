#!/usr/bin/env bash
# Recovery after a failure with real processes (docs/recovery.md): 16 Gloo ranks, tp 2 pp 2,
# through mcore-launch; after init rank 0 kills the named ranks with SIGKILL (by pid) and the
# survivors agree on the failed set through the store and re-form:
#   1. --fail-rank 5: 12 ranks on the planned layout (rank 5's replica 4, 5, 12, 13 dropped), every
#      group verified by a collective, `"recovered": true`; ranks 4, 12, 13 `"left": true`; the
#      launcher exits 0;
#   2. --fail-rank 1: rank 0 (the store's host) leaves with its replica and keeps the store up
#      until the survivors are done;
#   3. --fail-rank 1,2,4,6 (a rank of every replica): every survivor fails with "no valid layout
#      remains", naming the failed ranks, and the launcher exits non-zero (it stops the others at
#      the first error exit, so only the lines printed by then are checked, one at least);
#   4. --fail-rank 5 with --comm-strategy split: Gloo has no shrink slot, so the survivors create a
#      new world and split from it (`"world_from": "new"`), same outcome as 1.
# The planning and the CLI are covered by cargo tests (src/topology/recovery.rs,
# tests/cli_topo_recovery.rs), the Python twin by python/tests/test_recovery*.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok: $1"; }
bad() { fail=$((fail+1)); echo "FAIL: $1"; }
plugin="$PWD/target/gloo-plugin/libmcore_init_gloo.so"
if [ ! -f "$plugin" ]; then
  cmake -S backends/gloo -B target/gloo-plugin -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build target/gloo-plugin -j 2 >/dev/null
fi
cargo build --release --locked --bin mcore-launch --bin mcore-selftest >/dev/null 2>&1 || { echo "recovery: 0 passed, 1 failed (build)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME FAIL_RANKS [selftest args]: the launcher's output in $tmp/NAME.out, its status in $tmp/NAME.rc
run() {
  local name=$1 ranks=$2; shift 2
  LD_LIBRARY_PATH="$PWD/target/gloo-plugin" MCORE_INIT_TIMEOUT=60 timeout 150 ./target/release/mcore-launch --nproc 16 \
    --timeout 120 -- ./target/release/mcore-selftest --tp 2 --pp 2 --backend gloo --fail-rank "$ranks" --json "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err"
  echo $? >"$tmp/$name.rc"
}

# check NAME EXPECTED_RC KILLED LEFT SURVIVORS NEW_WORLD [WORLD_FROM]: every line checked with Python
check() {
  python3 - "$tmp/$1.out" "$(cat "$tmp/$1.rc")" "$2" "$3" "$4" "$5" "$6" "${7:-}" <<'PY'
import json, sys
path, rc, want_rc, killed, left, survivors, new_world, world_from = sys.argv[1:]
ints = lambda s: [int(x) for x in s.split(",") if x]
killed, left, survivors = ints(killed), ints(left), ints(survivors)
rows = {}
for line in open(path):
    if line.startswith("[rank ") and ": {" in line:
        head, body = line.split(": ", 1)
        rows[int(head[6:-1])] = json.loads(body)
errors = []
if (rc == "0") != (want_rc == "0"):
    errors.append(f"launcher exit {rc}, expected {'0' if want_rc == '0' else 'non-zero'}")
expected = set(range(16)) - set(killed)
# On a refusal the launcher stops the others at the first survivor's error exit: some may be
# stopped before printing theirs. Every line printed must be the refusal (one at least).
if new_world == "refused" and not (rows and set(rows) <= expected):
    errors.append(f"lines from ranks {sorted(rows)}: expected some, none from a killed rank")
elif new_world != "refused" and set(rows) != expected:
    errors.append(f"lines from ranks {sorted(rows)}, expected every rank but {killed}")
for r, o in sorted(rows.items()):
    if new_world == "refused":
        if o.get("ok") is not False or "no valid layout remains" not in o.get("error", "") \
                or f"{killed}" not in o.get("error", ""):
            errors.append(f"rank {r}: expected the refusal naming {killed}: {o}")
    elif r in left:
        if not (o.get("ok") and o.get("left") and o.get("failed") == killed):
            errors.append(f"rank {r}: expected to leave: {o}")
    elif r in survivors:
        if not (o.get("ok") and o.get("recovered") and o.get("world_size") == int(new_world)
                and o.get("rank") == survivors.index(r) and o.get("failed") == killed and o.get("groups", 0) > 0
                and (not world_from or o.get("world_from") == world_from)):
            errors.append(f"rank {r}: expected new rank {survivors.index(r)} of {new_world}: {o}")
        else:
            print(f"  rank {r} -> {o['rank']}/{o['world_size']}: {o['groups']} groups verified, "
                  f"recovery {o['recovery_seconds']:.3f} s")
    else:
        errors.append(f"rank {r}: unexpected line {o}")
print("\n".join(errors))
sys.exit(1 if errors else 0)
PY
}

run kill5 5
if check kill5 0 5 4,12,13 0,1,2,3,6,7,8,9,10,11,14,15 12 >"$tmp/kill5.check"; then
  ok "rank 5 killed: 12 ranks recovered on tp 2 pp 2 dp 3, ranks 4, 12, 13 left, launcher exit 0"
  grep -m2 "rank " "$tmp/kill5.check"
else
  bad "rank 5 killed: $(cat "$tmp/kill5.check")"; tail -5 "$tmp/kill5.err"
fi
run kill1 1
if check kill1 0 1 0,8,9 2,3,4,5,6,7,10,11,12,13,14,15 12 >"$tmp/kill1.check"; then
  ok "rank 1 killed: rank 0 (the store's host) left with its replica, 12 ranks recovered"
else
  bad "rank 1 killed: $(cat "$tmp/kill1.check")"; tail -5 "$tmp/kill1.err"
fi
run every 1,2,4,6
if check every 1 1,2,4,6 "" "" refused >"$tmp/every.check"; then
  ok "a rank of every replica killed: every survivor refuses with 'no valid layout remains', launcher non-zero"
else
  bad "a rank of every replica killed: $(cat "$tmp/every.check")"; tail -5 "$tmp/every.err"
fi
run split5 5 --comm-strategy split
if check split5 0 5 4,12,13 0,1,2,3,6,7,8,9,10,11,14,15 12 new >"$tmp/split5.check"; then
  ok "rank 5 killed, split strategy: no shrink slot in Gloo, 12 ranks recovered on a new world"
else
  bad "rank 5 killed, split strategy: $(cat "$tmp/split5.check")"; tail -5 "$tmp/split5.err"
fi
echo "recovery: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
