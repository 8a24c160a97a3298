"""Every public function checks its arguments before C sees them (mcore_init._args): a wrong
type is a TypeError, a bad value a ValueError, and the message names the function, the
parameter and the value. Before, ``spares=1.9`` was read as 1, ``backend="gloo\\0evil"`` as
"gloo", a non-Topology surfaced as an AttributeError, and ``check_health(window=1e300)`` came
back as status 99 (a panic inside the library)."""

import math
import pathlib
import subprocess
import sys

import pytest

from conftest import child_env, free_port, gloo_plugin
from mcore_init import McoreError, Topology, nodes, rng, runtime, topology
from mcore_init import parallel_state as ps

TP = "tensor_model_parallel"


class Index:
    """An int-like that is not an int (as numpy's integers): ``__index__`` makes it pass."""

    def __init__(self, v):
        self.v = v

    def __index__(self):
        return self.v


@pytest.fixture(scope="module")
def topo():
    with Topology(8, tp=2, pp=2) as t:
        yield t


@pytest.fixture()
def tracker(topo):
    with rng.Tracker(topo, 0) as t:
        yield t


def _case(func, param, value, exc, call, shown=None):
    """One bad argument: ``call(ctx)`` must raise ``exc`` naming ``func(): param`` and the value."""
    return pytest.param(func, param, value, exc, call, shown, id=f"{func}-{param}={value!r}"[:90])


T, V = TypeError, ValueError
CASES = []

# initialize: every keyword, refused before mcore_initialize runs (no launcher environment here)
_INIT_INTS = {"tp": 2**31, "pp": -2**31 - 1, "cp": 2**31, "ep": 2**40, "dist_opt_instances": 2**31, "gtp": 2**31,
              "egtp": 2**31, "vpp": 2**31, "etp": 2**31, "spares": -1, "seed": 2**63, "device": 2**31}
for name, out_of_range in _INIT_INTS.items():
    for bad, exc in ((1.9, T), (True, T), ("2", T), (out_of_range, V)):
        CASES.append(_case("initialize", name, bad, exc, lambda ctx, n=name, b=bad: runtime.initialize(**{n: b})))
for name in ("backend", "order", "seed_policy", "comm_strategy", "comm_config", "comm_config_path"):
    for bad, exc in (("gloo\0evil", V), (5, T), (["gloo"], T)):
        CASES.append(_case("initialize", name, bad, exc, lambda ctx, n=name, b=bad: runtime.initialize(**{n: b})))
for name in ("backend", "comm_config_path"):  # paths: bytes and os.PathLike too, still without NUL
    for bad in (b"lib\0x.so", pathlib.Path("lib\0x.so")):
        CASES.append(_case("initialize", name, bad, V, lambda ctx, n=name, b=bad: runtime.initialize(**{n: b})))
for bad, exc in ((math.nan, V), (-1, V), (0, V), (-math.inf, V), ("10", T), (True, T)):
    CASES.append(_case("initialize", "timeout", bad, exc, lambda ctx, b=bad: runtime.initialize(timeout=b)))
for name in ("verify", "split_share", "create_all_gather_groups", "data_parallel_random_init"):
    for bad in ("no", 2, None):
        CASES.append(_case("initialize", name, bad, T, lambda ctx, n=name, b=bad: runtime.initialize(**{n: b})))
CASES += [
    _case("initialize", "hcp[1]", 1.5, T, lambda ctx: runtime.initialize(cp=4, hcp=[2, 1.5])),
    _case("initialize", "hcp", "22", T, lambda ctx: runtime.initialize(hcp="22")),
    _case("initialize", "comm_config", {"tp": object()}, T, lambda ctx: runtime.initialize(comm_config={"tp": object()}),
          shown="{'tp': <object"),
]

