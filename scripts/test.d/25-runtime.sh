#!/usr/bin/env bash
# lane: wait
# The runtime with real processes over the Gloo plugin (tests/runtime/runtime_multiprocess.rs), and the
# README's main job (8 ranks through mcore-launch).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
plugin=$(gloo_plugin)
suite_check "tests/runtime/runtime_multiprocess.rs" \
  env MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test runtime runtime_multiprocess:: -- --test-threads 1
# Groups made after init by their members only (shuffled orders, a member that never calls, 16 ranks).
suite_check "tests/runtime/member_groups_multiprocess.rs" \
  env MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test runtime member_groups_multiprocess:: -- --test-threads 1
# mcore-launch's signal handling with real mcore-selftest ranks (and the rest of that file).
suite_check "tests/cli/cli_launch_signals.rs" env MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test cli cli_launch_signals::
# The README's C, C++ and Python examples run in 40-cmake-package.sh (installed prefix) and
# 61-python-wheel.sh (the wheel).
if bash scripts/main-job.sh >target/main-job.log 2>&1; then
  suite_ok; tail -1 target/main-job.log
else
  suite_bad "scripts/main-job.sh (log: target/main-job.log)"; tail -30 target/main-job.log
fi
suite_end runtime
