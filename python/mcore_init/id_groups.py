"""Groups joined from unique-id bytes (``mcore_unique_id_*``, ``mcore_id_group_*``;
docs/id-groups.md): the trainer side of a rollout engine's weight-sync group, without torch, a
rendezvous store or :func:`~mcore_init.initialize`.

:func:`unique_id` mints NCCL's 128-byte id (no GPU needed; this process then hosts the group's
bootstrap root and must live until every rank joined), :func:`to_base64` / :func:`from_base64`
convert it (standard base64, what vLLM's ``nccl_unique_id_b64`` carries), :func:`join` makes this
process one rank of the group within a deadline, :func:`vllm_init_info` builds the init-info
dictionary of vLLM's UID mode, and :func:`nccl_library` says which libnccl the process uses.
"""

import ctypes
from typing import Dict, List, Optional, Sequence, Union

from . import _types as T
from ._args import Args, cstr
from ._lib import OwnedHandle, check, declare

_status = ctypes.c_int32
_P = ctypes.POINTER

#: Bytes in an NCCL unique id.
NCCL_UNIQUE_ID_BYTES = 128
#: vLLM's defaults for the packed weight broadcast (``packed_tensor.py``: 1 GiB buffers, 2 of them).
VLLM_PACKED_BUFFER_SIZE_BYTES = 1 << 30
VLLM_PACKED_NUM_BUFFERS = 2


