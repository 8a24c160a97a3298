"""Recovery with real processes (``runtime.reinitialize``): 8 Gloo ranks, tp 2 pp 2.
1. After init: a health check finds every rank; then rank 3 kills itself with SIGKILL, and the
   survivors find it by its absence and re-form.
2. Before init: rank 3 kills itself before initializing; the others' ``initialize`` fails naming
   it, and ``reinitialize`` continues from that failed attempt to the same new layout.
3. A spare: 9 ranks with ``spares=1``; rank 8 stands by, rank 3 dies once every layout rank's
   init is over (a health check first), and rank 8 takes its place: the world stays 8 on tp 2
   pp 2 dp 2."""

import json
import subprocess
import sys

from conftest import child_env, free_port, gloo_plugin

# Every worker ends with this: a rank on the new layout reports its place and two collectives
# over it; every rank prints the reinitialize result `r` as its last line.
REPORT = r"""
if not r["left"]:
    r["world"] = list(runtime.world())
    r["tp_sum"] = runtime.allreduce_sum("tensor_model_parallel", [r["rank"]])
    r["dp_group"] = runtime.group_ranks("data_parallel")
runtime.destroy()
print(json.dumps(r), flush=True)
"""

WORKER = r"""
import json, os, signal, sys
from mcore_init import runtime
runtime.initialize(tp=2, pp=2, backend=sys.argv[1], timeout=60)
rank = int(os.environ["RANK"])
try:  # a bad argument is refused and leaves the runtime up
    runtime.reinitialize(suspected=[99])
    sys.exit("reinitialize accepted suspected rank 99")
except Exception as exc:
    assert "suspected rank 99" in str(exc) and runtime.is_initialized(), exc
assert runtime.check_health(window=30) is None, "every rank is alive: the health check must say so"
if rank == 3:
    os.kill(os.getpid(), signal.SIGKILL)
r = runtime.reinitialize(window=2.0)
""" + REPORT


BEFORE_INIT = r"""
import json, os, signal, sys
from mcore_init import runtime, McoreError
if int(os.environ["RANK"]) == 3:
    os.kill(os.getpid(), signal.SIGKILL)
try:
    runtime.initialize(tp=2, pp=2, backend=sys.argv[1], timeout=8)
    sys.exit("initialize succeeded without rank 3")
except McoreError as exc:
    assert "3 did not come to the check-in" in str(exc), exc
r = runtime.reinitialize()
""" + REPORT


def run_world(worker, n=8):
    """The JSON lines of ranks 0..n-1 but 3 (which must die by SIGKILL), each exiting 0."""
    port, plugin = free_port(), str(gloo_plugin())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", worker, plugin], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=child_env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=n, LOCAL_WORLD_SIZE=n, MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=port),
        )
        for r in range(n)
    ]
    outs = {}
    try:
        for r, p in enumerate(procs):
            stdout, stderr = p.communicate(timeout=120)
            if r == 3:
                assert p.returncode == -9, f"rank 3 exited {p.returncode}:\n{stderr}"
                continue
            assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{stderr}"
            outs[r] = json.loads(stdout.strip().splitlines()[-1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outs


def check_re_formed(outs):
    # Rank 3 (tp 1, dp 1, pp 0) takes its replica, ranks 2, 3, 6, 7, with it.
    for r, o in outs.items():
        assert o["failed"] == [3], (r, o)
        assert o["world_size"] == 4 and o["old_world_size"] == 8
        assert o["left"] == (r in (2, 6, 7)), (r, o)
    new = {0: 0, 1: 1, 4: 2, 5: 3}
    for old, n in new.items():
        o = outs[old]
        assert o["rank"] == n and o["world"] == [n, 4]
        assert o["tp_sum"] == [(n // 2) * 4 + 1], o  # tp pairs (0,1) and (2,3)
        assert o["dp_group"] == [n]


def test_survivors_find_the_dead_rank_and_re_form():
    check_re_formed(run_world(WORKER))


def test_a_rank_dead_before_init_is_recovered_from_the_failed_init():
    check_re_formed(run_world(BEFORE_INIT))


SPARE = r"""
import json, os, signal, sys
from mcore_init import runtime
runtime.initialize(tp=2, pp=2, backend=sys.argv[1], timeout=60, spares=1)
rank = int(os.environ["RANK"])
assert runtime.is_spare() == (rank == 8) and runtime.is_initialized() == (rank != 8), rank
# Every layout rank's init is over before rank 3 dies (the spare stands by): a death while a
# rank still verifies its groups fails that rank's init instead, by design.
if rank != 8:
    assert runtime.check_health(window=30) is None, "every rank is alive: the health check must say so"
if rank == 3:
    os.kill(os.getpid(), signal.SIGKILL)
r = runtime.reinitialize(suspected=[3] if rank == 0 else [], window=2.0)
""" + REPORT


def test_a_spare_takes_the_dead_ranks_place():
    outs = run_world(SPARE, n=9)
    assert sorted(outs) == [0, 1, 2, 4, 5, 6, 7, 8]
    for old, o in outs.items():
        new = 3 if old == 8 else old
        assert not o["left"] and o["failed"] == [3] and o["old_world_size"] == 9, (old, o)
        assert o["rank"] == new and o["world"] == [new, 8], (old, o)
        # tp pairs (0,1) (2,3) ...; dp (tp-cp-ep-dp-pp, tp 2, dp 2): {0,2} {1,3} {4,6} {5,7}
        assert o["tp_sum"] == [(new // 2) * 4 + 1], (old, o)
        assert o["dp_group"] == [new - (new % 4) + (new % 2), new - (new % 4) + (new % 2) + 2], (old, o)
