"""Megatron-Core's ``parallel_state`` getter names over the library's runtime, for tools that
need the layout (ranks, sizes, stages) without torch. Process groups are rank lists here:
``get_*_group_ranks()``. Every getter raises :class:`McoreError` when the library reports an
error (not initialized, not a member).
"""

import ctypes
from typing import List, Optional

from . import runtime
from ._args import Args
from ._lib import McoreError, declare, mcore_last_error_message, mcore_status_str

_INVALID_ARGUMENT = 1
_NOT_INITIALIZED = 6
_NOT_MEMBER = 20


def _getter(name):
    return declare(name, ctypes.c_int32)


def _call(fn, name=None):
    value = fn()
    if value < 0:
        name = name or fn.__name__
        message = mcore_last_error_message().decode()
        status = _NOT_INITIALIZED if not runtime.is_initialized() else _status_from(message)
        raise McoreError(status, mcore_status_str(status).decode(), f"{name}: {message}")
    return value


def _status_from(message):
    # The getters return -1 without a status code: initialized, the one other failure is
    # NOT_MEMBER (its message says so); anything else is reported as an invalid argument.
    return _NOT_MEMBER if "not a member" in message else _INVALID_ARGUMENT


_G = {
    name: _getter(f"mcore_{name}")
    for name in (
        "get_tensor_model_parallel_rank", "get_tensor_model_parallel_world_size", "get_tensor_model_parallel_src_rank",
        "get_pipeline_model_parallel_rank", "get_pipeline_model_parallel_world_size",
        "get_pipeline_model_parallel_first_rank", "get_pipeline_model_parallel_last_rank",
        "get_pipeline_model_parallel_next_rank", "get_pipeline_model_parallel_prev_rank",
        "get_data_parallel_rank", "get_data_parallel_world_size", "get_data_parallel_src_rank",
        "get_data_parallel_rank_with_cp", "get_data_parallel_world_size_with_cp", "get_data_parallel_src_rank_with_cp",
        "get_context_parallel_rank", "get_context_parallel_world_size",
        "get_model_parallel_rank", "get_model_parallel_world_size", "get_model_parallel_src_rank",
        "get_expert_model_parallel_rank", "get_expert_model_parallel_world_size",
        "get_expert_tensor_parallel_rank", "get_expert_tensor_parallel_world_size",
        "get_expert_data_parallel_rank", "get_expert_data_parallel_world_size",
        "get_virtual_pipeline_model_parallel_world_size",
    )
}
_stage_fns = {
    name: declare(f"mcore_{name}", ctypes.c_int32, ctypes.c_int32)
    for name in ("is_pipeline_first_stage", "is_pipeline_last_stage", "is_rank_in_embedding_group")
}


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


def get_tensor_model_parallel_rank() -> int:
    return _call(_G["get_tensor_model_parallel_rank"])


def get_tensor_model_parallel_world_size() -> int:
    return _call(_G["get_tensor_model_parallel_world_size"])


def get_tensor_model_parallel_src_rank() -> int:
    return _call(_G["get_tensor_model_parallel_src_rank"])


def get_pipeline_model_parallel_rank() -> int:
    return _call(_G["get_pipeline_model_parallel_rank"])


def get_pipeline_model_parallel_world_size() -> int:
    return _call(_G["get_pipeline_model_parallel_world_size"])


def get_pipeline_model_parallel_first_rank() -> int:
    return _call(_G["get_pipeline_model_parallel_first_rank"])


def get_pipeline_model_parallel_last_rank() -> int:
    return _call(_G["get_pipeline_model_parallel_last_rank"])


def get_pipeline_model_parallel_next_rank() -> int:
    return _call(_G["get_pipeline_model_parallel_next_rank"])


def get_pipeline_model_parallel_prev_rank() -> int:
    return _call(_G["get_pipeline_model_parallel_prev_rank"])


def _flags(func, **flags):
    """The bool arguments of ``func``, checked (a string such as "no" would be truthy)."""
    a = Args(func)
    return [a.flag(name, value) for name, value in flags.items()]


def _dp(base, with_context_parallel):
    return _call(_G[base + ("_with_cp" if with_context_parallel else "")])


