"""This process's parallel runtime: ``initialize`` from the launcher's environment (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun or mcore-launch set them), group queries,
small collectives, ``destroy``. One runtime per process; ``initialize`` is idempotent.
"""

import ctypes
import json
import re
from collections.abc import Mapping
from typing import List, NamedTuple, Optional, Sequence, Tuple

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
_ms_ranks = declare(
    "mcore_runtime_mindspeed_group_ranks", _status, ctypes.c_char_p, ctypes.c_uint32, _P(ctypes.c_uint32),
    ctypes.c_size_t, _P(ctypes.c_size_t),
)
_ms_communicator = declare(
    "mcore_runtime_mindspeed_communicator", _status, ctypes.c_char_p, ctypes.c_uint32, _P(ctypes.c_void_p)
)
_allreduce = declare("mcore_runtime_allreduce_sum_i64", _status, ctypes.c_int32, _P(ctypes.c_int64), ctypes.c_size_t)
_barrier = declare("mcore_runtime_barrier", _status, ctypes.c_int32)
_rng_tracker = declare("mcore_runtime_rng_tracker", _status, _P(ctypes.c_void_p))
_suspend = declare("mcore_suspend", _status, _P(T.SuspendArgs), _P(ctypes.c_size_t))
_resume = declare("mcore_resume", _status, _P(T.SuspendArgs), _P(ctypes.c_size_t))
_comm_memory = declare("mcore_runtime_comm_memory", _status, ctypes.c_int32, _P(T.CommMemory))
_comm_generation = declare("mcore_comm_generation", _status, _P(ctypes.c_uint64))


class _Default:
    """A layout keyword's default in :func:`initialize`'s signature (shown as its value), so
    that ``grids=`` can tell a layout keyword the caller gave from one left alone."""

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return repr(self.value)


_D = _Default

#: initialize's layout keywords (with ``grids=``, each grid's dict takes these and ``rank_offset``,
#: ``local_world_size``, ``seed``).
LAYOUT_KEYS = ("tp", "pp", "vpp", "cp", "hcp", "ep", "etp", "dist_opt_instances", "order", "gtp", "egtp")


