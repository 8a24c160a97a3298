#!/usr/bin/env bash
# tier: slow
# lane: wait
# Recovery after a failure with real processes (docs/recovery.md): 16 Gloo ranks, tp 2 pp 2,
# through mcore-launch; after init rank 0 kills the named ranks with SIGKILL (by pid) and the
# survivors agree on the failed set through the store and re-form:
#   1. --fail-rank 5: 12 ranks on the planned layout (rank 5's replica 4, 5, 12, 13 dropped), every
#      group verified by a collective, `"recovered": true`; ranks 4, 12, 13 `"left": true`; the
#      launcher exits 0; Gloo (auto = split strategy) has no shrink slot, so the survivors split
#      from a new world (`"world_from": "new"`), and keep the communicators of the kinds whose
#      membership did not change (tensor, pipeline, ...: `"kept_kinds"`);
#   2. --fail-rank 1: rank 0 (the store's host) leaves with its replica and keeps the store up
#      until the survivors are done;
#   3. --fail-rank 1,2,4,6 (a rank of every replica): every survivor fails with "no valid layout
#      remains", naming the failed ranks, and the launcher exits non-zero (it stops the others at
#      the first error exit, so only the lines printed by then are checked, one at least).
#   4. --fail-rank 5 --fail-at before: rank 5 SIGKILLs itself before initializing; the others'
#      init fails at check-in naming rank 5 (after MCORE_INIT_TIMEOUT), and they recover from that
#      failed init to the same layout as in 1;
#   5. --fail-at during: rank 5 SIGKILLs itself once every rank has checked in; the others'
#      communicator creation fails naming rank 5, and they recover likewise;
#   6. --fail-at verify: rank 5 SIGKILLs itself once its communicators exist; the others' init
#      fails verifying a group with it (or succeeds, and a health check finds the failure); no
#      error names rank 5 as never arrived, so the agreement finds it by its absence (the window);
#   7. 18 ranks with --spares 2 --fail-rank 5: ranks 16 and 17 stand by; 16 takes rank 5's place
#      (its coordinates, its groups) and the world stays 16 on tp 2 pp 2 dp 4, every group
#      verified; 17 stands by again after the recovery and leaves when the job ends.
# The planning and the CLI are covered by cargo tests (src/topology/recovery.rs,
# tests/cli/cli_topo_recovery.rs), the Python twin by python/tests/test_recovery*.py.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
gloo_plugin >/dev/null   # target/gloo-plugin, on LD_LIBRARY_PATH below
cargo build --release --locked --bin mcore-launch --bin mcore-selftest >/dev/null 2>&1 || suite_abort recovery build
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME FAIL_RANKS [FAIL_AT INIT_TIMEOUT]: the launcher's output in $tmp/NAME.out, its status
# in $tmp/NAME.rc ($NPROC processes, 16 by default; $SPARES spares, none by default). Without
# FAIL_AT and SPARES the command is the one docs/recovery.md shows (no --json: --fail-rank prints
# JSON lines by itself).
run() {
  local extra=()
  [ -n "${3:-}" ] && extra+=(--fail-at "$3")
  [ -n "${SPARES:-}" ] && extra+=(--spares "$SPARES")
  LD_LIBRARY_PATH="$PWD/target/gloo-plugin" MCORE_INIT_TIMEOUT=${4:-60} timeout 150 ./target/release/mcore-launch \
    --nproc "${NPROC:-16}" --timeout 120 -- ./target/release/mcore-selftest --tp 2 --pp 2 --backend gloo \
    --fail-rank "$2" "${extra[@]}" >"$tmp/$1.out" 2>"$tmp/$1.err"
  echo $? >"$tmp/$1.rc"
}

# check NAME EXPECTED_RC KILLED LEFT SURVIVORS NEW_WORLD [WORLD_FROM]: every line checked with Python
check() {
  python3 - "$tmp/$1.out" "$(cat "$tmp/$1.rc")" "$2" "$3" "$4" "$5" "$6" "${7:-}" <<'PY'
import json, re, sys
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
    fail_at = o.get("fail_at")
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
                and (not world_from or o.get("world_from") == world_from)
                and (fail_at != "after" or "tensor_model_parallel" in o.get("kept_kinds", []))):
            errors.append(f"rank {r}: expected new rank {survivors.index(r)} of {new_world}: {o}")
        elif o.get("fail_at") in ("before", "during") and not re.search(rf"rank\(s\) {killed[0]}\b[^;]* (did not come|died)", o.get("detected", "")):
            errors.append(f"rank {r}: the failed init should name rank {killed[0]}: {o.get('detected')}")
        elif o.get("fail_at") == "verify" and not o.get("detected", "").startswith(("init failed", "init succeeded")):
            errors.append(f"rank {r}: expected a failed init or a health check to find the failure: {o}")
        else:
            print(f"  rank {r} -> {o['rank']}/{o['world_size']}: {o['groups']} groups verified, "
                  f"recovery {o['recovery_seconds']:.3f} s" + (f" after {o['detected_after_s']:.1f} s of init"
                  if "detected_after_s" in o else ""))
    else:
        errors.append(f"rank {r}: unexpected line {o}")
