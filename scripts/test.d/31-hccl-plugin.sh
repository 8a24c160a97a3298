#!/usr/bin/env bash
# Build the HCCL backend plugin (backends/hccl, C++17, CMake) into target/hccl-plugin/ and run its
# tests: without libhccl.so loading fails naming libhccl.so; a library without HCCL's symbols is
# named; the root-info exchange, config and timeouts against a stand-in libhccl.so.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=target/hccl-plugin/build
if ! { cmake -S backends/hccl -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j2 >/dev/null; }; then
  cmake --build "$build" 2>&1 | tail -30
  echo "hccl-plugin: 0 passed, 1 failed (build)"
  exit 1
fi
log=$(mktemp)
(cd "$build" && ctest --output-on-failure) 2>&1 | tee "$log"
total=$(sed -n 's/.*tests passed, \([0-9]\+\) tests failed out of \([0-9]\+\).*/\2/p' "$log")
failed=$(sed -n 's/.*tests passed, \([0-9]\+\) tests failed out of.*/\1/p' "$log")
rm -f "$log"
[ -n "$total" ] || { echo "hccl-plugin: 0 passed, 1 failed (ctest)"; exit 1; }
echo "hccl-plugin: $((total - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
