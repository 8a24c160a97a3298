"""ctypes mirrors of the header's structs (field for field, same order and C types).

Function-pointer fields the bindings never set (embedding callbacks, finalizers) are mirrored as
``c_void_p``: same size and alignment as a C function pointer, left NULL.
At import the sizes that ``*_init`` functions record in ``struct_size`` are compared with the
mirrors, so a header change that moves fields is an ImportError rather than memory corruption.
"""

import ctypes

from ._lib import _INT_TYPES, Status, check, checked_int, declare, lib

c_size_t = ctypes.c_size_t
u32 = ctypes.c_uint32
u64 = ctypes.c_uint64
i32 = ctypes.c_int32

#: ``MCORE_RNG_NAME_MAX``: bytes of ``mcore_rng_named_seed.name``, NUL included.
RNG_NAME_MAX = 32


class CheckedStructure(ctypes.Structure):
    """A struct mirror whose integer fields refuse values their C type cannot hold (plain
    ctypes wraps them: ``seed = 2**64 + 5`` would store 5); the error names the field."""

    def __setattr__(self, name, value):
        ctype = dict(getattr(type(self), "_fields_", ())).get(name)
        if ctype in _INT_TYPES and not isinstance(value, ctype):
            checked_int(ctype, value, f"{type(self).__name__}.{name}")
        super().__setattr__(name, value)


#: ``MCORE_TIMEOUT_NONE``: ``timeout_ms`` meaning no limit.
TIMEOUT_NONE_MS = 2**64 - 1
#: Timeouts of this many seconds or more mean no limit (the library's ``MCORE_TIMEOUT_MAX_MS``).
TIMEOUT_MAX_S = 2**31


def timeout_ms(seconds, what="timeout"):
    """Milliseconds for a timeout in seconds: ``math.inf`` (or ``TIMEOUT_MAX_S`` and more) is
    no limit; NaN, zero, negative or non-numbers raise ValueError naming the value."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds != seconds or seconds <= 0:
        raise ValueError(f"{what} {seconds!r} must be a positive number of seconds (math.inf: no limit)")
    if seconds >= TIMEOUT_MAX_S:
        return TIMEOUT_NONE_MS
    return max(1, int(seconds * 1000))


def int_array(ctype, values, what):
    """A ctypes array of ``values`` (at least one element), each checked against ``ctype``."""
    values = list(values)
    return (ctype * max(len(values), 1))(*[checked_int(ctype, v, f"{what}[{i}]") for i, v in enumerate(values)])


class TopologyConfig(CheckedStructure):
    _fields_ = [
        ("struct_size", u32),
        ("tp", i32),
        ("pp", i32),
        ("vpp", i32),
        ("cp", i32),
        ("hcp", ctypes.POINTER(i32)),
        ("hcp_len", c_size_t),
        ("ep", i32),
        ("etp", i32),
        ("dist_opt_instances", i32),
        ("order", ctypes.c_char_p),
        ("rank_offset", u32),
        ("embedding_ranks", ctypes.c_void_p),
        ("position_embedding_ranks", ctypes.c_void_p),
        ("user_data", ctypes.c_void_p),
        ("user_data_free", ctypes.c_void_p),
        ("gtp", i32),
        ("egtp", i32),
        ("local_world_size", i32),
    ]


class GridSpec(CheckedStructure):
    """``mcore_grid_spec``: one named grid of ``mcore_init_args.grids``."""

    _fields_ = [
        ("struct_size", u32),
        ("name", ctypes.c_char_p),
        ("topology", ctypes.POINTER(TopologyConfig)),
        ("seed_rng", ctypes.c_bool),
        ("seed", ctypes.c_int64),
    ]


class PgEntry(CheckedStructure):
    """``mcore_pg_entry``: one field of a grid's ``ProcessGroupCollection`` view."""

    _fields_ = [
        ("field", ctypes.c_char_p),
        ("kind", i32),
        ("all_gather", ctypes.c_bool),
        ("rank", u32),
        ("size", u32),
        ("comm", ctypes.c_void_p),
    ]


class InitArgs(CheckedStructure):
    _fields_ = [
        ("struct_size", u32),
        ("topology", ctypes.POINTER(TopologyConfig)),
        ("backend", ctypes.c_char_p),
        ("timeout_ms", u64),
        ("verify", ctypes.c_bool),
        ("seed_rng", ctypes.c_bool),
        ("seed", ctypes.c_int64),
        ("seed_policy", ctypes.c_char_p),
        ("data_parallel_random_init", ctypes.c_bool),
        ("comm_strategy", ctypes.c_char_p),
        ("comm_config_path", ctypes.c_char_p),
        ("comm_config", ctypes.c_char_p),
        ("split_share", ctypes.c_bool),
        ("device", ctypes.c_int32),
        ("create_all_gather_groups", ctypes.c_bool),
        ("spares", ctypes.c_uint32),
        ("grid_name", ctypes.c_char_p),
        ("grids", ctypes.POINTER(ctypes.POINTER(GridSpec))),
        ("grids_len", c_size_t),
        ("grids_disjoint_or_identical", ctypes.c_bool),
        ("mindspeed", ctypes.c_char_p),
    ]


