#!/usr/bin/env python3
"""The trainer side of vLLM's UID-mode weight sync, without torch (docs/id-groups.md).

The trainer lays out its grid (Megatron layout, computed here without processes), mints NCCL's
unique id, builds the init info vLLM's ``/init_weight_transfer_engine`` takes, posts it (with
``--vllm-url``) while it joins the weight-sync group as rank 0 with vLLM's warm-up all-reduce,
then broadcasts one packed buffer. On a machine without a GPU, ``--cpu-only`` stops after the
init info (minting an id needs the libnccl library but no GPU):

    python examples/python/rl_trainer_uid.py --cpu-only --workers 4
    python examples/python/rl_trainer_uid.py --vllm-url http://127.0.0.1:8000 --workers 4

Each step prints one JSON line. The weight update protocol after the join (``/start_weight_update``,
``/update_weights`` with the names, dtypes and shapes of what is broadcast,
``/finish_weight_update``) is vLLM's and left to the caller: this example broadcasts one buffer of
``--packed-bytes`` bytes from host memory and prints its checksum.
"""

import argparse
import hashlib
import json
import sys
import threading
import urllib.request
from pathlib import Path

try:  # run from a checkout without installing the package
    import mcore_init  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from mcore_init import McoreError, id_groups
from mcore_init.topology import Topology


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def post(url, body, timeout):
    """POST ``body`` as JSON; the reply's status and text (or the error) as a dict."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return {"status": r.status, "reply": r.read(2000).decode(errors="replace")}
    except Exception as exc:  # reported, not raised: the join's own deadline decides the outcome
        return {"error": str(exc)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trainer-world", type=int, default=8, help="the trainer's ranks (its grid's world size)")
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--workers", type=int, default=1, help="vLLM workers in the weight-sync group")
    p.add_argument("--vllm-url", default=None, help="the vLLM server to post the init info to")
    p.add_argument("--packed-bytes", type=int, default=1 << 20, help="bytes of the packed buffer broadcast")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds bounding the join and the broadcast")
    p.add_argument("--cpu-only", action="store_true", help="stop after printing the init info")
    a = p.parse_args()

    with Topology(a.trainer_world, tp=a.tp, pp=a.pp) as grid:
        # The weight-sync group's trainer member is the grid's rank 0 (it holds a full copy after
        # gathering); every other trainer rank stays out of the side group.
        emit("grid", world_size=a.trainer_world, tensor_model_parallel=grid.groups("tensor_model_parallel"),
             pipeline_model_parallel=grid.groups("pipeline_model_parallel"))

    lib = id_groups.nccl_library()
    emit("nccl", **lib)
    uid = id_groups.unique_id()
    world = 1 + a.workers
    info = id_groups.vllm_init_info(uid, world, rank_offset=1)
    emit("init_info", init_info=info)
    if a.cpu_only:
        return

    poster = None
    if a.vllm_url:
        # vLLM's workers enter ncclCommInitRank inside the request: post in a thread, join here.
        result = {}
        url = a.vllm_url.rstrip("/") + "/init_weight_transfer_engine"
        poster = threading.Thread(target=lambda: result.update(post(url, {"init_info": info}, a.timeout)))
        poster.start()
    try:
        group = id_groups.join(uid, world, 0, name="weight_sync", timeout=a.timeout, warmup=True)
    except McoreError as exc:
        emit("join", ok=False, error=str(exc))
        raise SystemExit(1)
    finally:
        if poster:
            poster.join(a.timeout)
            emit("posted", url=url, **result)
    with group:
        emit("join", ok=True, rank=group.rank, size=group.size, communicator=hex(group.communicator()))
        packed = bytes((i * 131 + 7) % 251 for i in range(a.packed_bytes))
        out = group.broadcast(packed, root=0)
        emit("broadcast", bytes=len(out), sha256=hashlib.sha256(out).hexdigest(), same=out == packed)


if __name__ == "__main__":
    main()
