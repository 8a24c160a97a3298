"""torch and mcore_init in one process: :func:`torch_store` hands ``torch.distributed`` a client
of the job's own rendezvous store, so torch needs no store (and no port) of its own.

Under every launcher the same two lines work::

    mcore_init.initialize(tp=2, backend="gloo")            # or parallel_state.initialize_model_parallel
    rank, world = mcore_init.runtime.world()
    torch.distributed.init_process_group("gloo", store=mcore_init.torch_store(), rank=rank, world_size=world)

Why: torch's ``env://`` initialization makes rank 0 host a store on MASTER_PORT. Under torchrun
that works (torchrun's agent hosts the store and everyone, mcore_init included, is a client), but
under mcore-launch, Slurm or mpirun mcore_init's rank 0 already hosts its store there and torch
fails with ``Ping failed ... Got: 1396785997``. See docs/getting-started.md.
"""

import datetime
import os

from . import runtime

#: The key prefix of torch's keys in the shared store (mcore_init's own keys start with ``mcore_init/``).
PREFIX = "torch"


def torch_store(timeout=300.0):
    """A ``torch.distributed.Store`` for ``init_process_group(store=..., rank=..., world_size=...)``
    in a process that has initialized mcore_init: a client of the job's rendezvous store at
    MASTER_ADDR:MASTER_PORT (torchrun's agent store under torchrun; rank 0's mcore_init store
    otherwise), its keys under ``torch/``. A world of one without torchrun (mcore_init keeps its
    store in memory) gets a fresh in-process ``HashStore``. ``timeout``: seconds for torch's store
    calls.

    Rank 0's store must stay open to torch's client, which cannot prove the job's secret: set
    ``MCORE_STORE_KEEP_OPEN=1`` in the ranks' environment before :func:`mcore_init.initialize`
    (a job with ``MCORE_STORE_TOKEN`` cannot share its store with torch). Destroying mcore_init
    (on rank 0) ends the store torch uses: destroy torch's process group first."""
    import torch.distributed as dist  # torch is optional: only this function needs it

    if not runtime.is_initialized():
        raise RuntimeError("torch_store(): initialize mcore_init first (the store it hands torch is the job's own)")
    _, world = runtime.world()
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    delta = datetime.timedelta(seconds=timeout)
    if world == 1 and not agent:
        return dist.PrefixStore(PREFIX, dist.HashStore())
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        raise RuntimeError(
            "torch_store(): MASTER_ADDR and MASTER_PORT are not both set (mcore_init derived its store's address "
            "from the launcher); export them as mcore_init's rank 0 hosts the store (see docs/getting-started.md)")
    if not agent:
        if os.environ.get("MCORE_STORE_TOKEN") or os.environ.get("MCORE_STORE_TOKEN_FILE"):
            raise RuntimeError("torch_store(): MCORE_STORE_TOKEN is set, and torch's store client cannot prove "
                               "a token; unset it to share the store with torch")
        if os.environ.get("MCORE_STORE_KEEP_OPEN", "").strip() != "1":
            raise RuntimeError("torch_store(): rank 0's store serves only mcore_init's own ranks after "
                               "initialization; set MCORE_STORE_KEEP_OPEN=1 in every rank's environment before "
                               "mcore_init.initialize() so that torch's client may connect")
    client = dist.TCPStore(addr, int(port), is_master=False, timeout=delta, wait_for_workers=False)
    return dist.PrefixStore(PREFIX, client)
