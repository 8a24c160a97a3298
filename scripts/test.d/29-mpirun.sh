#!/usr/bin/env bash
# tier: slow
# lane: wait
# mpirun with nothing set by hand (issue 28): Debian's OpenMPI (openmpi-bin, installed when
# missing) runs `mpirun -np 8 mcore-selftest --tp 2 --pp 2 --backend gloo --json` on this one
# node with no MASTER_ADDR/MASTER_PORT: the ranks meet on loopback at the port derived from the
# job's PMIX_NAMESPACE (the documented formula); the several-node form (`-x MASTER_ADDR -x
# MASTER_PORT`) is used as given; a job that spans nodes without MASTER_ADDR is refused, naming it.
# mpirun runs a PMIx server, through which the ranks would meet by default (29b-pmix.sh):
# MCORE_RENDEZVOUS=tcp-store keeps this suite on the TCP store and its derived port.
# All traffic on 127.0.0.1 (mpirun's own wire-up included: --mca oob_tcp_if_include lo).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
mpirun_ready mpirun
echo "mpirun: $(mpirun --version 2>/dev/null | head -n 1)"
dir=$(mktemp -d /tmp/mcore-mpirun.XXXXXX)
trap 'rm -rf "$dir"' EXIT
# Each rank's output in its own files (mpirun interleaves the ranks' partial lines otherwise):
# gather NAME concatenates them into $dir/NAME.out and $dir/NAME.err.
gather() {
  cat "$dir/$1"/*/rank.*/stdout >"$dir/$1.out" 2>/dev/null
  cat "$dir/$1"/*/rank.*/stderr >"$dir/$1.err" 2>/dev/null
}
clean=(env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE MCORE_RENDEZVOUS=tcp-store
  LD_LIBRARY_PATH="$PWD/target/gloo-plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MCORE_LOG=debug)

# One node, nothing set.
"${clean[@]}" timeout 240 "${mpi[@]}" --output-filename "$dir/one" -np 8 target/release/mcore-selftest --tp 2 --pp 2 \
  --backend gloo --json --timeout 120 >/dev/null 2>"$dir/one.mpirun"
rc=$?
gather one
if [ "$rc" -eq 0 ]; then suite_ok "mpirun -np 8 exited 0"; else suite_bad "mpirun -np 8 exited with status $rc"; tail -n 20 "$dir/one.mpirun"; fi
if python3 scripts/lib/selftest_lines.py "$dir/one.out" 8 127.0.0.1; then
  suite_ok "8 JSON lines: ranks 0-7 at distinct coordinates, each ok with every group of its kinds verified, all on 127.0.0.1"
else
  suite_bad "mpirun's JSON lines:"; cat "$dir/one.out"
fi
# Every rank's MCORE_LOG=debug line: the same address and port, the port by the documented formula.
if python3 - "$dir/one.err" <<'PY'; then suite_ok "every rank met at 127.0.0.1:20000 + FNV-1a-64(PMIX_NAMESPACE) mod 12000"; else suite_bad "the ranks' meeting points"; grep meets "$dir/one.err"; fi
import re, sys
meets = re.findall(r"rank (\d+) meets the others at ([^ ]+):(\d+) \(address: every rank runs on this node "
                   r"\(OMPI_COMM_WORLD_LOCAL_SIZE=8\): loopback; port: derived from PMIX_NAMESPACE='([^']*)'\)",
                   open(sys.argv[1]).read())
assert sorted(int(m[0]) for m in meets) == list(range(8)), meets
assert len({m[1:] for m in meets}) == 1, meets
_, addr, port, ns = meets[0]
h = 0xCBF29CE484222325
for b in ns.encode():
    h = ((h ^ b) * 0x100000001B3) % 2**64
assert addr == "127.0.0.1" and int(port) == 20000 + h % 12000, (addr, port, ns)
print(f"mpirun: met at {addr}:{port} (PMIX_NAMESPACE={ns!r})")
PY

# Several nodes' form, on this one: MASTER_ADDR/MASTER_PORT passed with -x are used as given.
port=$(free_port)
"${clean[@]}" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" timeout 120 "${mpi[@]}" -x MASTER_ADDR -x MASTER_PORT -x LD_LIBRARY_PATH \
  --output-filename "$dir/x" -np 4 target/release/mcore-selftest --tp 2 --pp 2 --backend gloo --json --timeout 60 \
  >/dev/null 2>"$dir/x.mpirun"
rc=$?
gather x
if [ "$rc" -eq 0 ] && python3 scripts/lib/selftest_lines.py "$dir/x.out" 4 127.0.0.1 \
   && [ "$(grep -c "meets the others at 127.0.0.1:$port (address: MASTER_ADDR; port: MASTER_PORT)" "$dir/x.err")" -eq 4 ]; then
  suite_ok "mpirun -x MASTER_ADDR -x MASTER_PORT -np 4: every rank met at 127.0.0.1:$port as given"
else
  suite_bad "mpirun -x MASTER_ADDR -x MASTER_PORT (status $rc):"; tail -n 20 "$dir/x.out" "$dir/x.err" "$dir/x.mpirun"
fi

# A job that spans nodes (as its ranks see it) without MASTER_ADDR: refused at once, naming it
# (mpirun ends the other rank when the first fails, so one line at least).
"${clean[@]}" timeout 60 "${mpi[@]}" --output-filename "$dir/multi" -np 2 \
  env OMPI_COMM_WORLD_LOCAL_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 \
  target/release/mcore-selftest --backend gloo --timeout 30 >/dev/null 2>&1
rc=$?
gather multi
if [ "$rc" -ne 0 ] && [ "$(grep -c "^mcore-selftest: MASTER_ADDR is not set, and this OpenMPI job spans several nodes (OMPI_COMM_WORLD_LOCAL_SIZE='1' of OMPI_COMM_WORLD_SIZE=2).*mpirun -x MASTER_ADDR -x MASTER_PORT" "$dir/multi.err")" -ge 1 ]; then
  suite_ok "a job across nodes without MASTER_ADDR is refused, naming -x MASTER_ADDR -x MASTER_PORT"
else
  suite_bad "several nodes without MASTER_ADDR (status $rc):"; tail -n 20 "$dir/multi.err"
fi
suite_end mpirun
