#!/usr/bin/env bash
# lane: wait
# Build the HCCL backend plugin (backends/hccl, C++17, CMake; no Ascend toolkit needed) into
# target/hccl-plugin/libmcore_init_hccl.so and run its tests: the C++ cases (ctest: no libhccl.so,
# a library without HCCL's symbols, config generations, timeouts, a missing peer, against the test
# doubles of libhccl.so and libascendcl.so in target/hccl-plugin/double), tests/backends/hccl_plugin.rs
# (the plugin loaded through the library's plugin loader, two real processes), and mcore-selftest
# --backend hccl through mcore-launch with the doubles: 1, 2, 4 and 8 processes (tp2 pp2 cp2 at 8)
# with verification on, once per config generation the double models, once without int64, split
# with and without HcclCreateSubCommConfig (the fallback said at MCORE_LOG=debug), per-kind options
# reaching each kind's HcclCommConfig, and peers that
# never arrive (scripts/lib/fault_trials.py). The doubles are for the plugin's logic only: real
# HCCL is not tested here (docs/backends.md says what to run on an Ascend node).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
build=target/hccl-plugin/build
if ! { cmake -S backends/hccl -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j2 >/dev/null; }; then
  cmake --build "$build" 2>&1 | tail -30
  suite_abort hccl-plugin build
fi
exported=$(nm -D --defined-only target/hccl-plugin/libmcore_init_hccl.so | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v -E '^(mcore_backend_plugin_v1|mcore_hccl_.*)$' || true)
if [ -z "$exported" ]; then suite_ok; else suite_bad "unexpected exports: $exported"; fi
log=$(mktemp)
(cd "$build" && ctest --output-on-failure) >"$log" 2>&1
cat "$log"
suite_count_ctest ctest "$log"
MCORE_HCCL_TEST_REQUIRE=1 cargo test --release --locked --test backends hccl_plugin:: >"$log" 2>&1
cat "$log"
suite_count_cargo "tests/backends/hccl_plugin.rs" "$log"
# mcore-selftest --backend hccl through mcore-launch, with the doubles.
cargo build --release --locked --quiet --bins || suite_abort hccl-plugin "cargo build --bins"
dbl=$PWD/target/hccl-plugin/double
world() {  # world LABEL N VARIANT STRATEGY|- TEXT|- [VAR=VALUE...] -- SELFTEST_ARGS...
  local label=$1 n=$2 variant=$3 strategy=$4 text=$5 dir
  shift 5
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  dir=$(mktemp -d)
  echo "hccl-plugin: $label: $n processes, double $variant: mcore-selftest $*"
  env "${envs[@]}" LD_LIBRARY_PATH="$PWD/target/hccl-plugin" MCORE_HCCL_LIBRARY="$dbl/$variant/libhccl.so" \
    MCORE_HCCL_ACL_LIBRARY="$dbl/acl/libascendcl.so" MCORE_HCCL_DOUBLE_DIR="$dir" \
    timeout 300 ./target/release/mcore-launch --nproc "$n" --timeout 120 -- \
    ./target/release/mcore-selftest --backend hccl --json "$@" >"$log" 2>&1
  local rc=$?
  if [ -e "$dir/suspend_calls" ]; then
    echo "  the plugin called HCCL's reserved suspend/resume: $(head -3 "$dir/suspend_calls")"; suite_bad "selftest $label"
  elif [ "$rc" -eq 0 ] && python3 scripts/lib/hccl_world.py "$log" "$n" "$strategy" "${text#-}"; then
    suite_ok
  else
    echo "  (mcore-launch exit $rc)"; suite_bad "selftest $label"
  fi
  rm -rf "$dir"
}
world "1 process" 1 gen12 per-group - --
world "2 processes" 2 gen12 per-group - -- --tp 2
world "4 processes" 4 gen12 per-group - -- --tp 2 --pp 2
world "8 processes" 8 gen12 per-group "HcclCommDestroy succeeded after 3 tries" MCORE_LOG=debug -- --tp 2 --pp 2 --cp 2
world "8, config generation 2 (version 1, no capability call)" 8 gen2 per-group "config version 1 (32 bytes" \
  MCORE_LOG=debug -- --tp 2 --pp 2 --cp 2
world "8, config generation 4 (no 'not set')" 8 gen4 per-group "capability 4, buffer 200, deterministic 0" \
  MCORE_LOG=debug -- --tp 2 --pp 2 --cp 2
world "8, no int64 all-reduce" 8 gen12 per-group "summing int32" MCORE_LOG=debug MCORE_HCCL_DOUBLE_NO_INT64=1 -- \
  --tp 2 --pp 2 --cp 2
world "2, the device given to mcore_initialize" 2 gen12 per-group "device 3 set from the group spec" MCORE_LOG=debug -- \
  --tp 2 --device 3
world "8, split with HcclCreateSubCommConfig from a cluster-info world" 8 gen12 split \
  "HcclCommInitClusterInfoMemConfig from a rank table of 8 ranks" MCORE_LOG=debug -- --tp 2 --pp 2 --cp 2 \
  --comm-strategy split
