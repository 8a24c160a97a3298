"""Groups made after init by their members only (``mcore_group_*``; docs/groups-after-init.md).

Only the members of a group call :func:`create_group` (or :func:`start_group`), in any order
relative to their other creations: each returns at once where the backend creates in the
background (the Gloo plugin does), and :meth:`Group.wait` or a first collective waits. Ranks
that are not members do nothing. A member missing at the deadline (the init timeout unless
``timeout`` is given) is named in the error; so is a member that asked for other ranks.
"""

import ctypes
from typing import Dict, List, Optional, Sequence

from . import _types as T
from ._args import Args, cstr
from ._lib import OwnedHandle, check, declare

_status = ctypes.c_int32
_P = ctypes.POINTER


class GroupOptionsC(T.CheckedStructure):
    """Mirror of ``mcore_group_options``."""

    _fields_ = [
        ("struct_size", T.u32),
        ("timeout_ms", T.u64),
        ("cga_cluster_size", T.i32),
        ("min_ctas", T.i32),
        ("max_ctas", T.i32),
        ("net_name", ctypes.c_char_p),
        ("launch_order_implicit", T.i32),
    ]


_options_init = declare("mcore_group_options_init", _status, _P(GroupOptionsC))
_create = declare(
    "mcore_group_create", _status, ctypes.c_char_p, _P(ctypes.c_uint32), ctypes.c_size_t, _P(GroupOptionsC),
    _P(ctypes.c_void_p),
)
_wait = declare("mcore_group_wait", _status, ctypes.c_void_p)
_is_done = declare("mcore_group_is_done", _status, ctypes.c_void_p, _P(ctypes.c_bool))
_ranks = declare("mcore_group_ranks", _status, ctypes.c_void_p, _P(ctypes.c_uint32), ctypes.c_size_t,
                 _P(ctypes.c_size_t))
_rank = declare("mcore_group_rank", _status, ctypes.c_void_p, _P(ctypes.c_uint32))
_communicator = declare("mcore_group_communicator", _status, ctypes.c_void_p, _P(ctypes.c_void_p))
_allreduce = declare("mcore_group_allreduce_sum_i64", _status, ctypes.c_void_p, _P(ctypes.c_int64), ctypes.c_size_t)
_destroy = declare("mcore_group_destroy", None, ctypes.c_void_p)

_probe = GroupOptionsC()
check(_options_init(ctypes.byref(_probe)))
if _probe.struct_size != ctypes.sizeof(GroupOptionsC):
    raise ImportError(f"GroupOptionsC: the library's struct is {_probe.struct_size} bytes, the ctypes mirror "
                      f"{ctypes.sizeof(GroupOptionsC)}")
del _probe


class Group(OwnedHandle):
    """A group made after init. ``close()`` (or ``destroy()``) destroys it on this rank."""

    _destroy = _destroy
    _what = "group"

    def __init__(self, handle, name):
        self._handle = handle
        self.name = name

    def wait(self):
        """Wait until the communicator is ready (bounded by the group's timeout + 2 s)."""
        check(_wait(self.handle))
        return self

    def is_done(self) -> bool:
        """Whether the creation has ended (ready or failed); never waits."""
        done = ctypes.c_bool(False)
        check(_is_done(self.handle, ctypes.byref(done)))
        return done.value

    @property
    def ranks(self) -> List[int]:
        """The group's global ranks, ascending."""
        n = ctypes.c_size_t(0)
        buf = (ctypes.c_uint32 * 1)()
        status = _ranks(self.handle, buf, 0, ctypes.byref(n))
        if status == 0:
            return []
        buf = (ctypes.c_uint32 * n.value)()
        check(_ranks(self.handle, buf, n.value, ctypes.byref(n)))
        return list(buf)

    @property
    def rank(self) -> int:
        """This rank's index in :attr:`ranks`."""
        r = ctypes.c_uint32(0)
        check(_rank(self.handle, ctypes.byref(r)))
        return r.value

    def communicator(self) -> int:
        """The backend's own communicator handle (waits for the creation first)."""
        out = ctypes.c_void_p()
        check(_communicator(self.handle, ctypes.byref(out)))
        return out.value or 0

    def allreduce_sum(self, values: Sequence[int]) -> List[int]:
        """Element-wise int64 sum of ``values`` over the group (waits for the creation first)."""
        values = Args("Group.allreduce_sum").ints("values", values, ctypes.c_int64)
        buf = (ctypes.c_int64 * max(len(values), 1))(*values)
        check(_allreduce(self.handle, buf, len(values)))
        return list(buf[: len(values)])

    def destroy(self):
        """Destroy the group on this rank (the runtime and other groups stay)."""
        self.close()


def start_group(name: str, ranks: Sequence[int], timeout: Optional[float] = None,
                launch_order_implicit: Optional[bool] = None) -> Group:
    """Start making the group ``name`` of the global ``ranks`` (this rank among them); returns at
    once. ``timeout`` in seconds bounds the rendezvous (None: the init timeout; ``math.inf``: no
    limit). ``launch_order_implicit``: NCCL's per-communicator implicit launch order (2.31+; True
    for a side group such as a weight-sync group; None: NCCL's default). Bad names or ranks raise
    at once (ValueError/TypeError for Python types, :class:`~mcore_init.McoreError` for what the
    library refuses)."""
    a = Args("start_group")
    name_b = cstr(a.text("name", name))
    ranks = a.ints("ranks", ranks, ctypes.c_uint32)
    opts = GroupOptionsC()
    check(_options_init(ctypes.byref(opts)))
    seconds = a.seconds("timeout", timeout, inf=True, max_s=None)
    if seconds is not None:
        opts.timeout_ms = T.timeout_ms(seconds)
    if launch_order_implicit is not None:
        opts.launch_order_implicit = int(a.flag("launch_order_implicit", launch_order_implicit))
    buf = (ctypes.c_uint32 * max(len(ranks), 1))(*ranks)
    out = ctypes.c_void_p()
    check(_create(name_b, buf, len(ranks), ctypes.byref(opts), ctypes.byref(out)))
    return Group(out.value, name)


def create_group(name: str, ranks: Sequence[int], timeout: Optional[float] = None,
                 launch_order_implicit: Optional[bool] = None) -> Group:
    """:func:`start_group`, then wait for it."""
    return start_group(name, ranks, timeout, launch_order_implicit).wait()


def create_groups(groups: Dict[str, Sequence[int]], timeout: Optional[float] = None) -> Dict[str, Group]:
    """Start every group of ``groups`` (name: ranks; only those this rank is a member of are
    made, the others skipped), then wait for all in name order. The first failure is raised after
    every creation has ended."""
    rank = None
    from . import runtime

    rank = runtime.world()[0]
    started = {}
    try:
        for name, ranks in groups.items():
            if rank in list(ranks):
                started[name] = start_group(name, ranks, timeout)
        first = None
        for name in sorted(started):
            try:
                started[name].wait()
            except Exception as exc:  # every creation ends before the first failure is raised
                first = first or exc
        if first is not None:
            raise first
    except BaseException:
        for g in started.values():
            g.close()
        raise
    return started
