"""``initialize(grids=...)`` mapped onto ``mcore_init_args`` (grids: ``mcore_grid_spec``
pointers, topology NULL so that grids[0] is the first grid), and its errors, each naming the
grid and the key, all raised before the library is called."""

import ctypes

import pytest

import mcore_init
from mcore_init import McoreError, runtime


@pytest.fixture()
def captured(monkeypatch):
    """A test double for ``mcore_initialize``: records what the call received (read while the
    call runs, as the library does) and returns OK without bringing anything up."""
    seen = {}

    def fake(args_p, already_p):
        args = args_p._obj  # the InitArgs that ctypes.byref() wraps
        seen["topology_null"] = not bool(args.topology)
        seen["grid_name"] = args.grid_name
        seen["seed"] = (args.seed_rng, args.seed)
        seen["seed_policy"] = args.seed_policy
        seen["grids_disjoint_or_identical"] = args.grids_disjoint_or_identical
        grids = []
        for i in range(args.grids_len):
            spec = args.grids[i].contents
            topo = spec.topology.contents
            grids.append({
                "struct_size": spec.struct_size, "name": spec.name.decode(), "seed": (spec.seed_rng, spec.seed),
                "tp": topo.tp, "pp": topo.pp, "cp": topo.cp, "vpp": topo.vpp, "order": topo.order.decode(),
                "rank_offset": topo.rank_offset, "local_world_size": topo.local_world_size,
                "hcp": [topo.hcp[j] for j in range(topo.hcp_len)],
            })
        seen["grids"] = grids
        return 0

    monkeypatch.setattr(runtime, "_initialize_c", fake)
    return seen


def test_grids_map_onto_grid_specs_in_order_with_the_first_as_default(captured):
    assert mcore_init.initialize(grids={
        "train": dict(tp=2, pp=2, order="tp-cp-ep-dp-pp"),
        "rollout": dict(tp=4, rank_offset=8, local_world_size=8, seed=7),
        "critic": dict(cp=4, hcp=[2, 2], vpp=2),
    }, seed=1234) is False
    assert captured["topology_null"] and captured["grid_name"] is None
    assert captured["seed"] == (True, 1234) and captured["seed_policy"] == b"megatron"
    train, rollout, critic = captured["grids"]
    assert train["struct_size"] == ctypes.sizeof(mcore_init._types.GridSpec)
    assert (train["name"], train["tp"], train["pp"], train["seed"][0]) == ("train", 2, 2, False)
    assert (rollout["name"], rollout["tp"], rollout["rank_offset"], rollout["local_world_size"], rollout["seed"]) == \
        ("rollout", 4, 8, 8, (True, 7))
    assert (train["rank_offset"], train["local_world_size"]) == (0, 0)  # 0: the whole world
    assert (critic["cp"], critic["hcp"], critic["vpp"], critic["order"]) == (4, [2, 2], 2, "tp-cp-ep-dp-pp")


def test_a_grid_seed_alone_passes_the_jobs_seed_policy(captured):
    mcore_init.initialize(grids={"train": {}, "rollout": dict(seed=5)}, seed_policy="roll")
    assert captured["seed"][0] is False and captured["seed_policy"] == b"roll"
    assert [g["seed"] for g in captured["grids"]] == [(False, captured["grids"][0]["seed"][1]), (True, 5)]


def test_without_grids_the_layout_keywords_still_fill_the_topology(captured):
    mcore_init.initialize(tp=2)
    assert not captured["topology_null"] and captured["grids"] == []


