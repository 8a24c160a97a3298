#!/usr/bin/env bash
# tier: slow
# pip install: build the wheel (scripts/build-wheel.sh: setuptools, libmcore_init.so and the Gloo
# plugin inside, both built with zig for glibc 2.28, Gloo linked into the plugin), install it into a
# fresh virtualenv that has no Rust toolchain on its PATH, and run the Python tests from a copy
# outside the source tree against that install (no MCORE_INIT_LIBRARY; MCORE_GLOO_PLUGIN is the
# installed plugin: the package's own copies are what runs). The manylinux checks: the wheel is
# tagged manylinux_2_28_x86_64 and `auditwheel show` (printed) confirms it; its native libraries
# need nothing outside libc, libm, libpthread, libdl and the loader (no bundled mcore_init.libs/).
# In a mount namespace (unshare -m, root) where Debian's libgloo*, libhiredis*, libibverbs*,
# libnl-3*, libnl-route-3* and libstdc++* files are hidden (an empty file bound over each, an empty
# tmpfs over the ibverbs provider directory), ldd resolves the installed plugin, a 4-rank Gloo init
# from Python (tp 2, pp 2) passes with none of those libraries in any rank's /proc/self/maps, and
# the package's pytest suite runs there too.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
root=$PWD
fail() { suite_abort python-wheel "$1"; }
wheel=$(bash scripts/build-wheel.sh "$root/target/wheels" | tail -n 1) || fail "cannot build the wheel"
[ -f "$wheel" ] || fail "no wheel"
case "$wheel" in *-py3-none-manylinux_2_28_x86_64.whl) ;; *) fail "wheel $wheel is not tagged manylinux_2_28_x86_64" ;; esac
tag=${wheel##*-py3-none-}
tag=${tag%.whl}
show=$("$root/target/wheel-build-venv/bin/auditwheel" show "$wheel" 2>/dev/null) || fail "auditwheel show failed"
echo "auditwheel show:"
printf '%s\n' "$show" | sed 's/^/  | /'
# auditwheel wraps its lines: compare with the whitespace folded.
if tr -s ' \n' '  ' <<<"$show" | grep -qF "consistent with the following platform tag: \"$tag\""; then
  suite_ok "auditwheel show confirms $tag"
else
  suite_bad "auditwheel show does not confirm $tag"
fi
listing=$(python3 -m zipfile -l "$wheel")
for want in mcore_init/_native/libmcore_init.so mcore_init/_native/libmcore_init_gloo.so; do
  suite_check "wheel carries $want" grep -qF "$want" <<<"$listing"
done
# Gloo is inside the plugin: nothing for auditwheel to bundle.
if grep -qF mcore_init.libs/ <<<"$listing"; then
  suite_bad "wheel bundles libraries: $(grep -o 'mcore_init\.libs/[^ ]*' <<<"$listing" | tr '\n' ' ')"
else
  suite_ok "wheel bundles no libraries (mcore_init.libs/ absent)"
fi
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
import os, shutil, sys
import mcore_init, mcore_init._lib as lib
assert shutil.which("cargo") is None and shutil.which("rustc") is None, "a Rust toolchain is on PATH"
site = sys.prefix
assert mcore_init.__file__.startswith(site), mcore_init.__file__
assert lib.lib._name == str(lib.NATIVE_DIR / "libmcore_init.so"), lib.lib._name
assert (lib.NATIVE_DIR / "libmcore_init_gloo.so").is_file()
for tool in ("mcore-launch", "mcore-selftest", "mcore-topo"):
    assert shutil.which(tool) == os.path.join(sys.prefix, "bin", tool), (tool, shutil.which(tool))
# backend="gloo" finds the carried plugin (a world of one on loopback).
from mcore_init import runtime
sys.path.insert(0, os.path.join(os.environ["MCORE_REPO_ROOT"], "scripts", "lib"))
from ports import free_port  # MCORE_PORT_RANGE when set
port = free_port()
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
runtime.initialize(backend="gloo", timeout=60)
runtime.destroy()
print("installed:", mcore_init.__file__, "library:", lib.lib._name, "gloo init ok")
PY
native=$("$work/venv/bin/python" -c "import mcore_init._lib as l; print(l.NATIVE_DIR)") || fail "no native dir"
manylinux_needed='libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 ld-linux-x86-64.so.2'
for so in "$native/libmcore_init.so" "$native/libmcore_init_gloo.so"; do
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  extra=$(for n in $needed; do case " $manylinux_needed " in *" $n "*) ;; *) echo "$n" ;; esac; done)
  if [ -n "$needed" ] && [ -z "$extra" ]; then
    suite_ok "$(basename "$so") needs only $needed"
  else
    suite_bad "$(basename "$so") needs $needed (outside libc/libm/libpthread/libdl/the loader: $extra)"
  fi
