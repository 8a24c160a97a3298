#!/usr/bin/env bash
# tier: slow
# lane: wait
# The rendezvous through PMIx (issue 35), with Debian's OpenMPI (openmpi-bin, whose mpirun runs a
# PMIx server; libpmix2 comes with it): `mpirun -np 8 mcore-selftest --tp 2 --pp 2 --cp 2` with
# nothing set by hand rendezvous through PMIx (rank 0's store on an ephemeral port, published via
# PMIx_Put/Commit and read with PMIx_Get; check-in and world exchange as PMIx fences), every group
# verified; two such jobs at once both come
# up, each at its own port; MCORE_RENDEZVOUS=tcp-store still takes the derived port; a PMIx
# library that cannot be loaded falls back to the TCP store with one line (and is an error when
# MCORE_RENDEZVOUS=pmix). Rank 0's store serves at least 8 requests fewer per rank under PMIx
# (the check-in and the world exchange are PMIx fences). MASTER_ADDR/MASTER_PORT set by hand are
# still used; a rank that never comes is named at the check-in; a rank killed during init is
# named by every survivor through the store's liveness; one killed before init, at the
# check-in, within the deadline.
# All traffic on 127.0.0.1 (mpirun's own wire-up included: --mca oob_tcp_if_include lo).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
mpirun_ready pmix
echo "pmix: $(mpirun --version 2>/dev/null | head -n 1), libpmix2 $(dpkg-query -W -f '${Version}' libpmix2 2>/dev/null)"
dir=$(mktemp -d /tmp/mcore-pmix.XXXXXX)
trap 'rm -rf "$dir"' EXIT
clean=(env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MCORE_JOB_ID
  -u MCORE_RENDEZVOUS -u MCORE_PMIX_LIBRARY
  LD_LIBRARY_PATH="$PWD/target/gloo-plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MCORE_LOG=debug)
# run NAME NP [VAR=VALUE | --MPIRUN-OPTION...] -- SELFTEST-ARGS: one mpirun job; each rank's output gathered into
# $dir/NAME.out and $dir/NAME.err (mpirun interleaves the ranks' partial lines otherwise).
# mpirun gets RUN_LIMIT seconds (180 unset), then SIGKILL (it catches SIGTERM, and a deadlocked
# mpirun never acts on it): status 124 while a rank process was still running, 200 when every
# rank had ended and mpirun alone was left (see mpirun_ok).
run() {
  local name=$1 np=$2 vars=()
  shift 2
  local opts=()
  while [ "$1" != "--" ]; do case $1 in --*) opts+=("$1") ;; *) vars+=("$1") ;; esac; shift; done
  shift
  # A session directory of its own (TMPDIR): two mpiruns started at once race creating theirs
  # under /tmp ("orte_session_dir failed").
  mkdir -p "$dir/tmp.$name"
  "${clean[@]}" TMPDIR="$dir/tmp.$name" "${vars[@]}" "${mpi[@]}" "${opts[@]}" --output-filename "$dir/$name" -np "$np" \
    target/release/mcore-selftest --backend gloo --json --timeout 90 "$@" >/dev/null 2>"$dir/$name.mpirun" &
  mpirun_wait $! "${RUN_LIMIT:-180}" "$dir/$name.mpirun"
  local rc=$?
  cat "$dir/$name"/*/rank.*/stdout >"$dir/$name.out" 2>/dev/null
  cat "$dir/$name"/*/rank.*/stderr >"$dir/$name.err" 2>/dev/null
  return $rc
}
# field NAME KEY: the set of KEY's values over NAME's JSON lines, and rank 0's store_requests_served.
check() {
  python3 - "$dir/$1.out" "$dir/$1.err" "$2" "${3:-}" <<'PY'
import json, re, sys
out, err, want, port_rule = sys.argv[1:5]
lines = [json.loads(l) for l in open(out) if l.startswith("{")]
rdzv = {l.get("rendezvous") for l in lines}
assert rdzv == {want}, f"rendezvous {rdzv}, want {want}"
meets = re.findall(r"rank (\d+) meets the others at 127\.0\.0\.1:(\d+) \(([^\n]*)\)", open(err).read())
assert sorted(int(m[0]) for m in meets) == list(range(len(lines))), meets
ports = {m[1] for m in meets}
assert len(ports) == 1, f"the ranks met at several ports: {ports}"
whys = {m[2] for m in meets}
if want == "pmix":
    assert all("published through PMIx" in w and "pmix.local.size = pmix.job.size" in w for w in whys), whys
else:
    assert all("derived from PMIX_NAMESPACE" in w for w in whys), whys
served = [l.get("store_requests_served") for l in lines if l["rank"] == 0][0]
print(ports.pop(), served)
PY
}

