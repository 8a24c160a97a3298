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
. scripts/lib/pytest-summary.sh
pytest_summary python "$log" "$rc"
