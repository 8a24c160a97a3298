import pytest

import mcore_init
from mcore_init import Topology
from mcore_init.nodes import node_placement


def test_tp_of_8_on_4_gpu_nodes_warns_with_a_layout_that_fits():
    with Topology(32, tp=8, pp=2) as t:
        p = node_placement(t, 4)
        tp = p.kinds["tensor_model_parallel"]
        assert (tp.groups, tp.local, tp.crossing, tp.first_crossing, tp.max_nodes) == (4, 0, 4, 0, 2)
        assert p.kinds["context_parallel"].first_crossing is None
        assert list(p.kinds) == t.kinds()
        assert [w.kind for w in p.warnings] == ["tensor_model_parallel"]
        assert "--tp 4 --pp 4" in p.warnings[0].message
        assert node_placement(t, 8).warnings == []
        assert node_placement(t, 8).kinds["tensor_model_parallel"].local == 4


def test_strided_order_gets_an_order_that_keeps_tp_local():
    with Topology(8, tp=2, order="dp-tp-cp-ep-pp") as t:
        (w,) = node_placement(t, 4).warnings
    order = w.message.split("--order ")[1].split()[0]
    with Topology(8, tp=2, order=order) as t:
        assert node_placement(t, 4).warnings == []


def test_bad_gpus_per_node_is_named():
    with Topology(8, tp=2) as t:
        with pytest.raises(mcore_init.McoreError, match="gpus_per_node 0"):
            node_placement(t, 0)
        with pytest.raises(mcore_init.McoreError, match="gpus_per_node -1"):
            node_placement(t, -1)
