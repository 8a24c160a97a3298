"""Reproducible per-rank random streams: policy seeds, the named Philox tracker, cuRAND's Philox on CPU.

Seeds of one rank under a policy (``megatron``, ``roll`` or ``sharded:<kind>,<kind>...``)::

    with Topology(8, tp=2, pp=2) as t:
        stream_seeds(t, rank=5, seed=1234)   # {"default": 1334, "data-parallel-rng": 1334, ...}
"""

import ctypes
from typing import Dict, List, Optional, Sequence, Tuple

from . import _types as T
from ._args import Args, cstr
from ._lib import OwnedHandle, Status, check, declare, error, mcore_last_error_message, mcore_last_error_status
from .topology import Topology

_status = ctypes.c_int32
_P = ctypes.POINTER
_tracker_p = ctypes.c_void_p

#: ``MCORE_RNG_RESTORE_REDERIVE``.
RESTORE_REDERIVE = 1

_policy_seeds = declare(
    "mcore_rng_policy_seeds", _status, ctypes.c_char_p, ctypes.c_int64, ctypes.c_bool, _P(T.RngCoords),
    _P(T.RngGroupPosition), ctypes.c_size_t, _P(T.RngNamedSeed), ctypes.c_size_t, _P(ctypes.c_size_t),
)
_create = declare("mcore_rng_tracker_create", _tracker_p, _P(T.RngCoords))
_destroy = declare("mcore_rng_tracker_destroy", None, _tracker_p)
_seed = declare(
    "mcore_rng_tracker_seed", _status, _tracker_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_bool,
    _P(T.RngGroupPosition), ctypes.c_size_t,
)
_add = declare("mcore_rng_tracker_add", _status, _tracker_p, ctypes.c_char_p, ctypes.c_uint64)
_fork = declare("mcore_rng_tracker_fork", _status, _tracker_p, ctypes.c_char_p, ctypes.c_uint64, _P(T.RngState))
_get_state = declare("mcore_rng_tracker_get_state", _status, _tracker_p, ctypes.c_char_p, _P(T.RngState))
_set_state = declare("mcore_rng_tracker_set_state", _status, _tracker_p, ctypes.c_char_p, _P(T.RngState))
_reset = declare("mcore_rng_tracker_reset", _status, _tracker_p)
_cpu_add = declare("mcore_rng_tracker_cpu_add", _status, _tracker_p, ctypes.c_char_p, ctypes.c_uint64)
_cpu_fill_u32 = declare(
    "mcore_rng_tracker_cpu_fill_u32", _status, _tracker_p, ctypes.c_char_p, _P(ctypes.c_uint32), ctypes.c_size_t
)
_cpu_fill_f64 = declare(
    "mcore_rng_tracker_cpu_fill_f64", _status, _tracker_p, ctypes.c_char_p, _P(ctypes.c_double), ctypes.c_size_t
)
_save = declare("mcore_rng_tracker_save", _status, _tracker_p, _P(ctypes.c_uint8), ctypes.c_size_t, _P(ctypes.c_size_t))
_restore = declare("mcore_rng_tracker_restore", _status, _tracker_p, _P(ctypes.c_uint8), ctypes.c_size_t, ctypes.c_uint32)
_philox_u32 = declare(
    "mcore_rng_philox_fill_u32", _status, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, _P(ctypes.c_uint32),
    ctypes.c_size_t,
)
_philox_uniform = declare(
    "mcore_rng_philox_fill_uniform", _status, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, _P(ctypes.c_float),
    ctypes.c_size_t,
)

_COORD_KINDS = (
    ("pp_rank", "pipeline_model_parallel"),
    ("dp_rank", "data_parallel"),
    ("tp_rank", "tensor_model_parallel"),
    ("cp_rank", "context_parallel"),
    ("ep_rank", "expert_model_parallel"),
    ("etp_rank", "expert_tensor_parallel"),
)


def _fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def layout_fingerprint(topology: Topology) -> int:
    """These bindings' digest of a layout (sizes and order) for checkpoints. It is not the
    digest the Rust runtime computes (the C API does not expose that one)."""
    Args("layout_fingerprint").instance("topology", topology, Topology)
    return _fnv1a64(f"{tuple(topology.sizes)} order={topology.order}".encode())


def coordinates(topology: Topology, rank: int, fingerprint: Optional[int] = None) -> T.RngCoords:
    """An ``mcore_rng_coords`` for ``rank`` of ``topology`` (plain data-parallel rank, without CP)."""
    a = Args("coordinates")
    topology, rank = a.instance("topology", topology, Topology), a.int("rank", rank, ctypes.c_uint32)
    fingerprint = a.int("fingerprint", fingerprint, ctypes.c_uint64, none=True)
    coords = T.new_rng_coords()
    coords.world_size = topology.world_size
    coords.rank = rank
    for field, kind in _COORD_KINDS:
        info = topology.group(kind, rank)
        setattr(coords, field, info.rank if info else 0)
    coords.layout_fingerprint = layout_fingerprint(topology) if fingerprint is None else fingerprint
    return coords


