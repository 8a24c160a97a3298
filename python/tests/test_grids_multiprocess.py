"""Several named grids in one job, 16 real processes on Gloo (issue #26): each grid's handle
answers Megatron-Core 0.19.2's getters as its conformance vectors say for that grid's layout,
its groups equal Megatron's, its ProcessGroupCollection view matches its group queries, and a
rank outside a grid gets None/NOT_MEMBER.

Side by side: "train" tp2 pp2 on ranks 0-7 (vector config v192x0022: local_world_size=8) and
"rollout" tp2 pp2 on ranks 8-15 (cfg0347: rank_offset=8, local_world_size=8). Colocated: "train"
tp2 pp2 (cfg0130) and "rollout" tp4 (cfg0132), both over all 16 ranks.
"""

import json
import sys

import pytest

from conftest import REPO, child_env, free_port, gloo_plugin, megatron_groups
from test_multiprocess import _run_ranks

WORLD = 16

WORKER = r"""
import ast, json, sys
import mcore_init
from mcore_init import McoreError, runtime

spec = json.load(open(sys.argv[2]))
assert mcore_init.initialize(grids=spec["grids"], backend=sys.argv[1], timeout=120, seed=spec["seed"]) is False
rank = runtime.world()[0]


def call(g, key):
    name, _, rest = key.partition("(")
    kwargs = {}
    for part in filter(None, rest[:-1].split(", ")):
        k, v = part.split("=")
        kwargs[k] = ast.literal_eval(v)
    try:
        return {"ok": getattr(g, name)(**kwargs)}
    except McoreError as exc:
        return {"error": exc.status_name, "message": exc.message}


out = {"rank": rank, "grids": mcore_init.grids(), "default": mcore_init.grid().name, "per_grid": {}}
for name in mcore_init.grids():
    g = mcore_init.grid(name)
    groups = {}
    for kind in spec["kinds"]:
        try:
            groups[kind] = g.group_ranks(kind)
        except McoreError as exc:
            groups[kind] = {"error": exc.status_name, "message": exc.message}
    pg = {f: ([x._asdict() for x in v] if f == "hcp" else (v._asdict() if v else None))
          for f, v in g.pg_collection().fields().items()}
    # each field's handle is the communicator of its kind's group (the twins have their own)
    comms = {v.field: [v.comm, g.communicator(v.kind)] for v in g.pg_collection().fields().values()
             if v and not isinstance(v, list) and not v.all_gather}
    sums = {}
    if g.is_member():
        for kind in ("tensor_model_parallel", "pipeline_model_parallel", "data_parallel"):
            sums[kind] = g.allreduce_sum(kind, [rank, 1])
    try:
        tracker = g.rng_tracker()
        rng = {s: list(tracker.get_state(s)) for s in ("default", "model-parallel-rng")}
        tracker.close()
    except McoreError as exc:
        rng = exc.status_name
    out["per_grid"][name] = {"q": {key: call(g, key) for key in spec["queries"]}, "groups": groups, "pg": pg,
                             "member": g.is_member(), "sums": sums, "rng": rng, "comms": comms}
try:
    mcore_init.grid("nonexistent")
except McoreError as exc:
    out["unknown_grid"] = exc.message
mcore_init.destroy()
print(json.dumps(out), flush=True)
"""

#: ProcessGroupCollection fields and the Megatron-Core group (vector kind) that fills each.
PG_KINDS = {
    "tp": "TENSOR_MODEL_PARALLEL_GROUP", "pp": "PIPELINE_MODEL_PARALLEL_GROUP", "mp": "MODEL_PARALLEL_GROUP",
    "embd": "EMBEDDING_GROUP", "pos_embd": "POSITION_EMBEDDING_GROUP", "cp": "CONTEXT_PARALLEL_GROUP",
    "tp_cp": "TENSOR_AND_CONTEXT_PARALLEL_GROUP", "ep": "EXPERT_MODEL_PARALLEL_GROUP",
    "expt_tp": "EXPERT_TENSOR_PARALLEL_GROUP", "tp_ep": "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP",
    "tp_ep_pp": "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP",
    "tp_ep_pp_with_egtp_remat": "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP",
    "tp_dp_cp": "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP", "dp": "DATA_PARALLEL_GROUP",
    "dp_cp": "DATA_PARALLEL_GROUP_WITH_CP", "gtp_remat": "GTP_WEIGHT_REMAT_GROUP",
    "expt_gtp_remat": "EXPERT_GTP_WEIGHT_REMAT_GROUP", "expt_dp": "EXPERT_DATA_PARALLEL_GROUP",
    "intra_dist_opt": "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP",
}


def _config(cid):
    (cfg,) = [c for c in megatron_groups("v0.19.2")["configs"] if c["config"]["id"] == cid]
    assert cfg["outcome"] == "ok", cid
    return cfg


def _kind_key(megatron_kind):
    """The library's group-kind key of a Megatron-Core group name (TENSOR_MODEL_PARALLEL_GROUP ->
    tensor_model_parallel, DATA_PARALLEL_GROUP_WITH_CP -> data_parallel_with_cp)."""
    return megatron_kind.lower().replace("_group", "")


