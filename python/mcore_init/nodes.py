"""Where a layout's groups sit on machines of ``gpus_per_node`` GPUs (global rank r on node
r // gpus_per_node): per kind, how many groups stay inside one node and how many cross, and
warnings for tensor-, context- and expert-tensor-parallel groups that cross nodes (naming an
order or sizes that keep them inside nodes).

>>> from mcore_init import Topology
>>> from mcore_init.nodes import node_placement
>>> with Topology(32, tp=8, pp=2) as t:
...     p = node_placement(t, 4)
>>> p.kinds["tensor_model_parallel"].crossing, len(p.warnings)
(4, 1)
"""

import ctypes
from typing import Dict, List, NamedTuple, Optional

from . import _types as T
from ._lib import check, declare
from ._args import Args
from .topology import Topology, kind_name

_P = ctypes.POINTER

#: ``MCORE_NO_GROUP``: ``first_crossing`` of a kind none of whose groups cross nodes.
NO_GROUP = 2**64 - 1


class KindPlacementC(T.CheckedStructure):
    _fields_ = [("kind", T.i32), ("groups", T.u64), ("local", T.u64), ("crossing", T.u64),
                ("first_crossing", T.u64), ("max_nodes", T.u64)]


_placement = declare(
    "mcore_topology_node_placement", ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint32,
    _P(KindPlacementC), ctypes.c_size_t, _P(ctypes.c_size_t), _P(ctypes.c_size_t),
)
_warning = declare(
    "mcore_topology_node_warning", ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t,
    _P(ctypes.c_int32), ctypes.c_char_p, ctypes.c_size_t, _P(ctypes.c_size_t),
)


class KindPlacement(NamedTuple):
    groups: int
    local: int
    crossing: int
    first_crossing: Optional[int]
    max_nodes: int


class NodeWarning(NamedTuple):
    kind: str
    message: str


class NodePlacement(NamedTuple):
    gpus_per_node: int
    kinds: Dict[str, KindPlacement]
    warnings: List[NodeWarning]


def node_placement(topology: Topology, gpus_per_node: int) -> NodePlacement:
    """The placement of every kind of ``topology`` on nodes of ``gpus_per_node`` GPUs."""
    a = Args("node_placement")
    topology = a.instance("topology", topology, Topology)
    gpus_per_node = a.int("gpus_per_node", gpus_per_node, ctypes.c_uint32)
    h = topology.handle
    count = ctypes.c_size_t()
    rows = T.read_two_call(lambda buf, n, out: _placement(h, gpus_per_node, buf, n, out, ctypes.byref(count)),
                           KindPlacementC, 32)
    kinds = {
        kind_name(r.kind): KindPlacement(r.groups, r.local, r.crossing,
                                         None if r.first_crossing == NO_GROUP else r.first_crossing, r.max_nodes)
        for r in rows
    }
    warnings = []
    for i in range(count.value):
        kind = ctypes.c_int32()
        raw = T.read_two_call(lambda buf, n, out, i=i: _warning(h, gpus_per_node, i, ctypes.byref(kind), buf, n, out),
                              ctypes.c_char, 256)
        warnings.append(NodeWarning(kind_name(kind.value), raw.rstrip(b"\0").decode()))
    return NodePlacement(gpus_per_node, kinds, warnings)
