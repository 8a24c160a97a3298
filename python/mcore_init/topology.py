"""A parallel layout without any process: every group of every rank, computed by the library.

>>> with Topology(8, tp=2, pp=2) as t:
...     t.group_ranks("tensor_model_parallel", 5)
[4, 5]
"""

import ctypes
from typing import List, NamedTuple, Optional

from . import _types as T
from ._args import Args, cstr
from ._lib import McoreError, OwnedHandle, check, declare

c_topo_p = ctypes.c_void_p
_status = ctypes.c_int32
_P = ctypes.POINTER

_create = declare("mcore_topology_create", _status, _P(T.TopologyConfig), ctypes.c_uint32, _P(c_topo_p))
_destroy = declare("mcore_topology_destroy", None, c_topo_p)
_get_sizes = declare("mcore_topology_get_sizes", _status, c_topo_p, _P(T.TopologySizesC))
_kind_from_name = declare("mcore_group_kind_from_name", _status, ctypes.c_char_p, _P(ctypes.c_int32))
_kind_name = declare("mcore_group_kind_name", _status, ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t, _P(ctypes.c_size_t))
_kind_count = declare("mcore_topology_kind_count", _status, c_topo_p, _P(ctypes.c_size_t))
_kind_at = declare("mcore_topology_kind_at", _status, c_topo_p, ctypes.c_size_t, _P(ctypes.c_int32))
_group = declare("mcore_topology_group", _status, c_topo_p, ctypes.c_uint32, ctypes.c_int32, _P(T.GroupInfoC))
_group_ranks = declare(
    "mcore_topology_group_ranks", _status, c_topo_p, ctypes.c_uint32, ctypes.c_int32,
    _P(ctypes.c_uint32), ctypes.c_size_t, _P(ctypes.c_size_t),
)
_group_count = declare("mcore_topology_group_count", _status, c_topo_p, ctypes.c_int32, _P(ctypes.c_uint64))
_group_at = declare(
    "mcore_topology_group_at", _status, c_topo_p, ctypes.c_int32, ctypes.c_uint64,
    _P(ctypes.c_uint32), ctypes.c_size_t, _P(ctypes.c_size_t),
)
_pipeline = declare("mcore_topology_pipeline", _status, c_topo_p, ctypes.c_uint32, _P(T.PipelineInfoC))
_first_stage = declare(
    "mcore_topology_is_pipeline_first_stage", _status, c_topo_p, ctypes.c_uint32, ctypes.c_int32, _P(ctypes.c_bool)
)
_last_stage = declare(
    "mcore_topology_is_pipeline_last_stage", _status, c_topo_p, ctypes.c_uint32, ctypes.c_int32, _P(ctypes.c_bool)
)
_in_embedding = declare(
    "mcore_topology_is_rank_in_embedding_group", _status, c_topo_p, ctypes.c_uint32, ctypes.c_int32, _P(ctypes.c_bool)
)


_gtp_sizes = declare(
    "mcore_topology_get_gtp_sizes", _status, c_topo_p, _P(ctypes.c_uint32), _P(ctypes.c_uint32),
    _P(ctypes.c_uint32), _P(ctypes.c_uint32),
)
_in_grid = declare("mcore_topology_rank_in_grid", _status, c_topo_p, ctypes.c_uint32, _P(ctypes.c_bool))


class GtpSizes(NamedTuple):
    """Megatron-Core 0.19's sizes of a layout (1 = axis off; ``local_world_size`` 0 = none given)."""

    gtp: int
    egtp: int
    total_world_size: int
    local_world_size: int


class GroupInfo(NamedTuple):
    """A rank's place in one group: the group's index among its kind, the group rank, the size."""

    index: int
    rank: int
    size: int


class PipelineInfo(NamedTuple):
    """A rank's pipeline stage, the stage count, first/last ranks and ring neighbours."""

    stage: int
    num_stages: int
    first: int
    last: int
    next: int
    prev: int


class Sizes(NamedTuple):
    """A layout's sizes, derived ones included (``vpp`` 0 = no virtual pipeline)."""

    world_size: int
    rank_offset: int
    tp: int
    pp: int
    vpp: int
    cp: int
    hcp_levels: int
    ep: int
    etp: int
    dp: int
    expert_dp: int
    dist_opt_instances: int