# mpirun_ok NAME RC: mpirun exited 0, or, after a rank was killed (--enable-recovery), failed in
# its own teardown once every rank had ended. Debian's mpirun (OpenMPI 4.1.4, libpmix2 4.2.2) then
# either dies of SIGSEGV in PMIx_server_finalize under orte_finalize (status 139) or deadlocks in
# ext3x_server_deregister_client with its ranks all ended (status 200 from run): 5 and 2 in 528
# runs of check 8's scenario (docs/pmix.md). The ranks' lines are judged by the caller either way; said, not
# hidden.
mpirun_ok() {
  [ "$2" -eq 0 ] && return 0
  if [ "$2" -eq 139 ] && grep -q 'PMIx_server_finalize' "$dir/$1.mpirun" && grep -q 'orte_finalize' "$dir/$1.mpirun"; then
    echo "note: mpirun itself crashed in PMIx_server_finalize after its ranks ended (status 139; OpenMPI's defect, docs/pmix.md)"
    return 0
  fi
  if [ "$2" -eq 200 ]; then
    echo "note: mpirun itself did not exit after every rank had ended; killed (OpenMPI's deadlock, docs/pmix.md)"
    return 0
  fi
  return 1
}

# 1. One node, nothing set: PMIx, tp 2 pp 2 cp 2, every group verified.
if run one 8 -- --tp 2 --pp 2 --cp 2; then suite_ok "mpirun -np 8 (tp 2 pp 2 cp 2) exited 0"; else
  suite_bad "mpirun -np 8 exited with status $?"; tail -n 20 "$dir/one.mpirun" "$dir/one.err"; fi
if python3 scripts/lib/selftest_lines.py "$dir/one.out" 8 127.0.0.1 && read -r port_one served_pmix < <(check one pmix); then
  suite_ok "8 ranks ok, every group verified, rendezvous pmix, all met at 127.0.0.1:$port_one (published through PMIx)"
else
  suite_bad "the PMIx job's lines:"; head -c 3000 "$dir/one.out"; grep -h "meets\|PMIx" "$dir/one.err" | head
fi

# 2. Two jobs at once on this node: both come up, each at its own port.
run twoa 8 -- --tp 2 --pp 2 & a=$!
run twob 8 -- --tp 2 --pp 2 & b=$!
wait "$a"; rca=$?
wait "$b"; rcb=$?
pa=$(check twoa pmix 2>/dev/null | cut -d' ' -f1)
pb=$(check twob pmix 2>/dev/null | cut -d' ' -f1)
if [ "$rca" -eq 0 ] && [ "$rcb" -eq 0 ] && python3 scripts/lib/selftest_lines.py "$dir/twoa.out" 8 127.0.0.1 \
   && python3 scripts/lib/selftest_lines.py "$dir/twob.out" 8 127.0.0.1 && [ -n "$pa" ] && [ -n "$pb" ] && [ "$pa" != "$pb" ]; then
  suite_ok "two mpirun -np 8 jobs at once both came up through PMIx, at ports $pa and $pb"
else
  suite_bad "two concurrent jobs (status $rca, $rcb; ports '${pa}' '${pb}'):"
  tail -n 10 "$dir/twoa.mpirun" "$dir/twob.mpirun"; grep -h "error\|meets" "$dir/twoa.err" "$dir/twob.err" | head
fi