# initialize_model_parallel: the errors use Megatron's names
_IMP = [("tensor_model_parallel_size", 1.9, T), ("pipeline_model_parallel_size", "2", T),
        ("virtual_pipeline_model_parallel_size", 2**31, V), ("context_parallel_size", True, T),
        ("expert_model_parallel_size", 2.0, T), ("expert_tensor_parallel_size", -2**40, V),
        ("num_distributed_optimizer_instances", 1.5, T), ("gtp_remat_size", 1.5, T),
        ("expert_gtp_remat_size", 2**31, V), ("nccl_communicator_config_path", "a\0.yaml", V),
        ("nccl_communicator_config_path", 5, T), ("backend", "nccl\0", V), ("order", 1, T),
        ("seed", 0.5, T), ("timeout", math.nan, V), ("verify", "yes", T), ("create_all_gather_groups", "yes", T)]
for name, bad, exc in _IMP:
    CASES.append(_case("initialize_model_parallel", name, bad, exc,
                       lambda ctx, n=name, b=bad: ps.initialize_model_parallel(**{n: b})))
CASES.append(_case("initialize_model_parallel", "hierarchical_context_parallel_sizes[0]", 2.5, T,
                   lambda ctx: ps.initialize_model_parallel(hierarchical_context_parallel_sizes=[2.5])))

# recovery and health: window in seconds, finite, >= 0 (0 = the default), below 2**31 s
for func, fn in (("check_health", runtime.check_health), ("reinitialize", runtime.reinitialize)):
    for bad, exc in ((1e300, V), (math.inf, V), (math.nan, V), (-1, V), (-0.5, V), (2.0**31, V), ("3", T), (True, T)):
        CASES.append(_case(func, "window", bad, exc, lambda ctx, f=fn, b=bad: f(window=b)))
CASES += [
    _case("reinitialize", "suspected[0]", 1.5, T, lambda ctx: runtime.reinitialize(suspected=[1.5])),
    _case("reinitialize", "suspected[1]", -1, V, lambda ctx: runtime.reinitialize(suspected=[0, -1])),
    _case("reinitialize", "suspected", "12", T, lambda ctx: runtime.reinitialize(suspected="12")),
    _case("reinitialize", "suspected", 3, T, lambda ctx: runtime.reinitialize(suspected=3)),
]

# runtime's group queries and collectives (refused before the library reports NOT_INITIALIZED)
for func in ("group", "group_ranks", "all_gather_group_ranks", "all_gather_communicator", "communicator", "barrier"):
    for bad, exc in ((None, T), (1.5, T), (True, T), ("tensor\0model_parallel", V), (2**40, V)):
        CASES.append(_case(func, "kind", bad, exc, lambda ctx, f=func, b=bad: getattr(runtime, f)(b)))
CASES += [
    _case("allreduce_sum", "values[0]", 1.5, T, lambda ctx: runtime.allreduce_sum(TP, [1.5])),
    _case("allreduce_sum", "values[1]", 2**63, V, lambda ctx: runtime.allreduce_sum(TP, [1, 2**63])),
    _case("allreduce_sum", "values", 5, T, lambda ctx: runtime.allreduce_sum(TP, 5)),
    _case("allreduce_sum", "kind", None, T, lambda ctx: runtime.allreduce_sum(None, [1])),
]

# parallel_state: flags must be bools (a string such as "no" would be truthy), vp_stage an int >= 0
_PS_FLAGS = [
    ("get_data_parallel_rank", "with_context_parallel"), ("get_data_parallel_rank", "partial_data_parallel"),
    ("get_data_parallel_world_size", "with_gtp_remat"), ("get_data_parallel_src_rank", "with_context_parallel"),
    ("get_expert_data_parallel_rank", "partial_expert_data_parallel"),
    ("get_expert_data_parallel_world_size", "with_gtp_remat"),
    ("get_data_parallel_group_ranks", "with_context_parallel"),
    ("get_tensor_and_data_parallel_group_ranks", "with_context_parallel"),
    ("get_expert_tensor_model_pipeline_parallel_group_ranks", "with_egtp_remat"),
    ("get_expert_data_parallel_group_ranks", "partial_expert_data_parallel"),
    ("get_all_gather_group_ranks", "for_expert_parallelism"),
    ("is_pipeline_first_stage", "ignore_virtual"), ("is_pipeline_last_stage", "ignore_virtual"),
    ("is_rank_in_embedding_group", "ignore_virtual"),
]
for func, name in _PS_FLAGS:
    CASES.append(_case(func, name, "no", T, lambda ctx, f=func, n=name: getattr(ps, f)(**{n: "no"})))
