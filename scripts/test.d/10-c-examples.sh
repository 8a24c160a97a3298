#!/usr/bin/env bash
# Build every C example in examples/c against include/ and the release libmcore_init.so as a
# C11 program with -Wall -Wextra -Wpedantic -Werror, run it, and check the library's soname.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked --lib --quiet
out=target/c-examples
lib=$out/lib
mkdir -p "$lib"
# Stage the library the way an install lays it out: versioned file, soname link, dev link.
cp -f target/release/libmcore_init.so "$lib/libmcore_init.so.0.1.0"
ln -sf libmcore_init.so.0.1.0 "$lib/libmcore_init.so.0.1"
ln -sf libmcore_init.so.0.1 "$lib/libmcore_init.so"
soname=$(readelf -d "$lib/libmcore_init.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libmcore_init.so.0.1" ] || { echo "FAIL: soname is '$soname'"; exit 1; }
bad=$(nm -D --defined-only "$lib/libmcore_init.so" | awk '$2 ~ /^[TDBR]$/ {print $3}' | grep -v '^mcore_' || true)
[ -z "$bad" ] || { echo "FAIL: exported symbols outside mcore_*: $bad"; exit 1; }
pass=0; fail=0
# Every exported function is declared in the header (cbindgen cannot see macro-generated ones).
undeclared=$(nm -D --defined-only "$lib/libmcore_init.so" | awk '$2 == "T" {print $3}' | grep '^mcore_' \
  | while read -r sym; do grep -q "\b$sym(" include/mcore_init.h || echo "$sym"; done)
if [ -z "$undeclared" ]; then pass=$((pass+1)); else echo "FAIL: exported but not in include/mcore_init.h: $undeclared"; fail=$((fail+1)); fi
for src in examples/c/*.c; do
  name=$(basename "$src" .c)
  if cc -std=c11 -Wall -Wextra -Wpedantic -Werror -Iinclude "$src" -L"$lib" -lmcore_init \
        -Wl,-rpath,"$PWD/$lib" -o "$out/$name" && "$out/$name"; then
    pass=$((pass+1))
  else
    echo "FAIL: examples/c/$name"; fail=$((fail+1))
  fi
done
echo "c-examples: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
