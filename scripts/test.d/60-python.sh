#!/usr/bin/env bash
# pytest suite of the ctypes package (python/), against the release library in target/release,
# multi-process tests over the Gloo plugin (built here when missing, as 25-runtime.sh does).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
venv=$root/target/py-venv
if [ ! -x "$venv/bin/pytest" ]; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q pytest || { echo "python: 0 passed, 1 failed (cannot install pytest)"; exit 1; }
fi
# incremental: a no-op when the library is current, a rebuild when the Rust sources changed
cargo build --release --locked --lib >/dev/null 2>&1 || { echo "python: 0 passed, 1 failed (cannot build libmcore_init.so)"; exit 1; }
plugin=$root/target/gloo-plugin/libmcore_init_gloo.so
if [ ! -f "$plugin" ]; then
  cmake -S backends/gloo -B target/gloo-plugin -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null && cmake --build target/gloo-plugin -j 2 >/dev/null
fi
export MCORE_INIT_LIBRARY=$root/target/release/libmcore_init.so
export MCORE_GLOO_PLUGIN=$plugin
export MCORE_REPO_ROOT=$root
log=$root/target/py-pytest.log
(cd python && "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider tests) >"$log" 2>&1
rc=$?
tail -n 40 "$log"
summary=$(tail -n 1 "$log")
passed=$(grep -o '[0-9]\+ passed' <<<"$summary" | grep -o '[0-9]\+' || echo 0)
failed=$(( $(grep -o '[0-9]\+ failed' <<<"$summary" | grep -o '[0-9]\+' || echo 0) + $(grep -o '[0-9]\+ error' <<<"$summary" | grep -o '[0-9]\+' || echo 0) ))
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi
echo "python: $passed passed, $failed failed"
[ "$rc" -eq 0 ]
