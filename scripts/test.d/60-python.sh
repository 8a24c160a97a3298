#!/usr/bin/env bash
# pytest suite of the ctypes package (python/), against the release library in target/release.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
venv=$root/target/py-venv
if [ ! -x "$venv/bin/pytest" ]; then
  python3 -m venv "$venv" && "$venv/bin/pip" install -q pytest || { echo "python: 0 passed, 1 failed (cannot install pytest)"; exit 1; }
fi
export MCORE_INIT_LIBRARY=$root/target/release/libmcore_init.so
export MCORE_REPO_ROOT=$root
cd python && "$venv/bin/python" -m pytest -q -p no:cacheprovider tests
