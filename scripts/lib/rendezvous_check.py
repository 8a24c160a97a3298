"""How the ranks of one mpirun job met (scripts/lib/mpirun_run.sh's `check`).

usage: rendezvous_check.py OUT ERR WANT
OUT holds the ranks' mcore-selftest --json lines, ERR their stderr at MCORE_LOG=debug; WANT is
the rendezvous every rank must report (pmix or tcp-store). Every rank must say where it met the
others, all at one port of 127.0.0.1, for the reason WANT gives (published through PMIx, or a
port derived from PMIX_NAMESPACE). Prints that port and rank 0's store_requests_served.
"""
import json
import re
import sys

out, err, want = sys.argv[1:4]
lines = [json.loads(l) for l in open(out) if l.startswith("{")]
rdzv = {l.get("rendezvous") for l in lines}
assert rdzv == {want}, f"rendezvous {rdzv}, want {want}"
meets = re.findall(r"rank (\d+) meets the others at 127\.0\.0\.1:(\d+) \(([^\n]*)\)", open(err).read())
assert sorted(int(m[0]) for m in meets) == list(range(len(lines))), meets
ports = {m[1] for m in meets}
assert len(ports) == 1, f"the ranks met at several ports: {ports}"
whys = {m[2] for m in meets}
if want == "pmix":
    assert all("published through PMIx" in w and "pmix.local.size = pmix.job.size" in w for w in whys), whys
else:
    assert all("derived from PMIX_NAMESPACE" in w for w in whys), whys
served = [l.get("store_requests_served") for l in lines if l["rank"] == 0][0]
print(ports.pop(), served)