def _gtp_group(kind):
    """This rank's group of a Megatron-Core 0.19 kind, or None when not initialized with that
    axis > 1 (the getters then use the replicate group, as Megatron's alias does)."""
    g = runtime.group(kind)
    return g if g is not None and _remat_size(kind) > 1 else None


def _remat_size(kind):
    axis = "expert_gtp_weight_remat" if kind.startswith("expert") else "gtp_weight_remat"
    g = runtime.group(axis)
    return g.size if g is not None else 1


def _dp_gtp_kind(with_context_parallel):
    return "data_parallel_with_cp_with_gtp_remat" if with_context_parallel else "data_parallel_with_gtp_remat"


def _dp_info(with_context_parallel, partial_data_parallel, with_gtp_remat):
    """The group a data-parallel getter answers from when it is not the plain (or with-cp) one:
    the gtp-inclusive group (gtp > 1 and ``with_gtp_remat``, Megatron-Core 0.19), else the
    intra-partial group; None for the plain one."""
    if partial_data_parallel and not with_context_parallel:
        _partial_dp()
    if with_gtp_remat and (g := _gtp_group(_dp_gtp_kind(with_context_parallel))) is not None:
        return g
    return runtime.group("intra_partial_data_parallel_with_cp") if partial_data_parallel else None


def get_data_parallel_rank(with_context_parallel=False, partial_data_parallel=False, with_gtp_remat=True) -> int:
    """Megatron-Core 0.19: with gtp > 1 and ``with_gtp_remat`` (default), the rank in the
    gtp-inclusive group; else in the replicate group."""
    with_context_parallel, partial_data_parallel, with_gtp_remat = _flags(
        "get_data_parallel_rank", with_context_parallel=with_context_parallel,
        partial_data_parallel=partial_data_parallel, with_gtp_remat=with_gtp_remat)
    g = _dp_info(with_context_parallel, partial_data_parallel, with_gtp_remat)
    return g.rank if g is not None else _dp("get_data_parallel_rank", with_context_parallel)


def get_data_parallel_world_size(with_context_parallel=False, partial_data_parallel=False, with_gtp_remat=True) -> int:
    with_context_parallel, partial_data_parallel, with_gtp_remat = _flags(
        "get_data_parallel_world_size", with_context_parallel=with_context_parallel,
        partial_data_parallel=partial_data_parallel, with_gtp_remat=with_gtp_remat)
    g = _dp_info(with_context_parallel, partial_data_parallel, with_gtp_remat)
    return g.size if g is not None else _dp("get_data_parallel_world_size", with_context_parallel)


def _partial_dp():
    # Only with cp, as Megatron asserts ("Partial DP for Optimizer needs to include CP").
    raise McoreError(_INVALID_ARGUMENT, "invalid argument",
                     "partial_data_parallel=True needs with_context_parallel=True (as in Megatron)")


def get_data_parallel_src_rank(with_context_parallel=False) -> int:
    """The first rank of the replicate data-parallel group, also with gtp > 1: Megatron-Core
    0.19.2 answers from that group while its default rank and size use the gtp-inclusive one
    (reproduced on purpose; docs/conformance.md)."""
    (with_context_parallel,) = _flags("get_data_parallel_src_rank", with_context_parallel=with_context_parallel)
    return _dp("get_data_parallel_src_rank", with_context_parallel)


def get_context_parallel_rank() -> int:
    return _call(_G["get_context_parallel_rank"])


def get_context_parallel_world_size() -> int:
    return _call(_G["get_context_parallel_world_size"])


def get_model_parallel_src_rank() -> int:
    return _call(_G["get_model_parallel_src_rank"])


def get_expert_model_parallel_rank() -> int:
    return _call(_G["get_expert_model_parallel_rank"])


def get_expert_model_parallel_world_size() -> int:
    return _call(_G["get_expert_model_parallel_world_size"])


def get_expert_tensor_parallel_rank() -> int:
    return _call(_G["get_expert_tensor_parallel_rank"])


def get_expert_tensor_parallel_world_size() -> int:
    return _call(_G["get_expert_tensor_parallel_world_size"])


