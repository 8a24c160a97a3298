#!/usr/bin/env bash
# Build every C example in examples/c against include/ and the release libmcore_init.so as a
# C11 program with -Wall -Wextra -Wpedantic -Werror, run it, and check the library's soname.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
out=target/c-examples
lib=$out/lib
# Staged the way an install lays it out: versioned file, soname link, dev link.
stage_c_library || suite_abort c-examples "cannot build and stage libmcore_init.so"
soname=$(readelf -d "$lib/libmcore_init.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libmcore_init.so.0.1" ] || { echo "FAIL: soname is '$soname'"; suite_abort c-examples "soname"; }
bad=$(nm -D --defined-only "$lib/libmcore_init.so" | awk '$2 ~ /^[TDBR]$/ {print $3}' | grep -v '^mcore_' || true)
[ -z "$bad" ] || { echo "FAIL: exported symbols outside mcore_*: $bad"; suite_abort c-examples "exports"; }
# Every exported function is declared in the header (cbindgen cannot see macro-generated ones).
undeclared=$(nm -D --defined-only "$lib/libmcore_init.so" | awk '$2 == "T" {print $3}' | grep '^mcore_' \
  | while read -r sym; do grep -q "\b$sym(" include/mcore_init.h || echo "$sym"; done)
if [ -z "$undeclared" ]; then suite_ok; else suite_bad "exported but not in include/mcore_init.h: $undeclared"; fi
for src in examples/c/*.c; do
  name=$(basename "$src" .c)
  if cc -std=c11 -Wall -Wextra -Wpedantic -Werror -Iinclude "$src" -L"$lib" -lmcore_init \
        -Wl,-rpath,"$PWD/$lib" -o "$out/$name" && "$out/$name"; then
    suite_ok
  else
    suite_bad "examples/c/$name"
  fi
done
suite_end c-examples
