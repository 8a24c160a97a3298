"""Megatron-Core's ``parallel_state`` getter names over the library's runtime, for tools that
need the layout (ranks, sizes, stages) without torch. Process groups are rank lists here:
``get_*_group_ranks()`` ([] where this rank has no such group). Every getter raises
:class:`McoreError` when the library reports an error (not initialized, not a member).

The getters are those of :class:`mcore_init.named_grids.Grid` on the job's default grid (the
only grid of a job initialized without ``grids=``): one implementation answers both.
"""

from typing import List

from . import named_grids, runtime
from ._args import Args, cstr
from ._lib import McoreError, Status


def initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
                              virtual_pipeline_model_parallel_size=None, context_parallel_size=1,
                              hierarchical_context_parallel_sizes=None, expert_model_parallel_size=1,
                              expert_tensor_parallel_size=None, num_distributed_optimizer_instances=1,
                              order="tp-cp-ep-dp-pp", backend="gloo", timeout=None, verify=True,
                              seed=None, seed_policy="megatron", data_parallel_random_init=False,
                              nccl_communicator_config_path=None, comm_strategy="auto",
                              gtp_remat_size=1, expert_gtp_remat_size=1, create_all_gather_groups=False) -> bool:
    """Megatron's ``initialize_model_parallel`` arguments → :func:`mcore_init.runtime.initialize`
    (rendezvous from the environment); ``seed`` also seeds the rank's RNG streams
    (:func:`mcore_init.runtime.rng_tracker`); ``nccl_communicator_config_path`` is Megatron's
    per-group NCCL config YAML; ``gtp_remat_size``/``expert_gtp_remat_size`` are Megatron-Core
    0.19's weight-rematerialization axes; ``create_all_gather_groups`` does at init what
    Megatron's post-init helper of that name does (:func:`get_all_gather_group_ranks`). Returns
    True when it was already up with these settings."""
    names = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size",
             "vpp": "virtual_pipeline_model_parallel_size", "cp": "context_parallel_size",
             "hcp": "hierarchical_context_parallel_sizes", "ep": "expert_model_parallel_size",
             "etp": "expert_tensor_parallel_size", "dist_opt_instances": "num_distributed_optimizer_instances",
             "comm_config_path": "nccl_communicator_config_path", "gtp": "gtp_remat_size",
             "egtp": "expert_gtp_remat_size"}
    return runtime._initialize(
        Args("initialize_model_parallel", rename=names), comm_config=None, split_share=False, device=None, spares=0,
        gtp=gtp_remat_size, egtp=expert_gtp_remat_size, create_all_gather_groups=create_all_gather_groups,
        tp=tensor_model_parallel_size, pp=pipeline_model_parallel_size, vpp=virtual_pipeline_model_parallel_size,
        cp=context_parallel_size, hcp=hierarchical_context_parallel_sizes, ep=expert_model_parallel_size,
        etp=expert_tensor_parallel_size, dist_opt_instances=num_distributed_optimizer_instances, order=order,
        backend=backend, timeout=timeout, verify=verify, seed=seed, seed_policy=seed_policy,
        data_parallel_random_init=data_parallel_random_init, comm_strategy=comm_strategy,
        comm_config_path=nccl_communicator_config_path,
    )


def model_parallel_is_initialized() -> bool:
    return runtime.is_initialized()


def destroy_model_parallel():
    runtime.destroy()


class _DefaultGrid(named_grids.Grid):
    """The job's default grid, looked up at each query (so arguments are checked first, and
    NOT_INITIALIZED comes from the query), its argument errors named as this module's functions."""

    def __init__(self):
        self._where = ""

    @property
    def name(self):
        return named_grids.grids()[0]

    @property
    def _c(self):
        return cstr(self.name)


_DEFAULT = _DefaultGrid()


def _getter(name):
    method = getattr(named_grids.Grid, name)

    def getter(*args, **kwargs):
        return method(_DEFAULT, *args, **kwargs)

    getter.__name__ = getter.__qualname__ = name
    getter.__doc__ = method.__doc__
    return getter


for _name in named_grids.GETTERS:
    globals()[_name] = _getter(_name)
del _name


def get_all_gather_group_ranks(for_expert_parallelism=False) -> List[int]:
    """The all-gather twin of the dp-cp group (or, ``for_expert_parallelism``, of the expert-dp
    group; [] when ep = 1, as Megatron returns None): initialize with ``create_all_gather_groups``."""
    for_expert_parallelism = Args("get_all_gather_group_ranks").flag("for_expert_parallelism",
                                                                      for_expert_parallelism)
    kind = "expert_data_parallel" if for_expert_parallelism else "data_parallel_with_cp"
    try:
        return runtime.all_gather_group_ranks(kind)
    except McoreError as exc:
        if exc.status == Status.NOT_MEMBER:
            return []
        raise


__all__ = ["initialize_model_parallel", "model_parallel_is_initialized", "destroy_model_parallel",
           "get_all_gather_group_ranks", *named_grids.GETTERS]
