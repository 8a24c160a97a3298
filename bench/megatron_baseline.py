"""One rank of the Megatron-Core baseline for the init benchmark.

Started once per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment
(bench/run_init_bench.sh starts them; torchrun --no-python works too, see --agent-store).
It times, from the moment the kernel created this process:

  import torch + megatron.core.parallel_state -> init_process_group("gloo") ->
  megatron.core.parallel_state.initialize_model_parallel(tp, pp, cp, ep) -> barrier()

With --backend nccl --device D (a GPU run, bench/gpu_vs_megatron.sh): init_process_group("nccl",
device_id=cuda:D) -> initialize_model_parallel -> one all-reduce of a device tensor on every NCCL
group Megatron keeps (torch creates an NCCL communicator at a group's first collective, so this is
when the communicators exist) -> device synchronize -> barrier().

and prints one JSON line. With --count-store the rendezvous TCPStore is wrapped in a Python
Store that counts the operations torch, Gloo and Megatron send to it (see ROUND TRIP RULE
below); the wrapper costs time, so timings are taken from runs without it.
"""

import os
import time


def _boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def process_start_boottime() -> float:
    """Seconds since boot at which the kernel created this process (/proc/self/stat field 22).

    The kernel counts starttime in clock ticks of CLOCK_BOOTTIME (10 ms at CLK_TCK=100), so
    the elapsed times derived from it carry that resolution."""
    with open("/proc/self/stat", "rb") as f:
        stat = f.read().decode()
    # comm (field 2) may hold spaces and parentheses: split after its closing ')'.
    fields_from_3 = stat[stat.rindex(")") + 2:].split()
    starttime_ticks = int(fields_from_3[22 - 3])
    return starttime_ticks / os.sysconf("SC_CLK_TCK")


START = process_start_boottime()
T_MAIN = _boottime()

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

warnings.filterwarnings("ignore")  # megatron warns that Transformer Engine/Apex are absent

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from megatron.core import parallel_state  # noqa: E402

T_IMPORTED = _boottime()

# ROUND TRIP RULE: one round trip = one request on the TCPStore wire whose reply the client
# waits for (torch 2.15 TCPStore client, docs/wire-protocol.md). get and multi_get send
# WAIT then GET/MULTI_GET and wait for both replies: 2. add, check, wait, compare_set,
# delete_key, num_keys, list_keys, queue_len, queue_pop, barrier: 1. set, multi_set, append,
# queue_push are fire-and-forget (no reply): 0 round trips, but they are counted as requests.
# Not counted: the TCPStore connection handshake (VALIDATE + PING, 1 round trip per rank) and
# init/ worker counting (1 ADD per rank plus the master's polling), done once per rank in the
# TCPStore constructor, before any group exists.
ROUND_TRIPS = {
    "get": 2, "multi_get": 2,
    "add": 1, "check": 1, "wait": 1, "compare_set": 1, "delete_key": 1, "num_keys": 1,
    "list_keys": 1, "queue_len": 1, "queue_pop": 1, "barrier": 1,
    "set": 0, "multi_set": 0, "append": 0, "queue_push": 0,
}
REQUESTS = {"get": 2, "multi_get": 2}  # everything else is one request


class CountingStore(dist.Store):
    """Forwards every call to a TCPStore and counts it by operation name."""

    def __init__(self, inner: dist.Store):
        super().__init__()
        self.inner = inner
        self.ops: dict = {}

    def _count(self, op: str) -> None:
        self.ops[op] = self.ops.get(op, 0) + 1

    def set(self, key, value):
        self._count("set")
        return self.inner.set(key, value)

    def get(self, key):
        self._count("get")
        return self.inner.get(key)

    def add(self, key, value):
        self._count("add")
        return self.inner.add(key, value)

    def compare_set(self, key, expected, desired):
        self._count("compare_set")
        return self.inner.compare_set(key, expected, desired)

    def check(self, keys):
        self._count("check")
        return self.inner.check(keys)

    def wait(self, keys, timeout=None):
        self._count("wait")
        if timeout is None:
            return self.inner.wait(keys)
        return self.inner.wait(keys, timeout)

    def delete_key(self, key):
        self._count("delete_key")
        return self.inner.delete_key(key)

    def num_keys(self):
        self._count("num_keys")
        return self.inner.num_keys()

    def multi_get(self, keys):
        self._count("multi_get")
        return self.inner.multi_get(keys)

    def multi_set(self, keys, values):
        self._count("multi_set")
        return self.inner.multi_set(keys, values)

    def append(self, key, value):
        self._count("append")
        return self.inner.append(key, value)

    def has_extended_api(self):
        return True

    def set_timeout(self, timeout):
        return self.inner.set_timeout(timeout)

    def round_trips(self) -> int:
        unknown = set(self.ops) - set(ROUND_TRIPS)
        if unknown:
            raise RuntimeError(f"no round-trip rule for store operations {sorted(unknown)}")
        return sum(ROUND_TRIPS[op] * n for op, n in self.ops.items())

    def requests(self) -> int:
        return sum(REQUESTS.get(op, 1) * n for op, n in self.ops.items())


