#!/usr/bin/env bash
# Build every C example in examples/c against include/ and the release libmcore_init.so as a
# C11 program with -Wall -Wextra -Wpedantic -Werror, run it, and check the library's soname.
# rl_job (several grids and a group made after init) runs under mcore-launch with 16 Gloo ranks,
# colocated and side by side. first_job (the README's, 4 ranks) runs in 40-cmake-package.sh from an installed prefix.
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
        -Wl,-rpath,"$PWD/$lib" -o "$out/$name" && { [ "$name" = rl_job ] || [ "$name" = first_job ] || "$out/$name"; }; then
    suite_ok
  else
    suite_bad "examples/c/$name"
  fi
done
# The RL job: every rank prints its line; the weight-sync members (trainer rank 0 and each rollout
# tp leader: 4 ranks colocated, 3 side by side) report their verified sum.
cargo build --release --locked --quiet --bin mcore-launch || suite_abort c-examples "cannot build mcore-launch"
plugin=$(gloo_plugin)
for layout in colocated:4:24 side-by-side:3:20; do
  IFS=: read -r name members sum <<<"$layout"
  log=$out/rl_job-$name.log
  if MCORE_BACKEND_PLUGIN=$plugin ./target/release/mcore-launch --nproc 16 --timeout 120 -- "$out/rl_job" "$name" >"$log" 2>&1 \
     && [ "$(grep -c 'rank [0-9]*: train tp' "$log")" = 16 ] \
     && [ "$(grep -c "weight-sync $members members, sum $sum ok" "$log")" = "$members" ]; then
    suite_ok
  else
    tail -n 20 "$log"; suite_bad "examples/c/rl_job $name"
  fi
done
suite_end c-examples