def _sharded_kinds(policy: str) -> List[str]:
    return policy[len("sharded:"):].split(",") if policy.startswith("sharded:") else []


def group_positions(topology: Topology, rank: int, policy: str, args=None):
    """For a ``sharded:<kind>,...`` policy: ``rank``'s (group rank, size) in each listed kind."""
    a = args or Args("group_positions")
    topology, rank = a.instance("topology", topology, Topology), a.int("rank", rank, ctypes.c_uint32)
    policy = a.text("policy", policy)
    kinds = _sharded_kinds(policy)
    arr = (T.RngGroupPosition * max(len(kinds), 1))()
    for i, kind in enumerate(kinds):
        info = topology.group(kind, rank)
        if info is None:
            raise error(Status.INVALID_ARGUMENT, f"seed policy {policy}: rank {rank} is in no {kind} group of this layout")
        arr[i].rank, arr[i].size = info.rank, info.size
    return arr, len(kinds)


def policy_seeds(policy: str, seed: int, coords: T.RngCoords, positions: Sequence[Tuple[int, int]] = (),
                 data_parallel_random_init: bool = False) -> Dict[str, int]:
    """``mcore_rng_policy_seeds``: the named stream seeds (``default`` first, then the tracker
    streams in Megatron's add order) for explicit coordinates and sharded-group positions."""
    a = Args("policy_seeds")
    coords = a.instance("coords", coords, T.RngCoords)
    arr, n = _positions(a, positions)
    return _policy_seeds_raw(a, policy, seed, coords, arr, n, data_parallel_random_init)


def _positions(a, positions):
    """``positions`` (``(group rank, size)`` pairs) as an ``mcore_rng_group_position`` array."""
    if isinstance(positions, (str, bytes)) or not hasattr(positions, "__iter__"):
        raise a.type_error("positions", "a sequence of (rank, size) pairs", positions)
    pairs = []
    for i, pair in enumerate(positions):
        if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise a.type_error(f"positions[{i}]", "a (rank, size) pair", pair)
        pairs.append(T.RngGroupPosition(*(a.int(f"positions[{i}]", v, ctypes.c_uint32) for v in pair)))
    return (T.RngGroupPosition * max(len(pairs), 1))(*pairs), len(pairs)


def _policy_seeds_raw(a, policy, seed, coords, arr, n, dpri):
    policy_b = cstr(a.text("policy", policy))
    seed, dpri = a.int("seed", seed, ctypes.c_int64), a.flag("data_parallel_random_init", dpri)
    entries = T.read_two_call(
        lambda buf, cap, out: _policy_seeds(policy_b, seed, dpri, ctypes.byref(coords), arr, n, buf, cap, out),
        T.RngNamedSeed,
    )
    return {e.name.decode(): e.seed for e in entries}


def stream_seeds(topology: Topology, rank: int, seed: int, policy: str = "megatron",
                 data_parallel_random_init: bool = False) -> Dict[str, int]:
    """Every named stream seed of ``rank`` in ``topology`` under ``policy`` (``default`` first)."""
    a = Args("stream_seeds")
    arr, n = group_positions(topology, rank, policy, a)
    return _policy_seeds_raw(a, policy, seed, coordinates(topology, rank), arr, n, data_parallel_random_init)


def philox_fill_u32(seed: int, subsequence: int, offset: int, n: int) -> List[int]:
    """``n`` ``curand()`` values after ``curand_init(seed, subsequence, offset)`` (Philox4_32_10)."""
    seed, subsequence, offset, n = _philox_args("philox_fill_u32", seed, subsequence, offset, n, ctypes.c_uint32)
    out = (ctypes.c_uint32 * n)()
    check(_philox_u32(seed, subsequence, offset, out, n))
    return list(out)


def philox_fill_uniform(seed: int, subsequence: int, offset: int, n: int) -> List[float]:
    """``n`` ``curand_uniform()`` values after ``curand_init(seed, subsequence, offset)``."""
    seed, subsequence, offset, n = _philox_args("philox_fill_uniform", seed, subsequence, offset, n, ctypes.c_float)
    out = (ctypes.c_float * n)()
    check(_philox_uniform(seed, subsequence, offset, out, n))
    return list(out)


def _philox_args(func, seed, subsequence, offset, n, elem):
    a = Args(func)
    return (*(a.int(name, v, ctypes.c_uint64) for name, v in
              (("seed", seed), ("subsequence", subsequence), ("offset", offset))), a.count("n", n, elem))


