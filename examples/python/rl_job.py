#!/usr/bin/env python3
"""The layout of a reinforcement-learning job: a trainer (Megatron layout) and a rollout engine
as two named grids of one job, either on the same ranks (colocated) or on disjoint windows of
the world (side by side). Each rank prints one JSON line: its place in both grids (None where
it is outside one) and the members of the weight-sync group (trainer rank 0 plus every rollout
tensor-parallel leader), computed from the grids' layouts without any communication.

    mcore-launch --nproc 16 -- python examples/python/rl_job.py --layout colocated --rollout-tp 4
    mcore-launch --nproc 16 -- python examples/python/rl_job.py --layout side-by-side --trainer-ranks 8

Backend: --backend (default "gloo", whose plugin MCORE_BACKEND_PLUGIN names; "nccl" on GPUs).
"""

import argparse
import json
import os
import sys
from pathlib import Path

try:  # run from a checkout without installing the package
    import mcore_init  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

import mcore_init
from mcore_init import runtime


def grids_of(a, world):
    """The two grids' layouts for ``initialize(grids=...)``; the trainer is the default grid."""
    train = dict(tp=a.train_tp, pp=a.train_pp)
    rollout = dict(tp=a.rollout_tp, seed=a.rollout_seed)
    if a.layout == "side-by-side":
        if not 0 < a.trainer_ranks < world:
            sys.exit(f"--trainer-ranks {a.trainer_ranks} must leave ranks to both grids (world size {world})")
        train["local_world_size"] = a.trainer_ranks
        rollout.update(rank_offset=a.trainer_ranks, local_world_size=world - a.trainer_ranks)
    return {"train": train, "rollout": rollout}


def place(grid):
    """This rank's place in ``grid`` (Megatron's getters answered for that grid), or None outside it."""
    if not grid.is_member():
        return None
    rank = runtime.world()[0]
    return {
        "tp_rank": grid.get_tensor_model_parallel_rank(),
        "tp_size": grid.get_tensor_model_parallel_world_size(),
        "pp_rank": grid.get_pipeline_model_parallel_rank(),
        "pp_size": grid.get_pipeline_model_parallel_world_size(),
        "dp_rank": grid.get_data_parallel_rank(),
        "dp_size": grid.get_data_parallel_world_size(),
        "first_stage": grid.is_pipeline_first_stage(),
        "last_stage": grid.is_pipeline_last_stage(),
        "tp_group": grid.group_ranks("tensor_model_parallel"),
        # one collective over the grid's tensor group: every member contributes its global rank
        "tp_rank_sum": grid.allreduce_sum("tensor_model_parallel", [rank])[0],
    }


def weight_sync_members(world):
    """Trainer rank 0 and every rollout tensor-parallel leader, from the grids' layouts alone."""
    members = set()
    with mcore_init.grid("train").topology() as train, mcore_init.grid("rollout").topology() as rollout:
        members.add(next(r for r in range(world) if train.in_grid(r)))
        members.update(r for r in range(world)
                       if rollout.in_grid(r) and rollout.group("tensor_model_parallel", r).rank == 0)
    return sorted(members)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layout", choices=("colocated", "side-by-side"), default="colocated")
    p.add_argument("--trainer-ranks", type=int, default=None,
                   help="side by side: the trainer's ranks (0 .. N-1); the rollout engine gets the rest "
                        "(default: half the world)")
    p.add_argument("--train-tp", type=int, default=2)
    p.add_argument("--train-pp", type=int, default=2)
    p.add_argument("--rollout-tp", type=int, default=4)
    p.add_argument("--seed", type=int, default=1234, help="the trainer's seed")
    p.add_argument("--rollout-seed", type=int, default=7)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds bounding every wait of the init")
    a = p.parse_args()

    world = int(os.environ["WORLD_SIZE"])
    if a.trainer_ranks is None:
        a.trainer_ranks = world // 2
    mcore_init.initialize(grids=grids_of(a, world), seed=a.seed, backend=a.backend, timeout=a.timeout)
    rank, world = runtime.world()
    report = {
        "rank": rank,
        "world_size": world,
        "layout": a.layout,
        "grids": mcore_init.grids(),
        "train": place(mcore_init.grid("train")),
        "rollout": place(mcore_init.grid("rollout")),
        "weight_sync": weight_sync_members(world),
    }
    print(json.dumps(report), flush=True)
    mcore_init.destroy()


if __name__ == "__main__":
    main()