for func in ("is_pipeline_first_stage", "is_pipeline_last_stage", "is_rank_in_embedding_group"):
    for bad, exc in ((1.5, T), (-1, V), ("0", T)):
        CASES.append(_case(func, "vp_stage", bad, exc, lambda ctx, f=func, b=bad: getattr(ps, f)(vp_stage=b)))

# topology helpers
for name, bad, exc in [("world_size", 8.0, T), ("world_size", -8, V), ("world_size", 2**32, V), ("tp", 2.0, T),
                       ("pp", None, T), ("vpp", 1.5, T), ("etp", "1", T), ("order", "tp-dp\0", V), ("order", 5, T),
                       ("rank_offset", -1, V), ("rank_offset", 0.0, T), ("local_world_size", 0, V),
                       ("local_world_size", 4.0, T), ("gtp", True, T), ("hcp", 4, T)]:
    kwargs = {"world_size": 8, name: bad}
    CASES.append(_case("Topology", name, bad, exc, lambda ctx, k=kwargs: Topology(**k)))
for meth, args in [("group", (TP,)), ("group_ranks", (TP,)), ("pipeline", ()), ("in_grid", ()),
                   ("is_pipeline_first_stage", ()), ("is_pipeline_last_stage", ()), ("is_rank_in_embedding_group", ())]:
    for bad, exc in ((1.0, T), (-1, V), (2**32, V), (True, T), ("1", T)):
        CASES.append(_case(f"Topology.{meth}", "rank", bad, exc,
                           lambda ctx, m=meth, a=args, b=bad: getattr(ctx["topo"], m)(*a, b)))
for meth in ("group", "group_ranks", "group_count", "groups"):
    for bad, exc in ((None, T), (0.0, T), ("tensor\0", V), (2**31, V)):
        rank = (0,) if meth in ("group", "group_ranks") else ()
        CASES.append(_case(f"Topology.{meth}", "kind", bad, exc,
                           lambda ctx, m=meth, r=rank, b=bad: getattr(ctx["topo"], m)(b, *r)))
for meth in ("is_pipeline_first_stage", "is_pipeline_last_stage", "is_rank_in_embedding_group"):
    for bad, exc in ((1.0, T), (-1, V), (2**31, V)):
        CASES.append(_case(f"Topology.{meth}", "vp_stage", bad, exc,
                           lambda ctx, m=meth, b=bad: getattr(ctx["topo"], m)(0, vp_stage=b)))
CASES += [
    _case("kind_value", "kind", [TP], T, lambda ctx: topology.kind_value([TP])),
    _case("kind_name", "kind", "tensor\0model_parallel", V, lambda ctx: topology.kind_name("tensor\0model_parallel")),
    _case("kind_name", "kind", 2**40, V, lambda ctx: topology.kind_name(2**40)),
    _case("plan_recovery", "topology", "t", T, lambda ctx: topology.plan_recovery("t", [1])),
    _case("plan_recovery", "failed[0]", 1.5, T, lambda ctx: topology.plan_recovery(ctx["topo"], [1.5])),
    _case("plan_recovery", "failed", 5, T, lambda ctx: topology.plan_recovery(ctx["topo"], 5)),
    _case("plan_recovery", "spares[0]", -8, V, lambda ctx: topology.plan_recovery(ctx["topo"], [1], spares=[-8])),
    _case("node_placement", "topology", None, T, lambda ctx: nodes.node_placement(None, 8)),
    _case("node_placement", "gpus_per_node", 8.0, T, lambda ctx: nodes.node_placement(ctx["topo"], 8.0)),
    _case("node_placement", "gpus_per_node", -1, V, lambda ctx: nodes.node_placement(ctx["topo"], -1)),
]

