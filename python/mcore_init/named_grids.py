"""Per-grid handles of a job initialized with several named grids (``initialize(grids=...)``).

>>> import mcore_init
>>> mcore_init.initialize(grids={"train": dict(tp=2, pp=2), "rollout": dict(tp=4)})   # doctest: +SKIP
>>> rollout = mcore_init.grid("rollout")                                               # doctest: +SKIP
>>> rollout.get_tensor_model_parallel_rank(), rollout.group_ranks("tensor_model_parallel")  # doctest: +SKIP

A :class:`Grid` answers for its own layout: its groups, communicators, RNG streams, a
:class:`~mcore_init.topology.Topology` of its layout, a ``ProcessGroupCollection``-shaped view
(:meth:`Grid.pg_collection`) and Megatron-named getters computed from the grid's groups and
layout, as Megatron-Core's ``parallel_state`` would answer for that grid alone. On a rank outside
the grid (another window of the world) every getter raises :class:`~mcore_init.McoreError` with
status NOT_MEMBER naming the grid, except where Megatron's own getter answers without its group
(``is_rank_in_embedding_group`` False, the expert tensor-parallel rank and size None, the gtp
remat rank and size 0); :meth:`Grid.group` returns None and every :meth:`Grid.pg_collection`
field is None. Inside the grid, a ``get_*_group_ranks`` getter answers [] where this rank has no
such group (the embedding group off the first and last stages).

These getters are the package's one implementation of Megatron's names:
:mod:`mcore_init.parallel_state`'s module-level getters are the same methods on the default grid.
"""

import ctypes
from typing import List, NamedTuple, Optional, Sequence

from . import _types as T
from ._args import Args, cstr
from ._lib import McoreError, Status, check, declare, error
from .topology import GroupInfo, Topology, c_topo_p, kind_name, kind_value

_status = ctypes.c_int32
_P = ctypes.POINTER
_str = ctypes.c_char_p

_count = declare("mcore_grid_count", _status, _P(ctypes.c_uint32))
_name = declare("mcore_grid_name", _status, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t, _P(ctypes.c_size_t))
_group = declare("mcore_grid_group", _status, _str, ctypes.c_int32, _P(T.GroupInfoC))
_group_ranks = declare(
    "mcore_grid_group_ranks", _status, _str, ctypes.c_int32, _P(ctypes.c_uint32), ctypes.c_size_t, _P(ctypes.c_size_t)
)
_communicator = declare("mcore_grid_communicator", _status, _str, ctypes.c_int32, _P(ctypes.c_void_p))
_allreduce = declare("mcore_grid_allreduce_sum_i64", _status, _str, ctypes.c_int32, _P(ctypes.c_int64), ctypes.c_size_t)
_rng_tracker = declare("mcore_grid_rng_tracker", _status, _str, _P(ctypes.c_void_p))
_topology = declare("mcore_grid_topology", _status, _str, _P(c_topo_p))
_pg_collection = declare(
    "mcore_grid_pg_collection", _status, _str, _P(T.PgEntry), ctypes.c_size_t, _P(ctypes.c_size_t)
)

#: Megatron-Core 0.19.2's ``ProcessGroupCollection`` fields, in its order (``hcp`` is a list).
PG_COLLECTION_FIELDS = (
    "tp", "pp", "mp", "embd", "pos_embd", "cp", "tp_cp", "hcp", "ep", "expt_tp", "tp_ep", "tp_ep_pp",
    "tp_ep_pp_with_egtp_remat", "tp_dp_cp", "dp", "dp_cp", "dp_cp_gtp_remat", "dp_cp_ag", "gtp_remat",
    "expt_gtp_remat", "expt_dp", "expt_dp_gtp_remat", "expt_dp_ag", "intra_dp_cp", "intra_expt_dp",
    "inter_dist_opt", "intra_dist_opt",
)

#: The fields Megatron-Core 0.20's mandatory ``"expert"`` ``HyperCommGrid`` view fills (expt_tp,
#: ep, expt_dp, pp over the same ranks; ``pp`` is shared with the ``"base"`` view).
EXPERT_VIEW_FIELDS = (
    "ep", "expt_tp", "tp_ep", "tp_ep_pp", "tp_ep_pp_with_egtp_remat", "expt_gtp_remat", "expt_dp",
    "expt_dp_gtp_remat", "expt_dp_ag", "intra_expt_dp", "inter_dist_opt",
)