class GroupCounter:
    """Wraps torch.distributed.new_group to count the calls Megatron makes on this rank."""

    def __init__(self):
        self.calls = 0
        self.member = 0
        self.gloo_twins = 0
        self._orig = dist.new_group
        dist.new_group = self._new_group

    def _new_group(self, *args, **kwargs):
        self.calls += 1
        ranks = kwargs.get("ranks", args[0] if args else None)
        if ranks is None or dist.get_rank() in ranks:
            self.member += 1
            if kwargs.get("backend") == "gloo":
                self.gloo_twins += 1
        return self._orig(*args, **kwargs)


def allreduce_every_nccl_group(device: int) -> int:
    """One all-reduce on every distinct NCCL process group parallel_state holds for this rank
    (module globals holding a ProcessGroup or a list of them; Gloo twins skipped), each checked
    against the group's size. Returns how many groups."""
    seen = {}
    for value in vars(parallel_state).values():
        for pg in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(pg, dist.ProcessGroup) and id(pg) not in seen and dist.get_backend(pg) == "nccl":
                seen[id(pg)] = pg
    results = []
    for pg in seen.values():
        t = torch.ones(1, device=torch.device("cuda", device), dtype=torch.int64)
        dist.all_reduce(t, group=pg)
        results.append((dist.get_world_size(pg), t))
    torch.cuda.synchronize(device)
    for size, t in results:  # checked after the synchronize, so no group waits on another's check
        if int(t.item()) != size:
            raise RuntimeError(f"all-reduce on a group of {size} gave {int(t.item())}")
    return len(seen)


def env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        sys.exit(f"megatron_baseline: environment variable {name} is not set")
    try:
        return int(value)
    except ValueError:
        sys.exit(f"megatron_baseline: {name} must be an integer, got '{value}'")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--cp", type=int, default=2)
    p.add_argument("--ep", type=int, default=1, help="expert_model_parallel_size")
    p.add_argument("--count-store", action="store_true",
                   help="wrap the TCPStore in a counting Python store (slower; for round trips)")
    p.add_argument("--agent-store", action="store_true",
                   help="every rank is a TCPStore client (torchrun's agent serves the store)")
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--device", type=int, default=0, help="CUDA device with --backend nccl")
    a = p.parse_args()

    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    addr, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), env_int("MASTER_PORT")
    timeout = datetime.timedelta(seconds=a.timeout_s)

    t0 = _boottime()
    tcp = dist.TCPStore(addr, port, world, is_master=(rank == 0 and not a.agent_store),
                        timeout=timeout, wait_for_workers=False)
    store = CountingStore(tcp) if a.count_store else tcp
    if a.backend == "nccl":
        torch.cuda.set_device(a.device)
        dist.init_process_group("nccl", store=store, rank=rank, world_size=world, timeout=timeout,
                                device_id=torch.device("cuda", a.device))
    else:
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    t1 = _boottime()

    groups = GroupCounter()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=a.tp,
        pipeline_model_parallel_size=a.pp,
        context_parallel_size=a.cp,
        expert_model_parallel_size=a.ep,
        distributed_timeout_minutes=max(1, int(a.timeout_s // 60)),
    )
    nccl_groups = allreduce_every_nccl_group(a.device) if a.backend == "nccl" else 0
    t2 = _boottime()
    dist.barrier()
    t3 = _boottime()
    cpu = os.times()

    record = {
        "rank": rank,
        "world_size": world,
        "tp": a.tp, "pp": a.pp, "cp": a.cp, "ep": a.ep,
        "dp": parallel_state.get_data_parallel_world_size(),
        "ready_since_process_start_s": round(t3 - START, 4),
        "import_s": round(T_IMPORTED - START, 4),
        "interpreter_start_s": round(T_MAIN - START, 4),
        "init_process_group_s": round(t1 - t0, 4),
        "init_model_parallel_s": round(t2 - t1, 4),
        "final_barrier_s": round(t3 - t2, 4),
        "init_total_s": round(t3 - t0, 4),
        "cpu_s_at_ready": round(cpu.user + cpu.system, 3),
        "start_boottime_s": round(START, 3),
        "init_start_boottime_s": round(t0, 4),
        "ready_boottime_s": round(t3, 4),
        "groups_created": groups.calls,
        "groups_member": groups.member,
        "gloo_twin_groups_member": groups.gloo_twins,
        "backend": a.backend,
        "nccl_groups_allreduced": nccl_groups,
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if a.backend == "nccl" else None,
        "store_counted": a.count_store,
        "store_round_trips": store.round_trips() if a.count_store else None,
        "store_requests": store.requests() if a.count_store else None,
        "store_ops": dict(sorted(store.ops.items())) if a.count_store else None,
        "torch": torch.__version__,
    }
    print(json.dumps(record), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