def _own(groups, rank):
    """The group of ``groups`` holding ``rank`` (sorted), or None."""
    mine = [sorted(g) for g in groups if rank in g]
    assert len(mine) <= 1, (rank, mine)
    return mine[0] if mine else None


def _run(grids, seed, configs, tmp_path):
    from mcore_init import named_grids

    vectors = {name: _config(cid) for name, cid in configs.items()}
    # every getter of the grid handle that the vectors answer (Megatron's call strings)
    queries = sorted({k for v in vectors.values() for r in v["ranks"] for k in r["q"]
                      if k.partition("(")[0] in named_grids.GETTERS})
    kinds = sorted({k for v in vectors.values() for k in v["groups_by_kind"] if not k.endswith("_GLOO")})
    assert len(queries) >= 40 and len(kinds) >= 20, (queries, kinds)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"grids": grids, "seed": seed, "queries": queries,
                                "kinds": [_kind_key(k) for k in kinds]}))
    plugin = str(gloo_plugin())
    outs = _run_ranks(lambda r: [sys.executable, "-c", WORKER, plugin, str(spec)], WORLD, timeout=300)
    return vectors, queries, kinds, outs


def _check(vectors, queries, kinds, outs, windows):
    checked = 0
    for r, o in enumerate(outs):
        assert o["rank"] == r and o["grids"] == list(vectors) and o["default"] == list(vectors)[0]
        assert "no grid named 'nonexistent'" in o["unknown_grid"], o["unknown_grid"]
        for name, cfg in vectors.items():
            lo, hi = windows[name]
            inside = lo <= r < hi
            got = o["per_grid"][name]
            assert got["member"] is inside, (r, name)
            answers = cfg["ranks"][r]["q"]
            # the getters, as Megatron-Core 0.19.2 answers for this grid's layout
            for key in queries:
                want, have = answers[key], got["q"][key]
                if "ok" in want:
                    assert have == {"ok": want["ok"]}, (r, name, key, have, want)
                elif "group" in want:  # Megatron's group getters (the gtp remat ones): rank lists here
                    assert have == {"ok": want["group"]["ranks"]}, (r, name, key, have, want)
                else:
                    assert "error" in have, (r, name, key, have, want)
                    if "Partial DP" in want["error"]["msg"]:  # Megatron checks the arguments first
                        assert have["error"] == "MCORE_STATUS_INVALID_ARGUMENT", (r, name, key, have)
                    elif not inside:
                        assert have["error"] == "MCORE_STATUS_NOT_MEMBER", (r, name, key, have)
                        assert f"grid '{name}'" in have["message"], (r, name, key, have)
                checked += 1
            # the groups, as Megatron's for this grid
            for kind in kinds:
                want = _own(cfg["groups_by_kind"][kind], r)
                have = got["groups"][_kind_key(kind)]
                if want is None:
                    assert have["error"] == "MCORE_STATUS_NOT_MEMBER", (r, name, kind, have)
                else:
                    assert have == want, (r, name, kind, have, want)
            # the ProcessGroupCollection view: Megatron's field names over the same groups
            pg = got["pg"]
            for field, kind in PG_KINDS.items():
                want = _own(cfg["groups_by_kind"][kind], r)
                if want is None:
                    assert pg[field] is None, (r, name, field, pg[field])
                    continue
                g = pg[field]
                assert g is not None, (r, name, field)
                assert g["ranks"] == want == got["groups"][g["kind"]], (r, name, field, g, want)
                assert (g["rank"], g["size"], g["all_gather"]) == (want.index(r), len(want), False), (r, name, g)
            assert pg["hcp"] == [] and pg["dp_cp_ag"] is None and pg["expt_dp_ag"] is None
            assert all(a == b for a, b in got["comms"].values()), (r, name, got["comms"])
            if inside:
                assert got["comms"]["tp"][0] != 0, (r, name)
                tp = got["groups"]["tensor_model_parallel"]
                assert got["sums"]["tensor_model_parallel"] == [sum(tp), len(tp)], (r, name, got["sums"])
                dp = got["groups"]["data_parallel"]
                assert got["sums"]["data_parallel"] == [sum(dp), len(dp)], (r, name, got["sums"])
            else:
                assert all(v is None for f, v in pg.items() if f != "hcp"), (r, name, pg)
                assert got["sums"] == {}
    assert checked >= WORLD * len(vectors) * 40
    return outs


def _seeds(topology_kwargs, rank, seed):
    from mcore_init import Topology
    from mcore_init.rng import stream_seeds

    with Topology(WORLD, **topology_kwargs) as t:
        s = stream_seeds(t, rank, seed)
    return {"default": [s["default"], 0], "model-parallel-rng": [s["model-parallel-rng"], 0]}