# RNG: policy seeds, Philox, the tracker
CASES += [
    _case("layout_fingerprint", "topology", 8, T, lambda ctx: rng.layout_fingerprint(8)),
    _case("coordinates", "topology", "t", T, lambda ctx: rng.coordinates("t", 0)),
    _case("coordinates", "rank", 0.5, T, lambda ctx: rng.coordinates(ctx["topo"], 0.5)),
    _case("coordinates", "fingerprint", -1, V, lambda ctx: rng.coordinates(ctx["topo"], 0, fingerprint=-1)),
    _case("group_positions", "policy", 5, T, lambda ctx: rng.group_positions(ctx["topo"], 0, 5)),
    _case("group_positions", "rank", -1, V, lambda ctx: rng.group_positions(ctx["topo"], -1, "megatron")),
    _case("policy_seeds", "coords", "c", T, lambda ctx: rng.policy_seeds("megatron", 1, "c")),
    _case("policy_seeds", "seed", 1.5, T, lambda ctx: rng.policy_seeds("megatron", 1.5, rng.coordinates(ctx["topo"], 0))),
    _case("policy_seeds", "policy", "megatron\0", V,
          lambda ctx: rng.policy_seeds("megatron\0", 1, rng.coordinates(ctx["topo"], 0))),
    _case("policy_seeds", "positions[0]", (1,), T,
          lambda ctx: rng.policy_seeds("sharded:tensor_model_parallel", 1, rng.coordinates(ctx["topo"], 0), [(1,)])),
    _case("policy_seeds", "positions[0]", -1, V,
          lambda ctx: rng.policy_seeds("sharded:tensor_model_parallel", 1, rng.coordinates(ctx["topo"], 0), [(0, -1)])),
    _case("policy_seeds", "data_parallel_random_init", "yes", T,
          lambda ctx: rng.policy_seeds("megatron", 1, rng.coordinates(ctx["topo"], 0), data_parallel_random_init="yes")),
    _case("stream_seeds", "seed", 1.9, T, lambda ctx: rng.stream_seeds(ctx["topo"], 0, 1.9)),
    _case("stream_seeds", "seed", 2**64 + 5, V, lambda ctx: rng.stream_seeds(ctx["topo"], 0, 2**64 + 5)),
    _case("stream_seeds", "rank", True, T, lambda ctx: rng.stream_seeds(ctx["topo"], True, 1)),
    _case("stream_seeds", "policy", "roll\0", V, lambda ctx: rng.stream_seeds(ctx["topo"], 0, 1, "roll\0")),
    _case("stream_seeds", "topology", None, T, lambda ctx: rng.stream_seeds(None, 0, 1)),
]
for func, fn in (("philox_fill_u32", rng.philox_fill_u32), ("philox_fill_uniform", rng.philox_fill_uniform)):
    for i, name in enumerate(("seed", "subsequence", "offset", "n")):
        for bad, exc in ((1.5, T), (-1, V)):
            argv = [0, 0, 0, 4]
            argv[i] = bad
            CASES.append(_case(func, name, bad, exc, lambda ctx, f=fn, a=tuple(argv): f(*a)))