world "8, split without HcclCreateSubCommConfig" 8 gen12-nosplit split "falling back to a communicator from root info" \
  MCORE_LOG=debug -- --tp 2 --pp 2 --cp 2 --comm-strategy split
# Suspend and resume (docs/backends.md, "HCCL"): every kind released and created again, also
# where libhccl.so exports HcclCommSuspend (generation 12 of the double: the plugin must not call
# HCCL's reserved recovery calls, which release no memory; world() fails on any call); mcore-selftest
# checks that a suspended kind refuses an all-reduce and verifies every kind after.
world "8, suspend/resume all kinds (recreate; HcclCommSuspend exported, not called)" 8 gen12 per-group \
  '"mode":"recreate"' -- --tp 2 --pp 2 --cp 2 --suspend-resume all
world "8, suspend/resume without HcclCommSuspend (recreate)" 8 gen4 per-group '"mode":"recreate"' -- \
  --tp 2 --pp 2 --cp 2 --suspend-resume all
# Per-kind options (docs/backends.md, "HCCL"): torch_npu's keys in a per-kind file and MindSpeed's
# buffer string (MCORE_HCCL_GROUP_BUFFER) reach each kind's HcclCommConfig, which the double writes
# to config.<comm name>; the file's hccl_buffer_size wins over the string's; cp_ring sets MindSpeed's
# cp_ring groups (hybrid CP at init), not context_parallel.
hccl_options() {
  local dir rc
  dir=$(mktemp -d)
  printf 'tp: {hccl_buffer_size: 300, group_name: tp_grads, hccl_exec_timeout: 900}\npp: {qos_traffic_class: 132}\n' \
    >"$dir/comm.yaml"
  LD_LIBRARY_PATH="$PWD/target/hccl-plugin" MCORE_HCCL_LIBRARY="$dbl/gen12/libhccl.so" \
    MCORE_HCCL_ACL_LIBRARY="$dbl/acl/libascendcl.so" MCORE_HCCL_DOUBLE_DIR="$dir" \
    MCORE_HCCL_GROUP_BUFFER='dp:200;tp:500;pp:250;cp_ring:70' timeout 300 ./target/release/mcore-launch --nproc 8 \
    --timeout 120 -- ./target/release/mcore-selftest --backend hccl --tp 2 --pp 2 --cp 2 --comm-config "$dir/comm.yaml" \
    --mindspeed context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=1 >"$log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || { cat "$log"; echo "  (mcore-launch exit $rc)"; rm -rf "$dir"; return 1; }
  python3 - "$dir" <<'PY'
import pathlib, re, sys
d = pathlib.Path(sys.argv[1])
want = {"tensor_model_parallel": ["hcclBufferSize=300", "hcclUdi=tp_grads", "hcclExecTimeOut=900"],
        "pipeline_model_parallel": ["hcclBufferSize=250", "hcclRdmaTrafficClass=132"],
        "data_parallel": ["hcclBufferSize=200", "hcclRdmaTrafficClass=4294967295"],
        # cp 2 with dp 1: the context-parallel groups are data_parallel_with_cp's communicators.
        "data_parallel_with_cp": ["hcclBufferSize=4294967295"],
        "cp_ring": ["hcclBufferSize=70"], "cp_ulysses": ["hcclBufferSize=4294967295"]}
bad = []
for kind, fields in want.items():
    files = sorted(f for f in d.iterdir() if re.fullmatch(rf"config\.{kind}_\d+", f.name))
    if not files:
        bad.append(f"no communicator of {kind} recorded")
    for f in files:
        lines = f.read_text().splitlines()
        bad += [f"{f.name}: {x} missing (got {lines})" for x in fields if x not in lines]
print("\n".join(bad) or "hccl options: every kind's HcclCommConfig as configured")
sys.exit(1 if bad else 0)
PY
  rc=$?
  rm -rf "$dir"
  return $rc
}
suite_check "hccl: per-kind options and MindSpeed's buffer string reach HcclCommConfig (8 processes)" hccl_options
# A peer that never arrives (stopped before init, or after its check-in): every other rank ends
# within the deadline (T = 5 s, + 2 s) naming it.
hccl_faults() {
  MCORE_HCCL_LIBRARY="$dbl/gen12/libhccl.so" MCORE_HCCL_ACL_LIBRARY="$dbl/acl/libascendcl.so" \
    MCORE_HCCL_DOUBLE_DIR="$1" python3 scripts/lib/fault_trials.py --selftest target/release/mcore-selftest \
    --plugin-dir "$PWD/target/hccl-plugin" --backend hccl --trials 4 --worlds 4,8 --victim 3 \
    --only start:stop,checkin:stop --seed 25 --timeout 5 --json-out target/hccl-faults.json
}
fdir=$(mktemp -d)
suite_check "hccl: a peer that never arrives (4 trials, T = 5 s)" hccl_faults "$fdir"
rm -rf "$fdir"
rm -f "$log"
suite_end hccl-plugin
