"""This process's parallel runtime: ``initialize`` from the launcher's environment (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun or mcore-launch set them), group queries,
small collectives, ``destroy``. One runtime per process; ``initialize`` is idempotent.
"""

import ctypes
import json
from typing import List, Optional, Sequence, Tuple

from . import _lib
from . import _types as T
from ._args import Args, cstr
from ._lib import check, declare
from .topology import GroupInfo, config_struct, kind_value

_status = ctypes.c_int32
_P = ctypes.POINTER

_initialize_c = declare("mcore_initialize", _status, _P(T.InitArgs), _P(ctypes.c_bool))
_destroy = declare("mcore_destroy", _status)
_is_initialized = declare("mcore_is_initialized", ctypes.c_bool)
_world = declare("mcore_runtime_world", _status, _P(ctypes.c_uint32), _P(ctypes.c_uint32))
_group = declare("mcore_runtime_group", _status, ctypes.c_int32, _P(T.GroupInfoC))
_group_ranks = declare(
    "mcore_runtime_group_ranks", _status, ctypes.c_int32, _P(ctypes.c_uint32), ctypes.c_size_t, _P(ctypes.c_size_t)
)
_communicator = declare("mcore_runtime_communicator", _status, ctypes.c_int32, _P(ctypes.c_void_p))
_ag_ranks = declare(
    "mcore_runtime_all_gather_group_ranks", _status, ctypes.c_int32, _P(ctypes.c_uint32), ctypes.c_size_t,
    _P(ctypes.c_size_t),
)
_ag_communicator = declare("mcore_runtime_all_gather_communicator", _status, ctypes.c_int32, _P(ctypes.c_void_p))
_allreduce = declare("mcore_runtime_allreduce_sum_i64", _status, ctypes.c_int32, _P(ctypes.c_int64), ctypes.c_size_t)
_barrier = declare("mcore_runtime_barrier", _status, ctypes.c_int32)
_rng_tracker = declare("mcore_runtime_rng_tracker", _status, _P(ctypes.c_void_p))


def initialize(tp=1, pp=1, vpp=None, cp=1, hcp=None, ep=1, etp=None, dist_opt_instances=1,
               order="tp-cp-ep-dp-pp", backend="gloo", timeout=None, verify=True, seed=None,
               seed_policy="megatron", data_parallel_random_init=False, comm_strategy="auto",
               comm_config=None, comm_config_path=None, split_share=False, device=None, gtp=1, egtp=1,
               create_all_gather_groups=False, spares=0) -> bool:
    """Bring this process up (``mcore_initialize``). ``backend``: "gloo", "nccl", a registered
    name or a plugin ``.so`` path; ``timeout`` in seconds bounds every wait (None: the library's
    default, ``$MCORE_INIT_TIMEOUT`` or 300 s; ``math.inf``: no limit). With ``seed``, the rank's RNG streams are seeded
    under ``seed_policy`` ("megatron", "roll", "sharded:<kind>,...") and :func:`rng_tracker`
    hands them out. ``comm_strategy``: "auto" (split when the backend can), "split" or
    "per-group". ``comm_config``: per-group communicator options as Megatron's NCCL config
    (a dict like ``{"tp": {"max_ctas": 8}}`` or its YAML text); ``comm_config_path``: such a
    YAML file; ``split_share``: children of a split share the parent's resources; ``device``:
    the CUDA device of the NCCL communicators (None: ``LOCAL_RANK``); ``gtp``/``egtp``: Megatron-Core
    0.19's ``gtp_remat_size``/``expert_gtp_remat_size``; ``create_all_gather_groups``: also create
    the all-gather twins of the dp-cp and (ep > 1) expert-dp groups (:func:`all_gather_group_ranks`);
    ``spares``: the last ``spares`` ranks of the world stand by outside the layout (on those,
    :func:`is_spare` is True afterwards and :func:`reinitialize` stands by until a recovery places
    them or the job ends; docs/recovery.md). Returns True
    when it was already initialized with the same settings (nothing done); other settings raise
    ALREADY_INITIALIZED. Every argument is checked before the library sees any: a wrong type
    raises TypeError, a bad value (out of range, a NUL in a string, NaN seconds) ValueError, both
    naming the parameter (:mod:`mcore_init._args`)."""
    return _initialize(Args("initialize"), tp=tp, pp=pp, vpp=vpp, cp=cp, hcp=hcp, ep=ep, etp=etp,
                       dist_opt_instances=dist_opt_instances, order=order, backend=backend, timeout=timeout,
                       verify=verify, seed=seed, seed_policy=seed_policy,
                       data_parallel_random_init=data_parallel_random_init, comm_strategy=comm_strategy,
                       comm_config=comm_config, comm_config_path=comm_config_path, split_share=split_share,
                       device=device, gtp=gtp, egtp=egtp, create_all_gather_groups=create_all_gather_groups,
                       spares=spares)