GRID_ERRORS = [
    (dict(grids={"train": dict(tp=2)}, tp=2), ValueError, "initialize(): tp 2 was given with grids=: the first grid ('train')"),
    (dict(grids={"train": {}}, order="tp-pp-dp"), ValueError, "initialize(): order 'tp-pp-dp' was given with grids="),
    (dict(grids={"train": {}, "rollout": dict(tpp=4)}), ValueError,
     "initialize(): grids['rollout'] 'tpp' is not a grid key (keys: tp, pp,"),
    (dict(grids={"rollout": dict(tp=1.5)}), TypeError, "initialize(): grids['rollout']['tp'] must be an int, got 1.5"),
    (dict(grids={"rollout": dict(hcp=[2, "2"])}), TypeError, "initialize(): grids['rollout']['hcp'][1] must be an int"),
    (dict(grids={"rollout": dict(order=5)}), TypeError, "initialize(): grids['rollout']['order'] must be a str"),
    (dict(grids={"rollout": dict(rank_offset=-1)}), ValueError, "initialize(): grids['rollout']['rank_offset'] -1 is out of range"),
    (dict(grids={"rollout": dict(local_world_size=0)}), ValueError,
     "initialize(): grids['rollout']['local_world_size'] 0 is out of range 1.."),
    (dict(grids={"rollout": dict(seed=2**63)}), ValueError, "initialize(): grids['rollout']['seed'] 9223372036854775808 is out"),
    (dict(grids={"rollout": dict(seed="7")}), TypeError, "initialize(): grids['rollout']['seed'] must be an int"),
    (dict(grids={"train": dict(seed=1)}, seed=2), ValueError, "initialize(): seed 2 and grids['train']['seed'] 1 both seed"),
    (dict(grids=[("train", {})]), TypeError, "initialize(): grids must be a dict of grid name -> layout dict"),
    (dict(grids={}), ValueError, "initialize(): grids {} is empty"),
    (dict(grids={"train": None}), TypeError, "initialize(): grids['train'] must be a dict of layout keys"),
    (dict(grids={3: {}}), TypeError, "initialize(): grids must be keyed by grid names (str), got 3"),
    (dict(grids={"a b": {}}), ValueError, "initialize(): grids 'a b' is not a grid name"),
    (dict(grids={"x" * 65: {}}), ValueError, "is not a grid name (1 to 64 letters"),
    (dict(grids={"a\0b": {}}), ValueError, "contains a NUL character"),
]


@pytest.mark.parametrize("kwargs,exc,message", GRID_ERRORS, ids=[m[:50] for _, _, m in GRID_ERRORS])
def test_bad_grids_are_refused_naming_the_grid_and_key(monkeypatch, kwargs, exc, message):
    def never(*_):  # a test double: the library must not be reached
        raise AssertionError("mcore_initialize was called")

    monkeypatch.setattr(runtime, "_initialize_c", never)
    with pytest.raises(exc) as info:
        mcore_init.initialize(**kwargs)
    assert message in str(info.value), str(info.value)
    assert isinstance(info.value, McoreError) and info.value.status == 1  # INVALID_ARGUMENT


def test_grid_queries_before_initialize_say_not_initialized():
    assert not runtime.is_initialized()
    for call in (mcore_init.grids, mcore_init.grid, lambda: mcore_init.grid("rollout")):
        with pytest.raises(McoreError) as info:
            call()
        assert info.value.status_name == "MCORE_STATUS_NOT_INITIALIZED", info.value
    with pytest.raises(TypeError, match=r"grid\(\): name must be a str or None, got 5"):
        mcore_init.grid(5)


def test_the_disjoint_or_identical_rule_reaches_the_args_and_is_checked(captured):
    """Megatron-Core 0.20's grid rule: a flag of ``mcore_init_args``, off by default."""
    grids = {"train": dict(tp=2), "rollout": dict(tp=4)}
    runtime.initialize(grids=grids)
    assert captured["grids_disjoint_or_identical"] is False
    runtime.initialize(grids=grids, grids_disjoint_or_identical=True)
    assert captured["grids_disjoint_or_identical"] is True
    with pytest.raises(TypeError, match="grids_disjoint_or_identical"):
        runtime.initialize(grids=grids, grids_disjoint_or_identical="yes")


def test_the_expert_view_of_a_pg_collection():
    """Megatron-Core 0.20's ``"expert"`` HyperCommGrid view: the expert fields and the shared pp."""
    from mcore_init.named_grids import EXPERT_VIEW_FIELDS, PG_COLLECTION_FIELDS, PgCollection, PgGroup
    assert set(EXPERT_VIEW_FIELDS) <= set(PG_COLLECTION_FIELDS)
    groups = [PgGroup(f, "k", [0], 0, 1, 1, False) for f in ("tp", "pp", "ep", "expt_dp")]
    pg = PgCollection("default", groups)
    expert = pg.view("expert")
    assert set(expert) == set(EXPERT_VIEW_FIELDS) | {"pp"} and expert["ep"].field == "ep" and expert["tp_ep"] is None
    base = pg.view("base")
    assert base["tp"].field == "tp" and "ep" not in base and base["pp"].field == "pp"
    with pytest.raises(ValueError, match="'dense'"):
        pg.view("dense")
