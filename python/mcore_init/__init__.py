"""mcore_init: Megatron-Core's parallel state (topology, RNG seeds, runtime init) via ctypes.

Modules: :mod:`~mcore_init.topology` (layouts without processes), :mod:`~mcore_init.rng`
(policy seeds, tracker, Philox), :mod:`~mcore_init.runtime` (this process's initialization and
groups), :mod:`~mcore_init.groups` (groups made after init by their members only),
:mod:`~mcore_init.parallel_state` (Megatron's getter names),
:mod:`~mcore_init.id_groups` (groups joined from unique-id bytes: a rollout engine's weight-sync
group without torch or a store),
:mod:`~mcore_init.named_grids` (several named grids in one job: :func:`initialize` with
``grids=``, then :func:`grid` and :func:`grids`), :func:`torch_store` (torch's process group on
the job's own store, :mod:`~mcore_init.torch_interop`). A failed call raises
:class:`McoreError`; compare its ``status`` with :class:`Status` (``Status.NOT_MEMBER``).
"""

from . import id_groups
from ._lib import ABI_VERSION, McoreError, Status, version
from .named_grids import Grid, PgCollection, PgGroup, grid, grids
from .runtime import comm_generation, comm_memory, destroy, initialize, resume, suspend
from .torch_interop import torch_store
from .topology import GroupInfo, PipelineInfo, RecoveryPlan, Sizes, Topology, plan_recovery

__all__ = ["ABI_VERSION", "McoreError", "Status", "version", "Topology", "GroupInfo", "PipelineInfo", "Sizes", "RecoveryPlan",
           "plan_recovery", "initialize", "destroy", "grid", "grids", "Grid", "PgCollection", "PgGroup",
           "suspend", "resume", "comm_memory", "comm_generation", "torch_store", "id_groups"]