CASES += [
    _case("Tracker", "topology", "t", T, lambda ctx: rng.Tracker("t")),
    _case("Tracker", "rank", 0.5, T, lambda ctx: rng.Tracker(ctx["topo"], 0.5)),
    _case("Tracker", "coords", 5, T, lambda ctx: rng.Tracker(coords=5)),
    _case("Tracker.from_handle", "handle", 1.5, T, lambda ctx: rng.Tracker.from_handle(1.5)),
    _case("Tracker.seed", "seed", 1.5, T, lambda ctx: ctx["tracker"].seed(1.5)),
    _case("Tracker.seed", "policy", None, T, lambda ctx: ctx["tracker"].seed(1, policy=None)),
    _case("Tracker.seed", "data_parallel_random_init", "no", T,
          lambda ctx: ctx["tracker"].seed(1, data_parallel_random_init="no")),
    _case("Tracker.seed", "positions", 5, T, lambda ctx: rng.Tracker().seed(1, "sharded:tensor_model_parallel", positions=5)),
    _case("Tracker.add", "name", "a\0b", V, lambda ctx: ctx["tracker"].add("a\0b", 1)),
    _case("Tracker.add", "name", b"a", T, lambda ctx: ctx["tracker"].add(b"a", 1)),
    _case("Tracker.add", "seed", 1.5, T, lambda ctx: ctx["tracker"].add("a", 1.5)),
    _case("Tracker.add", "seed", 2**64, V, lambda ctx: ctx["tracker"].add("a", 2**64)),
    _case("Tracker.fork", "name", None, T, lambda ctx: ctx["tracker"].fork(None)),
    _case("Tracker.fork", "count", -4, V, lambda ctx: ctx["tracker"].fork(count=-4)),
    _case("Tracker.fork", "count", 4.0, T, lambda ctx: ctx["tracker"].fork(count=4.0)),
    _case("Tracker.get_state", "name", "default\0", V, lambda ctx: ctx["tracker"].get_state("default\0")),
    _case("Tracker.set_state", "state", (1,), T, lambda ctx: ctx["tracker"].set_state("default", (1,))),
    _case("Tracker.set_state", "state[1]", -1, V, lambda ctx: ctx["tracker"].set_state("default", (1, -1))),
    _case("Tracker.set_state", "name", 7, T, lambda ctx: ctx["tracker"].set_state(7, (1, 0))),
    _case("Tracker.cpu_add", "seed", 2**64, V, lambda ctx: ctx["tracker"].cpu_add("c", 2**64)),
    _case("Tracker.cpu_add", "name", "c\0", V, lambda ctx: ctx["tracker"].cpu_add("c\0", 1)),
    _case("Tracker.cpu_fill_u32", "n", 1.5, T, lambda ctx: ctx["tracker"].cpu_fill_u32("c", 1.5)),
    _case("Tracker.cpu_fill_f64", "n", -1, V, lambda ctx: ctx["tracker"].cpu_fill_f64("c", -1)),
    _case("Tracker.restore", "blob", "abc", T, lambda ctx: ctx["tracker"].restore("abc")),
    _case("Tracker.restore", "rederive", "yes", T, lambda ctx: ctx["tracker"].restore(b"", rederive="yes")),
]


@pytest.mark.parametrize("func, param, value, exc, call, shown", CASES)
def test_bad_argument_is_refused_naming_the_parameter(topo, tracker, func, param, value, exc, call, shown):
    with pytest.raises(exc) as info:
        call({"topo": topo, "tracker": tracker})
    msg = str(info.value)
    assert msg.startswith(f"{func}(): {param} "), msg
    assert (shown or repr(value)) in msg, msg
    # As the library would report it: McoreError, INVALID_ARGUMENT.
    assert isinstance(info.value, McoreError) and info.value.status == 1, info.value
    # TypeError for a wrong type, ValueError for a bad value; never both.
    assert isinstance(info.value, TypeError) != isinstance(info.value, ValueError)


def test_the_measured_cases():
    with pytest.raises(TypeError, match=r"^initialize\(\): spares must be an int, got 1\.9 \(float\)$"):
        runtime.initialize(spares=1.9)
    with pytest.raises(ValueError, match=r"^initialize\(\): backend 'gloo\\x00evil' contains a NUL"):
        runtime.initialize(backend="gloo\0evil")
    with pytest.raises(ValueError, match=r"^check_health\(\): window 1e\+300 must be less than 2147483648 seconds"):
        runtime.check_health(window=1e300)
    with pytest.raises(ValueError, match=r"^reinitialize\(\): window 1e\+300"):
        runtime.reinitialize(window=1e300)
    with pytest.raises(OverflowError, match=r"initialize\(\): seed 18446744073709551621 is out of range"):
        runtime.initialize(seed=2**64 + 5)


