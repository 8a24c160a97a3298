#!/usr/bin/env bash
# GoogleTest suite (cpp_tests/) against the package in target/stage (staged when missing by
# stage_cmake_package, as 40-cmake-package.sh stages it): a normal build with ctest (labels unit,
# integration, gpu) plus valgrind (label leak), and an ASan+UBSan build.
# The multi-process tests (label integration) run in both builds and, with their child ranks, under
# valgrind; the trainer example also runs as 2 ranks under target/release/mcore-launch.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
root=$PWD
stage=$root/target/stage
if [ ! -f "$stage/lib/cmake/McoreInit/McoreInitConfig.cmake" ]; then
  mkdir -p "$root/target"
  stage_cmake_package >"$root/target/cmake-install.log" 2>&1 \
    || { echo "staging the CMake package failed (log: target/cmake-install.log)"; tail -20 "$root/target/cmake-install.log"; }
fi
# The project's launcher, for the trainer example's mcore-launch test (skipped if it cannot be built).
launch=$root/target/release/mcore-launch
cargo build --release --locked --bin mcore-launch >"$root/target/cpp-tests-launch.log" 2>&1 || launch=
run_suite() {
  local name=$1 dir=$2; shift 2
  if cmake -S cpp_tests -B "$dir" -DCMAKE_PREFIX_PATH="$stage" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMCORE_LAUNCH="$launch" "$@" >"$dir.log" 2>&1 \
     && cmake --build "$dir" -j2 >>"$dir.log" 2>&1 \
     && LD_LIBRARY_PATH="$stage/lib" ctest --test-dir "$dir" --output-on-failure >>"$dir.log" 2>&1; then
    suite_ok; grep -E "tests passed|tests failed" "$dir.log" | sed "s/^/$name: /"
  else
    suite_bad "$name (log: $dir.log)"; tail -40 "$dir.log"
  fi
}
mkdir -p "$root/target"
run_suite ctest "$root/target/cpp-tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  run_suite asan-ubsan "$root/target/cpp-tests-asan" -DMCORE_SANITIZE=ON
suite_end cpp-tests