class GroupInfoC(CheckedStructure):
    _fields_ = [("index", u64), ("rank", u32), ("size", u32)]


class TopologySizesC(CheckedStructure):
    _fields_ = [
        (name, u32)
        for name in (
            "world_size", "rank_offset", "tp", "pp", "vpp", "cp", "hcp_levels",
            "ep", "etp", "dp", "expert_dp", "dist_opt_instances",
        )
    ]


class PipelineInfoC(CheckedStructure):
    _fields_ = [(name, u32) for name in ("stage", "num_stages", "first", "last", "next", "prev")]


class RngCoords(CheckedStructure):
    _fields_ = [("struct_size", u32)] + [
        (name, u32) for name in ("world_size", "rank", "pp_rank", "dp_rank", "tp_rank", "cp_rank", "ep_rank", "etp_rank")
    ] + [("layout_fingerprint", u64)]


class RngGroupPosition(CheckedStructure):
    _fields_ = [("rank", u32), ("size", u32)]


class RngState(CheckedStructure):
    _fields_ = [("seed", u64), ("offset", u64)]


class RngNamedSeed(CheckedStructure):
    _fields_ = [("name", ctypes.c_char * RNG_NAME_MAX), ("seed", u64)]


class SuspendArgs(CheckedStructure):
    _fields_ = [
        ("struct_size", u32),
        ("kinds", ctypes.POINTER(ctypes.c_char_p)),
        ("n_kinds", c_size_t),
        ("grid", ctypes.c_char_p),
        ("timeout_ms", u64),
    ]


class CommMemory(CheckedStructure):
    _fields_ = [
        ("known", ctypes.c_bool),
        ("suspended", ctypes.c_bool),
        ("suspendable_bytes", u64),
        ("persistent_bytes", u64),
        ("total_bytes", u64),
    ]


mcore_topology_config_init = declare("mcore_topology_config_init", ctypes.c_int32, ctypes.POINTER(TopologyConfig))
mcore_init_args_init = declare("mcore_init_args_init", ctypes.c_int32, ctypes.POINTER(InitArgs))
mcore_grid_spec_init = declare("mcore_grid_spec_init", ctypes.c_int32, ctypes.POINTER(GridSpec))
mcore_rng_coords_default = declare("mcore_rng_coords_default", ctypes.c_int32, ctypes.POINTER(RngCoords))
mcore_suspend_args_init = declare("mcore_suspend_args_init", ctypes.c_int32, ctypes.POINTER(SuspendArgs))


def _recorded_size(init, mirror, size_type):
    """Run ``init`` on a zeroed buffer far larger than the mirror; read back its struct_size."""
    buf = (ctypes.c_uint8 * 4096)()
    check(init(ctypes.cast(buf, ctypes.POINTER(mirror))))
    return size_type.from_buffer(buf).value


for _init, _mirror, _size_type in (
    (mcore_topology_config_init, TopologyConfig, u32),
    (mcore_init_args_init, InitArgs, u32),
    (mcore_rng_coords_default, RngCoords, u32),
    (mcore_grid_spec_init, GridSpec, u32),
    (mcore_suspend_args_init, SuspendArgs, u32),
):
    _size = _recorded_size(_init, _mirror, _size_type)
    if _size != ctypes.sizeof(_mirror):
        raise ImportError(
            f"{_mirror.__name__}: the library's struct is {_size} bytes, the ctypes mirror "
            f"{ctypes.sizeof(_mirror)}; loaded from {lib._name}"
        )


def new_topology_config():
    cfg = TopologyConfig()
    check(mcore_topology_config_init(ctypes.byref(cfg)))
    return cfg


def new_init_args():
    args = InitArgs()
    check(mcore_init_args_init(ctypes.byref(args)))
    return args


def new_grid_spec():
    spec = GridSpec()
    check(mcore_grid_spec_init(ctypes.byref(spec)))
    return spec


def new_suspend_args():
    args = SuspendArgs()
    check(mcore_suspend_args_init(ctypes.byref(args)))
    return args


def new_rng_coords():
    coords = RngCoords()
    check(mcore_rng_coords_default(ctypes.byref(coords)))
    return coords


def read_two_call(call, elem_type, first_guess=8):
    """The header's buffer pattern: ``call(buf, len, &out_len)``; grow to ``out_len`` once on
    BUFFER_TOO_SMALL. Returns the filled ctypes array slice as a list."""
    n = c_size_t(0)
    cap = first_guess
    for _ in range(3):
        buf = (elem_type * cap)()
        status = call(buf, cap, ctypes.byref(n))
        if status == BUFFER_TOO_SMALL and n.value > cap:
            cap = n.value
            continue
        check(status)
        return buf[: n.value]
    check(status)
    raise AssertionError("unreachable")


#: Statuses compared by name across the package (from :data:`mcore_init._lib.Status`, the one table).
BUFFER_TOO_SMALL = Status.BUFFER_TOO_SMALL
NOT_MEMBER = Status.NOT_MEMBER
#: The kind's communicator is suspended (resume it first).
SUSPENDED = Status.SUSPENDED
