"""Seeds, the tracker and Philox through the ctypes bindings."""

import json

import pytest

from mcore_init import McoreError
from mcore_init.rng import Tracker, coordinates, philox_fill_u32, philox_fill_uniform, policy_seeds, stream_seeds
from mcore_init.topology import Topology

from conftest import conformance_file

RFC_POLICY = "sharded:pipeline_model_parallel,tensor_model_parallel"


def test_rfc_sharded_table():
    """The PyTorch RFC's table: world 8, dp=pp=tp=2 (order tp-pp-dp), sharded over [pp, tp]."""
    with Topology(8, tp=2, pp=2, order="tp-pp-dp") as t:
        offsets = [stream_seeds(t, r, 1000, RFC_POLICY)["default"] - 1000 for r in range(8)]
        assert offsets == [0, 1, 2, 3, 0, 1, 2, 3]
        swapped = [stream_seeds(t, r, 1000, "sharded:tensor_model_parallel,pipeline_model_parallel")["default"] - 1000
                   for r in range(8)]
        assert swapped == [0, 2, 1, 3, 0, 2, 1, 3]


def test_explicit_positions_match_topology_positions():
    with Topology(8, tp=2, pp=2, order="tp-pp-dp") as t:
        coords = coordinates(t, 6)
        pp, tp = t.group("pipeline_model_parallel", 6), t.group("tensor_model_parallel", 6)
        explicit = policy_seeds(RFC_POLICY, 7, coords, [(pp.rank, pp.size), (tp.rank, tp.size)])
        assert explicit == stream_seeds(t, 6, 7, RFC_POLICY)


def _megatron_cases():
    with open(conformance_file("megatron_rng_seeds.json")) as f:
        return json.load(f)["set_random_seed"]


def test_megatron_policy_matches_megatron_seeds():
    checked = 0
    for case in _megatron_cases():
        cfg = case["config"]
        if cfg.get("gtp", 1) != 1 or cfg.get("rank_offset", 0) != 0:
            continue
        with Topology(cfg["world_size"], tp=cfg["tp"], pp=cfg["pp"], vpp=cfg["vpp"], cp=cfg["cp"], hcp=cfg["hcp"],
                      ep=cfg["ep"], etp=cfg["etp"], dist_opt_instances=cfg["nd"], order=cfg["order"]) as t:
            for rank in case["ranks"]:
                if rank["result"] != "ok":
                    with pytest.raises(McoreError):
                        stream_seeds(t, rank["rank"], case["seed"], "megatron", case["data_parallel_random_init"])
                    t_ = Tracker(t, rank["rank"])
                    with pytest.raises(McoreError) as info:
                        t_.seed(case["seed"], "megatron", case["data_parallel_random_init"])
                    assert info.value.status_name == "MCORE_STATUS_ALREADY_EXISTS"
                    continue
                seeds = stream_seeds(t, rank["rank"], case["seed"], "megatron", case["data_parallel_random_init"])
                assert list(seeds.values()) == rank["cuda_manual_seed_calls"], (cfg["id"], rank["rank"])
                names = list(rank["tracker"]["states"])
                assert list(seeds)[1:] == names
                checked += 1
    assert checked > 50


def test_tracker_fork_rounds_to_four_and_state_round_trip():
    with Topology(8, tp=2, pp=2) as t, Tracker(t, 3) as tr:
        tr.seed(1234)
        model = stream_seeds(t, 3, 1234)["model-parallel-rng"]
        assert tr.get_state("model-parallel-rng") == (model, 0)
        assert tr.fork("model-parallel-rng", 5) == (model, 0)
        assert tr.get_state("model-parallel-rng") == (model, 8)
        assert tr.fork("model-parallel-rng", 4) == (model, 8)
        assert tr.fork("model-parallel-rng", 1) == (model, 12)
        assert tr.get_state("model-parallel-rng") == (model, 16)
        tr.set_state("model-parallel-rng", (99, 40))
        assert tr.fork("model-parallel-rng", 3) == (99, 40)
        with pytest.raises(McoreError) as info:
            tr.add("model-parallel-rng", 5)
        assert info.value.status_name == "MCORE_STATUS_ALREADY_EXISTS"
        with pytest.raises(McoreError) as info:
            tr.get_state("no-such-stream")
        assert "no-such-stream" in info.value.message


def test_save_restore_round_trip_and_wrong_rank():
    with Topology(8, tp=2, pp=2) as t:
        tr = Tracker(t, 5)
        tr.seed(42)
        tr.add("extra", 777)
        tr.cpu_add("data", 9)
        tr.fork("extra", 12)
        first = tr.cpu_fill_u32("data", 3)
        blob = tr.save()
        assert isinstance(blob, bytes) and len(blob) > 16
        after_save = (tr.get_state("extra"), tr.cpu_fill_u32("data", 4), tr.cpu_fill_f64("data", 2))
        tr.fork("extra", 100)
        tr.restore(blob)
        assert (tr.get_state("extra"), tr.cpu_fill_u32("data", 4), tr.cpu_fill_f64("data", 2)) == after_save
        assert tr.get_state("extra") == (777, 12)
        assert first != after_save[1]
        other = Tracker(t, 7)
        with pytest.raises(McoreError) as info:
            other.restore(blob)
        assert info.value.status_name == "MCORE_STATUS_WRONG_RANK" and "5" in info.value.message
        with pytest.raises(McoreError) as info:
            tr.restore(blob[:-3])
        assert info.value.status == 17  # CORRUPT
        tr.close()
        other.close()


def test_philox_fill_is_deterministic_and_offset_consistent():
    a = philox_fill_u32(1234, 0, 0, 8)
    assert a == philox_fill_u32(1234, 0, 0, 8)
    assert philox_fill_u32(1234, 0, 4, 4) == a[4:]
    assert philox_fill_u32(1234, 1, 0, 8) != a
    u = philox_fill_uniform(1234, 0, 0, 8)
    assert all(0.0 < x <= 1.0 for x in u)
    # curand_uniform maps a 32-bit draw x to x·2^-32 + 2^-33
    assert u == pytest.approx([x * 2.0 ** -32 + 2.0 ** -33 for x in a], rel=1e-6)


def test_bad_policy_is_named():
    with Topology(4, tp=2) as t:
        with pytest.raises(McoreError) as info:
            stream_seeds(t, 0, 1, "sharded:tensor_parallel")
        assert "tensor_parallel" in info.value.message
        with pytest.raises(McoreError) as info:
            stream_seeds(t, 0, 0, "megatron")
        assert "0" in info.value.message
