"""Check the JSON lines of `mcore-selftest --fail-rank R --fail-at during` run by a launcher that
keeps the survivors running: WORLD - 1 lines, each ok, each naming rank R as dead in what ended
its init, before half the init timeout (so a death ended the wait, not the deadline). Prints the
latest detection in seconds.

With --launcher-may-end-it (Slurm's mpi/pmix cancels the step once a task's PMIx connection is
lost, often before a survivor has printed its line): every line that came out as above, if any.

usage: killed_in_init.py OUT WORLD RANK TIMEOUT [--launcher-may-end-it]
"""
import json
import re
import sys

out, world, rank, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ended = sys.argv[5:] == ["--launcher-may-end-it"]
lines = []
for l in open(out):
    if l.startswith("{"):
        try:
            lines.append(json.loads(l))
        except ValueError:
            # A line the launcher's kill cut short.
            if not ended:
                raise
assert (len(lines) < world if ended else len(lines) == world - 1) and all(l["ok"] for l in lines), lines
named = re.compile(rf"rank\(s\) {rank}( on host [^:]*)? died")
assert all(named.search(l["detected"]) for l in lines), [l["detected"] for l in lines]
worst = max((l["detected_after_s"] for l in lines), default=0.0)
assert worst < timeout / 2, f"named only after {worst} s: the deadline ended the wait, not the death"
print(f"{worst:.2f}")
