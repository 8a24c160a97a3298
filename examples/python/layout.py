#!/usr/bin/env python3
"""Print a parallel layout and one rank's RNG seeds using only the mcore_init package (no torch,
no processes). Example: python layout.py --world-size 16 --tp 2 --pp 4 --rank 5 --seed 1234
"""

import argparse
import sys
from pathlib import Path

try:  # run from a checkout without installing the package
    import mcore_init  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from mcore_init import McoreError
from mcore_init.rng import stream_seeds
from mcore_init.topology import Topology


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=16)
    for flag in ("tp", "pp", "cp", "ep"):
        p.add_argument(f"--{flag}", type=int, default=1 if flag != "tp" else 2)
    p.add_argument("--vpp", type=int)
    p.add_argument("--etp", type=int)
    p.add_argument("--order", default="tp-cp-ep-dp-pp")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--seed-policy", default="megatron")
    a = p.parse_args()
    try:
        topo = Topology(a.world_size, tp=a.tp, pp=a.pp, vpp=a.vpp, cp=a.cp, ep=a.ep, etp=a.etp, order=a.order)
    except McoreError as exc:
        raise SystemExit(f"layout.py: {exc}")
    with topo:
        print(topo)
        for kind in topo.kinds():
            print(f"{kind:40s} {topo.groups(kind)}")
        info = topo.pipeline(a.rank)
        print(f"rank {a.rank}: pipeline stage {info.stage}/{info.num_stages}, next {info.next}, prev {info.prev}")
        for name, seed in stream_seeds(topo, a.rank, a.seed, a.seed_policy).items():
            print(f"rank {a.rank} seed {name} = {seed}")


if __name__ == "__main__":
    main()