class Tracker(OwnedHandle):
    """All random streams of one rank (``mcore_rng_tracker``): named Philox ``(seed, offset)``
    states, the default generator (``"default"``) and CPU ChaCha streams; checkpointable.

    ``Tracker(topology, rank)`` records that rank's coordinates in checkpoints; ``Tracker()``
    (or ``coords=``) for explicit or unknown coordinates.
    """

    _destroy = _destroy
    _what = "Tracker"

    def __init__(self, topology: Optional[Topology] = None, rank: int = 0, coords: Optional[T.RngCoords] = None):
        self._handle = None
        a = Args("Tracker")
        topology = a.instance("topology", topology, Topology, none=True)
        rank = a.int("rank", rank, ctypes.c_uint32)
        coords = a.instance("coords", coords, T.RngCoords, none=True)
        self._topology, self._rank = topology, rank
        if coords is None:
            coords = coordinates(topology, rank) if topology is not None else T.new_rng_coords()
        handle = _create(ctypes.byref(coords))
        if not handle:
            raise error(mcore_last_error_status(), f"Tracker: {mcore_last_error_message().decode()}")
        self._handle = handle

    @classmethod
    def from_handle(cls, handle):
        """Own an ``mcore_rng_tracker*`` made elsewhere (e.g. ``mcore_runtime_rng_tracker``)."""
        handle = Args("Tracker.from_handle").int("handle", handle, ctypes.c_size_t)
        if not handle:
            raise ValueError("NULL tracker handle")
        self = cls.__new__(cls)
        self._topology, self._rank, self._handle = None, 0, ctypes.c_void_p(handle)
        return self

    def seed(self, seed: int, policy: str = "megatron", data_parallel_random_init: bool = False,
             positions: Optional[Sequence[Tuple[int, int]]] = None):
        """Re-seed every stream from a policy. ``positions`` for ``sharded`` default to the
        tracker's topology rank's positions."""
        a = Args("Tracker.seed")
        policy_b = cstr(a.text("policy", policy))
        seed, dpri = a.int("seed", seed, ctypes.c_int64), a.flag("data_parallel_random_init", data_parallel_random_init)
        if positions is None and self._topology is not None:
            arr, n = group_positions(self._topology, self._rank, policy, a)
        else:
            arr, n = _positions(a, () if positions is None else positions)
        check(_seed(self.handle, policy_b, seed, dpri, arr, n))

    def add(self, name: str, seed: int):
        """Add a named Philox stream at offset 0 (duplicate name or seed: ALREADY_EXISTS)."""
        a = Args("Tracker.add")
        check(_add(self.handle, cstr(a.text("name", name)), a.int("seed", seed, ctypes.c_uint64)))

    def fork(self, name: str = "model-parallel-rng", count: int = 4) -> Tuple[int, int]:
        """One kernel launch: the ``(seed, offset)`` to launch with; advances by ``count`` rounded up to 4."""
        a = Args("Tracker.fork")
        name_b, count = cstr(a.text("name", name)), a.int("count", count, ctypes.c_uint64)
        out = T.RngState()
        check(_fork(self.handle, name_b, count, ctypes.byref(out)))
        return out.seed, out.offset

    def get_state(self, name: str) -> Tuple[int, int]:
        name_b = cstr(Args("Tracker.get_state").text("name", name))
        out = T.RngState()
        check(_get_state(self.handle, name_b, ctypes.byref(out)))
        return out.seed, out.offset

    def set_state(self, name: str, state: Tuple[int, int]):
        a = Args("Tracker.set_state")
        name_b = cstr(a.text("name", name))
        if isinstance(state, (str, bytes)) or not hasattr(state, "__len__") or len(state) != 2:
            raise a.type_error("state", "a (seed, offset) pair", state)
        st = T.RngState(*(a.int(f"state[{i}]", v, ctypes.c_uint64) for i, v in enumerate(state)))
        check(_set_state(self.handle, name_b, ctypes.byref(st)))

    def reset(self):
        """Forget every named stream and seed (default generator and CPU streams stay)."""
        check(_reset(self.handle))

    def cpu_add(self, name: str, seed: int):
        a = Args("Tracker.cpu_add")
        check(_cpu_add(self.handle, cstr(a.text("name", name)), a.int("seed", seed, ctypes.c_uint64)))

    def cpu_fill_u32(self, name: str, n: int) -> List[int]:
        a = Args("Tracker.cpu_fill_u32")
        name_b, n = cstr(a.text("name", name)), a.count("n", n, ctypes.c_uint32)
        out = (ctypes.c_uint32 * n)()
        check(_cpu_fill_u32(self.handle, name_b, out, n))
        return list(out)

    def cpu_fill_f64(self, name: str, n: int) -> List[float]:
        a = Args("Tracker.cpu_fill_f64")
        name_b, n = cstr(a.text("name", name)), a.count("n", n, ctypes.c_double)
        out = (ctypes.c_double * n)()
        check(_cpu_fill_f64(self.handle, name_b, out, n))
        return list(out)

    def save(self) -> bytes:
        """The checkpoint blob of every stream (records the rank and layout coordinates)."""
        return bytes(T.read_two_call(lambda buf, n, out: _save(self.handle, buf, n, out), ctypes.c_uint8, 256))

    def restore(self, blob: bytes, rederive: bool = False):
        """Restore a :meth:`save` blob (another rank's: WRONG_RANK; damaged: CORRUPT)."""
        a = Args("Tracker.restore")
        blob, rederive = a.blob("blob", blob), a.flag("rederive", rederive)
        buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob) if blob else (ctypes.c_uint8 * 1)()
        check(_restore(self.handle, buf, len(blob), RESTORE_REDERIVE if rederive else 0))
