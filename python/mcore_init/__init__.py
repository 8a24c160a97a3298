"""mcore_init: Megatron-Core's parallel state (topology, RNG seeds, runtime init) via ctypes.

Modules: :mod:`~mcore_init.topology` (layouts without processes), :mod:`~mcore_init.rng`
(policy seeds, tracker, Philox), :mod:`~mcore_init.runtime` (this process's initialization and
groups), :mod:`~mcore_init.groups` (groups made after init by their members only),
:mod:`~mcore_init.parallel_state` (Megatron's getter names).
"""

from ._lib import ABI_VERSION, McoreError, version
from .topology import GroupInfo, PipelineInfo, RecoveryPlan, Sizes, Topology, plan_recovery

__all__ = ["ABI_VERSION", "McoreError", "version", "Topology", "GroupInfo", "PipelineInfo", "Sizes", "RecoveryPlan", "plan_recovery"]
