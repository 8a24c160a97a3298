#!/usr/bin/env bash
# pytest suite of the ctypes package (python/), against the release library in target/release,
# multi-process tests over the Gloo plugin (built here when missing).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
root=$PWD
venv=$root/target/py-venv
if [ ! -x "$venv/bin/pytest" ]; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q pytest || suite_abort python "cannot install pytest"
fi
# incremental: a no-op when the library is current, a rebuild when the Rust sources changed
cargo build --release --locked --lib >/dev/null 2>&1 || suite_abort python "cannot build libmcore_init.so"
# the launcher the examples' tests run under (tests/test_rl_job_example.py)
cargo build --release --locked --bin mcore-launch >/dev/null 2>&1 || suite_abort python "cannot build mcore-launch"
plugin=$(gloo_plugin)
export MCORE_INIT_LIBRARY=$root/target/release/libmcore_init.so
export MCORE_GLOO_PLUGIN=$plugin
export MCORE_REPO_ROOT=$root
export MCORE_LAUNCH=$root/target/release/mcore-launch
log=$root/target/py-pytest.log
(cd python && "$venv/bin/python" -m pytest -q -rsfE -p no:cacheprovider tests) >"$log" 2>&1
rc=$?
suite_count_pytest "$log" "$rc"
suite_end python