def get_expert_data_parallel_rank(partial_expert_data_parallel=False, with_gtp_remat=True) -> int:
    """Megatron-Core 0.19: with egtp > 1 and ``with_gtp_remat`` (default), the rank in the
    egtp-inclusive expert data-parallel group."""
    partial_expert_data_parallel, with_gtp_remat = _flags(
        "get_expert_data_parallel_rank", partial_expert_data_parallel=partial_expert_data_parallel,
        with_gtp_remat=with_gtp_remat)
    if with_gtp_remat and (g := _gtp_group("expert_data_parallel_with_gtp_remat")) is not None:
        return g.rank
    if partial_expert_data_parallel:
        return runtime.group("intra_partial_expert_data_parallel").rank
    return _call(_G["get_expert_data_parallel_rank"])


def get_expert_data_parallel_world_size(partial_expert_data_parallel=False, with_gtp_remat=True) -> int:
    partial_expert_data_parallel, with_gtp_remat = _flags(
        "get_expert_data_parallel_world_size", partial_expert_data_parallel=partial_expert_data_parallel,
        with_gtp_remat=with_gtp_remat)
    if with_gtp_remat and (g := _gtp_group("expert_data_parallel_with_gtp_remat")) is not None:
        return g.size
    if partial_expert_data_parallel:
        return runtime.group("intra_partial_expert_data_parallel").size
    return _call(_G["get_expert_data_parallel_world_size"])


def _remat_getters(prefix, kind):
    """Megatron-Core 0.19's ``get_[expert_]gtp_weight_remat_{group,world_size,rank,global_ranks}``
    (groups are rank lists here; size and rank are 0 on a rank in no such group, as Megatron's)."""

    def group() -> List[int]:
        return _ranks(kind)

    def world_size() -> int:
        g = runtime.group(kind)
        return g.size if g is not None else 0

    def rank() -> int:
        g = runtime.group(kind)
        return g.rank if g is not None else 0

    fns = {"group": group, "group_ranks": group, "global_ranks": group, "world_size": world_size, "rank": rank}
    for suffix, fn in fns.items():
        fn.__name__ = f"get_{prefix}_{suffix}"
        globals()[fn.__name__] = fn


_remat_getters("gtp_weight_remat", "gtp_weight_remat")
_remat_getters("expert_gtp_weight_remat", "expert_gtp_weight_remat")


def get_virtual_pipeline_model_parallel_world_size() -> Optional[int]:
    """The virtual pipeline size, or None without an interleaved schedule (as Megatron)."""
    return _call(_G["get_virtual_pipeline_model_parallel_world_size"]) or None


def _stage(name, ignore_virtual, vp_stage):
    a = Args(name)
    ignore_virtual, vp_stage = a.flag("ignore_virtual", ignore_virtual), a.int("vp_stage", vp_stage, lo=0, none=True)
    vp = -1
    if not ignore_virtual and get_virtual_pipeline_model_parallel_world_size() is not None:
        if vp_stage is None:
            raise McoreError(_INVALID_ARGUMENT, "invalid argument", "vp_stage must be passed if virtual pipeline is enabled")
        vp = vp_stage
    return bool(_call(lambda: _stage_fns[name](vp), f"mcore_{name}"))


def is_pipeline_first_stage(ignore_virtual=True, vp_stage=None) -> bool:
    """First pipeline stage; with ``ignore_virtual=False`` under a virtual pipeline also
    ``vp_stage == 0`` (``vp_stage`` then required)."""
    return _stage("is_pipeline_first_stage", ignore_virtual, vp_stage)


def is_pipeline_last_stage(ignore_virtual=True, vp_stage=None) -> bool:
    """Last pipeline stage; with ``ignore_virtual=False`` under a virtual pipeline also the last
    virtual stage (``vp_stage`` then required)."""
    return _stage("is_pipeline_last_stage", ignore_virtual, vp_stage)


def is_rank_in_embedding_group(ignore_virtual=True, vp_stage=None) -> bool:
    return _stage("is_rank_in_embedding_group", ignore_virtual, vp_stage)


def _ranks(kind) -> List[int]:
    try:
        return runtime.group_ranks(kind)
    except McoreError as exc:
        if exc.status == _NOT_MEMBER:
            return []
        raise


def get_tensor_model_parallel_group_ranks() -> List[int]:
    return _ranks("tensor_model_parallel")


