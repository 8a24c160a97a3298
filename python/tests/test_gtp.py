"""Megatron-Core 0.19's options through Python: the Topology wrapper against every 0.19.2 config
with gtp, egtp or a local world (tests/data/conformance/v0.19.2), and parallel_state's getters on
four real processes against Megatron's own per-rank answers for config v192x0000 (world 4, gtp 2)."""

import json
import sys

import pytest

from mcore_init import McoreError
from mcore_init.topology import Topology

from conftest import gloo_plugin, megatron_groups
from test_multiprocess import _run_ranks

NEW_KINDS = {
    "_GTP_WEIGHT_REMAT_GROUP": "gtp_weight_remat",
    "_DATA_PARALLEL_GROUP_WITH_GTP_REMAT": "data_parallel_with_gtp_remat",
    "_DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT": "data_parallel_with_cp_with_gtp_remat",
    "_EXPERT_GTP_WEIGHT_REMAT_GROUP": "expert_gtp_weight_remat",
    "_EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP": "expert_tensor_model_pipeline_parallel_with_egtp",
    "_EXPERT_DATA_PARALLEL_GROUP_WITH_GTP_REMAT": "expert_data_parallel_with_gtp_remat",
    "_TENSOR_MODEL_PARALLEL_GROUP": "tensor_model_parallel",
    "_MODEL_PARALLEL_GROUP": "model_parallel",
    "_TENSOR_AND_DATA_PARALLEL_GROUP": "tensor_and_data_parallel",
}


def _entries():
    cfgs = megatron_groups("v0.19.2")["configs"]
    return [c for c in cfgs if c["config"]["id"].startswith("v192x")
            and not c["config"]["use_sharp"] and not c["config"]["hybrid_cp"]]


def _topology(c):
    lws = c["local_world_size"] or c["world_size"]
    return Topology(c["world_size"], tp=c["tp"], pp=c["pp"], vpp=c["vpp"], cp=c["cp"], hcp=c["hcp"], ep=c["ep"],
                    etp=c["etp"], dist_opt_instances=c["nd"], order=c["order"], rank_offset=c["rank_offset"],
                    gtp=c["gtp"], egtp=c["egtp"], local_world_size=lws)


def _deviation(c):
    """docs/conformance.md: orders without tp are accepted; upper-case orders with gtp put gtp after tp."""
    order = c["order"]
    return "tp" not in order.lower().split("-") or (order != order.lower() and max(c["gtp"], c["egtp"]) > 1)


def test_every_0_19_2_config_with_its_new_options_matches():
    compared = 0
    for entry in _entries():
        c = entry["config"]
        if _deviation(c):
            continue
        if entry["outcome"] == "error":
            with pytest.raises(McoreError):
                _topology(c)
            continue
        with _topology(c) as t:
            for glob, key in NEW_KINDS.items():
                assert t.groups(key) == entry["groups_by_global"][glob]["ranks"], (c["id"], key)
                compared += 1
            sizes = t.gtp_sizes
            assert (sizes.gtp, sizes.egtp, sizes.total_world_size) == (c["gtp"], c["egtp"], c["world_size"])
            for r in entry["ranks"]:
                rank, q = r["rank"], r["q"]
                inside = t.in_grid(rank)
                assert inside == ("group" in q["get_tensor_model_parallel_group()"]), (c["id"], rank)
                want = q["get_gtp_weight_remat_global_ranks()"]
                assert t.group_ranks("gtp_weight_remat", rank) == want.get("ok", []), (c["id"], rank)
                if not inside:
                    assert t.group("tensor_model_parallel", rank) is None
                    with pytest.raises(McoreError, match="belongs to no group"):
                        t.pipeline(rank)
    assert compared >= 150


