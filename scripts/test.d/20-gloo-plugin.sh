#!/usr/bin/env bash
# Build the Gloo backend plugin (backends/gloo, CMake, Debian's libgloo-dev) into
# target/gloo-plugin/, check it exports only its entry symbol, then run the backend tests with
# real processes against it (tests/backends/backend_plugin.rs via MCORE_GLOO_PLUGIN).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
out=target/gloo-plugin
if gloo_plugin_build "$out.cmake.log"; then
  suite_ok
else
  cat "$out.cmake.log"; suite_abort gloo-plugin "cannot build the Gloo plugin, log: $out.cmake.log"
fi
plugin="$PWD/$out/libmcore_init_gloo.so"
exported=$(nm -D --defined-only "$plugin" | awk '$2 ~ /^[TDBRVW]$/ {print $3}')
if [ "$exported" = "mcore_backend_plugin_v1" ]; then
  suite_ok
else
  suite_bad "the plugin exports more than mcore_backend_plugin_v1: $exported"
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
  suite_ok
else
  cat "$store"/out.*; suite_bad "--backend gloo through LD_LIBRARY_PATH"
fi
rm -rf "$store"
log=$(mktemp)
MCORE_GLOO_PLUGIN="$plugin" cargo test --release --quiet --test backends backend_plugin:: >"$log" 2>&1
cat "$log"
suite_count_cargo "backend_plugin tests" "$log"
rm -f "$log"
suite_end gloo-plugin