def kind_value(kind, args=None):
    """The ``mcore_group_kind`` number of a group-kind key (docs/topology.md) such as
    "data_parallel_with_cp" (an int passes). ``args``: the caller's :class:`Args` for errors."""
    args = args or Args("kind_value")
    if isinstance(kind, str):
        out = ctypes.c_int32()
        check(_kind_from_name(cstr(args.text("kind", kind)), ctypes.byref(out)))
        return out.value
    if isinstance(kind, bool) or not hasattr(type(kind), "__index__"):
        raise args.type_error("kind", "a group-kind name (str) or number (int)", kind)
    return args.int("kind", kind, ctypes.c_int32)


def kind_name(kind):
    """The group-kind key (docs/topology.md) of a group kind number (a key string is checked and returned)."""
    value = kind_value(kind, Args("kind_name"))
    raw = T.read_two_call(lambda buf, n, out: _kind_name(value, buf, n, out), ctypes.c_char, 64)
    return raw.rstrip(b"\0").decode()


def config_struct(tp=1, pp=1, vpp=None, cp=1, hcp=None, ep=1, etp=None, dist_opt_instances=1,
                  order="tp-cp-ep-dp-pp", rank_offset=0, gtp=1, egtp=1, local_world_size=None, args=None):
    """A new ``mcore_topology_config`` mirror (filled by the library's init), set as given;
    ``args`` (the caller's :class:`Args`) checks every value first. Negative sizes pass: the
    library names them in its error.

    Returns ``(cfg, keepalive)``: ``keepalive`` holds the buffers the struct points to.
    """
    a = args or Args("config_struct")
    sizes = {name: a.int(name, value) for name, value in (
        ("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep), ("dist_opt_instances", dist_opt_instances),
        ("gtp", gtp), ("egtp", egtp))}
    vpp, etp = a.int("vpp", vpp, none=True), a.int("etp", etp, none=True)
    local_world_size = a.int("local_world_size", local_world_size, lo=1, none=True)
    rank_offset = a.int("rank_offset", rank_offset, ctypes.c_uint32)
    hcp = a.ints("hcp", hcp, ctypes.c_int32, none=True)
    order_b = cstr(a.text("order", order, none=True))
    cfg = T.new_topology_config()
    for name, value in sizes.items():
        setattr(cfg, name, value)
    cfg.vpp = vpp or 0
    cfg.etp = etp or 0
    cfg.order = order_b
    cfg.rank_offset = rank_offset
    cfg.local_world_size = local_world_size or 0
    hcp_arr = None
    if hcp:
        hcp_arr = (ctypes.c_int32 * len(hcp))(*hcp)
        cfg.hcp = ctypes.cast(hcp_arr, ctypes.POINTER(ctypes.c_int32))
        cfg.hcp_len = len(hcp)
    return cfg, (order_b, hcp_arr)


def _rank(args, rank):
    """A rank (uint32_t) of a method; ``args``: an :class:`Args` or the method's name."""
    return (Args(args) if isinstance(args, str) else args).int("rank", rank, ctypes.c_uint32)


class Topology(OwnedHandle):
    """One layout of ``world_size`` ranks (``mcore_topology``). Use as a context manager, or
    call :meth:`close`; it is also destroyed when collected."""

    _destroy = _destroy
    _what = "Topology"

    def __init__(self, world_size, tp=1, pp=1, vpp=None, cp=1, hcp=None, ep=1, etp=None,
                 dist_opt_instances=1, order="tp-cp-ep-dp-pp", rank_offset=0, gtp=1, egtp=1,
                 local_world_size=None):
        """``gtp``/``egtp``: Megatron-Core 0.19's ``gtp_remat_size``/``expert_gtp_remat_size``;
        ``local_world_size``: the grid covers ``rank_offset .. rank_offset + local_world_size`` of a
        world of ``world_size`` ranks (the others are in no group: :meth:`in_grid`)."""
        self._handle = None
        a = Args("Topology")
        world_size = a.int("world_size", world_size, ctypes.c_uint32)
        cfg, keep = config_struct(tp, pp, vpp, cp, hcp, ep, etp, dist_opt_instances, order, rank_offset,
                                  gtp=gtp, egtp=egtp, local_world_size=local_world_size, args=a)
        handle = c_topo_p()
        check(_create(ctypes.byref(cfg), world_size, ctypes.byref(handle)))
        del keep  # create copied the order string and the hcp sizes
        self._handle = handle
        self.order = order
        self.hcp = tuple(hcp) if hcp else ()

    # queries --------------------------------------------------------------------------------
    @property
    def sizes(self) -> Sizes:
        out = T.TopologySizesC()
        check(_get_sizes(self.handle, ctypes.byref(out)))
        return Sizes(*(getattr(out, f) for f, _ in T.TopologySizesC._fields_))

    @property
    def world_size(self) -> int:
        """Ranks of the grid (the local world size when one was given)."""
        return self.sizes.world_size

    @property
    def gtp_sizes(self) -> GtpSizes:
        """Megatron-Core 0.19's sizes: gtp, egtp, the whole world, the local world (0 = none)."""
        out = [ctypes.c_uint32() for _ in range(4)]
        check(_gtp_sizes(self.handle, *(ctypes.byref(o) for o in out)))
        return GtpSizes(*(o.value for o in out))

    def in_grid(self, rank) -> bool:
        """False for a rank of the world outside the grid: it belongs to no group (its
        :meth:`group` is None, :meth:`pipeline` raises saying so)."""
        out = ctypes.c_bool()
        check(_in_grid(self.handle, _rank("Topology.in_grid", rank), ctypes.byref(out)))
        return out.value

    def kinds(self) -> List[str]:
        """The group kinds of this layout (keys in table order, docs/topology.md; hierarchical levels included)."""
        count = ctypes.c_size_t()
        check(_kind_count(self.handle, ctypes.byref(count)))
        names = []
        for i in range(count.value):
            kind = ctypes.c_int32()
            check(_kind_at(self.handle, i, ctypes.byref(kind)))
            names.append(kind_name(kind.value))
        return names

    def group(self, kind, rank) -> Optional[GroupInfo]:
        """``rank``'s group of ``kind``, or None when the rank is in no group of that kind."""
        out = T.GroupInfoC()
        a = Args("Topology.group")
        status = _group(self.handle, _rank(a, rank), kind_value(kind, a), ctypes.byref(out))
        if status == T.NOT_MEMBER:
            return None
        check(status)
        return GroupInfo(out.index, out.rank, out.size)

    def group_ranks(self, kind, rank) -> List[int]:
        """The global ranks of ``rank``'s group of ``kind``, ascending ([] when not a member)."""
        a = Args("Topology.group_ranks")
        k, rank = kind_value(kind, a), _rank(a, rank)
        try:
            return T.read_two_call(lambda buf, n, out: _group_ranks(self.handle, rank, k, buf, n, out), ctypes.c_uint32)
        except McoreError as exc:
            if exc.status == T.NOT_MEMBER:
                return []
            raise

    def group_count(self, kind) -> int:
        out = ctypes.c_uint64()
        check(_group_count(self.handle, kind_value(kind, Args("Topology.group_count")), ctypes.byref(out)))
        return out.value

    def groups(self, kind) -> List[List[int]]:
        """Every group of ``kind`` in creation order (the same on every rank), each ascending."""
        k = kind_value(kind, Args("Topology.groups"))
        return [
            T.read_two_call(lambda buf, n, out, i=i: _group_at(self.handle, k, i, buf, n, out), ctypes.c_uint32)
            for i in range(self.group_count(k))
        ]

    def pipeline(self, rank) -> PipelineInfo:
        out = T.PipelineInfoC()
        check(_pipeline(self.handle, _rank("Topology.pipeline", rank), ctypes.byref(out)))
        return PipelineInfo(*(getattr(out, f) for f, _ in T.PipelineInfoC._fields_))

    def _flag(self, fn, rank, vp_stage):
        a = Args(f"Topology.{fn.__name__[len('mcore_topology_'):]}")
        rank, vp = _rank(a, rank), a.int("vp_stage", vp_stage, lo=0, none=True)
        out = ctypes.c_bool()
        check(fn(self.handle, rank, -1 if vp is None else vp, ctypes.byref(out)))
        return out.value

    def is_pipeline_first_stage(self, rank, vp_stage=None) -> bool:
        """First pipeline stage (and virtual stage 0 when ``vp_stage`` is given)."""
        return self._flag(_first_stage, rank, vp_stage)

    def is_pipeline_last_stage(self, rank, vp_stage=None) -> bool:
        """Last pipeline stage (and the last virtual stage when ``vp_stage`` is given)."""
        return self._flag(_last_stage, rank, vp_stage)

    def is_rank_in_embedding_group(self, rank, vp_stage=None) -> bool:
        return self._flag(_in_embedding, rank, vp_stage)

    def __repr__(self):
        if self._handle is None:
            return "Topology(closed)"
        s = self.sizes
        return (f"Topology(world_size={s.world_size}, tp={s.tp}, pp={s.pp}, vpp={s.vpp or None}, cp={s.cp}, "
                f"ep={s.ep}, etp={s.etp}, dp={s.dp}, order={self.order!r})")


# recovery planning ----------------------------------------------------------------------------
c_plan_p = ctypes.c_void_p
_plan_create = declare(
    "mcore_recovery_plan_create", _status, c_topo_p, _P(ctypes.c_uint32), ctypes.c_size_t,
    _P(ctypes.c_uint32), ctypes.c_size_t, _P(c_plan_p),
)
_plan_destroy = declare("mcore_recovery_plan_destroy", None, c_plan_p)
_plan_topology = declare("mcore_recovery_plan_topology", _status, c_plan_p, _P(c_topo_p))
_plan_new_rank = declare("mcore_recovery_plan_new_rank", _status, c_plan_p, ctypes.c_uint32, _P(ctypes.c_int64))
_plan_dropped = declare(
    "mcore_recovery_plan_dropped", _status, c_plan_p, ctypes.c_bool,
    _P(ctypes.c_uint32), ctypes.c_size_t, _P(ctypes.c_size_t),
)
_plan_kinds = declare(
    "mcore_recovery_plan_changed_kinds", _status, c_plan_p, _P(ctypes.c_int32), ctypes.c_size_t, _P(ctypes.c_size_t),
)


class RecoveryPlan(NamedTuple):
    """The next layout after a failure (``mcore_recovery_plan_*``): ``topology`` (a new
    :class:`Topology`), ``rank_map`` (old rank or spare -> new rank), ``dropped`` (every old rank
    not in the new layout), ``leaving`` (the healthy ones among them), ``changed_kinds``."""

    topology: "Topology"
    rank_map: dict
    dropped: List[int]
    leaving: List[int]
    changed_kinds: List[str]


def _ranks_array(ranks):
    return (ctypes.c_uint32 * max(len(ranks), 1))(*ranks), len(ranks)


def plan_recovery(topology, failed, spares=()) -> RecoveryPlan:
    """Plan the layout of ``topology`` without the ``failed`` ranks (docs/recovery.md): each failed
    rank's whole data-parallel (and expert-data-parallel) replica leaves, tp/pp/cp/ep/etp and the
    order stay; ``spares`` (ranks from ``world_size`` on) take failed ranks' places where they
    repair a whole replica. Raises :class:`McoreError` (INVALID_CONFIG, "no valid layout remains")
    when nothing valid is left."""
    a = Args("plan_recovery")
    topology = a.instance("topology", topology, Topology)
    failed, spares = a.ints("failed", failed), a.ints("spares", spares)
    fa, nf = _ranks_array(failed)
    sa, ns = _ranks_array(spares)
    plan = c_plan_p()
    check(_plan_create(topology.handle, fa, nf, sa, ns, ctypes.byref(plan)))
    try:
        new = Topology.__new__(Topology)
        new._handle = None
        handle = c_topo_p()
        check(_plan_topology(plan, ctypes.byref(handle)))
        new._handle = handle
        new.order, new.hcp = topology.order, topology.hcp
        rank_map = {}
        out = ctypes.c_int64()
        for old in list(range(topology.sizes.rank_offset, topology.sizes.rank_offset + topology.world_size)) + \
                spares:
            check(_plan_new_rank(plan, old, ctypes.byref(out)))
            if out.value >= 0:
                rank_map[old] = out.value
        dropped = T.read_two_call(lambda b, n, o: _plan_dropped(plan, False, b, n, o), ctypes.c_uint32)
        leaving = T.read_two_call(lambda b, n, o: _plan_dropped(plan, True, b, n, o), ctypes.c_uint32)
        kinds = T.read_two_call(lambda b, n, o: _plan_kinds(plan, b, n, o), ctypes.c_int32, first_guess=32)
        return RecoveryPlan(new, rank_map, dropped, leaving, [kind_name(k) for k in kinds])
    finally:
        _plan_destroy(plan)
