"""torch and mcore_init in one process (scripts/test.d/71-torch-store.sh), under mcore-launch or
torchrun: mcore_init initializes first (Gloo plugin: argv[1]; tp 2), then torch's process group is
built on mcore_init.torch_store(); both all-reduce and the results must match the world. Prints
"SAME_PROCESS_OK rank world torch_sum mcore_tp_sum"."""
import os, sys, warnings
from datetime import timedelta

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import mcore_init  # noqa: E402
from mcore_init import runtime  # noqa: E402

mcore_init.initialize(tp=2, backend=sys.argv[1], timeout=60)
rank, world = runtime.world()
dist.init_process_group("gloo", store=mcore_init.torch_store(timeout=60), rank=rank, world_size=world,
                        timeout=timedelta(seconds=60))
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
want = world * (world + 1) / 2
if t.item() != want:
    sys.exit(f"rank {rank}: torch all_reduce gave {t.item()}, want {want}")
tp = runtime.allreduce_sum("tensor_model_parallel", [rank])[0]
peers = runtime.group_ranks("tensor_model_parallel")
if tp != sum(peers):
    sys.exit(f"rank {rank}: mcore_init tp all-reduce gave {tp}, want {sum(peers)}")
dist.barrier()
dist.destroy_process_group()
runtime.destroy()
print(f"SAME_PROCESS_OK {rank} {world} {t.item():g} {tp}", flush=True)
