"""Recovery with real processes (``runtime.reinitialize``): 8 Gloo ranks, tp 2 pp 2; rank 3 kills
itself with SIGKILL after init; the survivors find it by its absence and re-form."""

import json
import subprocess
import sys

from conftest import child_env, free_port, gloo_plugin

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
if rank == 3:
    os.kill(os.getpid(), signal.SIGKILL)
r = runtime.reinitialize(window=2.0)
if not r["left"]:
    r["world"] = list(runtime.world())
    r["tp_sum"] = runtime.allreduce_sum("tensor_model_parallel", [r["rank"]])
    r["dp_group"] = runtime.group_ranks("data_parallel")
runtime.destroy()
print(json.dumps(r), flush=True)
"""


def test_survivors_find_the_dead_rank_and_re_form():
    port, plugin = free_port(), str(gloo_plugin())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, plugin], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=child_env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=8, LOCAL_WORLD_SIZE=8, MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=port),
        )
        for r in range(8)
    ]
    outs = {}
    try:
        for r, p in enumerate(procs):
            stdout, stderr = p.communicate(timeout=120)
            if r == 3:
                assert p.returncode == -9, f"rank 3 exited {p.returncode}"
                continue
            assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{stderr}"
            outs[r] = json.loads(stdout.strip().splitlines()[-1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
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
