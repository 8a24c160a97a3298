"""Groups made after init by their members only (mcore_init.groups), real processes on loopback
over the Gloo plugin."""

import sys

from conftest import gloo_plugin
from test_multiprocess import _run_ranks

WORKER = r"""
import json, os, sys
from mcore_init import McoreError, groups, runtime
runtime.initialize(tp=1, backend=sys.argv[1], timeout=30)
rank = int(os.environ["RANK"])
out = {"rank": rank}
# Three groups started in an order that differs per rank; only their members start each.
specs = {"x": [0, 1, 2], "y": [1, 2, 3, 4], "z": [0, 4]}
mine = [n for n in specs if rank in specs[n]]
mine = mine[rank % len(mine):] + mine[: rank % len(mine)] if mine else []
started = [groups.start_group(n, specs[n], timeout=20) for n in mine]
for g in started:
    g.wait()
out["made"] = {g.name: [g.ranks, g.rank] for g in started}
for g in sorted(started, key=lambda g: g.name):
    out.setdefault("sums", {})[g.name] = g.allreduce_sum([rank, 1])
out["comm_nonzero"] = all(g.communicator() != 0 for g in started)
# The weight-sync group {0, 2, 4}: made by its members only, the others do nothing.
if rank in (0, 2, 4):
    ws = groups.create_group("weight-sync", [4, 0, 2])
    out["ws"] = ws.allreduce_sum([rank])
    ws.destroy()
    # A destroyed name can be made again (new keys).
    ws = groups.create_group("weight-sync", [0, 2, 4])
    out["ws_again"] = ws.allreduce_sum([1])
    ws.destroy()
for name, ranks in (("", [rank]), ("a/b", [rank]), ("dup", [rank, rank]), ("far", [rank, 99]),
                    ("other", [r for r in range(5) if r != rank])):
    try:
        groups.start_group(name, ranks)
        out.setdefault("errors", []).append(None)
    except (McoreError, ValueError) as exc:
        out.setdefault("errors", []).append(str(exc))
for g in started:
    g.destroy()
runtime.destroy()
print(json.dumps(out), flush=True)
"""


def test_five_ranks_make_groups_after_init_in_their_own_orders_and_a_weight_sync_group():
    plugin = str(gloo_plugin())
    outs = _run_ranks(lambda r: [sys.executable, "-c", WORKER, plugin], 5, timeout=90)
    specs = {"x": [0, 1, 2], "y": [1, 2, 3, 4], "z": [0, 4]}
    for o in outs:
        rank = o["rank"]
        want = {n: [m, m.index(rank)] for n, m in specs.items() if rank in m}
        assert o["made"] == want, o
        assert o["sums"] == {n: [sum(specs[n]), len(specs[n])] for n in want}, o
        assert o["comm_nonzero"], o
        if rank in (0, 2, 4):
            assert o["ws"] == [6] and o["ws_again"] == [3], o
        else:
            assert "ws" not in o, o
        empty, slash, dup, far, other = o["errors"]
        assert "group name is empty" in empty, empty
        assert "contains '/'" in slash, slash
        assert f"rank {rank} is listed twice" in dup, dup
        assert "rank 99 is not in the world of 5 ranks" in far, far
        assert f"this rank {rank} is not a member" in other, other


DESTROY_RACE = r"""
import json, sys, threading
from mcore_init import McoreError, groups, runtime
runtime.initialize(tp=1, backend=sys.argv[1], timeout=30)
outcomes = {}
for i in range(100):
    g = groups.start_group("g", [0])
    got = []

    def waiter():
        try:
            g.wait()
            got.append("ready")
        except McoreError as exc:
            got.append(str(exc))
        except ValueError as exc:  # the Python object was closed before the thread read its handle
            got.append(str(exc))

    t = threading.Thread(target=waiter)
    t.start()
    g.destroy()
    t.join(10)
    assert not t.is_alive(), f"run {i}: the wait did not end"
    key = "ready" if got[0] == "ready" else ("destroyed" if "destroyed" in got[0] else
                                             "closed" if "closed" in got[0] else got[0])
    outcomes[key] = outcomes.get(key, 0) + 1
runtime.destroy()
print(json.dumps(outcomes), flush=True)
"""


def test_a_group_destroyed_while_another_thread_waits_on_it_100_times_never_crashes():
    # Issue 34.4: this used to end in SIGSEGV in 5 of 26 runs (the wait read the freed handle).
    plugin = str(gloo_plugin())
    (outcomes,) = _run_ranks(lambda r: [sys.executable, "-c", DESTROY_RACE, plugin], 1, timeout=120)
    assert sum(outcomes.values()) == 100, outcomes
    # Every wait ended ready (it won the race), with "the group was destroyed", or found the
    # Python object closed: nothing else.
    assert set(outcomes) <= {"ready", "destroyed", "closed"}, outcomes
    print("group destroy while a thread waits, 100 runs:", outcomes)
