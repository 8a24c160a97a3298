#!/usr/bin/env bash
# The install as users get it: the top-level CMake build installs into target/stage; an
# out-of-tree CMake project finds it with find_package(McoreInit) and runs; a C program builds
# with pkg-config; the installed files carry the right names and soname.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
root=$PWD
stage=$root/target/stage        # as stage_cmake_package lays it out
build=$root/target/cmake-build
check() { local name=$1; shift; suite_check_log "$name" "target/cmake-$name.log" "$@"; }

check install stage_cmake_package
check layout bash -c "test -f '$stage/lib/libmcore_init.so.0.1.0' && test -L '$stage/lib/libmcore_init.so.0.1' \
  && test -L '$stage/lib/libmcore_init.so' && test -f '$stage/include/mcore_init.h' && test -f '$stage/include/mcore_backend.h' \
  && test -f '$stage/lib/cmake/McoreInit/McoreInitConfigVersion.cmake' && test -f '$stage/lib/libmcore_init_gloo.so' && test -f '$stage/lib/pkgconfig/mcore_init.pc' \
  && readelf -d '$stage/lib/libmcore_init.so.0.1.0' | grep -q 'SONAME.*libmcore_init.so.0.1'"
check find-package bash -c "cmake -S examples/cmake-consumer -B '$build-consumer' -DCMAKE_PREFIX_PATH='$stage' \
  && cmake --build '$build-consumer' && LD_LIBRARY_PATH='$stage/lib' '$build-consumer/mcore_consumer'"
# SameMinorVersion: a project asking for 0.2 must not accept this 0.1 package.
mkdir -p "$root/target/consumer-0.2"
sed 's/McoreInit 0.1 CONFIG/McoreInit 0.2 CONFIG/' examples/cmake-consumer/CMakeLists.txt > "$root/target/consumer-0.2/CMakeLists.txt"
cp examples/cmake-consumer/main.cpp "$root/target/consumer-0.2/"
check version-0.2-rejected bash -c "! cmake -S '$root/target/consumer-0.2' -B '$build-consumer-0.2' -DCMAKE_PREFIX_PATH='$stage'"
check pkg-config bash -c "PKG_CONFIG_PATH='$stage/lib/pkgconfig' cc -std=c11 -Wall -Wextra -Wpedantic -Werror \
  examples/c/version.c \$(PKG_CONFIG_PATH='$stage/lib/pkgconfig' pkg-config --cflags --libs mcore_init) \
  -Wl,-rpath,'$stage/lib' -o '$root/target/pkgconfig-version' && '$root/target/pkgconfig-version'"
suite_end cmake-package
