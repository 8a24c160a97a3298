#!/usr/bin/env bash
# Build the HCCL backend plugin (backends/hccl, C++17, CMake; no Ascend toolkit needed) into
# target/hccl-plugin/libmcore_init_hccl.so and run its tests: the C++ cases (ctest: no libhccl.so,
# a library without HCCL's symbols, root-info exchange, config and timeouts against a stand-in
# libhccl.so) and tests/hccl_plugin.rs (the plugin loaded through the library's plugin loader).
set -uo pipefail
cd "$(dirname "$0")/../.."
build=target/hccl-plugin/build
if ! { cmake -S backends/hccl -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j2 >/dev/null; }; then
  cmake --build "$build" 2>&1 | tail -30
  echo "hccl-plugin: 0 passed, 1 failed (build)"
  exit 1
fi
exported=$(nm -D --defined-only target/hccl-plugin/libmcore_init_hccl.so | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v -E '^(mcore_backend_plugin_v1|mcore_hccl_.*)$' || true)
pass=0; fail=0
if [ -z "$exported" ]; then pass=$((pass+1)); else echo "FAIL: unexpected exports: $exported"; fail=$((fail+1)); fi
log=$(mktemp)
(cd "$build" && ctest --output-on-failure) >"$log" 2>&1
cat "$log"
total=$(sed -n 's/.*tests passed, \([0-9]\+\) tests failed out of \([0-9]\+\).*/\2/p' "$log")
bad=$(sed -n 's/.*tests passed, \([0-9]\+\) tests failed out of.*/\1/p' "$log")
if [ -n "$total" ]; then pass=$((pass+total-bad)); fail=$((fail+bad)); else echo "FAIL: ctest did not run"; fail=$((fail+1)); fi
MCORE_HCCL_TEST_REQUIRE=1 cargo test --release --locked --test hccl_plugin >"$log" 2>&1
cat "$log"
ok=$(sed -n 's/^test result: .* \([0-9]*\) passed; \([0-9]*\) failed.*/\1/p' "$log" | tail -1)
bad=$(sed -n 's/^test result: .* \([0-9]*\) passed; \([0-9]*\) failed.*/\2/p' "$log" | tail -1)
if [ -n "$ok" ]; then pass=$((pass+ok)); fail=$((fail+bad)); else echo "FAIL: tests/hccl_plugin.rs did not run"; fail=$((fail+1)); fi
rm -f "$log"
echo "hccl-plugin: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
