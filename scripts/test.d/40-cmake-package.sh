#!/usr/bin/env bash
# The install as users get it, with nothing set afterwards: the top-level CMake build installs into a
# fresh prefix (target/stage); the installed files carry the right names and soname, the tools
# are there, and the library and tools have no debug info (their symbols kept). The README's C and C++ examples (checked identical to examples/c/first_job.c and
# examples/cmake-consumer/main.cpp) are built against the prefix with CMake (find_package) and with
# pkg-config, and each runs as 4 Gloo ranks under the installed mcore-launch with no
# LD_LIBRARY_PATH, no MCORE_BACKEND_PLUGIN, no MCORE_INIT_* set: the binaries find the library
# (build RPATH, pkg-config's -rpath), the library finds the Gloo plugin beside itself. A mistyped
# backend name gets a near-miss suggestion.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
root=$PWD
stage=$root/target/stage        # as stage_cmake_package lays it out
build=$root/target/cmake-build
check() { local name=$1; shift; suite_check_log "$name" "target/cmake-$name.log" "$@"; }
# Nothing that points at libraries or plugins.
clean=(env -u LD_LIBRARY_PATH -u MCORE_BACKEND_PLUGIN -u MCORE_INIT_LIBRARY -u MCORE_GLOO_PLUGIN)

echo "cmake-package: building and installing into $stage (cargo build of the library and tools: minutes)"
check install stage_cmake_package
check layout bash -c "test -f '$stage/lib/libmcore_init.so.0.1.0' && test -L '$stage/lib/libmcore_init.so.0.1' \
  && test -L '$stage/lib/libmcore_init.so' && test -f '$stage/include/mcore_init.h' && test -f '$stage/include/mcore_backend.h' \
  && test -f '$stage/lib/cmake/McoreInit/McoreInitConfigVersion.cmake' && test -f '$stage/lib/libmcore_init_gloo.so' && test -f '$stage/lib/pkgconfig/mcore_init.pc' \
  && readelf -d '$stage/lib/libmcore_init.so.0.1.0' | grep -q 'SONAME.*libmcore_init.so.0.1'"
# Installed without debug info (90 MB with it, 9.5 MB without: CMakeLists.txt strips at install),
# the symbol table kept for backtraces.
check stripped bash -c "for f in '$stage/lib/libmcore_init.so.0.1.0' '$stage'/bin/mcore-*; do \
  ! readelf -S \"\$f\" | grep -q debug_info && nm \"\$f\" | grep -q ' T ' || { echo \"\$f\"; exit 1; }; done"
for tool in mcore-launch mcore-selftest mcore-topo; do
  check "tool-$tool" bash -c "test -x '$stage/bin/$tool' && '$stage/bin/$tool' --help 2>&1 | grep -q '^usage: $tool'"
done
# The README's examples are the files built here, as written.
readme_block() {  # LANG: the first fenced block of that language in README.md
  awk -v lang="$1" '$0 == "```" lang { on = 1; next } on && $0 == "```" { exit } on { print }' README.md
}
for pair in c:examples/c/first_job.c cpp:examples/cmake-consumer/main.cpp python:examples/python/first_job.py; do
  lang=${pair%%:*} file=${pair#*:}
  readme_block "$lang" >"$root/target/readme-block.$lang"
  check "readme-$lang-is-$(basename "$file")" diff "$root/target/readme-block.$lang" "$file"
done
check find-package bash -c "cmake -S examples/cmake-consumer -B '$build-consumer' -DCMAKE_PREFIX_PATH='$stage' \
  && cmake --build '$build-consumer'"
check pkg-config bash -c "PKG_CONFIG_PATH='$stage/lib/pkgconfig' cc -std=c11 -Wall -Wextra -Wpedantic -Werror \
  examples/c/first_job.c \$(PKG_CONFIG_PATH='$stage/lib/pkgconfig' pkg-config --cflags --libs mcore_init) \
  -o '$root/target/pkgconfig-first_job' && c++ -std=c++17 -Wall -Wextra -Werror examples/cmake-consumer/main.cpp \
  \$(PKG_CONFIG_PATH='$stage/lib/pkgconfig' pkg-config --cflags --libs mcore_init) -o '$root/target/pkgconfig-consumer'"
# 4 Gloo ranks each, nothing set.
run4() {  # NAME BINARY PATTERN: 4 ranks, each printing a line that matches PATTERN
  local name=$1 bin=$2 pattern=$3 log=$root/target/cmake-run-$1.log n
  if "${clean[@]}" "$stage/bin/mcore-launch" --nproc 4 --timeout 120 -- "$bin" >"$log" 2>&1 \
     && n=$(grep -cE "$pattern" "$log") && [ "$n" = 4 ]; then
    suite_ok "$name: 4 Gloo ranks from the installed prefix, nothing set"
  else
    tail -n 20 "$log"; suite_bad "$name: 4 Gloo ranks from the installed prefix (${n:-0}/4 lines)"
  fi
}
run4 cmake-c "$build-consumer/first_job" 'tp rank [01] of 2 \(sum 2\), pp stage [01]$'
run4 cmake-cpp "$build-consumer/mcore_consumer" 'rank [0-3] of 4: tp group sum (1|5) \(ok\)$'
run4 pkg-config-c "$root/target/pkgconfig-first_job" 'tp rank [01] of 2 \(sum 2\), pp stage [01]$'
run4 pkg-config-cpp "$root/target/pkgconfig-consumer" 'rank [0-3] of 4: tp group sum (1|5) \(ok\)$'
# The installed selftest finds the plugin in ../lib too.
check selftest-gloo "${clean[@]}" "$stage/bin/mcore-launch" --nproc 4 --timeout 120 -- "$stage/bin/mcore-selftest" \
  --tp 2 --pp 2 --backend gloo
# A mistyped backend: the error suggests the near miss and says where it looked.
typo=$("${clean[@]}" "$stage/bin/mcore-launch" --nproc 1 --timeout 60 -- "$stage/bin/mcore-selftest" --backend glo 2>&1)
if grep -q "did you mean 'gloo'?" <<<"$typo" && grep -qF "$stage/lib" <<<"$typo"; then
  suite_ok "backend 'glo': did you mean 'gloo'?"
else
  printf '%s\n' "$typo" | tail -5; suite_bad "a mistyped backend got no near-miss suggestion"
fi
# SameMinorVersion: a project asking for 0.2 must not accept this 0.1 package.
mkdir -p "$root/target/consumer-0.2"
sed 's/McoreInit 0.1 CONFIG/McoreInit 0.2 CONFIG/' examples/cmake-consumer/CMakeLists.txt > "$root/target/consumer-0.2/CMakeLists.txt"
cp examples/cmake-consumer/main.cpp "$root/target/consumer-0.2/"
check version-0.2-rejected bash -c "! cmake -S '$root/target/consumer-0.2' -B '$build-consumer-0.2' -DCMAKE_PREFIX_PATH='$stage' \
  >'$root/target/consumer-0.2.log' 2>&1 && grep -q 'version: 0.1.0' '$root/target/consumer-0.2.log'"
suite_end cmake-package
