"""Recovery planning through the C library (``plan_recovery``), checked against the layouts."""

import pytest

from mcore_init import McoreError, Topology, plan_recovery


def test_rank_5_of_16_takes_its_replica_with_it():
    with Topology(16, tp=2, pp=2) as t:
        p = plan_recovery(t, [5])
        assert p.topology.world_size == 12
        assert p.topology.sizes.dp == 3
        assert p.dropped == [4, 5, 12, 13]
        assert p.leaving == [4, 12, 13]
        assert p.rank_map == {0: 0, 1: 1, 2: 2, 3: 3, 6: 4, 7: 5, 8: 6, 9: 7, 10: 8, 11: 9, 14: 10, 15: 11}
        assert "data_parallel" in p.changed_kinds
        assert "tensor_model_parallel" not in p.changed_kinds
        # Kept coordinates: the tensor and pipeline group ranks of every survivor.
        for old, new in p.rank_map.items():
            for kind in ("tensor_model_parallel", "pipeline_model_parallel"):
                assert t.group(kind, old).rank == p.topology.group(kind, new).rank
        p.topology.close()


def test_a_spare_takes_the_place_of_the_failed_rank():
    with Topology(16, tp=2, pp=2) as t:
        p = plan_recovery(t, [5], spares=[16])
        assert p.topology.world_size == 16
        assert p.rank_map[16] == 5 and 5 not in p.rank_map
        assert p.dropped == []


def test_every_replica_hit_is_refused():
    with Topology(16, tp=2, pp=2) as t:
        with pytest.raises(McoreError) as e:
            plan_recovery(t, [0, 2, 4, 6])
        assert "no valid layout remains" in str(e.value) and "[0, 2, 4, 6]" in str(e.value)
        with pytest.raises(McoreError, match="failed rank 16"):
            plan_recovery(t, [16])
        with pytest.raises(McoreError, match=r"failed\[0\] -1"):
            plan_recovery(t, [-1])
