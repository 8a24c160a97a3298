#!/usr/bin/env bash
# The runtime with real processes over the Gloo plugin (tests/runtime_multiprocess.rs), and the
# README's main job (8 ranks through mcore-launch).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
plugin=$(gloo_plugin)
suite_check "tests/runtime_multiprocess.rs" \
  env MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test runtime_multiprocess -- --test-threads 1
# Groups made after init by their members only (shuffled orders, a member that never calls, 16 ranks).
suite_check "tests/member_groups_multiprocess.rs" \
  env MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test member_groups_multiprocess -- --test-threads 1
# mcore-launch's signal handling with real mcore-selftest ranks (and the rest of that file).
suite_check "tests/cli_launch_signals.rs" env MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test cli_launch_signals
# The README's C example, as written there, on 4 ranks (tp=2, pp=2) through mcore-launch.
stage_c_library >/dev/null 2>&1   # target/c-examples/lib
python3 - <<'PY' > target/readme_example.c
import re
print(re.findall(r"```c\n(.*?)```", open("README.md").read(), re.S)[0])
PY
if cc -std=c11 -Wall -Wextra -Wpedantic -Werror -Iinclude target/readme_example.c -Ltarget/c-examples/lib -lmcore_init \
     -Wl,-rpath,"$PWD/target/c-examples/lib" -o target/readme_example \
   && out=$(LD_LIBRARY_PATH="$PWD/target/gloo-plugin" ./target/release/mcore-launch --nproc 4 --timeout 120 -- target/readme_example) \
   && [ "$(echo "$out" | grep -c 'tp rank [01] of 2, pp stage [01]')" -eq 4 ]; then
  suite_ok
else
  suite_bad "README's C example on 4 ranks: ${out:-}"
fi
if bash scripts/main-job.sh >target/main-job.log 2>&1; then
  suite_ok; tail -1 target/main-job.log
else
  suite_bad "scripts/main-job.sh (log: target/main-job.log)"; tail -30 target/main-job.log
fi
suite_end runtime