class IdGroupArgsC(T.CheckedStructure):
    """Mirror of ``mcore_id_group_args``."""

    _fields_ = [
        ("struct_size", T.u32),
        ("backend", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("id", ctypes.c_void_p),
        ("id_len", ctypes.c_size_t),
        ("world_size", T.u32),
        ("rank", T.u32),
        ("timeout_ms", T.u64),
        ("device", T.i32),
        ("warmup", ctypes.c_bool),
        ("launch_order_implicit", T.i32),
    ]


_mint = declare("mcore_unique_id_create", _status, ctypes.c_char_p, _P(ctypes.c_uint8), ctypes.c_size_t,
                _P(ctypes.c_size_t))
_to_b64 = declare("mcore_unique_id_to_base64", _status, _P(ctypes.c_uint8), ctypes.c_size_t, ctypes.c_char_p,
                  ctypes.c_size_t, _P(ctypes.c_size_t))
_from_b64 = declare("mcore_unique_id_from_base64", _status, ctypes.c_char_p, _P(ctypes.c_uint8), ctypes.c_size_t,
                    _P(ctypes.c_size_t))
_args_init = declare("mcore_id_group_args_init", _status, _P(IdGroupArgsC))
_join = declare("mcore_id_group_join", _status, _P(IdGroupArgsC), _P(ctypes.c_void_p))
_rank = declare("mcore_id_group_rank", _status, ctypes.c_void_p, _P(ctypes.c_uint32), _P(ctypes.c_uint32))
_communicator = declare("mcore_id_group_communicator", _status, ctypes.c_void_p, _P(ctypes.c_void_p))
_allreduce = declare("mcore_id_group_allreduce_sum_i64", _status, ctypes.c_void_p, _P(ctypes.c_int64),
                     ctypes.c_size_t)
_broadcast = declare("mcore_id_group_broadcast", _status, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                     ctypes.c_uint32)
_destroy = declare("mcore_id_group_destroy", None, ctypes.c_void_p)
_library = declare("mcore_nccl_library_info", _status, ctypes.c_char_p, ctypes.c_size_t, _P(ctypes.c_size_t),
                   _P(ctypes.c_uint32), _P(ctypes.c_bool))

_probe = IdGroupArgsC()
check(_args_init(ctypes.byref(_probe)))
if _probe.struct_size != ctypes.sizeof(IdGroupArgsC):
    raise ImportError(f"IdGroupArgsC: the library's struct is {_probe.struct_size} bytes, the ctypes mirror "
                      f"{ctypes.sizeof(IdGroupArgsC)}")
del _probe


def _sized(call, ctype, first=256):
    """``call(buf, len, out_len)`` with a buffer grown once to the size the library asks for."""
    n = ctypes.c_size_t(0)
    buf = (ctype * first)()
    status = call(buf, first, ctypes.byref(n))
    if status == 16:  # MCORE_STATUS_BUFFER_TOO_SMALL: n holds the size needed
        buf = (ctype * n.value)()
        status = call(buf, n.value, ctypes.byref(n))
    check(status)
    return buf, n.value


def unique_id(backend: str = "nccl") -> bytes:
    """A new unique id of ``backend`` (only "nccl" has them): NCCL's 128 bytes from
    ``ncclGetUniqueId`` of the loaded libnccl. This process hosts the group's bootstrap root."""
    b = cstr(Args("unique_id").text("backend", backend))
    buf, n = _sized(lambda buf, ln, out: _mint(b, buf, ln, out), ctypes.c_uint8)
    return bytes(buf[:n])


def to_base64(uid: bytes) -> str:
    """Standard base64 (RFC 4648, padded; not URL-safe) of ``uid``, by the library."""
    uid = Args("to_base64").blob("uid", uid)
    raw = (ctypes.c_uint8 * max(len(uid), 1)).from_buffer_copy(uid or b"\0")
    buf, n = _sized(lambda buf, ln, out: _to_b64(raw, len(uid), buf, ln, out), ctypes.c_char)
    return buf.raw[: n - 1].decode()


def from_base64(text: str) -> bytes:
    """The bytes of standard base64 ``text``; McoreError (INVALID_ARGUMENT) names a bad
    character and its position (URL-safe ``-`` and ``_`` as such)."""
    t = cstr(Args("from_base64").text("text", text))
    buf, n = _sized(lambda buf, ln, out: _from_b64(t, buf, ln, out), ctypes.c_uint8)
    return bytes(buf[:n])


def nccl_library() -> Dict[str, object]:
    """The libnccl this process uses (loaded on first use, as the runtime and :func:`join` do):
    ``{"path", "version" ("2.32.3"), "version_code" (23203), "shared"}``; ``shared`` is True when
    the process had it loaded before mcore_init bound it (torch, CuPy or a ctypes load first)."""
    code, shared = ctypes.c_uint32(0), ctypes.c_bool(False)
    buf, _ = _sized(lambda buf, ln, out: _library(buf, ln, out, ctypes.byref(code), ctypes.byref(shared)),
                    ctypes.c_char, 4096)
    v = code.value
    return {"path": buf.value.decode(errors="replace"), "version": f"{v // 10000}.{v // 100 % 100}.{v % 100}",
            "version_code": v, "shared": shared.value}


class IdGroup(OwnedHandle):
    """A group joined from a unique id. ``close()`` (or ``destroy()``) releases the communicator."""

    _destroy = _destroy
    _what = "id group"

    def __init__(self, handle, name):
        self._handle = handle
        self.name = name

    def _rank_size(self):
        r, n = ctypes.c_uint32(0), ctypes.c_uint32(0)
        check(_rank(self.handle, ctypes.byref(r), ctypes.byref(n)))
        return r.value, n.value

    @property
    def rank(self) -> int:
        return self._rank_size()[0]

    @property
    def size(self) -> int:
        return self._rank_size()[1]

    def communicator(self) -> int:
        """The ``ncclComm_t`` as an int, owned by this group until destroyed; hand it only to code
        that calls the same libnccl (:func:`nccl_library`)."""
        out = ctypes.c_void_p()
        check(_communicator(self.handle, ctypes.byref(out)))
        return out.value or 0

    def allreduce_sum(self, values: Sequence[int]) -> List[int]:
        """Element-wise int64 sum of ``values`` over the group, within the join's timeout."""
        values = Args("IdGroup.allreduce_sum").ints("values", values, ctypes.c_int64)
        buf = (ctypes.c_int64 * max(len(values), 1))(*values)
        check(_allreduce(self.handle, buf, len(values)))
        return list(buf[: len(values)])

    def broadcast(self, data: Union[bytes, bytearray], root: int = 0) -> bytes:
        """``data`` of group rank ``root`` on every rank (each passes a buffer of the same length),
        through host memory: for checks and small payloads."""
        a = Args("IdGroup.broadcast")
        data = a.blob("data", data)
        root = a.int("root", root, ctypes.c_uint32)
        buf = ctypes.create_string_buffer(data, max(len(data), 1))
        check(_broadcast(self.handle, buf, len(data), root))
        return buf.raw[: len(data)]

    def destroy(self):
        """Release the communicator on this rank (idempotent)."""
        self.close()


def join(uid: bytes, world_size: int, rank: int, *, name: str = "id_group", timeout: Optional[float] = None,
         device: Optional[int] = None, warmup: bool = False, launch_order_implicit: Optional[bool] = None,
         backend: str = "nccl") -> IdGroup:
    """Join the group of ``uid`` as ``rank`` of ``world_size``; every rank must join concurrently.
    ``timeout`` (seconds; None: ``$MCORE_INIT_TIMEOUT`` or 300 s; ``math.inf``: no limit) bounds
    the join and each later collective: a rank that never comes raises McoreError (TIMEOUT) naming
    the group and its size, and a new id can be joined at once. ``warmup``: run vLLM's
    one-element float all-reduce inside the join. ``launch_order_implicit``: None = on where NCCL
    has the per-communicator field (2.31+). ``device``: None = ``$LOCAL_RANK`` or 0."""
    a = Args("join")
    uid = a.blob("uid", uid)
    args = IdGroupArgsC()
    check(_args_init(ctypes.byref(args)))
    name_b = cstr(a.text("name", name))
    backend_b = cstr(a.text("backend", backend))
    args.name, args.backend = name_b, backend_b
    raw = (ctypes.c_uint8 * max(len(uid), 1)).from_buffer_copy(uid or b"\0")
    args.id, args.id_len = ctypes.cast(raw, ctypes.c_void_p), len(uid)
    args.world_size = a.int("world_size", world_size, ctypes.c_uint32)
    args.rank = a.int("rank", rank, ctypes.c_uint32)
    seconds = a.seconds("timeout", timeout, inf=True, max_s=None)
    if seconds is not None:
        args.timeout_ms = T.timeout_ms(seconds)
    if device is not None:
        args.device = a.int("device", device, ctypes.c_int32, lo=0)
    args.warmup = a.flag("warmup", warmup)
    if launch_order_implicit is not None:
        args.launch_order_implicit = int(a.flag("launch_order_implicit", launch_order_implicit))
    out = ctypes.c_void_p()
    check(_join(ctypes.byref(args), ctypes.byref(out)))
    return IdGroup(out.value, name)


def vllm_init_info(uid: bytes, world_size: int, *, rank_offset: int = 1, packed: bool = True,
                   packed_buffer_size_bytes: int = VLLM_PACKED_BUFFER_SIZE_BYTES,
                   packed_num_buffers: int = VLLM_PACKED_NUM_BUFFERS) -> Dict[str, object]:
    """The init info of vLLM's UID mode (vLLM 0.28+: ``/init_weight_transfer_engine`` over HTTP,
    or the Ray actor method of that name), field names as vLLM's NCCL weight-transfer init info
    has them: ``nccl_unique_id_b64`` (standard base64 of the 128 bytes), ``world_size`` (trainer
    ranks plus every worker), ``rank_offset`` (the first worker's rank; the trainer is rank 0, or
    ranks ``[0, T)`` with ``rank_offset = T`` in the m2n layout) and the packing fields. No
    ``master_address``/``master_port``: vLLM refuses both modes at once."""
    a = Args("vllm_init_info")
    uid = a.blob("uid", uid)
    if len(uid) != NCCL_UNIQUE_ID_BYTES:
        raise a.value_error("uid", uid, f"must be an NCCL unique id of {NCCL_UNIQUE_ID_BYTES} bytes")
    world_size = a.int("world_size", world_size, ctypes.c_uint32, lo=2)
    rank_offset = a.int("rank_offset", rank_offset, ctypes.c_uint32, lo=1, hi=world_size - 1)
    return {
        "nccl_unique_id_b64": to_base64(uid),
        "world_size": world_size,
        "rank_offset": rank_offset,
        "packed": a.flag("packed", packed),
        "packed_buffer_size_bytes": a.int("packed_buffer_size_bytes", packed_buffer_size_bytes, ctypes.c_uint64, lo=1),
        "packed_num_buffers": a.int("packed_num_buffers", packed_num_buffers, ctypes.c_uint32, lo=1),
    }
