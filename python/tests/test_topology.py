"""The Topology wrapper against Megatron-Core's own answers (tests/data/conformance)."""

import re

import pytest

from mcore_init import McoreError
from mcore_init.topology import Topology, kind_name, kind_value

from conftest import megatron_groups

# Arguments outside the library's scope (README of the vectors): configs that set them are skipped.
_OUT_OF_SCOPE = {
    "gtp": 1, "egtp": 1, "rank_offset": 0, "local_world_size": None, "hybrid_cp": False,
    "pp_comm_backend": None, "use_sharp": False, "create_all_gather_group": False,
}


def _in_scope(entry):
    return entry["outcome"] != "unsupported" and all(entry["config"].get(k, v) == v for k, v in _OUT_OF_SCOPE.items())


def _configs(outcome):
    return [c for c in megatron_groups()["configs"] if c["outcome"] == outcome and _in_scope(c)]


def _topology(cfg):
    return Topology(
        cfg["world_size"], tp=cfg["tp"], pp=cfg["pp"], vpp=cfg["vpp"], cp=cfg["cp"], hcp=cfg["hcp"], ep=cfg["ep"],
        etp=cfg["etp"], dist_opt_instances=cfg["nd"], order=cfg["order"],
    )


def _key(megatron_global):
    """`_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP` → `tensor_and_data_parallel_with_cp`;
    `_HIERARCHICAL_CONTEXT_PARALLEL_GROUPS[1]` → `hierarchical_context_parallel_1`; None for the
    Megatron-only extras (Gloo and all-gather twins, hybrid DP×CP)."""
    m = re.fullmatch(r"_HIERARCHICAL_CONTEXT_PARALLEL_GROUPS\[(\d+)\]", megatron_global)
    if m:
        return f"hierarchical_context_parallel_{m.group(1)}"
    if megatron_global.endswith(("_GLOO", "_AG")) or "HYBRID" in megatron_global:
        return None
    return megatron_global.lstrip("_").replace("_GROUP", "").lower()


def _pick(pred):
    return next(c for c in _configs("ok") if pred(c["config"]))


# A handful of layouts that exercise different parts: Megatron's docstring example, a virtual
# pipeline, hierarchical CP, experts with their own tp, several optimizer instances, another order.
PICKS = {
    "docstring-tp2-pp4": lambda c: c["world_size"] == 16 and c["tp"] == 2 and c["pp"] == 4 and c["vpp"] is None,
    "vpp": lambda c: c["vpp"] is not None and c["pp"] > 1 and c["tp"] > 1,
    "hcp": lambda c: c["hcp"] is not None,
    "experts-etp": lambda c: c["ep"] > 1 and c["etp"] is not None and c["etp"] != c["tp"],
    "dist-opt-instances": lambda c: c["nd"] > 1,
    "alt-order": lambda c: c["order"] != "tp-cp-ep-dp-pp" and c["pp"] > 1 and c["tp"] > 1,
}


@pytest.fixture(params=sorted(PICKS), scope="module")
def picked(request):
    entry = _pick(PICKS[request.param])
    with _topology(entry["config"]) as topo:
        yield entry, topo


def test_every_group_of_every_valid_config_matches_megatron():
    configs = _configs("ok")
    assert len(configs) > 200
    compared = 0
    for entry in configs:
        with _topology(entry["config"]) as topo:
            kinds = set(topo.kinds())
            for glob, value in entry["groups_by_global"].items():
                key = _key(glob)
                if key is None:
                    continue
                assert key in kinds, (entry["config"]["id"], glob)
                assert topo.groups(key) == value["ranks"], (entry["config"]["id"], key)
                compared += 1
    assert compared > 2000


