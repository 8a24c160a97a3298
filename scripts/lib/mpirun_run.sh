# One mpirun job of mcore-selftest, for the suites that run them (29b-pmix.sh under Debian's
# mpirun, 29c-openmpi5.sh under OpenMPI 5's): source it after suite.sh, with these set
#   dir       the suite's scratch folder (outputs go there)
#   launcher  an array: mpirun and its options ("${mpi[@]}" or "${mpi5[@]}")
# It sets `clean`, the environment every rank starts from (an `env` prefix: nothing set by hand
# that steers the rendezvous, the Gloo plugin on the library path, MCORE_LOG=debug).
#
# run NAME NP [VAR=VALUE | MPIRUN-OPTION...] -- SELFTEST-ARGS
#   One job: `mpirun -np NP mcore-selftest --backend gloo --json --timeout 90 SELFTEST-ARGS`.
#   An argument shaped NAME=VALUE is set in the ranks' environment; any other (an option and
#   its value) goes to mpirun. Each rank's output is gathered into $dir/NAME.out and
#   $dir/NAME.err (mpirun interleaves the ranks' partial lines otherwise; OpenMPI 4 and 5 lay
#   the per-rank files out differently), mpirun's own into $dir/NAME.mpirun. mpirun gets
#   RUN_LIMIT seconds (180 unset), then SIGKILL (it catches SIGTERM, and a deadlocked mpirun
#   never acts on it): status 124 while a rank process was still running, 200 when every rank
#   had ended and mpirun alone was left (see mpirun_ok); else mpirun's own status.
# check NAME WANT
#   NAME's ranks all reported rendezvous WANT (pmix or tcp-store) and met at one port of
#   127.0.0.1 for WANT's reason (scripts/lib/rendezvous_check.py; the ranks' stderr at
#   MCORE_LOG=debug); prints that port and rank 0's store_requests_served.
# two_jobs_at_once WHAT [WORD...]
#   A check: two 8-rank jobs (tp 2 pp 2) started at once both come up through PMIx, each at its
#   own port (mpirun_ok with WORDs for each mpirun's status); WHAT names the launcher in the line.
# mpirun_ok NAME RC [WORD...]
#   Whether mpirun's status RC is acceptable once the caller has judged the ranks' lines: 0;
#   139 (mpirun itself died of SIGSEGV in its teardown) when each WORD is in $dir/NAME.mpirun
#   (its backtrace); 200 (mpirun left alone with its ranks ended). Each accepted failure is
#   said on a note line, never hidden.
clean=(env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MCORE_JOB_ID
  -u MCORE_RENDEZVOUS -u MCORE_PMIX_LIBRARY
  LD_LIBRARY_PATH="$PWD/target/gloo-plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MCORE_LOG=debug)

run() {
  local name=$1 np=$2 vars=() opts=()
  shift 2
  while [ "$1" != "--" ]; do
    if [[ $1 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then vars+=("$1"); else opts+=("$1"); fi
    shift
  done
  shift
  # A session directory of its own (TMPDIR): two mpiruns started at once race creating theirs
  # under /tmp ("orte_session_dir failed").
  mkdir -p "$dir/tmp.$name"
  "${clean[@]}" TMPDIR="$dir/tmp.$name" "${vars[@]}" "${launcher[@]}" "${opts[@]}" --output-filename "$dir/$name" \
    -np "$np" target/release/mcore-selftest --backend gloo --json --timeout 90 "$@" >/dev/null 2>"$dir/$name.mpirun" &
  mpirun_wait $! "${RUN_LIMIT:-180}" "$dir/$name.mpirun"
  local rc=$?
  # OpenMPI 4: NAME/1/rank.R/stdout; OpenMPI 5: NAME.NAMESPACE.R.out.
  cat "$dir/$name"/*/rank.*/stdout "$dir/$name".*.out >"$dir/$name.out" 2>/dev/null
  cat "$dir/$name"/*/rank.*/stderr "$dir/$name".*.err >"$dir/$name.err" 2>/dev/null
  return $rc
}

check() {
  python3 scripts/lib/rendezvous_check.py "$dir/$1.out" "$dir/$1.err" "$2"
}

two_jobs_at_once() {
  local what=$1 a b rca rcb pa pb
  shift
  run twoa 8 -- --tp 2 --pp 2 & a=$!
  run twob 8 -- --tp 2 --pp 2 & b=$!
  wait "$a"; rca=$?
  wait "$b"; rcb=$?
  pa=$(check twoa pmix 2>/dev/null | cut -d' ' -f1)
  pb=$(check twob pmix 2>/dev/null | cut -d' ' -f1)
  if python3 scripts/lib/selftest_lines.py "$dir/twoa.out" 8 127.0.0.1 && python3 scripts/lib/selftest_lines.py "$dir/twob.out" 8 127.0.0.1 \
     && mpirun_ok twoa $rca "$@" && mpirun_ok twob $rcb "$@" && [ -n "$pa" ] && [ -n "$pb" ] && [ "$pa" != "$pb" ]; then
    suite_ok "two $what -np 8 jobs at once both came up through PMIx, at ports $pa and $pb"
  else
    suite_bad "two concurrent $what jobs (status $rca, $rcb; ports '${pa}' '${pb}'):"
    tail -n 10 "$dir/twoa.mpirun" "$dir/twob.mpirun"; grep -h "error\|meets" "$dir/twoa.err" "$dir/twob.err" | head
  fi
}

mpirun_ok() {
  local name=$1 rc=$2 word
  shift 2
  [ "$rc" -eq 0 ] && return 0
  if [ "$rc" -eq 139 ]; then
    for word in "$@"; do grep -q "$word" "$dir/$name.mpirun" || return 1; done
    echo "note: $name: mpirun itself crashed (SIGSEGV, status 139) in its teardown${*:+ (${*})}, after its ranks ended (OpenMPI's defect, docs/pmix.md)"
    return 0
  fi
  if [ "$rc" -eq 200 ]; then
    echo "note: $name: mpirun itself did not exit after every rank had ended; killed (OpenMPI's deadlock, docs/pmix.md)"
    return 0
  fi
  return 1
}
