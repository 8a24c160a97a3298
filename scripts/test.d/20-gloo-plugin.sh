#!/usr/bin/env bash
# Build the Gloo backend plugin (backends/gloo, CMake, Debian's libgloo-dev) into
# target/gloo-plugin/, check it exports only its entry symbol, then run the backend tests with
# real processes against it (tests/backend_plugin.rs via MCORE_GLOO_PLUGIN).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/gloo-plugin
pass=0; fail=0
if cmake -S backends/gloo -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$out.cmake.log" 2>&1 \
   && cmake --build "$out" -j 2 >>"$out.cmake.log" 2>&1; then
  pass=$((pass+1))
else
  cat "$out.cmake.log"; echo "FAIL: building the Gloo plugin (log: $out.cmake.log)"; fail=$((fail+1))
  echo "gloo-plugin: $pass passed, $fail failed"; exit 1
fi
plugin="$PWD/$out/libmcore_init_gloo.so"
exported=$(nm -D --defined-only "$plugin" | awk '$2 ~ /^[TDBRVW]$/ {print $3}')
if [ "$exported" = "mcore_backend_plugin_v1" ]; then
  pass=$((pass+1))
else
  echo "FAIL: the plugin exports more than mcore_backend_plugin_v1: $exported"; fail=$((fail+1))
fi
# `--backend gloo` finds libmcore_init_gloo.so through the dynamic loader's search path.
store=$(mktemp -d)
probe=target/release/examples/mcore-backend-probe   # a test worker, not an installed tool
cargo build --release --quiet --example mcore-backend-probe
pids=()
for r in 0 1; do
  LD_LIBRARY_PATH="$PWD/$out" timeout 60 "$probe" --backend gloo --store-dir "$store" --rank $r \
    --world-size 2 --timeout-ms 20000 >"$store/out.$r" 2>&1 & pids+=($!)
done
ok=1; for p in "${pids[@]}"; do wait "$p" || ok=0; done
if [ "$ok" = 1 ] && grep -q '"ok":true' "$store/out.0" && grep -q '"ok":true' "$store/out.1"; then
  pass=$((pass+1))
else
  cat "$store"/out.*; echo "FAIL: --backend gloo through LD_LIBRARY_PATH"; fail=$((fail+1))
fi
rm -rf "$store"
log=$(mktemp)
if MCORE_GLOO_PLUGIN="$plugin" cargo test --release --quiet --test backend_plugin >"$log" 2>&1; then :; fi
cat "$log"
n_ok=$(sed -n 's/^test result: .* \([0-9]*\) passed; \([0-9]*\) failed.*/\1/p' "$log" | tail -1)
n_bad=$(sed -n 's/^test result: .* \([0-9]*\) passed; \([0-9]*\) failed.*/\2/p' "$log" | tail -1)
if [ -z "$n_ok" ]; then echo "FAIL: backend_plugin tests did not run"; fail=$((fail+1)); n_ok=0; n_bad=0; fi
pass=$((pass+n_ok)); fail=$((fail+n_bad))
rm -f "$log"
echo "gloo-plugin: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
