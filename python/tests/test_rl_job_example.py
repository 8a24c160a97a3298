"""examples/python/rl_job.py under mcore-launch, 16 ranks on Gloo: a trainer grid (tp2 pp2) and
a rollout grid (tp4) colocated on all ranks, then side by side on ranks 0-7 and 8-15; every rank
prints its place in both grids and the weight-sync members."""

import json
import re
import subprocess
import sys

import pytest

from conftest import REPO, child_env, free_port, gloo_plugin, mcore_launch

WORLD = 16


def _launch(*args):
    script = REPO / "examples" / "python" / "rl_job.py"
    res = subprocess.run(
        [str(mcore_launch()), "--nproc", str(WORLD), "--master-port", str(free_port()), "--timeout", "240", "--",
         sys.executable, str(script), *args, "--timeout", "120"],
        capture_output=True, text=True, timeout=300, env=child_env(MCORE_BACKEND_PLUGIN=gloo_plugin()),
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    reports = {}
    for line in res.stdout.splitlines():
        m = re.match(r"\[rank (\d+)\]: (\{.*\})$", line)
        if m:
            reports[int(m.group(1))] = json.loads(m.group(2))
    assert sorted(reports) == list(range(WORLD)), res.stdout[-3000:]
    return reports


def _train(r, dp_size, base=0):
    """Megatron's place of global rank ``r`` in a tp2 pp2 grid starting at ``base``."""
    local = r - base
    tp_group = [r - r % 2, r - r % 2 + 1]
    return {"tp_rank": local % 2, "tp_size": 2, "pp_rank": local // (2 * dp_size), "pp_size": 2,
            "dp_rank": local // 2 % dp_size, "dp_size": dp_size, "first_stage": local < 2 * dp_size,
            "last_stage": local >= 2 * dp_size, "tp_group": tp_group, "tp_rank_sum": sum(tp_group)}


def _rollout(r, dp_size, base=0):
    tp_group = [r - (r - base) % 4 + k for k in range(4)]
    return {"tp_rank": (r - base) % 4, "tp_size": 4, "pp_rank": 0, "pp_size": 1, "dp_rank": (r - base) // 4,
            "dp_size": dp_size, "first_stage": True, "last_stage": True, "tp_group": tp_group,
            "tp_rank_sum": sum(tp_group)}


def test_rl_job_colocated_prints_each_ranks_place_in_both_grids():
    reports = _launch("--layout", "colocated", "--train-tp", "2", "--train-pp", "2", "--rollout-tp", "4")
    for r, o in reports.items():
        assert (o["rank"], o["world_size"], o["grids"]) == (r, WORLD, ["train", "rollout"])
        assert o["train"] == _train(r, 4), (r, o["train"])
        assert o["rollout"] == _rollout(r, 4), (r, o["rollout"])
        assert o["weight_sync"] == [0, 4, 8, 12]


def test_rl_job_side_by_side_prints_none_outside_each_grid():
    reports = _launch("--layout", "side-by-side", "--trainer-ranks", "8", "--rollout-tp", "4")
    for r, o in reports.items():
        if r < 8:
            assert o["train"] == _train(r, 2) and o["rollout"] is None, (r, o)
        else:
            assert o["train"] is None and o["rollout"] == _rollout(r, 2, base=8), (r, o)
        assert o["weight_sync"] == [0, 8, 12]


@pytest.mark.parametrize("ranks", ["0", "16"])
def test_rl_job_refuses_a_split_that_leaves_a_grid_empty(ranks):
    reports = subprocess.run(
        [sys.executable, str(REPO / "examples" / "python" / "rl_job.py"), "--layout", "side-by-side",
         "--trainer-ranks", ranks],
        capture_output=True, text=True, timeout=60, env=child_env(WORLD_SIZE=WORLD),
    )
    assert reports.returncode != 0 and f"--trainer-ranks {ranks} must leave ranks to both grids" in reports.stderr