# 3. MCORE_RENDEZVOUS=tcp-store: the derived port, as without PMIx.
if run tcp 8 MCORE_RENDEZVOUS=tcp-store -- --tp 2 --pp 2 --cp 2 && python3 scripts/lib/selftest_lines.py "$dir/tcp.out" 8 127.0.0.1 \
   && read -r port_tcp served_tcp < <(check tcp tcp-store); then
  suite_ok "MCORE_RENDEZVOUS=tcp-store: 8 ranks ok through the TCP store at the derived port $port_tcp"
  # Issue 35's count: requests rank 0's store served by the end of init. Under PMIx each other
  # rank skips the check-in (3: the arrival with its host, the verdict's WAIT and GET), the
  # world's exchange (3: SET, WAIT, MULTI_GET) and the job check, and opens one connection fewer
  # (VALIDATE, PING): at least 8 fewer per rank, 64 at 8 ranks (docs/BENCHMARKS.md lists them).
  if [ -n "${served_pmix:-}" ] && [ "$((served_tcp - served_pmix))" -ge 64 ]; then
    suite_ok "rank 0's store served $served_pmix requests under PMIx, $served_tcp through the TCP store (8 ranks; at least 8 fewer per rank)"
  else
    suite_bad "rank 0's store served ${served_pmix:-?} requests under PMIx, ${served_tcp} through the TCP store"
  fi
else
  suite_bad "MCORE_RENDEZVOUS=tcp-store:"; tail -n 20 "$dir/tcp.mpirun" "$dir/tcp.err"
fi

# 4. A PMIx library that cannot be loaded: the TCP store, one line per rank saying why.
if run nolib 4 MCORE_PMIX_LIBRARY=/nonexistent/libpmix.so.2 -- --tp 2 && python3 scripts/lib/selftest_lines.py "$dir/nolib.out" 4 127.0.0.1 \
   && check nolib tcp-store >/dev/null \
   && [ "$(grep -c "^mcore_init: PMIx not used, rendezvous through the TCP store: cannot load the PMIx library /nonexistent/libpmix.so.2" "$dir/nolib.err")" -eq 4 ]; then
  suite_ok "MCORE_PMIX_LIBRARY=/nonexistent/...: each rank said so once and met through the TCP store"
else
  suite_bad "an unloadable PMIx library:"; tail -n 20 "$dir/nolib.mpirun" "$dir/nolib.err"
fi

# 5. The same with MCORE_RENDEZVOUS=pmix: an error naming it (mpirun ends the others on the first).
run forced 2 MCORE_RENDEZVOUS=pmix MCORE_PMIX_LIBRARY=/nonexistent/libpmix.so.2 -- --tp 2
rc=$?
if [ "$rc" -ne 0 ] && grep -q "MCORE_RENDEZVOUS=pmix, but PMIx cannot be used: cannot load the PMIx library /nonexistent/libpmix.so.2" "$dir/forced.err"; then
  suite_ok "MCORE_RENDEZVOUS=pmix without a loadable library fails, naming both"
else
  suite_bad "MCORE_RENDEZVOUS=pmix without the library (status $rc):"; tail -n 20 "$dir/forced.err" "$dir/forced.mpirun"
fi

# 6. MASTER_ADDR and MASTER_PORT set by hand under PMIx: rank 0's store binds them, and publishes.
port=$(free_port)
if run given 4 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" -- --tp 2 && python3 scripts/lib/selftest_lines.py "$dir/given.out" 4 127.0.0.1 \
   && [ "$(grep -c '"rendezvous":"pmix"' "$dir/given.out")" -eq 4 ] \
   && [ "$(grep -c "meets the others at 127.0.0.1:$port (address: MASTER_ADDR, published through PMIx; port: MASTER_PORT)" "$dir/given.err")" -eq 4 ]; then
  suite_ok "MASTER_ADDR/MASTER_PORT under PMIx: rank 0's store took them and published them; 4 ranks ok"
else
  suite_bad "MASTER_ADDR/MASTER_PORT under PMIx:"; tail -n 20 "$dir/given.mpirun" "$dir/given.err"
fi

# 7. A rank that never comes (it sleeps 30 s before starting): the others reach rank 0's store
# without a fence (rank 0's record is read as soon as it is committed); the check-in's PMIx fence
# ends before the deadline (--timeout 4) and the launcher's process table names the rank as one
# that never started mcore_init (or, where the table does not answer in time, the store's
# check-in names it), within the deadline; the job does not wait for the sleeper.
start=$SECONDS
"${clean[@]}" timeout -k 5 60 "${mpi[@]}" --output-filename "$dir/late" -np 3 bash -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then sleep 30; fi; exec target/release/mcore-selftest --backend gloo --timeout 4' \
  >/dev/null 2>&1