def initialize(tp=_D(1), pp=_D(1), vpp=_D(None), cp=_D(1), hcp=_D(None), ep=_D(1), etp=_D(None),
               dist_opt_instances=_D(1), order=_D("tp-cp-ep-dp-pp"), backend="gloo", timeout=None, verify=True,
               seed=None, seed_policy="megatron", data_parallel_random_init=False, comm_strategy="auto",
               comm_config=None, comm_config_path=None, split_share=False, device=None, gtp=_D(1), egtp=_D(1),
               create_all_gather_groups=False, spares=0, grids=None, grids_disjoint_or_identical=False,
               mindspeed=None) -> bool:
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
    naming the parameter (:mod:`mcore_init._args`).

    ``grids``: several named grids in one job, a dict ``{name: layout}`` in order, e.g.
    ``{"train": dict(tp=2, pp=2), "rollout": dict(tp=4, rank_offset=8, local_world_size=8, seed=7)}``.
    The first entry is the default grid (the one :mod:`~mcore_init.parallel_state` and this
    module's group queries answer); do not pass the layout keywords (``tp``, ``pp``, ...) with
    it. Each layout takes those keywords plus ``rank_offset``, ``local_world_size`` (the grid's
    window of the world) and ``seed`` (the grid's RNG streams; a grid without one has none; the
    top-level ``seed`` seeds the first grid). Per-grid handles: :func:`mcore_init.grid`.
    ``grids_disjoint_or_identical``: Megatron-Core 0.20's rule, any two grids on the same ranks or
    on none in common, all of them covering the world; the library refuses other
    grids with INVALID_ARGUMENT naming the offending pair.

    ``mindspeed``: also create MindSpeed's groups on the layout (docs/topology.md), from its
    options by MindSpeed's argument names: a dict such as ``{"context_parallel_algo":
    "hybrid_cp_algo", "ulysses_degree_in_cp": 2, "use_cp_send_recv_overlap": True}`` or the same as
    ``KEY=VALUE,...`` text ("default": MindSpeed's defaults); read them with
    :func:`mindspeed_group_ranks` and :func:`mindspeed_communicator`."""
    layout = dict(tp=tp, pp=pp, vpp=vpp, cp=cp, hcp=hcp, ep=ep, etp=etp, dist_opt_instances=dist_opt_instances,
                  order=order, gtp=gtp, egtp=egtp)
    given = [k for k, v in layout.items() if not isinstance(v, _Default)]
    layout = {k: v.value if isinstance(v, _Default) else v for k, v in layout.items()}
    return _initialize(Args("initialize"), backend=backend, timeout=timeout,
                       verify=verify, seed=seed, seed_policy=seed_policy,
                       data_parallel_random_init=data_parallel_random_init, comm_strategy=comm_strategy,
                       comm_config=comm_config, comm_config_path=comm_config_path, split_share=split_share,
                       device=device, create_all_gather_groups=create_all_gather_groups,
                       spares=spares, grids=grids, layout_given=given,
                       grids_disjoint_or_identical=grids_disjoint_or_identical, mindspeed=mindspeed, **layout)


def _initialize(a, tp, pp, vpp, cp, hcp, ep, etp, dist_opt_instances, order, backend, timeout, verify, seed,
                seed_policy, data_parallel_random_init, comm_strategy, comm_config, comm_config_path, split_share,
                device, gtp, egtp, create_all_gather_groups, spares, grids=None, layout_given=(),
                grids_disjoint_or_identical=False, mindspeed=None):
    """:func:`initialize` with its arguments checked by ``a`` (an :class:`Args` naming the caller);
    ``layout_given``: the layout keywords the caller passed (refused together with ``grids``)."""
    # Every argument is checked before the library sees any of them.
    if grids is None:
        layout, keep = config_struct(tp, pp, vpp, cp, hcp, ep, etp, dist_opt_instances, order, gtp=gtp, egtp=egtp,
                                     args=a)
        grid_c = None
    else:
        if layout_given:
            first = next(iter(grids), None) if isinstance(grids, Mapping) else None
            values = dict(tp=tp, pp=pp, vpp=vpp, cp=cp, hcp=hcp, ep=ep, etp=etp, dist_opt_instances=dist_opt_instances,
                          order=order, gtp=gtp, egtp=egtp)
            raise a.value_error(layout_given[0], values[layout_given[0]],
                                f"was given with grids=: the first grid ({first!r}) is the default grid and its "
                                f"dict gives its layout; pass {', '.join(layout_given)} there")
        layout, keep = None, None
        grid_c = grid_specs(a, grids)
    backend = a.text("backend", backend, none=True, path=True)
    timeout = a.seconds("timeout", timeout, inf=True, max_s=None)
    flags = {name: a.flag(name, value) for name, value in (
        ("verify", verify), ("data_parallel_random_init", data_parallel_random_init), ("split_share", split_share),
        ("create_all_gather_groups", create_all_gather_groups),
        ("grids_disjoint_or_identical", grids_disjoint_or_identical))}
    seed = a.int("seed", seed, ctypes.c_int64, none=True)
    if grid_c is not None and seed is not None and grid_c.seeds[0] is not None:
        raise a.value_error("seed", seed, f"and grids[{grid_c.names[0]!r}]['seed'] {grid_c.seeds[0]!r} both seed the "
                                          "first grid: give one")
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
    mindspeed_b = cstr(a.text("mindspeed", mindspeed_text(a, mindspeed), none=True))

    args = T.new_init_args()
    if layout is not None:
        args.topology = ctypes.pointer(layout)
    else:  # topology NULL: grids[0] is the first grid
        args.grids, args.grids_len = grid_c.array, len(grid_c.names)
    backend_b = cstr(backend) if backend is not None else None
    args.backend = backend_b
    if timeout is not None:
        args.timeout_ms = T.timeout_ms(timeout)
    args.verify = flags["verify"]
    if seed is not None:
        args.seed_rng, args.seed = True, seed
    if seed is not None or (grid_c is not None and any(s is not None for s in grid_c.seeds)):
        args.seed_policy = policy_b  # the job's policy, for every seeded grid
        args.data_parallel_random_init = flags["data_parallel_random_init"]
    args.comm_strategy, args.comm_config_path, args.comm_config = strings
    args.split_share = flags["split_share"]
    args.create_all_gather_groups = flags["create_all_gather_groups"]
    args.spares = spares
    args.grids_disjoint_or_identical = flags["grids_disjoint_or_identical"]
    args.mindspeed = mindspeed_b
    if device is not None:
        args.device = device
    already = ctypes.c_bool(False)
    check(_initialize_c(ctypes.byref(args), ctypes.byref(already)))
    del layout, keep, backend_b, policy_b, strings, grid_c, mindspeed_b  # kept alive until the call returned
    return already.value


def mindspeed_text(a, options):
    """``initialize``'s ``mindspeed`` as the library's ``KEY=VALUE,...`` text: a str as is, a dict
    with True as the key alone and False as ``key=false``; None stays None."""
    if options is None or isinstance(options, str):
        return options
    if not isinstance(options, Mapping):
        raise a.type_error("mindspeed", "a dict, a str or None", options)
    items = []
    for key, value in options.items():
        if not isinstance(key, str) or not isinstance(value, (bool, int, str)):
            raise a.type_error("mindspeed", "a dict of option names to bool, int or str", options)
        if value is True:
            items.append(key)
        else:
            items.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    return ",".join(items) if items else "default"


def mindspeed_group_ranks(kind, copy=0) -> List[int]:
    """The members (ascending) of this rank's MindSpeed group of ``kind`` (MindSpeed's name:
    "cp2", "cp_ulysses", "cp_ring", "cp_ring_intra", "nd1_dim1", "tp-y-cp", "exp", ...) and
    ``copy`` (the hot-expert groups "exp" come in several): initialize with ``mindspeed=``."""
    a = Args("mindspeed_group_ranks")
    k, c = cstr(a.text("kind", kind)), a.int("copy", copy, ctypes.c_uint32)
    return T.read_two_call(lambda buf, n, out: _ms_ranks(k, c, buf, n, out), ctypes.c_uint32)


def mindspeed_communicator(kind, copy=0) -> int:
    """The backend's handle of this rank's MindSpeed group of ``kind`` and ``copy`` (a
    communicator of its own)."""
    a = Args("mindspeed_communicator")
    k, c = cstr(a.text("kind", kind)), a.int("copy", copy, ctypes.c_uint32)
    out = ctypes.c_void_p()
    check(_ms_communicator(k, c, ctypes.byref(out)))
    return out.value or 0


#: A grid name as the library takes it: 1 to 64 letters, digits, ``_``, ``-``, ``.``.
_GRID_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: The keys of a grid's dict in ``initialize(grids=...)``.
GRID_KEYS = LAYOUT_KEYS + ("rank_offset", "local_world_size", "seed")


class _GridArgs(NamedTuple):
    """``initialize(grids=...)`` as C structs: ``array`` (the ``grids`` pointer array) and
    everything it points to, kept alive by this object until the call returns."""

    names: List[str]
    seeds: List[Optional[int]]
    array: object
    keep: list


def grid_specs(a, grids) -> _GridArgs:
    """``initialize``'s ``grids`` checked by ``a`` and mapped onto ``mcore_grid_spec`` structs;
    every error names the grid and the key, e.g. ``initialize(): grids['rollout']['tp'] must be
    an int, got 1.5 (float)``."""
    if not isinstance(grids, Mapping):
        raise a.type_error("grids", "a dict of grid name -> layout dict, in order", grids)
    if not grids:
        raise a.value_error("grids", grids, "is empty: give at least one grid (the first is the default grid)")
    names, seeds, specs, keep = [], [], [], []
    for name, layout in grids.items():
        if not isinstance(name, str):
            raise a.type_error("grids", "keyed by grid names (str)", name)
        a.text(f"grids[{name!r}]", name)
        if not _GRID_NAME.fullmatch(name):
            raise a.value_error("grids", name, "is not a grid name (1 to 64 letters, digits, '_', '-', '.')")
        where = f"grids[{name!r}]"
        if not isinstance(layout, Mapping):
            raise a.type_error(where, "a dict of layout keys (tp=, pp=, ..., rank_offset=, local_world_size=, seed=)",
                               layout)
        for key in layout:
            if key not in GRID_KEYS:
                raise a.value_error(where, key,
                                    f"is not a grid key (keys: {', '.join(GRID_KEYS)})")
        ga = Args(a.func, rename={**a.rename, **{k: f"{where}[{k!r}]" for k in GRID_KEYS}})
        kw = {k: v for k, v in layout.items() if k != "seed"}
        cfg, cfg_keep = config_struct(**kw, args=ga)
        seed = ga.int("seed", layout.get("seed"), ctypes.c_int64, none=True)
        spec = T.new_grid_spec()
        name_b = cstr(name)
        spec.name = name_b
        spec.topology = ctypes.pointer(cfg)
        if seed is not None:
            spec.seed_rng, spec.seed = True, seed
        names.append(name)
        seeds.append(seed)
        specs.append(spec)
        keep.extend((cfg, cfg_keep, name_b))
    array = (ctypes.POINTER(T.GridSpec) * len(specs))(*(ctypes.pointer(s) for s in specs))
    return _GridArgs(names, seeds, array, keep + specs)


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


def comm_generation() -> int:
    """A number that changes exactly when communicator handles given out may have been released
    (a suspend in recreate mode, a destroy, a recovery). Cache it with the handles of
    :func:`communicator` and friends; when it differs, fetch them again: the old ones may be freed."""
    out = ctypes.c_uint64()
    check(_comm_generation(ctypes.byref(out)))
    return out.value


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


def _suspend_args(kinds, grid, timeout, what):
    """The ``mcore_suspend_args`` of a call, with the arrays it points to (kept alive by the caller)."""
    a = Args(what)
    args = T.new_suspend_args()
    keep = []
    if kinds is not None:
        if isinstance(kinds, (str, bytes)) or not isinstance(kinds, (list, tuple)):
            raise a.type_error("kinds", "a list of kind names or None (every kind)", kinds)
        if not kinds:
            raise a.value_error("kinds", kinds, "is empty: name at least one kind, or pass None for every kind")
        names = [cstr(a.text(f"kinds[{i}]", k)) for i, k in enumerate(kinds)]
        arr = (ctypes.c_char_p * len(names))(*names)
        keep.append(arr)
        args.kinds = ctypes.cast(arr, _P(ctypes.c_char_p))
        args.n_kinds = len(names)
    if grid is not None:
        args.grid = cstr(a.text("grid", grid))
    if timeout is not None:
        args.timeout_ms = T.timeout_ms(timeout, f"{what}: timeout")
    return args, keep


def suspend(kinds=None, grid=None) -> int:
    """Suspend the communicators of ``kinds`` (kind names, e.g. ``["tensor_model_parallel"]``;
    None: every kind) on every rank (collective: call it with the same kinds everywhere).
    Backends that can (NCCL 2.29.7+) release the device memory in place; others release the
    communicators and :func:`resume` creates them again (with new handles: :func:`comm_generation`
    changes, fetch cached handles again). A kind sharing a communicator with a
    named one is suspended with it. Using a suspended kind raises SUSPENDED naming it. ``grid``:
    a grid's name (None: the default grid); a communicator that grid shares with another grid
    that is still running stays up. Returns how many communicators were suspended."""
    args, _keep = _suspend_args(kinds, grid, None, "suspend")
    n = ctypes.c_size_t(0)
    check(_suspend(ctypes.byref(args), ctypes.byref(n)))
    return n.value


def resume(kinds=None, grid=None, timeout=None) -> int:
    """Resume what :func:`suspend` suspended of ``kinds`` (None: every kind), collectively, and
    verify each communicator with an all-reduce the layout predicts. ``timeout`` (seconds; None:
    the init timeout) bounds creating released communicators again. Returns how many were resumed."""
    args, _keep = _suspend_args(kinds, grid, timeout, "resume")
    n = ctypes.c_size_t(0)
    check(_resume(ctypes.byref(args), ctypes.byref(n)))
    return n.value


def comm_memory(kind="tensor_model_parallel") -> dict:
    """Device memory of this rank's communicator of ``kind``: ``{"known", "suspended",
    "suspendable_bytes", "persistent_bytes", "total_bytes"}`` (byte counts 0 when not known,
    e.g. Gloo, or NCCL before 2.29.7)."""
    out = T.CommMemory()
    check(_comm_memory(kind_value(kind, Args("comm_memory")), ctypes.byref(out)))
    return {name: getattr(out, name) for name, _ in T.CommMemory._fields_}