def test_sizes_of_picked_config(picked):
    entry, topo = picked
    cfg, derived = entry["config"], entry["derived"]
    s = topo.sizes
    assert (s.world_size, s.tp, s.pp, s.cp, s.ep) == (cfg["world_size"], cfg["tp"], cfg["pp"], cfg["cp"], cfg["ep"])
    assert s.dp == derived["dp"]
    assert s.expert_dp == derived["expert_dp"]
    assert s.etp == derived["etp_effective"]
    assert (s.vpp or None) == cfg["vpp"]
    assert s.hcp_levels == len(cfg["hcp"] or [])


_RANK_QUERIES = {
    "get_tensor_model_parallel_rank()": lambda t, r: t.group("tensor_model_parallel", r).rank,
    "get_tensor_model_parallel_world_size()": lambda t, r: t.group("tensor_model_parallel", r).size,
    "get_tensor_model_parallel_src_rank()": lambda t, r: t.group_ranks("tensor_model_parallel", r)[0],
    "get_pipeline_model_parallel_rank()": lambda t, r: t.pipeline(r).stage,
    "get_pipeline_model_parallel_world_size()": lambda t, r: t.pipeline(r).num_stages,
    "get_pipeline_model_parallel_first_rank()": lambda t, r: t.pipeline(r).first,
    "get_pipeline_model_parallel_last_rank()": lambda t, r: t.pipeline(r).last,
    "get_pipeline_model_parallel_next_rank()": lambda t, r: t.pipeline(r).next,
    "get_pipeline_model_parallel_prev_rank()": lambda t, r: t.pipeline(r).prev,
    "get_data_parallel_rank()": lambda t, r: t.group("data_parallel", r).rank,
    "get_data_parallel_rank(with_context_parallel=True)": lambda t, r: t.group("data_parallel_with_cp", r).rank,
    "get_data_parallel_world_size(with_context_parallel=True)": lambda t, r: t.group("data_parallel_with_cp", r).size,
    "get_data_parallel_src_rank()": lambda t, r: t.group_ranks("data_parallel", r)[0],
    "get_context_parallel_rank()": lambda t, r: t.group("context_parallel", r).rank,
    "get_context_parallel_global_ranks()": lambda t, r: t.group_ranks("context_parallel", r),
    "get_expert_model_parallel_rank()": lambda t, r: t.group("expert_model_parallel", r).rank,
    "get_expert_tensor_parallel_rank()": lambda t, r: t.group("expert_tensor_parallel", r).rank,
    "get_expert_data_parallel_rank()": lambda t, r: t.group("expert_data_parallel", r).rank,
    "get_expert_data_parallel_world_size()": lambda t, r: t.group("expert_data_parallel", r).size,
    "is_pipeline_first_stage()": lambda t, r: t.is_pipeline_first_stage(r),
    "is_pipeline_last_stage()": lambda t, r: t.is_pipeline_last_stage(r),
    "is_rank_in_embedding_group()": lambda t, r: t.is_rank_in_embedding_group(r),
    "get_virtual_pipeline_model_parallel_world_size()": lambda t, r: t.sizes.vpp or None,
}

_GROUP_QUERIES = {
    "get_tensor_model_parallel_group()": "tensor_model_parallel",
    "get_pipeline_model_parallel_group()": "pipeline_model_parallel",
    "get_data_parallel_group(with_context_parallel=True, partial_data_parallel=True)": "intra_partial_data_parallel_with_cp",
    "get_model_parallel_group()": "model_parallel",
    "get_tensor_and_data_parallel_group(with_context_parallel=True)": "tensor_and_data_parallel_with_cp",
    "get_embedding_group()": "embedding",
    "get_position_embedding_group()": "position_embedding",
    "get_expert_tensor_and_model_parallel_group()": "expert_tensor_and_model_parallel",
    "get_intra_distributed_optimizer_instance_group()": "intra_distributed_optimizer_instance",
}


