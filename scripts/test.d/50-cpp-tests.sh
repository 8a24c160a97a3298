#!/usr/bin/env bash
# GoogleTest suite (cpp_tests/) against the package in target/stage (staged when missing by
# stage_cmake_package, as 40-cmake-package.sh stages it), in two builds: an ASan+UBSan build that
# runs every ctest test (labels unit, integration, gpu; the trainer example also as 2 ranks under
# target/release/mcore-launch), and a plain build whose whole test binary runs under valgrind (label
# leak; the multi-process tests' child ranks too). The plain build's ctest runs only that one test:
# its other 48 are the tests valgrind runs and the ASan build runs (all of them when valgrind is
# missing). Both builds compile the test sources as one unity translation unit (GoogleTest's
# headers parsed once), the ASan build at -O1 (ASan's advice): about 44 s of CPU instead of 102 for
# the ASan build (docs/BENCHMARKS.md, "Test command").
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
  if cmake -S cpp_tests -B "$dir" -DCMAKE_PREFIX_PATH="$stage" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=ON \
       -DMCORE_LAUNCH="$launch" "$@" >"$dir.log" 2>&1 \
     && cmake --build "$dir" -j2 >>"$dir.log" 2>&1 \
     && LD_LIBRARY_PATH="$stage/lib" ctest --test-dir "$dir" --output-on-failure "${ctest_args[@]}" >>"$dir.log" 2>&1; then
    suite_ok; grep -E "tests passed|tests failed" "$dir.log" | sed "s/^/$name: /"
  else
    suite_bad "$name (log: $dir.log)"; tail -40 "$dir.log"
  fi
}
mkdir -p "$root/target"
ctest_args=()
command -v valgrind >/dev/null && ctest_args=(-L leak)
run_suite ctest "$root/target/cpp-tests"
ctest_args=()
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  run_suite asan-ubsan "$root/target/cpp-tests-asan" -DMCORE_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG"
suite_end cpp-tests
