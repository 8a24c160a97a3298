"""Suspend and resume over real processes on loopback (the Gloo plugin: recreate mode), and the
argument checks of ``mcore_init.suspend``/``resume``."""

import json
import sys

import pytest

import mcore_init
from conftest import child_env, free_port, gloo_plugin
from test_multiprocess import _run_ranks

WORKER = r"""
import json, os, sys
import mcore_init
from mcore_init import runtime
runtime.initialize(tp=2, pp=2, backend=sys.argv[1], timeout=60)
rank = int(os.environ["RANK"])
out = {"rank": rank}
out["memory_before"] = mcore_init.comm_memory("tensor_model_parallel")
generation = mcore_init.comm_generation()
pp_comm = runtime.communicator("pipeline_model_parallel")
out["suspended"] = mcore_init.suspend(kinds=["tensor_model_parallel", "data_parallel"])
# Recreate mode released tp and dp: cached handles are stale, the generation says so; pp's stays.
out["generation_moved"] = mcore_init.comm_generation() != generation
out["pp_comm_kept"] = runtime.communicator("pipeline_model_parallel") == pp_comm
out["memory_while"] = mcore_init.comm_memory("tensor_model_parallel")
try:
    runtime.allreduce_sum("tensor_model_parallel", [rank])
except mcore_init.McoreError as exc:
    out["while_suspended"] = [exc.status, str(exc)]
out["pp_still_works"] = runtime.allreduce_sum("pipeline_model_parallel", [rank])
try:
    mcore_init.suspend(kinds=["no_such_kind"])
except mcore_init.McoreError as exc:
    out["bad_kind"] = str(exc)
try:
    mcore_init.suspend(grid="nosuch")
except mcore_init.McoreError as exc:
    out["bad_grid"] = str(exc)
out["resumed"] = mcore_init.resume(timeout=30)
out["tp_sum"] = runtime.allreduce_sum("tensor_model_parallel", [rank, 1])
out["dp_sum"] = runtime.allreduce_sum("data_parallel", [rank, 1])
out["all_suspended"] = mcore_init.suspend()
out["all_resumed"] = mcore_init.resume()
out["tp_sum_again"] = runtime.allreduce_sum("tensor_model_parallel", [rank, 1])
runtime.destroy()
print(json.dumps(out), flush=True)
"""


def test_four_processes_suspend_two_kinds_then_all_and_resume():
    plugin = str(gloo_plugin())
    outs = _run_ranks(lambda r: [sys.executable, "-c", WORKER, plugin], 4)
    for r, o in enumerate(outs):
        base = r - r % 2
        assert o["memory_before"]["known"] is False and o["memory_before"]["suspended"] is False, o
        # tp2 pp2 at 4 ranks: dp = 1, its singleton groups have their own communicators.
        assert o["suspended"] == 2, o
        assert o["generation_moved"] is True and o["pp_comm_kept"] is True, o
        assert o["memory_while"]["suspended"] is True, o
        status, message = o["while_suspended"]
        assert status == 22, o  # MCORE_STATUS_SUSPENDED
        assert "tensor_model_parallel" in message and "suspended" in message, message
        assert o["pp_still_works"] == [r % 2 + r % 2 + 2], o
        assert "'no_such_kind' is not a kind of this layout" in o["bad_kind"], o
        assert "no grid named 'nosuch' (this job's grids: default)" in o["bad_grid"], o
        assert o["resumed"] == 2, o
        assert o["tp_sum"] == [2 * base + 1, 2], o
        assert o["dp_sum"] == [r, 1], o
        assert o["all_suspended"] >= 3 and o["all_resumed"] == o["all_suspended"], o
        assert o["tp_sum_again"] == [2 * base + 1, 2], o


def test_suspend_arguments_are_checked_before_the_library():
    with pytest.raises(TypeError, match="kinds"):
        mcore_init.suspend(kinds="tensor_model_parallel")
    with pytest.raises(ValueError, match="kinds"):
        mcore_init.suspend(kinds=[])
    with pytest.raises(ValueError, match=r"kinds\[0\]"):
        mcore_init.resume(kinds=["a\0b"])
    with pytest.raises(ValueError, match="timeout"):
        mcore_init.resume(timeout=0)


def test_suspend_without_init_is_not_initialized():
    with pytest.raises(mcore_init.McoreError) as e:
        mcore_init.suspend()
    assert e.value.status_name == "MCORE_STATUS_NOT_INITIALIZED"