print("\n".join(errors))
sys.exit(1 if errors else 0)
PY
}

run kill5 5
if check kill5 0 5 4,12,13 0,1,2,3,6,7,8,9,10,11,14,15 12 new >"$tmp/kill5.check"; then
  suite_ok "rank 5 killed: 12 ranks recovered on tp 2 pp 2 dp 3 (a new world: Gloo has no shrink slot), ranks 4, 12, 13 left, launcher exit 0"
  grep -m2 "rank " "$tmp/kill5.check"
else
  suite_bad "rank 5 killed: $(cat "$tmp/kill5.check")"; tail -5 "$tmp/kill5.err"
fi
run kill1 1
if check kill1 0 1 0,8,9 2,3,4,5,6,7,10,11,12,13,14,15 12 >"$tmp/kill1.check"; then
  suite_ok "rank 1 killed: rank 0 (the store's host) left with its replica, 12 ranks recovered"
else
  suite_bad "rank 1 killed: $(cat "$tmp/kill1.check")"; tail -5 "$tmp/kill1.err"
fi
run every 1,2,4,6
if check every 1 1,2,4,6 "" "" refused >"$tmp/every.check"; then
  suite_ok "a rank of every replica killed: every survivor refuses with 'no valid layout remains', launcher non-zero"
else
  suite_bad "a rank of every replica killed: $(cat "$tmp/every.check")"; tail -5 "$tmp/every.err"
fi
for at in before during verify; do
  run "$at" 5 "$at" 8
  if check "$at" 0 5 4,12,13 0,1,2,3,6,7,8,9,10,11,14,15 12 >"$tmp/$at.check"; then
    suite_ok "rank 5 killed ($at init): found, 12 ranks recovered on tp 2 pp 2 dp 3, launcher exit 0"
    grep -m1 "rank " "$tmp/$at.check"
  else
    suite_bad "rank 5 killed ($at init): $(cat "$tmp/$at.check")"; tail -5 "$tmp/$at.err"
  fi
done
NPROC=18 SPARES=2 run spare 5
if python3 - "$tmp/spare.out" "$(cat "$tmp/spare.rc")" >"$tmp/spare.check" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("[rank ") and ": {" in line:
        head, body = line.split(": ", 1)
        rows[int(head[6:-1])] = json.loads(body)
errors = [] if sys.argv[2] == "0" else [f"launcher exit {sys.argv[2]}"]
if sorted(rows) != [r for r in range(18) if r != 5]:
    errors.append(f"lines from ranks {sorted(rows)}, expected every rank but 5")
# The spare left standing by (new rank 16, after the layout's 16) leaves when the job ends.
o = rows.pop(17, {})
if not (o.get("ok") and o.get("spare") and o.get("left") and o.get("rank") == 16):
    errors.append(f"rank 17: expected the spare left standing by, leaving when the job ends: {o}")
for r, o in sorted(rows.items()):
    new = 5 if r == 16 else r
    # The world: the layout's 16 ranks and the spare left (new rank 16).
    if not (o.get("ok") and o.get("recovered") and o.get("world_size") == 17 and o.get("rank") == new
            and o.get("failed") == [5] and o.get("groups", 0) > 0 and bool(o.get("spare")) == (r == 16)):
        errors.append(f"rank {r}: expected new rank {new} of 16 (and a spare): {o}")
if not errors:
    print(f"  spare 16 -> 5/16: {rows[16]['groups']} groups verified, recovery {rows[16]['recovery_seconds']:.3f} s")
print("\n".join(errors))
sys.exit(1 if errors else 0)
PY
then
  suite_ok "two spares: 18 ranks, rank 5 killed, spare rank 16 took its place, 16 ranks on tp 2 pp 2 dp 4, spare 17 stood by again"
  head -1 "$tmp/spare.check"
else
  suite_bad "a spare took rank 5's place: $(cat "$tmp/spare.check")"; tail -5 "$tmp/spare.err"
fi
suite_end recovery