def grids() -> List[str]:
    """The names of the initialized job's grids, the default (first) one first."""
    n = ctypes.c_uint32()
    check(_count(ctypes.byref(n)))
    out = []
    for i in range(n.value):
        raw = T.read_two_call(lambda buf, cap, got, i=i: _name(i, buf, cap, got), ctypes.c_char, 65)
        out.append(raw.rstrip(b"\0").decode())
    return out


def grid(name=None) -> "Grid":
    """The handle of grid ``name`` (None: the default grid, the first of ``initialize(grids=...)``,
    or the only one). Raises NOT_INITIALIZED before :func:`~mcore_init.runtime.initialize`, and
    an INVALID_ARGUMENT :class:`McoreError` naming the job's grids for a name it does not have."""
    name = Args("grid").text("name", name, none=True)
    names = grids()
    if name is None:
        return Grid(names[0])
    if name not in names:
        raise error(Status.INVALID_ARGUMENT, f"grid(): no grid named {name!r} (this job's grids: {', '.join(names)})")
    return Grid(name)


class PgGroup(NamedTuple):
    """One group of a :class:`PgCollection`: its field, group kind, members (ascending), this
    rank's group rank, the size, the backend's communicator handle (an int address), and whether
    it is an all-gather twin (a communicator of its own over the same members)."""

    field: str
    kind: str
    ranks: List[int]
    rank: int
    size: int
    comm: int
    all_gather: bool


class PgCollection:
    """A grid's ``ProcessGroupCollection`` view on this rank: one attribute per Megatron-Core
    0.19.2 field (:data:`PG_COLLECTION_FIELDS`), each a :class:`PgGroup` or None when this rank
    has no such group (outside the grid, off the embedding stages, a twin not created); ``hcp``
    is a list of the hierarchical context-parallel levels' groups (empty without ``hcp``)."""

    def __init__(self, grid_name, groups):
        self.grid = grid_name
        for field in PG_COLLECTION_FIELDS:
            setattr(self, field, [] if field == "hcp" else None)
        for g in groups:
            if g.field == "hcp":
                self.hcp.append(g)
            else:
                setattr(self, g.field, g)

    def fields(self):
        """``{field: PgGroup, None or (hcp) a list}`` in field order."""
        return {f: getattr(self, f) for f in PG_COLLECTION_FIELDS}

    def view(self, name):
        """The fields of Megatron-Core 0.20's ``HyperCommGrid`` view ``name``: ``"expert"``
        (:data:`EXPERT_VIEW_FIELDS` and the shared ``pp``) or ``"base"`` (the others)."""
        if name not in ("base", "expert"):
            raise ValueError(f"PgCollection.view(): view {name!r} is not 'base' or 'expert'")
        fields = self.fields()
        if name == "expert":
            return {f: fields[f] for f in PG_COLLECTION_FIELDS if f in EXPERT_VIEW_FIELDS or f == "pp"}
        return {f: v for f, v in fields.items() if f not in EXPERT_VIEW_FIELDS}

    def __repr__(self):
        present = [f for f, g in self.fields().items() if g]
        return f"PgCollection(grid={self.grid!r}, fields={present})"


