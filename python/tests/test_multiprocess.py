"""Real processes on loopback over the Gloo plugin: parallel_state init, getters, an all-reduce."""

import json
import subprocess
import sys

from conftest import REPO, child_env, free_port, gloo_plugin

WORKER = r"""
import json, os, sys
from mcore_init import parallel_state as ps, runtime
assert ps.initialize_model_parallel(tensor_model_parallel_size=2, backend=sys.argv[1], timeout=30) is False
assert ps.initialize_model_parallel(tensor_model_parallel_size=2, backend=sys.argv[1], timeout=30) is True
rank = int(os.environ["RANK"])
out = {
    "rank": rank,
    "world": list(runtime.world()),
    "tp": [ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size(),
           ps.get_tensor_model_parallel_src_rank()],
    "dp": [ps.get_data_parallel_rank(), ps.get_data_parallel_world_size(), ps.get_data_parallel_src_rank()],
    "pp": [ps.get_pipeline_model_parallel_rank(), ps.get_pipeline_model_parallel_world_size(),
           ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()],
    "vpp": ps.get_virtual_pipeline_model_parallel_world_size(),
    "tp_group": ps.get_tensor_model_parallel_group_ranks(),
    "dp_group": ps.get_data_parallel_group_ranks(),
    "sum": runtime.allreduce_sum("tensor_model_parallel", [rank, 1, 10 ** 12]),
}
runtime.barrier("data_parallel")
try:
    runtime.rng_tracker()
except Exception as exc:
    out["tracker_without_seed"] = exc.status_name
ps.destroy_model_parallel()
out["after_destroy"] = ps.model_parallel_is_initialized()
try:
    ps.get_tensor_model_parallel_rank()
except Exception as exc:
    out["error_after_destroy"] = exc.status_name
print(json.dumps(out), flush=True)
"""


