#!/usr/bin/env bash
# Build the HCCL backend plugin (backends/hccl, C++17, CMake; no Ascend toolkit needed) into
# target/hccl-plugin/libmcore_init_hccl.so and run its tests: the C++ cases (ctest: no libhccl.so,
# a library without HCCL's symbols, root-info exchange, config and timeouts against a stand-in
# libhccl.so) and tests/hccl_plugin.rs (the plugin loaded through the library's plugin loader).
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
MCORE_HCCL_TEST_REQUIRE=1 cargo test --release --locked --test hccl_plugin >"$log" 2>&1
cat "$log"
suite_count_cargo "tests/hccl_plugin.rs" "$log"
rm -f "$log"
suite_end hccl-plugin
