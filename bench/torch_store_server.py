"""torch's own libuv TCPStore server on 127.0.0.1:PORT for the store benchmarks
(bench/store_scale.sh, bench/scale_sim.sh): prints "ready", serves until stdin closes."""
import datetime
import sys

import torch.distributed as dist

store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=True, use_libuv=True,
                      wait_for_workers=False, timeout=datetime.timedelta(seconds=300))
print("ready", flush=True)
sys.stdin.read()
