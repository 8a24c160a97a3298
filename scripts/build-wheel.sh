#!/usr/bin/env bash
# Build the Python wheel: python/ (setuptools, the standard build backend) with the release
# libmcore_init.so and, where built, the Gloo plugin in mcore_init/_native/. The wheel is
# platform-tagged and needs no Rust toolchain to install. Usage: scripts/build-wheel.sh [OUTDIR]
# (default target/wheels); prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-$root/target/wheels}
cargo build --release --locked --lib --quiet
stage=$root/target/wheel-src
rm -rf "$stage"
mkdir -p "$stage" "$out"
cp -r python/pyproject.toml python/setup.py python/README.md python/mcore_init "$stage/"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$stage/mcore_init/_native"
cp target/release/libmcore_init.so "$stage/mcore_init/_native/"
# Debug info stays in target/; the exported symbols stay in the copy.
strip --strip-debug "$stage/mcore_init/_native/libmcore_init.so"
plugin=${MCORE_GLOO_PLUGIN:-$root/target/gloo-plugin/libmcore_init_gloo.so}
if [ -f "$plugin" ]; then
  cp "$plugin" "$stage/mcore_init/_native/libmcore_init_gloo.so"
else
  echo "build-wheel: no Gloo plugin at $plugin; the wheel carries libmcore_init.so only" >&2
fi
builder=$root/target/wheel-build-venv
[ -x "$builder/bin/pip" ] || python3 -m venv "$builder"
rm -f "$out"/mcore_init-*.whl
"$builder/bin/pip" wheel -q --no-deps -w "$out" "$stage" >&2
ls "$out"/mcore_init-*.whl