GETTERS = r"""
import json, sys
from mcore_init import parallel_state as ps
ps.initialize_model_parallel(gtp_remat_size=2, backend=sys.argv[1], timeout=30)
calls = {
    "get_gtp_weight_remat_group()": ps.get_gtp_weight_remat_group,
    "get_gtp_weight_remat_world_size()": ps.get_gtp_weight_remat_world_size,
    "get_gtp_weight_remat_rank()": ps.get_gtp_weight_remat_rank,
    "get_gtp_weight_remat_global_ranks()": ps.get_gtp_weight_remat_global_ranks,
    "get_expert_gtp_weight_remat_group()": ps.get_expert_gtp_weight_remat_group,
    "get_expert_gtp_weight_remat_world_size()": ps.get_expert_gtp_weight_remat_world_size,
    "get_expert_gtp_weight_remat_rank()": ps.get_expert_gtp_weight_remat_rank,
    "get_data_parallel_group()": ps.get_data_parallel_group_ranks,
    "get_data_parallel_group(with_context_parallel=True)": lambda: ps.get_data_parallel_group_ranks(True),
    "get_data_parallel_group(with_gtp_remat=False)": lambda: ps.get_data_parallel_group_ranks(with_gtp_remat=False),
    "get_data_parallel_world_size()": ps.get_data_parallel_world_size,
    "get_data_parallel_rank()": ps.get_data_parallel_rank,
    "get_data_parallel_rank(with_gtp_remat=False)": lambda: ps.get_data_parallel_rank(with_gtp_remat=False),
    "get_data_parallel_world_size(with_gtp_remat=False)": lambda: ps.get_data_parallel_world_size(with_gtp_remat=False),
    "get_data_parallel_src_rank()": ps.get_data_parallel_src_rank,
    "get_expert_data_parallel_rank()": ps.get_expert_data_parallel_rank,
    "get_expert_data_parallel_world_size()": ps.get_expert_data_parallel_world_size,
    "get_expert_tensor_model_pipeline_parallel_group(with_egtp_remat=True)":
        lambda: ps.get_expert_tensor_model_pipeline_parallel_group_ranks(with_egtp_remat=True),
    "get_model_parallel_group()": ps.get_model_parallel_group_ranks,
}
out = {k: f() for k, f in calls.items()}
# Left in order: a rank that exits with its runtime up is a death to the ranks still verifying.
ps.destroy_model_parallel()
print(json.dumps(out))
"""


def test_parallel_state_gtp_getters_answer_as_megatron_0_19_2():
    entry = next(c for c in megatron_groups("v0.19.2")["configs"] if c["config"]["id"] == "v192x0000")
    assert (entry["config"]["world_size"], entry["config"]["gtp"]) == (4, 2)
    outs = _run_ranks(lambda r: [sys.executable, "-c", GETTERS, str(gloo_plugin())], 4)
    compared = 0
    for r, o in enumerate(outs):
        q = entry["ranks"][r]["q"]
        for key, ours in o.items():
            want = q[key]
            want = want["group"]["ranks"] if "group" in want else want["ok"]
            assert ours == want, (r, key, ours, want)
            compared += 1
    assert compared == 4 * 19


ALL_GATHER = r"""
import json, sys
from mcore_init import parallel_state as ps, runtime
ps.initialize_model_parallel(context_parallel_size=2, expert_model_parallel_size=2, backend=sys.argv[1],
                             timeout=30, create_all_gather_groups=True)
out = {
    "dp_cp": ps.get_data_parallel_group_ranks(with_context_parallel=True),
    "dp_cp_ag": ps.get_all_gather_group_ranks(),
    "edp": ps.get_expert_data_parallel_group_ranks(),
    "edp_ag": ps.get_all_gather_group_ranks(for_expert_parallelism=True),
    "separate": runtime.all_gather_communicator("data_parallel_with_cp") != runtime.communicator("data_parallel_with_cp"),
}
ps.destroy_model_parallel()
ps.initialize_model_parallel(context_parallel_size=2, backend=sys.argv[1], timeout=30)
out["without_opt_in"] = ps.get_all_gather_group_ranks()
print(json.dumps(out))
"""


def test_all_gather_twins_are_separate_verified_communicators():
    outs = _run_ranks(lambda r: [sys.executable, "-c", ALL_GATHER, str(gloo_plugin())], 4)
    for r, o in enumerate(outs):
        assert o["dp_cp_ag"] == o["dp_cp"] == [0, 1, 2, 3], (r, o)
        assert o["edp_ag"] == o["edp"] and len(o["edp"]) == 2, (r, o)
        assert o["separate"] is True
        assert o["without_opt_in"] == []