def _run_ranks(argv_for_rank, world, timeout=120, **env):
    port = free_port()
    procs = [
        subprocess.Popen(
            argv_for_rank(r), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=child_env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=world, LOCAL_WORLD_SIZE=world,
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **env),
        )
        for r in range(world)
    ]
    outs = []
    try:
        for r, p in enumerate(procs):
            stdout, stderr = p.communicate(timeout=timeout)
            assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{stderr}"
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def test_four_processes_tp2_getters_and_allreduce():
    plugin = str(gloo_plugin())
    outs = _run_ranks(lambda r: [sys.executable, "-c", WORKER, plugin], 4)
    for r, o in enumerate(outs):
        base = r - r % 2
        assert o["rank"] == r and o["world"] == [r, 4]
        assert o["tp"] == [r % 2, 2, base]
        assert o["dp"] == [r // 2, 2, r % 2]
        assert o["pp"] == [0, 1, True, True]
        assert o["vpp"] is None
        assert o["tp_group"] == [base, base + 1]
        assert o["dp_group"] == [r % 2, r % 2 + 2]
        assert o["sum"] == [2 * base + 1, 2, 2 * 10 ** 12]
        assert o["after_destroy"] is False
        assert o["error_after_destroy"] == "MCORE_STATUS_NOT_INITIALIZED"
        assert o["tracker_without_seed"] == "MCORE_STATUS_NOT_INITIALIZED"


def test_train_init_example_under_two_ranks():
    plugin = str(gloo_plugin())
    script = REPO / "examples" / "python" / "train_init.py"
    # backend "gloo" by name: the plugin is loaded from MCORE_BACKEND_PLUGIN
    outs = _run_ranks(lambda r: [sys.executable, str(script), "--tp", "2", "--timeout", "30"], 2,
                      MCORE_BACKEND_PLUGIN=plugin)
    for r, o in enumerate(outs):
        assert (o["rank"], o["tp_rank"], o["tp_size"], o["dp_size"]) == (r, r, 2, 1)
        assert o["tp_group"] == [0, 1] and o["tp_rank_sum"] == 1


def test_layout_example_prints_layout_and_seeds():
    script = REPO / "examples" / "python" / "layout.py"
    res = subprocess.run(
        [sys.executable, str(script), "--world-size", "16", "--tp", "2", "--pp", "4", "--rank", "5", "--seed", "1234"],
        capture_output=True, text=True, timeout=60, env=child_env(),
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert any(l.startswith("tensor_model_parallel ") and "[4, 5]" in l for l in lines), res.stdout
    # rank 5 sits on pipeline stage 1 (dp stride 2, pp stride 4): Megatron adds 100 per stage
    assert "rank 5 seed default = 1334" in lines
    assert "rank 5 seed model-parallel-rng = 4053" in lines  # 1334 + 2718 + tp_rank 1
    bad = subprocess.run([sys.executable, str(script), "--world-size", "6", "--tp", "4"],
                         capture_output=True, text=True, timeout=60, env=child_env())
    assert bad.returncode != 0 and "6" in bad.stderr


MISMATCH = r"""
import json, os, sys
from mcore_init import McoreError, parallel_state as ps
tp = 2 if os.environ["RANK"] == "0" else 1
try:
    ps.initialize_model_parallel(tensor_model_parallel_size=tp, backend=sys.argv[1], timeout=20)
    print(json.dumps({"ok": True}))
except McoreError as exc:
    print(json.dumps({"status": exc.status, "message": exc.message, "up": ps.model_parallel_is_initialized()}))
"""


def test_ranks_started_with_different_layouts_fail_with_config_mismatch():
    plugin = str(gloo_plugin())
    outs = _run_ranks(lambda r: [sys.executable, "-c", MISMATCH, plugin], 2, timeout=90)
    for o in outs:
        assert o.get("status") == 8, o  # CONFIG_MISMATCH
        assert o["up"] is False
    assert any("1" in o["message"] for o in outs)


GETTERS = r"""
import json, sys
from mcore_init import parallel_state as ps
from mcore_init import runtime
ps.initialize_model_parallel(tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                             virtual_pipeline_model_parallel_size=2, expert_model_parallel_size=2,
                             expert_tensor_parallel_size=1,
                             backend=sys.argv[1], timeout=30, seed=1234)
tracker = runtime.rng_tracker()
names = [n for n in dir(ps) if n.startswith("get_") and not n.endswith("group_ranks")]
out = {n: getattr(ps, n)() for n in names}
out.update({n: getattr(ps, n)() for n in dir(ps) if n.endswith("group_ranks")})
out["stages"] = [[ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=k),
                  ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=k)] for k in range(2)]
out["stages_ignoring_virtual"] = [ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()]
try:
    ps.is_pipeline_first_stage(ignore_virtual=False)
except Exception as exc:
    out["vp_stage_required"] = str(exc)
ps.destroy_model_parallel()
out["fork_after_destroy"] = [tracker.fork("model-parallel-rng", 5), tracker.fork("model-parallel-rng", 1)]
out["default_state"] = tracker.get_state("default")
tracker.close()
print(json.dumps(out))
"""


def test_four_processes_tp2_pp2_vpp2_ep2_etp1_getters_match_the_topology():
    from mcore_init.rng import stream_seeds
    from mcore_init.topology import Topology

    plugin = str(gloo_plugin())
    outs = _run_ranks(lambda r: [sys.executable, "-c", GETTERS, plugin], 4)
    with Topology(4, tp=2, pp=2, vpp=2, ep=2, etp=1) as t:
        for r, o in enumerate(outs):
            pipe = t.pipeline(r)
            kinds = {"tensor_model_parallel": "tensor_model_parallel", "pipeline_model_parallel": "pipeline_model_parallel",
                     "data_parallel": "data_parallel", "context_parallel": "context_parallel",
                     "expert_model_parallel": "expert_model_parallel", "expert_tensor_parallel": "expert_tensor_parallel",
                     "expert_data_parallel": "expert_data_parallel"}
            for prefix, kind in kinds.items():
                g = t.group(kind, r)
                assert o[f"get_{prefix}_rank"] == g.rank, (r, prefix)
                assert o[f"get_{prefix}_world_size"] == g.size, (r, prefix)
            for name in ("tensor_model_parallel", "pipeline_model_parallel", "data_parallel", "context_parallel",
                         "model_parallel", "embedding", "position_embedding", "expert_model_parallel",
                         "expert_tensor_parallel", "expert_data_parallel", "tensor_and_data_parallel"):
                assert o[f"get_{name}_group_ranks"] == t.group_ranks(name, r), (r, name)
            assert o["get_tensor_model_parallel_src_rank"] == t.group_ranks("tensor_model_parallel", r)[0]
            assert o["get_data_parallel_src_rank"] == t.group_ranks("data_parallel", r)[0]
            assert o["get_model_parallel_src_rank"] == t.group_ranks("model_parallel", r)[0]
            assert [o[f"get_pipeline_model_parallel_{k}_rank"] for k in ("first", "last", "next", "prev")] == \
                [pipe.first, pipe.last, pipe.next, pipe.prev]
            assert o["get_virtual_pipeline_model_parallel_world_size"] == 2
            assert o["stages"] == [[t.is_pipeline_first_stage(r, k), t.is_pipeline_last_stage(r, k)] for k in range(2)]
            assert o["stages_ignoring_virtual"] == [pipe.stage == 0, pipe.stage == 1]
            assert "vp_stage must be passed" in o["vp_stage_required"]
            seeds = stream_seeds(t, r, 1234)  # the megatron policy, from the layout alone
            model = seeds["model-parallel-rng"]
            assert o["fork_after_destroy"] == [[model, 0], [model, 8]]
            assert o["default_state"] == [seeds["default"], 0]


COMM_OPTIONS = r"""
import json, sys
from mcore_init import McoreError, runtime
out = {}
for name, kwargs in [("gloo_with_options", {"comm_config": {"tp": {"max_ctas": 4}}}),
                     ("bad_strategy", {"comm_strategy": "diagonal"}),
                     ("bad_yaml", {"comm_config": "tp: {max_ctas: four}"}),
                     ("missing_file", {"comm_config_path": "/nonexistent/nccl.yaml"}),
                     ("device_with_gloo", {"device": 0}),
                     ("negative_device", {"device": -5})]:
    try:
        runtime.initialize(tp=1, backend=sys.argv[1], timeout=20, **kwargs)
        out[name] = "initialized"
        runtime.destroy()
    except McoreError as exc:
        out[name] = [exc.status_name, exc.message, runtime.is_initialized()]
print(json.dumps(out))
"""


def test_communicator_options_are_checked_before_any_rendezvous():
    plugin = str(gloo_plugin())
    (o,) = _run_ranks(lambda r: [sys.executable, "-c", COMM_OPTIONS, plugin], 1, timeout=60)
    for name, (status, message, up) in o.items():
        assert status == "MCORE_STATUS_INVALID_ARGUMENT" and up is False, (name, message)
    assert "takes no communicator options" in o["gloo_with_options"][1]
    assert "communicator options of tensor_model_parallel" in o["gloo_with_options"][1]
    assert "max_ctas=4" in o["gloo_with_options"][1]
    assert "'diagonal'" in o["bad_strategy"][1]
    assert "max_ctas must be an integer, got 'four'" in o["bad_yaml"][1]
    assert "/nonexistent/nccl.yaml" in o["missing_file"][1]
    assert "device 0 was given, but backend '" in o["device_with_gloo"][1]
    assert "does not take a device (nccl does, and plugins that set" in o["device_with_gloo"][1]
    assert "device -5 is not -1 or a device ordinal" in o["negative_device"][1]


UNLIMITED = r"""
import json, sys
from mcore_init import runtime
timeout = None if sys.argv[2] == "env" else float(sys.argv[2])
runtime.initialize(tp=2, backend=sys.argv[1], timeout=timeout)
print(json.dumps({"sum": runtime.allreduce_sum("tensor_model_parallel", [1])}), flush=True)
runtime.destroy()
"""


def test_no_limit_timeouts_through_the_c_api():
    plugin = gloo_plugin()
    # MCORE_INIT_TIMEOUT=1e20 made mcore_initialize return "internal panic".
    outs = _run_ranks(lambda r: [sys.executable, "-c", UNLIMITED, str(plugin), "env"], 2, MCORE_INIT_TIMEOUT="1e20")
    assert [o["sum"] for o in outs] == [[2], [2]]
    # 2**63 ms reached Gloo as a negative count; math.inf is the documented no limit.
    for seconds in (str(2**63 / 1000), "inf"):
        outs = _run_ranks(lambda r: [sys.executable, "-c", UNLIMITED, str(plugin), seconds], 2)
        assert [o["sum"] for o in outs] == [[2], [2]]


OUTSIDER = r"""
import json, os, socket, sys
from mcore_init import parallel_state as ps, runtime
ps.initialize_model_parallel(tensor_model_parallel_size=1, backend=sys.argv[1], timeout=30)
rank = int(os.environ["RANK"])
runtime.barrier("data_parallel")
reply = None
if rank == 1:
    # A client that is not one of the job's ranks: torch's VALIDATE then a PING of 4321.
    with socket.create_connection(("127.0.0.1", int(os.environ["MASTER_PORT"])), timeout=10) as s:
        s.sendall(bytes([0]) + (0x3C85F7CE).to_bytes(4, "little") + bytes([13]) + (4321).to_bytes(4, "little"))
        got = b""
        while len(got) < 4:
            chunk = s.recv(4 - len(got))
            if not chunk:
                break
            got += chunk
    reply = got.hex()
runtime.barrier("data_parallel")
ps.destroy_model_parallel()
print(json.dumps({"rank": rank, "reply": reply}), flush=True)
"""


def test_after_init_the_store_serves_only_the_jobs_ranks_unless_kept_open():
    plugin = str(gloo_plugin())
    refused = _run_ranks(lambda r: [sys.executable, "-c", OUTSIDER, plugin], 2)
    # "MCAS": the store serves only the job's ranks now; the outsider's PING is never answered.
    assert refused[1]["reply"] == b"MCAS".hex(), refused
    kept = _run_ranks(lambda r: [sys.executable, "-c", OUTSIDER, plugin], 2, MCORE_STORE_KEEP_OPEN="1")
    assert kept[1]["reply"] == (4321).to_bytes(4, "little").hex(), kept


LATE_JOB = r"""
import json, os, subprocess, sys, time
from mcore_init import parallel_state as ps, runtime
ps.initialize_model_parallel(tensor_model_parallel_size=1, backend=sys.argv[1], timeout=30)
rank = int(os.environ["RANK"])
runtime.barrier("data_parallel")
late = None
if rank == 1:
    # A rank of another job on the same port, once this job's initialization is over.
    other = ("from mcore_init import parallel_state as ps\n"
             "try:\n    ps.initialize_model_parallel(backend=%r, timeout=30)\n    print('UP')\n"
             "except Exception as exc:\n    print(str(exc))\n") % sys.argv[1]
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, MCORE_JOB_ID="job-B"))
    late = {"seconds": time.monotonic() - t0, "out": res.stdout.strip()}
runtime.barrier("data_parallel")
ps.destroy_model_parallel()
print(json.dumps({"rank": rank, "late": late}), flush=True)
"""


def test_a_rank_of_another_job_meeting_a_store_after_init_fails_at_once_naming_both_jobs():
    plugin = str(gloo_plugin())
    outs = _run_ranks(lambda r: [sys.executable, "-c", LATE_JOB, plugin], 2, MCORE_JOB_ID="job-A")
    late = outs[1]["late"]
    assert "'job-A'" in late["out"] and "'job-B'" in late["out"], late
    # Well before its 30 s timeout: the store's refusal named job-A.
    assert late["seconds"] < 20, late
