"""A torchrun worker for the c10d-rendezvous check (scripts/test.d/71-torch-store.sh): torchrun's
rendezvous runs on our store server (--rdzv-endpoint); this worker also builds its process group
(Gloo, CPU) on a store client of our server (MCORE_TEST_STORE_PORT), all-reduces, runs a
barrier, queues each rank for rank 0 to pop, meets at the store's BARRIER, and prints "WORKER_OK rank world sum".
"""
import os, sys, warnings
from datetime import timedelta

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
run = os.environ.get("TORCHELASTIC_RUN_ID", "run")
tcp = dist.TCPStore("127.0.0.1", int(os.environ["MCORE_TEST_STORE_PORT"]), is_master=False,
                    timeout=timedelta(seconds=60))
store = dist.PrefixStore(f"train/{run}", tcp)
dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=60))
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
want = world * (world + 1) / 2
dist.barrier()
# Every rank queues its rank; rank 0 pops them all (blocking pops, bounded by the store timeout).
store.queue_push("ranks", str(rank))
if rank == 0:
    seen = sorted(int(store.queue_pop("ranks")) for _ in range(world))
    if seen != list(range(world)):
        sys.exit(f"rank 0 popped {seen} from the queue")
# The BARRIER query (TCPStore.barrier), once the queue is drained.
tcp.barrier(f"train/{run}/done", world, timedelta(seconds=60))
dist.destroy_process_group()
if t.item() != want:
    sys.exit(f"rank {rank}: all_reduce gave {t.item()}, want {want}")
print(f"WORKER_OK {rank} {world} {t.item():g}", flush=True)
