"""Check the JSON lines of `mcore-launch ... mcore-selftest --json --backend hccl` (31-hccl-plugin.sh):
every one of N ranks reports ok on backend hccl with every one of its group kinds verified (the
groups it checked = its kinds, > 0; ranks differ, e.g. in embedding groups), and the strategy
asked for; optionally the log holds a text (a debug line).
usage: hccl_world.py LOG N STRATEGY|- [TEXT]"""
import json
import sys

log, n, strategy = sys.argv[1], int(sys.argv[2]), sys.argv[3]
want = sys.argv[4] if len(sys.argv) > 4 else ""
raw = open(log, errors="replace").read()
lines = []
for l in raw.splitlines():
    if "{" in l and '"rank"' in l:
        try:
            lines.append(json.loads(l[l.index("{"):]))
        except ValueError:
            pass
ok = [l for l in lines if l.get("ok") and l.get("backend") == "hccl"]
groups = {l.get("groups") for l in ok}
unchecked = [l.get("rank") for l in ok if not l.get("groups") or l.get("groups") != len(l.get("kinds", []))]
problems = []
if len(ok) != n:
    problems.append(f"{len(ok)}/{n} ranks ok")
if unchecked:
    problems.append(f"ranks {unchecked} did not check every group kind")
if strategy != "-" and any(l.get("strategy") != strategy for l in ok):
    problems.append(f"strategies {sorted({l.get('strategy') for l in ok})}, expected {strategy}")
if want and want not in raw:
    problems.append(f"the log lacks '{want}'")
if problems:
    print("  " + "; ".join(problems))
    for l in raw.splitlines()[-25:]:
        print("  | " + l[:300])
    sys.exit(1)
print(f"  {n} ranks ok, {min(groups)}..{max(groups)} groups verified per rank, strategy {ok[0].get('strategy')}")