def test_valid_values_still_work_without_processes(topo):
    # ints through __index__, flags as 0/1, int seconds, kinds by name or number, bytes-like blobs
    with Topology(Index(8), tp=Index(2), pp=2, vpp=None, order="tp-cp-ep-dp-pp", rank_offset=0,
                  local_world_size=None) as t:
        assert t.sizes.tp == 2 and t.group_ranks(TP, Index(5)) == [4, 5]
        assert t.group(0, 5) == t.group(TP, 5) and t.group_count(TP) == 4 and len(t.groups(0)) == 4
        assert t.is_pipeline_first_stage(0, vp_stage=None) and t.in_grid(7) and t.pipeline(0).num_stages == 2
    with Topology(8, cp=4, hcp=(2, 2)) as t:
        assert "hierarchical_context_parallel_1" in t.kinds()
    assert topology.kind_name(topology.kind_value(TP)) == TP
    assert topology.plan_recovery(topo, (5,), spares=[]).topology.world_size == 4
    assert nodes.node_placement(topo, 4).gpus_per_node == 4
    assert rng.stream_seeds(topo, 1, 1234) == rng.stream_seeds(topo, Index(1), Index(1234), policy="megatron",
                                                              data_parallel_random_init=0)
    coords = rng.coordinates(topo, 0, fingerprint=2**64 - 1)
    policy = "sharded:tensor_model_parallel"
    assert rng.policy_seeds(policy, 7, coords, [(0, 2)]) == rng.policy_seeds(policy, 7, coords, ((0, 2),))
    assert rng.philox_fill_u32(2**64 - 1, 0, 0, 0) == [] and len(rng.philox_fill_uniform(1, 2, 3, Index(4))) == 4
    with rng.Tracker(topo, 0) as tr:
        tr.seed(1234, policy="megatron", data_parallel_random_init=False)
        tr.add("extra", 2**64 - 1)
        assert tr.fork("extra", count=4) == (2**64 - 1, 0)
        tr.set_state("extra", [2**64 - 1, 8])
        assert tr.get_state("extra") == (2**64 - 1, 8)
        tr.cpu_add("cpu", 0)
        assert len(tr.cpu_fill_u32("cpu", 3)) == 3 and tr.cpu_fill_f64("cpu", 0) == []
        blob = tr.save()
        tr.restore(bytearray(blob))
        tr.restore(memoryview(blob), rederive=1)


def test_errors_are_raised_before_the_library_is_called():
    # Outside a launcher, a call that reached mcore_initialize would fail there (a McoreError
    # with the library's status); the check's error is INVALID_ARGUMENT naming the parameter.
    with pytest.raises(TypeError) as info:
        runtime.initialize(tp=2, backend="gloo", seed=1, spares=0.0)
    assert "spares" in str(info.value) and not runtime.is_initialized()


# One process, a world of 1 over the Gloo plugin: the valid forms still go through, and a bad
# window after init is refused without touching the runtime.
WORKER = r"""
import json, pathlib, sys
from mcore_init import runtime, parallel_state as ps
plugin = sys.argv[1]
out = {"first": runtime.initialize(tp=1, pp=1, backend=plugin, timeout=30, verify=1, seed=1234, spares=0,
                                   device=None, comm_strategy="auto", seed_policy="megatron")}
out["again_with_path"] = runtime.initialize(tp=1, pp=1, backend=pathlib.Path(plugin), timeout=30.0, verify=True,
                                            seed=1234, spares=0, comm_strategy="auto", seed_policy="megatron")
out["health"] = [runtime.check_health(window=5), runtime.check_health(window=0), runtime.check_health(window=2)]
out["dp"] = [ps.get_data_parallel_rank(with_context_parallel=True), ps.is_pipeline_first_stage(ignore_virtual=False),
             ps.get_data_parallel_group_ranks(with_context_parallel=False)]
out["sum"] = runtime.allreduce_sum(0, (1, 2**62))
runtime.barrier(kind="data_parallel")
try:
    runtime.check_health(window=1e300)
except ValueError as exc:
    out["refused"] = [str(exc), runtime.is_initialized()]
r = runtime.reinitialize(suspected=[], window=1)
out["reinit"] = [r["left"], r["world_size"], r["failed"]]
runtime.destroy()
print(json.dumps(out), flush=True)
"""


def test_valid_values_still_work_in_a_world_of_one():
    plugin = str(gloo_plugin())
    env = child_env(RANK=0, LOCAL_RANK=0, WORLD_SIZE=1, LOCAL_WORLD_SIZE=1, MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=free_port())
    p = subprocess.run([sys.executable, "-c", WORKER, plugin], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    import json

    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["first"] is False and out["again_with_path"] is True
    assert out["health"] == [None, None, None]
    assert out["dp"] == [0, True, [0]] and out["sum"] == [1, 2**62]
    assert out["refused"] == ["check_health(): window 1e+300 must be less than 2147483648 seconds", True]
    assert out["reinit"] == [False, 1, []]
