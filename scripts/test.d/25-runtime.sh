#!/usr/bin/env bash
# The runtime with real processes over the Gloo plugin (tests/runtime_multiprocess.rs), and the
# README's main job (8 ranks through mcore-launch).
set -uo pipefail
cd "$(dirname "$0")/../.."
pass=0; fail=0
plugin="$PWD/target/gloo-plugin/libmcore_init_gloo.so"
if [ ! -f "$plugin" ]; then
  cmake -S backends/gloo -B target/gloo-plugin -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build target/gloo-plugin -j 2 >/dev/null
fi
if MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test runtime_multiprocess -- --test-threads 1; then
  pass=$((pass+1))
else
  echo "FAIL: tests/runtime_multiprocess.rs"; fail=$((fail+1))
fi
if bash scripts/main-job.sh >target/main-job.log 2>&1; then
  pass=$((pass+1)); tail -1 target/main-job.log
else
  echo "FAIL: scripts/main-job.sh (log: target/main-job.log)"; tail -30 target/main-job.log; fail=$((fail+1))
fi
echo "runtime: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
