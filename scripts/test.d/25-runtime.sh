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
# mcore-launch's signal handling with real mcore-selftest ranks (and the rest of that file).
if MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test cli_launch_signals; then
  pass=$((pass+1))
else
  echo "FAIL: tests/cli_launch_signals.rs"; fail=$((fail+1))
fi
# The README's C example, as written there, on 4 ranks (tp=2, pp=2) through mcore-launch.
bash scripts/test.d/10-c-examples.sh >/dev/null 2>&1 || true   # stages target/c-examples/lib
python3 - <<'PY' > target/readme_example.c
import re
print(re.findall(r"```c\n(.*?)```", open("README.md").read(), re.S)[0])
PY
if cc -std=c11 -Wall -Wextra -Wpedantic -Werror -Iinclude target/readme_example.c -Ltarget/c-examples/lib -lmcore_init \
     -Wl,-rpath,"$PWD/target/c-examples/lib" -o target/readme_example \
   && out=$(LD_LIBRARY_PATH="$PWD/target/gloo-plugin" ./target/release/mcore-launch --nproc 4 --timeout 120 -- target/readme_example) \
   && [ "$(echo "$out" | grep -c 'tp rank [01] of 2, pp stage [01]')" -eq 4 ]; then
  pass=$((pass+1))
else
  echo "FAIL: README's C example on 4 ranks: $out"; fail=$((fail+1))
fi
if bash scripts/main-job.sh >target/main-job.log 2>&1; then
  pass=$((pass+1)); tail -1 target/main-job.log
else
  echo "FAIL: scripts/main-job.sh (log: target/main-job.log)"; tail -30 target/main-job.log; fail=$((fail+1))
fi
echo "runtime: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