def _initialize(a, tp, pp, vpp, cp, hcp, ep, etp, dist_opt_instances, order, backend, timeout, verify, seed,
                seed_policy, data_parallel_random_init, comm_strategy, comm_config, comm_config_path, split_share,
                device, gtp, egtp, create_all_gather_groups, spares):
    """:func:`initialize` with its arguments checked by ``a`` (an :class:`Args` naming the caller)."""
    # Every argument is checked before the library sees any of them.
    layout, keep = config_struct(tp, pp, vpp, cp, hcp, ep, etp, dist_opt_instances, order, gtp=gtp, egtp=egtp,
                                 args=a)
    backend = a.text("backend", backend, none=True, path=True)
    timeout = a.seconds("timeout", timeout, inf=True, max_s=None)
    flags = {name: a.flag(name, value) for name, value in (
        ("verify", verify), ("data_parallel_random_init", data_parallel_random_init), ("split_share", split_share),
        ("create_all_gather_groups", create_all_gather_groups))}
    seed = a.int("seed", seed, ctypes.c_int64, none=True)
    policy_b = cstr(a.text("seed_policy", seed_policy, none=True))
    if isinstance(comm_config, dict):
        try:
            comm_config = json.dumps(comm_config)  # JSON is YAML's flow style
        except (TypeError, ValueError) as exc:
            raise a.type_error("comm_config", f"a dict of JSON values ({exc})", comm_config) from None
    elif comm_config is not None and not isinstance(comm_config, str):
        raise a.type_error("comm_config", "a dict, a str or None", comm_config)
    strings = [cstr(a.text("comm_strategy", comm_strategy, none=True)),
               cstr(a.text("comm_config_path", None if comm_config_path in ("", b"") else comm_config_path,
                      none=True, path=True)),
               cstr(a.text("comm_config", comm_config, none=True))]
    spares = a.int("spares", spares, ctypes.c_uint32)
    device = a.int("device", device, none=True)

    args = T.new_init_args()
    args.topology = ctypes.pointer(layout)
    backend_b = cstr(_lib.bundled_backend(backend)) if backend is not None else None
    args.backend = backend_b
    if timeout is not None:
        args.timeout_ms = T.timeout_ms(timeout)
    args.verify = flags["verify"]
    if seed is not None:
        args.seed_rng, args.seed, args.seed_policy = True, seed, policy_b
        args.data_parallel_random_init = flags["data_parallel_random_init"]
    args.comm_strategy, args.comm_config_path, args.comm_config = strings
    args.split_share = flags["split_share"]
    args.create_all_gather_groups = flags["create_all_gather_groups"]
    args.spares = spares
    if device is not None:
        args.device = device
    already = ctypes.c_bool(False)
    check(_initialize_c(ctypes.byref(args), ctypes.byref(already)))
    del layout, keep, backend_b, policy_b, strings
    return already.value


def destroy():
    """Tear everything down (succeeds when nothing is initialized); initialize works again after."""
    check(_destroy())


def is_initialized() -> bool:
    return _is_initialized()


_is_spare = declare("mcore_is_spare", ctypes.c_bool)


def is_spare() -> bool:
    """Whether this rank is a spare standing by (``initialize(spares=...)``)."""
    return _is_spare()


def world() -> Tuple[int, int]:
    """(global rank, world size) of this process."""
    rank, size = ctypes.c_uint32(), ctypes.c_uint32()
    check(_world(ctypes.byref(rank), ctypes.byref(size)))
    return rank.value, size.value


def group(kind) -> Optional[GroupInfo]:
    """This rank's group of ``kind`` (index, group rank, size); None when not a member."""
    out = T.GroupInfoC()
    status = _group(kind_value(kind, Args("group")), ctypes.byref(out))
    if status == T.NOT_MEMBER:
        return None
    check(status)
    return GroupInfo(out.index, out.rank, out.size)


def group_ranks(kind) -> List[int]:
    """The global ranks of this rank's group of ``kind``, ascending."""
    k = kind_value(kind, Args("group_ranks"))
    return T.read_two_call(lambda buf, n, out: _group_ranks(k, buf, n, out), ctypes.c_uint32)


def all_gather_group_ranks(kind="data_parallel_with_cp") -> List[int]:
    """The members of this rank's all-gather twin of ``kind`` ("data_parallel_with_cp", or
    "expert_data_parallel" with ep > 1): initialize with ``create_all_gather_groups=True``."""
    k = kind_value(kind, Args("all_gather_group_ranks"))
    return T.read_two_call(lambda buf, n, out: _ag_ranks(k, buf, n, out), ctypes.c_uint32)