class Grid:
    """One named grid of the initialized job (:func:`grid`): queries by name through the
    ``mcore_grid_*`` C API, so a handle stays usable as long as the runtime is up."""

    def __init__(self, name, where="Grid."):
        self.name = name
        self._c = cstr(name)
        # What an argument error names: "Grid.get_..." here, "get_..." for parallel_state's
        # module-level getters (the same methods on the default grid).
        self._where = where

    def __repr__(self):
        return f"Grid({self.name!r})"

    # groups -----------------------------------------------------------------------------------
    def _kind(self, kind, func):
        return kind_value(kind, Args(f"{self._where}{func}"))

    def group(self, kind) -> Optional[GroupInfo]:
        """This rank's group of ``kind`` in this grid (index, group rank, size); None when not a member."""
        out = T.GroupInfoC()
        status = _group(self._c, self._kind(kind, "group"), ctypes.byref(out))
        if status == T.NOT_MEMBER:
            return None
        check(status)
        return GroupInfo(out.index, out.rank, out.size)

    def group_ranks(self, kind) -> List[int]:
        """The global ranks of this rank's group of ``kind`` in this grid, ascending; NOT_MEMBER
        (a :class:`McoreError` naming the grid) when the rank has no such group."""
        k = self._kind(kind, "group_ranks")
        return T.read_two_call(lambda buf, n, out: _group_ranks(self._c, k, buf, n, out), ctypes.c_uint32)

    def communicator(self, kind) -> int:
        """The backend's raw communicator handle of this rank's group of ``kind`` (an int address);
        groups with the same members and options share one, across grids too."""
        out = ctypes.c_void_p()
        check(_communicator(self._c, self._kind(kind, "communicator"), ctypes.byref(out)))
        return out.value or 0

    def allreduce_sum(self, kind, values: Sequence[int]) -> List[int]:
        """Element-wise int64 sum of ``values`` over this rank's group of ``kind`` in this grid."""
        a = Args("Grid.allreduce_sum")
        k, values = kind_value(kind, a), a.ints("values", values, ctypes.c_int64)
        buf = (ctypes.c_int64 * max(len(values), 1))(*values)
        check(_allreduce(self._c, k, buf, len(values)))
        return list(buf[: len(values)])

    def rng_tracker(self):
        """A :class:`mcore_init.rng.Tracker` on this grid's RNG streams of this rank (seeded from
        its coordinates in this grid); NOT_INITIALIZED when the grid has no ``seed`` or the rank
        is outside it."""
        from .rng import Tracker

        out = ctypes.c_void_p()
        check(_rng_tracker(self._c, ctypes.byref(out)))
        return Tracker.from_handle(out.value)

    def topology(self) -> Topology:
        """A new :class:`Topology` of this grid's layout over the job's world (every query of the
        package's layouts works on it; it stays valid after destroy). Close it when done."""
        handle = c_topo_p()
        check(_topology(self._c, ctypes.byref(handle)))
        t = Topology.__new__(Topology)
        t._handle = handle
        t.order, t.hcp = None, ()
        return t

    def pg_collection(self) -> PgCollection:
        """This grid's ``ProcessGroupCollection`` view on this rank (:class:`PgCollection`)."""
        entries = T.read_two_call(lambda buf, n, out: _pg_collection(self._c, buf, n, out), T.PgEntry, 32)
        groups = []
        for e in entries:
            groups.append(PgGroup(
                field=e.field.decode(), kind=kind_name(e.kind), ranks=self.group_ranks(e.kind), rank=e.rank,
                size=e.size, comm=e.comm or 0, all_gather=bool(e.all_gather),
            ))
        return PgCollection(self.name, groups)

    def is_member(self) -> bool:
        """Whether this rank is in this grid's window of the world."""
        rank = _this_rank()
        with self.topology() as t:
            return t.in_grid(rank)

    # Megatron-named getters -------------------------------------------------------------------
    def _info(self, kind) -> GroupInfo:
        """This rank's group of ``kind``; NOT_MEMBER (naming the grid) when it has none."""
        g = self.group(kind)
        if g is None:
            self.group_ranks(kind)  # raises the library's NOT_MEMBER, naming the rank and the grid
            raise error(Status.NOT_MEMBER, f"no {kind_name(kind)} group of grid {self.name!r} on this rank")
        return g

    def _src(self, kind) -> int:
        return self.group_ranks(kind)[0]

    def get_tensor_model_parallel_rank(self) -> int:
        return self._info("tensor_model_parallel").rank

    def get_tensor_model_parallel_world_size(self) -> int:
        return self._info("tensor_model_parallel").size

    def get_tensor_model_parallel_src_rank(self) -> int:
        return self._src("tensor_model_parallel")

    def get_pipeline_model_parallel_rank(self) -> int:
        return self._info("pipeline_model_parallel").rank

    def get_pipeline_model_parallel_world_size(self) -> int:
        return self._info("pipeline_model_parallel").size

    def _pipeline_neighbour(self, step):
        ranks = self.group_ranks("pipeline_model_parallel")
        stage = self._info("pipeline_model_parallel").rank
        return ranks[(stage + step) % len(ranks)]

    def get_pipeline_model_parallel_first_rank(self) -> int:
        return self.group_ranks("pipeline_model_parallel")[0]

    def get_pipeline_model_parallel_last_rank(self) -> int:
        return self.group_ranks("pipeline_model_parallel")[-1]

    def get_pipeline_model_parallel_next_rank(self) -> int:
        return self._pipeline_neighbour(1)

    def get_pipeline_model_parallel_prev_rank(self) -> int:
        return self._pipeline_neighbour(-1)

    def get_virtual_pipeline_model_parallel_world_size(self) -> Optional[int]:
        """The grid's virtual pipeline size, or None without an interleaved schedule."""
        with self.topology() as t:
            return t.sizes.vpp or None

    def _remat_size(self, kind):
        axis = "expert_gtp_weight_remat" if kind.startswith("expert") else "gtp_weight_remat"
        g = self.group(axis)
        return g.size if g is not None else 1

    def _gtp_group(self, kind):
        g = self.group(kind)
        return g if g is not None and self._remat_size(kind) > 1 else None

    def _dp_kind(self, func, with_context_parallel, partial_data_parallel, with_gtp_remat):
        """The group kind a data-parallel getter answers from, as Megatron-Core 0.19's: the
        gtp-inclusive group with gtp > 1 and ``with_gtp_remat``, the intra-partial group with
        ``partial_data_parallel`` (only together with context parallelism), else the plain one."""
        a = Args(f"{self._where}{func}")
        with_context_parallel = a.flag("with_context_parallel", with_context_parallel)
        partial_data_parallel = a.flag("partial_data_parallel", partial_data_parallel)
        with_gtp_remat = a.flag("with_gtp_remat", with_gtp_remat)
        if partial_data_parallel and not with_context_parallel:
            raise error(Status.INVALID_ARGUMENT, f"{self._where}{func}(): partial_data_parallel=True needs "
                        "with_context_parallel=True (as in Megatron)")
        gtp_kind = "data_parallel_with_cp_with_gtp_remat" if with_context_parallel else "data_parallel_with_gtp_remat"
        if with_gtp_remat and self._gtp_group(gtp_kind) is not None:
            return gtp_kind
        if partial_data_parallel:
            return "intra_partial_data_parallel_with_cp"
        return "data_parallel_with_cp" if with_context_parallel else "data_parallel"

    def get_data_parallel_rank(self, with_context_parallel=False, partial_data_parallel=False,
                               with_gtp_remat=True) -> int:
        return self._info(self._dp_kind("get_data_parallel_rank", with_context_parallel, partial_data_parallel,
                                        with_gtp_remat)).rank

    def get_data_parallel_world_size(self, with_context_parallel=False, partial_data_parallel=False,
                                     with_gtp_remat=True) -> int:
        return self._info(self._dp_kind("get_data_parallel_world_size", with_context_parallel,
                                        partial_data_parallel, with_gtp_remat)).size

    def get_data_parallel_src_rank(self, with_context_parallel=False) -> int:
        """The first rank of the replicate data-parallel group (also with gtp > 1, as Megatron-Core 0.19.2)."""
        with_context_parallel = Args(f"{self._where}get_data_parallel_src_rank").flag("with_context_parallel",
                                                                                       with_context_parallel)
        return self._src("data_parallel_with_cp" if with_context_parallel else "data_parallel")

    def get_data_parallel_group_ranks(self, with_context_parallel=False, partial_data_parallel=False,
                                      with_gtp_remat=True) -> List[int]:
        return self._ranks(self._dp_kind("get_data_parallel_group_ranks", with_context_parallel,
                                         partial_data_parallel, with_gtp_remat))

    def get_context_parallel_rank(self) -> int:
        return self._info("context_parallel").rank

    def get_context_parallel_world_size(self) -> int:
        return self._info("context_parallel").size

    def get_context_parallel_global_ranks(self) -> List[int]:
        return self.group_ranks("context_parallel")

    def get_tensor_and_context_parallel_rank(self) -> int:
        return self._info("tensor_and_context_parallel").rank

    def get_tensor_and_context_parallel_world_size(self) -> int:
        return self._info("tensor_and_context_parallel").size

    def get_model_parallel_rank(self) -> int:
        return self._info("model_parallel").rank

    def get_model_parallel_world_size(self) -> int:
        return self._info("model_parallel").size

    def get_model_parallel_src_rank(self) -> int:
        return self._src("model_parallel")

    def get_expert_model_parallel_rank(self) -> int:
        return self._info("expert_model_parallel").rank

    def get_expert_model_parallel_world_size(self) -> int:
        return self._info("expert_model_parallel").size

    def get_expert_tensor_parallel_rank(self) -> Optional[int]:
        """None on a rank outside the grid, as Megatron-Core's getter without its group."""
        g = self.group("expert_tensor_parallel")
        return g.rank if g is not None else None

    def get_expert_tensor_parallel_world_size(self) -> Optional[int]:
        """None on a rank outside the grid, as Megatron-Core's getter without its group."""
        g = self.group("expert_tensor_parallel")
        return g.size if g is not None else None

    def get_expert_tensor_and_model_parallel_rank(self) -> int:
        return self._info("expert_tensor_and_model_parallel").rank

    def get_expert_tensor_and_model_parallel_world_size(self) -> int:
        return self._info("expert_tensor_and_model_parallel").size

    def _edp_kind(self, func, partial_expert_data_parallel, with_gtp_remat):
        a = Args(f"{self._where}{func}")
        partial = a.flag("partial_expert_data_parallel", partial_expert_data_parallel)
        with_gtp_remat = a.flag("with_gtp_remat", with_gtp_remat)
        if with_gtp_remat and self._gtp_group("expert_data_parallel_with_gtp_remat") is not None:
            return "expert_data_parallel_with_gtp_remat"
        return "intra_partial_expert_data_parallel" if partial else "expert_data_parallel"

    def get_expert_data_parallel_rank(self, partial_expert_data_parallel=False, with_gtp_remat=True) -> int:
        return self._info(self._edp_kind("get_expert_data_parallel_rank", partial_expert_data_parallel,
                                         with_gtp_remat)).rank

    def get_expert_data_parallel_world_size(self, partial_expert_data_parallel=False, with_gtp_remat=True) -> int:
        return self._info(self._edp_kind("get_expert_data_parallel_world_size", partial_expert_data_parallel,
                                         with_gtp_remat)).size

    def _remat_field(self, kind, field) -> int:
        """Megatron-Core 0.19's gtp remat rank and size: 0 on a rank without the group."""
        g = self.group(kind)
        return getattr(g, field) if g is not None else 0

    def get_gtp_weight_remat_rank(self) -> int:
        return self._remat_field("gtp_weight_remat", "rank")

    def get_gtp_weight_remat_world_size(self) -> int:
        return self._remat_field("gtp_weight_remat", "size")

    def get_expert_gtp_weight_remat_rank(self) -> int:
        return self._remat_field("expert_gtp_weight_remat", "rank")

    def get_expert_gtp_weight_remat_world_size(self) -> int:
        return self._remat_field("expert_gtp_weight_remat", "size")

    # rank lists of Megatron's group getters: [] where this rank of the grid has no such group ----
    def _ranks(self, kind) -> List[int]:
        try:
            return self.group_ranks(kind)
        except McoreError as exc:
            if exc.status == Status.NOT_MEMBER and self.is_member():
                return []
            raise

    def get_tensor_model_parallel_group_ranks(self) -> List[int]:
        return self._ranks("tensor_model_parallel")

    def get_pipeline_model_parallel_group_ranks(self) -> List[int]:
        return self._ranks("pipeline_model_parallel")

    def get_context_parallel_group_ranks(self) -> List[int]:
        return self._ranks("context_parallel")

    def get_model_parallel_group_ranks(self) -> List[int]:
        return self._ranks("model_parallel")

    def get_tensor_and_data_parallel_group_ranks(self, with_context_parallel=False) -> List[int]:
        cp = Args(f"{self._where}get_tensor_and_data_parallel_group_ranks").flag("with_context_parallel",
                                                                                 with_context_parallel)
        return self._ranks("tensor_and_data_parallel_with_cp" if cp else "tensor_and_data_parallel")

    def get_tensor_and_context_parallel_group_ranks(self) -> List[int]:
        return self._ranks("tensor_and_context_parallel")

    def get_embedding_group_ranks(self) -> List[int]:
        return self._ranks("embedding")

    def get_position_embedding_group_ranks(self) -> List[int]:
        return self._ranks("position_embedding")

    def get_expert_model_parallel_group_ranks(self) -> List[int]:
        return self._ranks("expert_model_parallel")

    def get_expert_tensor_parallel_group_ranks(self) -> List[int]:
        return self._ranks("expert_tensor_parallel")

    def get_expert_tensor_and_model_parallel_group_ranks(self) -> List[int]:
        return self._ranks("expert_tensor_and_model_parallel")

    def get_expert_tensor_model_pipeline_parallel_group_ranks(self, with_egtp_remat=False) -> List[int]:
        """``with_egtp_remat``: the group merged with its egtp peers (Megatron-Core 0.19)."""
        egtp = Args(f"{self._where}get_expert_tensor_model_pipeline_parallel_group_ranks").flag(
            "with_egtp_remat", with_egtp_remat)
        return self._ranks("expert_tensor_model_pipeline_parallel_with_egtp" if egtp
                           else "expert_tensor_model_pipeline_parallel")

    def get_expert_data_parallel_group_ranks(self, partial_expert_data_parallel=False,
                                             with_gtp_remat=True) -> List[int]:
        return self._ranks(self._edp_kind("get_expert_data_parallel_group_ranks", partial_expert_data_parallel,
                                          with_gtp_remat))

    def get_intra_distributed_optimizer_instance_group_ranks(self) -> List[int]:
        return self._ranks("intra_distributed_optimizer_instance")

    def get_gtp_weight_remat_group_ranks(self) -> List[int]:
        return self._ranks("gtp_weight_remat")

    def get_expert_gtp_weight_remat_group_ranks(self) -> List[int]:
        return self._ranks("expert_gtp_weight_remat")

    # Megatron-Core 0.19's names for the same lists (groups are rank lists here)
    get_gtp_weight_remat_group = get_gtp_weight_remat_global_ranks = get_gtp_weight_remat_group_ranks
    get_expert_gtp_weight_remat_group = get_expert_gtp_weight_remat_group_ranks
    get_expert_gtp_weight_remat_global_ranks = get_expert_gtp_weight_remat_group_ranks

    def _stage(self, func, test, ignore_virtual, vp_stage):
        a = Args(f"{self._where}{func}")
        ignore_virtual, vp_stage = a.flag("ignore_virtual", ignore_virtual), a.int("vp_stage", vp_stage, lo=0,
                                                                                    none=True)
        if test == "is_rank_in_embedding_group":
            if not self.is_member():
                return False  # a membership test: Megatron answers False without the group
        else:
            self._info("pipeline_model_parallel")  # NOT_MEMBER off the grid (Megatron: no pipeline group)
        vp = None
        if not ignore_virtual and self.get_virtual_pipeline_model_parallel_world_size() is not None:
            if vp_stage is None:
                raise error(Status.INVALID_ARGUMENT,
                            f"{self._where}{func}(): vp_stage must be passed if virtual pipeline is enabled")
            vp = vp_stage
        with self.topology() as t:
            return bool(getattr(t, test)(_this_rank(), vp))

    def is_pipeline_first_stage(self, ignore_virtual=True, vp_stage=None) -> bool:
        """First pipeline stage of this grid; with ``ignore_virtual=False`` under a virtual
        pipeline also ``vp_stage == 0`` (``vp_stage`` then required)."""
        return self._stage("is_pipeline_first_stage", "is_pipeline_first_stage", ignore_virtual, vp_stage)

    def is_pipeline_last_stage(self, ignore_virtual=True, vp_stage=None) -> bool:
        return self._stage("is_pipeline_last_stage", "is_pipeline_last_stage", ignore_virtual, vp_stage)

    def is_rank_in_embedding_group(self, ignore_virtual=True, vp_stage=None) -> bool:
        return self._stage("is_rank_in_embedding_group", "is_rank_in_embedding_group", ignore_virtual, vp_stage)


def _this_rank() -> int:
    from . import runtime

    return runtime.world()[0]


#: The getters a :class:`Grid` answers under Megatron's names.
GETTERS = tuple(n for n in dir(Grid) if n.startswith(("get_", "is_pipeline", "is_rank_in")))