rc=$?
took=$((SECONDS - start))
cat "$dir/late"/*/rank.[01]/stderr >"$dir/late.err" 2>/dev/null
if [ "$rc" -ne 0 ] && [ "$took" -lt 20 ] \
   && [ "$(grep -cE "^mcore-selftest: (rendezvous timed out after [3-6]\.[0-9] s: rank\(s\) 2 did not come to the check-in|rank\(s\) 2 on host '[^']*' did not come to the check-in: the launcher's process table says its process runs but never started mcore_init .*had waited [3-6]\.[0-9] s)" "$dir/late.err")" -eq 2 ]; then
  suite_ok "a rank that never comes: ranks 0 and 1 named it at the check-in within the 4 s deadline ($(grep -c "launcher's process table" "$dir/late.err") of 2 from the launcher's process table; job over in ${took} s)"
else
  suite_bad "a rank that never comes (status $rc, ${took} s):"; cat "$dir/late.err"
fi
# 8. A rank killed during init (rank 5 SIGKILLs itself once every rank has checked in, while the
# world communicator's exchange waits in its PMIx fence): mpirun --enable-recovery keeps the
# others running. Every survivor names rank 5 as dead through the store's liveness (its
# connection's close notice ends the fence's wait), long before the 60 s deadline, and they
# recover; whether the launcher sent a PMIx event is counted (Debian's mpirun sends none:
# docs/pmix.md).
# The ranks end within seconds; mpirun gets 40 s (a deadlocked one is killed then, see run).
RUN_LIMIT=40 run killed 8 --enable-recovery -- --tp 2 --pp 2 --fail-rank 5 --fail-at during --recovery-window 5 --timeout 60
rc=$?
if mpirun_ok killed $rc && killed=$(python3 scripts/lib/killed_in_init.py "$dir/killed.out" 8 5 60); then
  suite_ok "a rank killed during init: all 7 survivors named rank 5 through the store's liveness (at most ${killed} s after init began) and recovered; PMIx events seen: $(grep -c 'mcore_init: PMIx event ' "$dir/killed.err")"
else
  suite_bad "a rank killed during init under PMIx (status $rc):"; head -c 3000 "$dir/killed.out"; tail -n 20 "$dir/killed.mpirun"
fi
# 9. A rank killed before it initializes, after its PMIx client has connected (rank 5 SIGKILLs
# itself): OpenMPI's PMIx server completes the check-in's fence without it, often with success,
# and its check-in record never comes. The survivors' reads of it end at the fence's deadline
# (--timeout 4), the launcher's process table (or, where it cannot tell, the store's check-in)
# names rank 5 within the deadline (+2 s) — or a PMIx event does at once, which this server
# sometimes sends (PROC-ABORTED) — and they recover (or leave with the replica that lost it).
# None waits on PMIx past the deadline (a blocking PMIx_Get of the record hung here in 3 runs of
# 6: docs/pmix.md).
start=$SECONDS
RUN_LIMIT=40 run before 8 --enable-recovery -- --tp 2 --pp 2 --fail-rank 5 --fail-at before --recovery-window 5 --timeout 4
rc=$?
took=$((SECONDS - start))
# (A deadlocked mpirun is killed at 40 s: then the ranks' own times below judge the job.)
if mpirun_ok before $rc && { [ "$took" -lt 30 ] || [ "$rc" -eq 200 ]; } && python3 - "$dir/before.out" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
# Each survivor recovered, or left with the data-parallel replica that lost rank 5.
assert len(lines) == 7 and all(l["ok"] and (l.get("recovered") or l.get("left")) for l in lines), lines
named = ("rank(s) 5 did not come to the check-in", "died: the launcher reported it")
assert all("rank(s) 5" in l["detected"] and any(n in l["detected"] for n in named) for l in lines), [l["detected"] for l in lines]
assert all(l["detected_after_s"] <= 6 for l in lines), [l["detected_after_s"] for l in lines]
PY
then
  suite_ok "a rank killed before init: all 7 survivors named it at the check-in within the 4 s deadline and recovered or left ($(grep -c 'died: the launcher reported it' "$dir/before.out") of 7 from the launcher; job over in ${took} s)"
else
  suite_bad "a rank killed before init under PMIx (status $rc, ${took} s):"; head -c 3000 "$dir/before.out"; tail -n 20 "$dir/before.mpirun"
fi
suite_end pmix