def all_gather_communicator(kind="data_parallel_with_cp") -> int:
    """The backend's handle of the twin: a communicator separate from :func:`communicator`'s."""
    out = ctypes.c_void_p()
    check(_ag_communicator(kind_value(kind, Args("all_gather_communicator")), ctypes.byref(out)))
    return out.value or 0


def communicator(kind) -> int:
    """The backend's raw communicator handle (e.g. an ``ncclComm_t``) as an int address."""
    out = ctypes.c_void_p()
    check(_communicator(kind_value(kind, Args("communicator")), ctypes.byref(out)))
    return out.value or 0


def allreduce_sum(kind, values: Sequence[int]) -> List[int]:
    """Element-wise int64 sum of ``values`` over this rank's group of ``kind``."""
    a = Args("allreduce_sum")
    k, values = kind_value(kind, a), a.ints("values", values, ctypes.c_int64)
    buf = (ctypes.c_int64 * max(len(values), 1))(*values)
    check(_allreduce(k, buf, len(values)))
    return list(buf[: len(values)])


def barrier(kind="tensor_model_parallel"):
    """Wait until every member of this rank's group of ``kind`` arrives."""
    check(_barrier(kind_value(kind, Args("barrier"))))


def rng_tracker():
    """A :class:`mcore_init.rng.Tracker` on this rank's RNG streams, seeded at init (``seed=``);
    it stays valid after :func:`destroy`. NOT_INITIALIZED when initialized without a seed."""
    from .rng import Tracker

    out = ctypes.c_void_p()
    check(_rng_tracker(ctypes.byref(out)))
    return Tracker.from_handle(out.value)


class _RecoveryResult(ctypes.Structure):
    _fields_ = [
        ("left", ctypes.c_bool), ("old_rank", ctypes.c_uint32), ("new_rank", ctypes.c_uint32),
        ("old_world_size", ctypes.c_uint32), ("new_world_size", ctypes.c_uint32), ("n_failed", ctypes.c_size_t),
        ("agree_seconds", ctypes.c_double), ("total_seconds", ctypes.c_double),
    ]


_reinitialize = declare(
    "mcore_reinitialize", _status, _P(ctypes.c_uint32), ctypes.c_size_t, ctypes.c_double,
    _P(ctypes.c_uint32), ctypes.c_size_t, _P(_RecoveryResult),
)


def reinitialize(suspected: Sequence[int] = (), window: Optional[float] = None) -> dict:
    """Recover after a failure (``mcore_reinitialize``, docs/recovery.md): agree with the other
    survivors on the failed ranks (``suspected`` ones this rank knows of; the others are found by
    their absence within ``window`` seconds, default 3), re-form the groups of the next layout
    and verify them. Works on an initialized runtime, and after an :func:`initialize` that failed
    for a peer (a rank missing at check-in, a group that timed out or lost a peer). Returns ``{"left", "old_rank", "rank", "old_world_size", "world_size",
    "failed", "agree_seconds", "seconds"}``; with ``left`` true this process is not on the new
    layout and should exit. Raises :class:`McoreError` (e.g. "no valid layout remains")."""
    a = Args("reinitialize")
    sus = a.ints("suspected", suspected, ctypes.c_uint32)
    window = a.seconds("window", window, zero=True)
    arr = (ctypes.c_uint32 * max(len(sus), 1))(*sus)
    failed = (ctypes.c_uint32 * 4096)()
    out = _RecoveryResult()
    check(_reinitialize(arr, len(sus), window or 0.0, failed, len(failed), ctypes.byref(out)))
    return {
        "left": out.left, "old_rank": out.old_rank, "rank": out.new_rank, "old_world_size": out.old_world_size,
        "world_size": out.new_world_size, "failed": list(failed[: min(out.n_failed, len(failed))]),
        "agree_seconds": out.agree_seconds, "seconds": out.total_seconds,
    }


_check_health = declare(
    "mcore_check_health", _status, ctypes.c_double, _P(ctypes.c_bool), _P(ctypes.c_uint32), ctypes.c_size_t,
    _P(ctypes.c_size_t),
)


def check_health(window: Optional[float] = None) -> Optional[List[int]]:
    """A health check of the world through the store (``mcore_check_health``), collective: call it
    at the same points on every rank. ``None`` when every rank came within ``window`` seconds
    (default 3) and no recovery was requested; else the ranks to suspect (possibly empty), to
    pass to :func:`reinitialize`."""
    window = Args("check_health").seconds("window", window, zero=True)
    healthy, n = ctypes.c_bool(), ctypes.c_size_t()
    buf = (ctypes.c_uint32 * 4096)()
    check(_check_health(window or 0.0, ctypes.byref(healthy), buf, len(buf), ctypes.byref(n)))
    return None if healthy.value else list(buf[: min(n.value, len(buf))])
