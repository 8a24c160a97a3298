#!/usr/bin/env bash
# pip install: build the wheel (scripts/build-wheel.sh: setuptools, libmcore_init.so and the Gloo
# plugin inside), install it into a fresh virtualenv that has no Rust toolchain on its PATH, and
# run the Python tests from a copy outside the source tree against that install (no
# MCORE_INIT_LIBRARY, no MCORE_GLOO_PLUGIN: the package finds what it carries).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
root=$PWD
fail() { suite_abort python-wheel "$1"; }
gloo_plugin >/dev/null   # target/gloo-plugin, which scripts/build-wheel.sh packs
wheel=$(bash scripts/build-wheel.sh "$root/target/wheels" | tail -n 1) || fail "cannot build the wheel"
[ -f "$wheel" ] || fail "no wheel"
case "$wheel" in *-py3-none-linux_*.whl) ;; *) fail "wheel $wheel is not platform-tagged" ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv" || fail "cannot create a venv"
# No cargo/rustc reachable while installing and testing.
clean_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
PATH=$clean_path "$work/venv/bin/pip" install -q "$wheel" pytest || fail "cannot install the wheel (or pytest)"
cp -r python/tests "$work/tests"
cd "$work"
env -u MCORE_INIT_LIBRARY -u MCORE_GLOO_PLUGIN -u MCORE_BACKEND_PLUGIN -u PYTHONPATH -u LD_LIBRARY_PATH \
  PATH="$work/venv/bin:$clean_path" MCORE_REPO_ROOT="$root" "$work/venv/bin/python" - <<'PY' || fail "the installed package is not the one imported"
import shutil, sys
import mcore_init, mcore_init._lib as lib
assert shutil.which("cargo") is None and shutil.which("rustc") is None, "a Rust toolchain is on PATH"
site = sys.prefix
assert mcore_init.__file__.startswith(site), mcore_init.__file__
assert lib.lib._name == str(lib.NATIVE_DIR / "libmcore_init.so"), lib.lib._name
assert (lib.NATIVE_DIR / "libmcore_init_gloo.so").is_file()
assert lib.bundled_backend("gloo") == str(lib.NATIVE_DIR / "libmcore_init_gloo.so")
# backend="gloo" finds the carried plugin (a world of one on loopback).
import os, socket
from mcore_init import runtime
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
runtime.initialize(backend="gloo", timeout=60)
runtime.destroy()
print("installed:", mcore_init.__file__, "library:", lib.lib._name, "gloo init ok")
PY
log=$work/pytest.log
env -u MCORE_INIT_LIBRARY -u MCORE_GLOO_PLUGIN -u MCORE_BACKEND_PLUGIN -u PYTHONPATH -u LD_LIBRARY_PATH \
  PATH="$work/venv/bin:$clean_path" MCORE_REPO_ROOT="$root" \
  "$work/venv/bin/python" -m pytest -q -rs -p no:cacheprovider tests >"$log" 2>&1
rc=$?
suite_count_pytest "$log" "$rc"
suite_end python-wheel " ($(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB)"