def get_pipeline_model_parallel_group_ranks() -> List[int]:
    return _ranks("pipeline_model_parallel")


def get_data_parallel_group_ranks(with_context_parallel=False, partial_data_parallel=False,
                                  with_gtp_remat=True) -> List[int]:
    with_context_parallel, partial_data_parallel, with_gtp_remat = _flags(
        "get_data_parallel_group_ranks", with_context_parallel=with_context_parallel,
        partial_data_parallel=partial_data_parallel, with_gtp_remat=with_gtp_remat)
    if partial_data_parallel and not with_context_parallel:
        _partial_dp()
    if with_gtp_remat and _gtp_group(_dp_gtp_kind(with_context_parallel)) is not None:
        return _ranks(_dp_gtp_kind(with_context_parallel))
    if partial_data_parallel:
        return _ranks("intra_partial_data_parallel_with_cp")
    return _ranks("data_parallel_with_cp" if with_context_parallel else "data_parallel")


def get_context_parallel_group_ranks() -> List[int]:
    return _ranks("context_parallel")


def get_model_parallel_group_ranks() -> List[int]:
    return _ranks("model_parallel")


def get_tensor_and_data_parallel_group_ranks(with_context_parallel=False) -> List[int]:
    (with_context_parallel,) = _flags("get_tensor_and_data_parallel_group_ranks",
                                      with_context_parallel=with_context_parallel)
    return _ranks("tensor_and_data_parallel_with_cp" if with_context_parallel else "tensor_and_data_parallel")


def get_tensor_and_context_parallel_group_ranks() -> List[int]:
    return _ranks("tensor_and_context_parallel")


def get_embedding_group_ranks() -> List[int]:
    """Empty when this rank is in no embedding group."""
    return _ranks("embedding")


def get_position_embedding_group_ranks() -> List[int]:
    return _ranks("position_embedding")


def get_expert_model_parallel_group_ranks() -> List[int]:
    return _ranks("expert_model_parallel")


def get_expert_tensor_parallel_group_ranks() -> List[int]:
    return _ranks("expert_tensor_parallel")


def get_expert_tensor_and_model_parallel_group_ranks() -> List[int]:
    return _ranks("expert_tensor_and_model_parallel")


def get_expert_tensor_model_pipeline_parallel_group_ranks(with_egtp_remat=False) -> List[int]:
    """``with_egtp_remat``: the group merged with its egtp peers (Megatron-Core 0.19)."""
    (with_egtp_remat,) = _flags("get_expert_tensor_model_pipeline_parallel_group_ranks",
                                with_egtp_remat=with_egtp_remat)
    return _ranks("expert_tensor_model_pipeline_parallel_with_egtp" if with_egtp_remat
                  else "expert_tensor_model_pipeline_parallel")


def get_expert_data_parallel_group_ranks(partial_expert_data_parallel=False, with_gtp_remat=True) -> List[int]:
    partial_expert_data_parallel, with_gtp_remat = _flags(
        "get_expert_data_parallel_group_ranks", partial_expert_data_parallel=partial_expert_data_parallel,
        with_gtp_remat=with_gtp_remat)
    if with_gtp_remat and _gtp_group("expert_data_parallel_with_gtp_remat") is not None:
        return _ranks("expert_data_parallel_with_gtp_remat")
    return _ranks("intra_partial_expert_data_parallel" if partial_expert_data_parallel else "expert_data_parallel")


def get_intra_distributed_optimizer_instance_group_ranks() -> List[int]:
    return _ranks("intra_distributed_optimizer_instance")



def get_all_gather_group_ranks(for_expert_parallelism=False) -> List[int]:
    """The all-gather twin of the dp-cp group (or, ``for_expert_parallelism``, of the expert-dp
    group; [] when ep = 1, as Megatron returns None): initialize with ``create_all_gather_groups``."""
    (for_expert_parallelism,) = _flags("get_all_gather_group_ranks", for_expert_parallelism=for_expert_parallelism)
    kind = "expert_data_parallel" if for_expert_parallelism else "data_parallel_with_cp"
    try:
        return runtime.all_gather_group_ranks(kind)
    except McoreError as exc:
        if exc.status == _NOT_MEMBER:
            return []
        raise
