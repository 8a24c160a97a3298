"""MindSpeed's groups at init through the Python package: four Gloo ranks with hybrid CP
(cp 4, Ulysses degree 2, window 1, send/recv overlap), each group read by MindSpeed's kind name
and a communicator of its own; bad ``mindspeed=`` input is refused before the library sees it."""

import json
import sys

import pytest

import mcore_init
from mcore_init import McoreError, Status, runtime

from conftest import gloo_plugin
from test_multiprocess import _run_ranks

HYBRID = r"""
import json, sys
from mcore_init import Status, runtime
runtime.initialize(cp=4, backend=sys.argv[1], timeout=30,
                   mindspeed={"context_parallel_algo": "hybrid_cp_algo", "ulysses_degree_in_cp": 2,
                              "use_cp_send_recv_overlap": True, "use_flash_attn": False})
kinds = ["cp2", "cp_ulysses", "cp_ring", "cp_ring_intra", "cp_ring_intra_overlap"]
comms = [runtime.mindspeed_communicator(k) for k in kinds] + [runtime.communicator("context_parallel")]
out = {k: runtime.mindspeed_group_ranks(k) for k in kinds}
out["distinct_comms"] = len(set(comms))
try:
    runtime.mindspeed_group_ranks("nd1_dim1")
except Exception as e:
    out["absent"] = e.status == Status.NOT_MEMBER
runtime.destroy()
print(json.dumps(out))
"""


def test_hybrid_cp_groups_by_mindspeed_kind_name():
    outs = _run_ranks(lambda r: [sys.executable, "-c", HYBRID, str(gloo_plugin())], 4)
    for r, o in enumerate(outs):
        assert o["cp2"] == [0, 1, 2, 3], (r, o)
        assert o["cp_ulysses"] == ([0, 1] if r < 2 else [2, 3]), (r, o)
        assert o["cp_ring"] == [r % 2, r % 2 + 2], (r, o)
        assert o["cp_ring_intra"] == o["cp_ring_intra_overlap"] == [r], (r, o)
        assert o["distinct_comms"] == 6, "each MindSpeed group has its own communicator"
        assert o["absent"] is True


def test_bad_mindspeed_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match="mindspeed"):
        mcore_init.initialize(mindspeed=["tp_2d"])
    with pytest.raises(TypeError, match="mindspeed"):
        mcore_init.initialize(mindspeed={"tp_x": 2.5})
    assert runtime.mindspeed_text(None, {"tp_2d": True, "tp_x": 2, "use_flash_attn": False}) == \
        "tp_2d,tp_x=2,use_flash_attn=false"
    assert runtime.mindspeed_text(None, {}) == "default"


def test_unknown_mindspeed_option_is_invalid_argument():
    with pytest.raises(McoreError) as e:
        mcore_init.initialize(mindspeed="nonsense=1", backend=str(gloo_plugin()), timeout=5)
    assert e.value.status == Status.INVALID_ARGUMENT
    assert "'nonsense'" in str(e.value)