def test_per_rank_queries_match_megatron(picked):
    entry, topo = picked
    vpp = entry["config"]["vpp"]
    checked = 0
    for rank_entry in entry["ranks"]:
        r, q = rank_entry["rank"], rank_entry["q"]
        for key, ours in _RANK_QUERIES.items():
            assert ours(topo, r) == q[key]["ok"], (entry["config"]["id"], r, key)
            checked += 1
        for key, kind in _GROUP_QUERIES.items():
            want = q[key]["group"]["ranks"] if "group" in q[key] else []
            assert topo.group_ranks(kind, r) == want, (entry["config"]["id"], r, key)
            info = topo.group(kind, r)
            assert (info is None) == (want == []), (r, key)
            if info is not None:
                assert want[info.rank] == r and info.size == len(want)
            checked += 1
        for k in range(vpp or 0):
            for fn in ("is_pipeline_first_stage", "is_pipeline_last_stage"):
                key = f"{fn}(ignore_virtual=False, vp_stage={k})"
                assert getattr(topo, fn)(r, vp_stage=k) == q[key]["ok"], (r, key)
                checked += 1
    assert checked >= entry["config"]["world_size"] * (len(_RANK_QUERIES) + len(_GROUP_QUERIES))


def test_every_config_megatron_rejects_is_rejected():
    rejected = _configs("error")
    assert len(rejected) > 20
    for entry in rejected:
        with pytest.raises(McoreError) as info:
            _topology(entry["config"]).close()
        assert info.value.status_name and info.value.message, entry["config"]["id"]


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(world_size=8, tp=3), "3"),
        (dict(world_size=8, tp=-2), "-2"),
        (dict(world_size=8, order="tp-xy-dp"), "xy"),
        (dict(world_size=8, cp=4, hcp=[2, 3]), "[2, 3]"),
        (dict(world_size=8, tp=2**32 + 2), str(2**32 + 2)),
        (dict(world_size=-8), "-8"),
    ],
)
def test_invalid_config_raises_naming_the_value(kwargs, named):
    with pytest.raises(McoreError) as info:
        Topology(**kwargs)
    assert info.value.status == 2 or info.value.status == 1, info.value
    assert named in info.value.message, info.value.message


def test_unknown_kind_is_not_found():
    with Topology(8, tp=2) as topo:
        with pytest.raises(McoreError) as info:
            topo.group("tensor_parallel", 0)
        assert info.value.status_name == "MCORE_STATUS_NOT_FOUND"
        assert "tensor_parallel" in info.value.message
    with pytest.raises(McoreError):
        kind_value("hierarchical_context_parallel_x")


def test_kind_names_round_trip_and_hierarchical_levels():
    with Topology(8, cp=4, hcp=[2, 2]) as topo:
        kinds = topo.kinds()
        assert "hierarchical_context_parallel_1" in kinds and "hierarchical_context_parallel_2" not in kinds
        for k in kinds:
            assert kind_name(kind_value(k)) == k
        assert kind_value("hierarchical_context_parallel_1") == kind_value("hierarchical_context_parallel_0") + 1
        assert topo.group_ranks("hierarchical_context_parallel_0", 0) == [0, 1]


def test_non_member_and_out_of_range_rank():
    with Topology(4, pp=4) as topo:
        assert topo.group("embedding", 1) is None
        assert topo.group_ranks("embedding", 1) == []
        with pytest.raises(McoreError) as info:
            topo.group("tensor_model_parallel", 4)
        assert "4" in info.value.message
        with pytest.raises(McoreError) as info:
            topo.group_ranks("tensor_model_parallel", -1)
        assert "-1" in info.value.message
    with Topology(4, pp=2, vpp=2) as topo:
        assert topo.is_pipeline_last_stage(2, vp_stage=1) and not topo.is_pipeline_last_stage(2, vp_stage=0)
        with pytest.raises(McoreError) as info:
            topo.is_pipeline_first_stage(0, vp_stage=2)  # virtual stages are 0 and 1
        assert info.value.status == 3 and "2" in info.value.message


def test_closed_topology_refuses_queries():
    topo = Topology(4, tp=2)
    topo.close()
    topo.close()
    with pytest.raises(ValueError):
        topo.sizes