done
# The console commands run the programs the wheel carries: mcore-topo, and 4 ranks of
# mcore-selftest (Gloo, the plugin found beside the program) and of the README's Python example
# (examples/python/first_job.py) under the wheel's mcore-launch, with nothing set.
wheel_env=(env -u MCORE_INIT_LIBRARY -u MCORE_GLOO_PLUGIN -u MCORE_BACKEND_PLUGIN -u PYTHONPATH -u LD_LIBRARY_PATH
  PATH="$work/venv/bin:$clean_path")
if "${wheel_env[@]}" mcore-topo --world-size 8 --tp 2 | grep -q tensor_model_parallel; then
  suite_ok "wheel's mcore-topo"
else
  suite_bad "wheel's mcore-topo"
fi
rc=0; out=$("${wheel_env[@]}" mcore-launch --nproc 4 --timeout 120 -- mcore-selftest --tp 2 --pp 2 --backend gloo 2>&1) || rc=$?
if [ "$rc" = 0 ] && [ "$(grep -c '^\[rank [0-3]\]: ' <<<"$out")" -ge 4 ]; then
  suite_ok "wheel's mcore-launch runs 4 ranks of its mcore-selftest on Gloo"
else
  printf '%s\n' "$out" | tail -20; suite_bad "wheel's mcore-launch + mcore-selftest (exit status $rc)"
fi
cp "$root/examples/python/first_job.py" "$work/first_job.py"
out=$("${wheel_env[@]}" mcore-launch --nproc 4 --timeout 120 -- python "$work/first_job.py" 2>&1)
if [ "$(grep -cE 'rank [0-3] of 4: tp rank [01], tp sum (1|5) ok$' <<<"$out")" = 4 ]; then
  suite_ok "the README's Python example: 4 ranks under the wheel's mcore-launch"
else
  printf '%s\n' "$out" | tail -20; suite_bad "the README's Python example under the wheel's mcore-launch"
fi
# The 4-rank Gloo init where Debian's Gloo, what it links and libstdc++ are hidden.
cat >"$work/ranks.py" <<'PY'
import json, os, subprocess, sys
WORKER = r"""
import json, os
from mcore_init import parallel_state as ps, runtime
rank = int(os.environ["RANK"])
ps.initialize_model_parallel(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                             backend="gloo", timeout=60)
maps = open("/proc/self/maps").read()
libs = sorted({l.split()[-1] for l in maps.splitlines()
               if any(n in l for n in ("libgloo", "libhiredis", "libibverbs", "libnl-", "libstdc++",
                                       "libmcore_init"))})
out = {"rank": rank, "world": list(runtime.world()),
       "tp": ps.get_tensor_model_parallel_group_ranks(), "pp": ps.get_pipeline_model_parallel_group_ranks(),
       "tp_sum": runtime.allreduce_sum("tensor_model_parallel", [rank, 1]),
       "pp_sum": runtime.allreduce_sum("pipeline_model_parallel", [rank, 1]), "libs": libs}
ps.destroy_model_parallel()
print(json.dumps(out), flush=True)
"""
sys.path.insert(0, os.path.join(os.environ["MCORE_REPO_ROOT"], "scripts", "lib"))
from ports import free_port  # MCORE_PORT_RANGE when set
port = free_port()
env = {k: v for k, v in os.environ.items() if not k.startswith("MCORE_")}
procs = [subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True,
                          env=dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="4", LOCAL_WORLD_SIZE="4",
                                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
         for r in range(4)]
outs = []
for r, p in enumerate(procs):
    stdout, _ = p.communicate(timeout=120)
    assert p.returncode == 0, f"rank {r} exited {p.returncode}"
    outs.append(json.loads(stdout.strip().splitlines()[-1]))