def test_side_by_side_grids_answer_as_megatron_for_their_windows(tmp_path):
    grids = {"train": dict(tp=2, pp=2, local_world_size=8),
             "rollout": dict(tp=2, pp=2, rank_offset=8, local_world_size=8)}
    vectors, queries, kinds, outs = _run(grids, 1234, {"train": "v192x0022", "rollout": "cfg0347"}, tmp_path)
    _check(vectors, queries, kinds, outs, {"train": (0, 8), "rollout": (8, 16)})
    for r, o in enumerate(outs):
        # the top-level seed seeds the first grid on its ranks; "rollout" asked for none
        train = o["per_grid"]["train"]["rng"]
        if r < 8:
            assert train == _seeds(dict(tp=2, pp=2, local_world_size=8), r, 1234), (r, train)
        else:
            assert train == "MCORE_STATUS_NOT_INITIALIZED", (r, train)
        assert o["per_grid"]["rollout"]["rng"] == "MCORE_STATUS_NOT_INITIALIZED"


def test_colocated_grids_answer_as_megatron_with_their_own_seeds(tmp_path):
    grids = {"train": dict(tp=2, pp=2), "rollout": dict(tp=4, seed=7)}
    vectors, queries, kinds, outs = _run(grids, 1234, {"train": "cfg0130", "rollout": "cfg0132"}, tmp_path)
    _check(vectors, queries, kinds, outs, {"train": (0, 16), "rollout": (0, 16)})
    for r, o in enumerate(outs):
        rollout = o["per_grid"]["rollout"]
        assert rollout["q"]["get_tensor_model_parallel_rank()"] == {"ok": r % 4}
        assert rollout["q"]["get_data_parallel_world_size()"] == {"ok": 4}
        assert o["per_grid"]["train"]["rng"] == _seeds(dict(tp=2, pp=2), r, 1234), r
        assert rollout["rng"] == _seeds(dict(tp=4), r, 7), r
        # the same members ([r]) share one communicator across the grids; different members do not
        train = o["per_grid"]["train"]
        assert train["comms"]["cp"][0] == rollout["comms"]["cp"][0] != 0, r
        assert train["comms"]["tp"][0] != rollout["comms"]["tp"][0], r


SINGLE = r"""
import json, sys
import mcore_init
from mcore_init import McoreError, named_grids, parallel_state as ps
ps.initialize_model_parallel(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                             virtual_pipeline_model_parallel_size=2, expert_model_parallel_size=2,
                             expert_tensor_parallel_size=1, backend=sys.argv[1], timeout=60, seed=1234,
                             create_all_gather_groups=True)
g = mcore_init.grid()
pg = g.pg_collection()
both = [n for n in named_grids.GETTERS if hasattr(ps, n)]
out = {"grids": mcore_init.grids(), "name": g.name, "both": both,
       "grid": {n: getattr(g, n)() for n in both if not n.startswith("is_")},
       "ps": {n: getattr(ps, n)() for n in both if not n.startswith("is_")},
       "stages": [[f(ignore_virtual=False, vp_stage=k) for f in (g.is_pipeline_first_stage, g.is_pipeline_last_stage,
                                                                  g.is_rank_in_embedding_group)] for k in range(2)],
       "ps_stages": [[f(ignore_virtual=False, vp_stage=k) for f in (ps.is_pipeline_first_stage, ps.is_pipeline_last_stage,
                                                                     ps.is_rank_in_embedding_group)] for k in range(2)],
       "dp_cp": [g.get_data_parallel_rank(with_context_parallel=True), ps.get_data_parallel_rank(with_context_parallel=True)],
       "same_comm": g.communicator("data_parallel") == mcore_init.runtime.communicator("data_parallel"),
       "twins": [[t.all_gather, t.ranks == base.ranks, t.comm != base.comm, t.comm == mcore_init.runtime.all_gather_communicator(k)]
                 for t, base, k in ((pg.dp_cp_ag, pg.dp_cp, "data_parallel_with_cp"),
                                    (pg.expt_dp_ag, pg.expt_dp, "expert_data_parallel"))],
       "tracker": list(g.rng_tracker().get_state("default")) == list(mcore_init.runtime.rng_tracker().get_state("default"))}
try:
    g.is_pipeline_first_stage(ignore_virtual=False)
except McoreError as exc:
    out["vp_required"] = exc.message
ps.destroy_model_parallel()
print(json.dumps(out), flush=True)
"""


def test_a_job_without_grids_has_one_grid_named_default_answering_as_parallel_state():
    plugin = str(gloo_plugin())
    outs = _run_ranks(lambda r: [sys.executable, "-c", SINGLE, plugin], 4)
    for r, o in enumerate(outs):
        assert o["grids"] == ["default"] and o["name"] == "default"
        assert len(o["both"]) >= 25, o["both"]
        assert o["grid"] == o["ps"], r
        assert o["stages"] == o["ps_stages"], r
        assert o["dp_cp"][0] == o["dp_cp"][1] and o["same_comm"] and o["tracker"], (r, o)
        assert "vp_stage must be passed" in o["vp_required"]
        assert o["twins"] == [[True, True, True, True]] * 2, (r, o["twins"])  # all-gather twins: own communicators
