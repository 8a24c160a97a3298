#!/usr/bin/env python3
"""A training script's start, torchrun style: bring up model parallelism from the launcher's
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), print where this rank sits, tear down.

    mcore-launch --nproc 4 -- python examples/python/train_init.py --tp 2
    torchrun --nproc-per-node 4 examples/python/train_init.py --tp 2

Backend: --backend (default "gloo", whose plugin MCORE_BACKEND_PLUGIN names, e.g.
target/gloo-plugin/libmcore_init_gloo.so; a plugin path or "nccl" work too).
"""

import argparse
import json
import sys
from pathlib import Path

try:  # run from a checkout without installing the package
    import mcore_init  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from mcore_init import parallel_state as ps
from mcore_init import runtime


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--cp", type=int, default=1)
    p.add_argument("--ep", type=int, default=1)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds bounding every wait of the init")
    a = p.parse_args()

    ps.initialize_model_parallel(
        tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp, context_parallel_size=a.cp,
        expert_model_parallel_size=a.ep, backend=a.backend, timeout=a.timeout,
    )
    rank, world = runtime.world()
    report = {
        "rank": rank,
        "world_size": world,
        "tp_rank": ps.get_tensor_model_parallel_rank(),
        "tp_size": ps.get_tensor_model_parallel_world_size(),
        "pp_rank": ps.get_pipeline_model_parallel_rank(),
        "pp_size": ps.get_pipeline_model_parallel_world_size(),
        "dp_rank": ps.get_data_parallel_rank(),
        "dp_size": ps.get_data_parallel_world_size(),
        "first_stage": ps.is_pipeline_first_stage(),
        "last_stage": ps.is_pipeline_last_stage(),
        "tp_group": ps.get_tensor_model_parallel_group_ranks(),
        # one collective over the tensor group: every member contributes its global rank
        "tp_rank_sum": runtime.allreduce_sum("tensor_model_parallel", [rank])[0],
    }
    print(json.dumps(report), flush=True)
    ps.destroy_model_parallel()


if __name__ == "__main__":
    main()