import mcore_init._lib as lib
native = str(lib.NATIVE_DIR)
for r, o in enumerate(outs):
    tp, pp = [r - r % 2, r - r % 2 + 1], [r % 2, r % 2 + 2]
    assert o["world"] == [r, 4] and o["tp"] == tp and o["pp"] == pp, o
    assert o["tp_sum"] == [sum(tp), 2] and o["pp_sum"] == [sum(pp), 2], o
    # The wheel's two libraries and nothing else: no libgloo, hiredis, ibverbs, libnl, libstdc++.
    assert o["libs"] == [native + "/libmcore_init.so", native + "/libmcore_init_gloo.so"], o["libs"]
print("4-rank gloo init ok; rank 0 mapped:", " ".join(outs[0]["libs"]))
PY
cat >"$work/hide.sh" <<'SH'
# Runs inside `unshare -m`: hide Debian's files, show that they are hidden, then run "$@".
set -u
work=$1
shift
mount --make-rprivate / || exit 1
: >"$work/empty"
hidden=0
for f in $(find /usr/lib /usr/lib64 /usr/local/lib -maxdepth 2 -type f \
    \( -name 'libgloo*.so*' -o -name 'libhiredis*.so*' -o -name 'libibverbs*.so*' \
       -o -name 'libnl-3*.so*' -o -name 'libnl-route-3*.so*' -o -name 'libstdc++.so*' \) 2>/dev/null); do
  mount --bind "$work/empty" "$f" || exit 1
  hidden=$((hidden + 1))
done
[ -d /usr/lib/x86_64-linux-gnu/libibverbs ] && { mount -t tmpfs none /usr/lib/x86_64-linux-gnu/libibverbs || exit 1; }
echo "hidden: $hidden Debian library files"
[ "$hidden" -ge 6 ] || { echo "expected at least 6 files to hide"; exit 1; }
for n in libgloo.so.0 libhiredis.so.0.14 libibverbs.so.1 libnl-3.so.200 libnl-route-3.so.200 libstdc++.so.6; do
  if "$work/venv/bin/python" -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$n" 2>/dev/null; then
    echo "$n still loads from the system"; exit 1
  fi
done
echo "Debian's libgloo, libhiredis, libibverbs, libnl-3, libnl-route-3, libstdc++ do not load here"
exec "$@"
SH
cat >"$work/ranks.sh" <<'SH'
set -u
work=$1
plugin=$("$work/venv/bin/python" -c "import mcore_init._lib as l; print(l.NATIVE_DIR / 'libmcore_init_gloo.so')") || exit 1
echo "ldd $plugin:"
ldd "$plugin" | sed 's/^/  | /'
if ldd "$plugin" | grep -q 'not found'; then echo "unresolved libraries"; exit 1; fi
if ldd "$plugin" | grep -E 'libgloo|libhiredis|libibverbs|libnl-|libstdc\+\+'; then echo "the plugin links these"; exit 1; fi
cd "$work" && "$work/venv/bin/python" "$work/ranks.py"
SH
run_env=(env -u MCORE_INIT_LIBRARY -u MCORE_BACKEND_PLUGIN -u PYTHONPATH -u LD_LIBRARY_PATH
  PATH="$work/venv/bin:$clean_path" MCORE_REPO_ROOT="$root" MCORE_GLOO_PLUGIN="$native/libmcore_init_gloo.so")
hide=()
if [ "$(id -u)" -ne 0 ]; then
  suite_bad "hidden-library checks need root (unshare -m, mount --bind)"
elif "${run_env[@]}" unshare -m bash "$work/hide.sh" "$work" bash "$work/ranks.sh" "$work" >"$work/hidden.log" 2>&1; then
  sed 's/^/  /' "$work/hidden.log"
  suite_ok "4-rank Gloo init from the installed wheel with Debian's gloo, hiredis, ibverbs, libnl, libstdc++ hidden"
  hide=(unshare -m bash "$work/hide.sh" "$work")
else
  sed 's/^/  /' "$work/hidden.log"
  suite_bad "4-rank Gloo init with Debian's libraries hidden"
fi
log=$work/pytest.log
if [ "${#hide[@]}" -gt 0 ]; then where="in the namespace with Debian's libraries hidden"; else where="with Debian's libraries visible"; fi
echo "pytest against the installed wheel, $where:"
"${run_env[@]}" "${hide[@]}" "$work/venv/bin/python" -m pytest -q -rsfE -p no:cacheprovider tests >"$log" 2>&1
rc=$?
suite_count_pytest "$log" "$rc"
suite_end python-wheel " ($(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB)"
