"""Loading libmcore_init.so, checking its ABI, and turning status codes into exceptions.

The library is found through ``MCORE_INIT_LIBRARY`` (a path), else next to this package
(``_native/``), else the repository's ``target/release``, else the loader's search path.
Every function used is declared with ``argtypes``/``restype`` in :func:`declare`.
"""

import ctypes
import enum
import os
from pathlib import Path

#: The ABI version these bindings were written for (``MCORE_ABI_VERSION`` in the header).
ABI_VERSION = 2

c_status = ctypes.c_int32


#: Each status's name as the header declares it (``mcore_status`` in mcore_backend.h;
#: tests/test_abi.py checks them against the header).
STATUS_NAMES = {
    0: "MCORE_STATUS_OK", 1: "MCORE_STATUS_INVALID_ARGUMENT", 2: "MCORE_STATUS_INVALID_CONFIG",
    3: "MCORE_STATUS_OUT_OF_RANGE", 4: "MCORE_STATUS_NOT_FOUND", 5: "MCORE_STATUS_ALREADY_EXISTS",
    6: "MCORE_STATUS_NOT_INITIALIZED", 7: "MCORE_STATUS_ALREADY_INITIALIZED", 8: "MCORE_STATUS_CONFIG_MISMATCH",
    9: "MCORE_STATUS_TIMEOUT", 10: "MCORE_STATUS_IO", 11: "MCORE_STATUS_PROTOCOL", 12: "MCORE_STATUS_BACKEND",
    13: "MCORE_STATUS_UNSUPPORTED", 14: "MCORE_STATUS_LIBRARY_LOAD", 15: "MCORE_STATUS_VERSION_TOO_OLD",
    16: "MCORE_STATUS_BUFFER_TOO_SMALL", 17: "MCORE_STATUS_CORRUPT", 18: "MCORE_STATUS_WRONG_RANK",
    19: "MCORE_STATUS_PEER_FAILED", 20: "MCORE_STATUS_NOT_MEMBER", 21: "MCORE_STATUS_BUSY",
    22: "MCORE_STATUS_SUSPENDED", 99: "MCORE_STATUS_PANIC",
}

#: The same table as an ``IntEnum`` (``Status.NOT_MEMBER == 20``): the package's one list of
#: status codes; every module compares and raises with these names.
Status = enum.IntEnum("Status", {name[len("MCORE_STATUS_"):]: code for code, name in STATUS_NAMES.items()})


class McoreError(Exception):
    """A failed ``mcore_*`` call: ``status`` (int), ``status_name`` (the header's name, e.g.
    ``"MCORE_STATUS_TIMEOUT"``), ``status_text`` (``mcore_status_str``'s words, e.g. ``"timed
    out"``) and the library's ``message``."""

    def __init__(self, status, status_text, message):
        self.status = status
        self.status_name = STATUS_NAMES.get(status, f"MCORE_STATUS_{status}")
        self.status_text = status_text
        self.message = message
        head = f"{self.status_name} ({status_text})"
        super().__init__(f"{head}: {message}" if message else head)


def _candidates():
    env = os.environ.get("MCORE_INIT_LIBRARY")
    if env:
        yield Path(env)
        return
    here = Path(__file__).resolve().parent
    yield here / "_native" / "libmcore_init.so"
    repo = here.parent.parent
    yield repo / "target" / "release" / "libmcore_init.so"
    yield repo / "target" / "debug" / "libmcore_init.so"
    yield Path("libmcore_init.so.0.1")


def _load():
    tried = []
    for path in _candidates():
        if path.is_absolute() and not path.exists():
            tried.append(f"{path} (missing)")
            continue
        try:
            return ctypes.CDLL(str(path))
        except OSError as exc:
            tried.append(f"{path} ({exc})")
    raise ImportError("libmcore_init.so not found; set MCORE_INIT_LIBRARY. Tried: " + "; ".join(tried))


lib = _load()

#: Where a wheel puts the native libraries it carries (scripts/build-wheel.sh); the library finds
#: the plugins there itself (``backend="gloo"``: ``_native/libmcore_init_gloo.so``).
NATIVE_DIR = Path(__file__).resolve().parent / "_native"


#: Every function declared so far, by name (the tests check nothing is used undeclared).
DECLARED = {}


def int_range(ctype):
    """``(lo, hi)`` of a ctypes integer type (``c_int32``, ``c_uint64``, ``c_size_t``, ...)."""
    bits = 8 * ctypes.sizeof(ctype)
    signed = ctype(-1).value == -1
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def checked_int(ctype, value, what):
    """``value`` when it is an int that ``ctype`` holds; else OverflowError (or TypeError)
    naming ``what`` and the value: ctypes itself wraps silently (2**64 + 5 becomes 5)."""
    if not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r}")
    lo, hi = int_range(ctype)
    if not lo <= value <= hi:
        c_name = f"{'int' if lo < 0 else 'uint'}{8 * ctypes.sizeof(ctype)}_t"
        raise OverflowError(f"{what} {value!r} is out of range for {c_name} ({lo}..{hi})")
    return value


_INT_TYPES = (ctypes.c_int8, ctypes.c_uint8, ctypes.c_int16, ctypes.c_uint16, ctypes.c_int32, ctypes.c_uint32,
              ctypes.c_int64, ctypes.c_uint64, ctypes.c_size_t)
_CHECKED = {}


def checked_param(ctype):
    """A subclass of integer type ``ctype`` whose ``from_param`` refuses out-of-range ints
    (ctypes raises it as ``ctypes.ArgumentError`` naming the argument); other types as is."""
    if ctype not in _INT_TYPES:
        return ctype
    if ctype not in _CHECKED:
        def from_param(cls, value, _base=ctype):
            if isinstance(value, int):
                return _base(checked_int(_base, value, "value"))
            return _base.from_param(value)

        _CHECKED[ctype] = type(f"checked_{ctype.__name__}", (ctype,), {"from_param": classmethod(from_param)})
    return _CHECKED[ctype]


def declare(name, restype, *argtypes):
    """Declare ``name``'s signature on the loaded library and return the function. Integer
    parameters are range-checked: an int its C type cannot hold raises instead of wrapping."""
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = [checked_param(t) for t in argtypes]
    DECLARED[name] = fn
    return fn


mcore_abi_version = declare("mcore_abi_version", ctypes.c_uint32)
mcore_version_string = declare("mcore_version_string", ctypes.c_char_p)
mcore_status_str = declare("mcore_status_str", ctypes.c_char_p, ctypes.c_int32)
mcore_last_error_message = declare("mcore_last_error_message", ctypes.c_char_p)
mcore_last_error_status = declare("mcore_last_error_status", ctypes.c_int32)

_abi = mcore_abi_version()
if _abi != ABI_VERSION:
    raise ImportError(
        f"libmcore_init ABI version {_abi} does not match these bindings (ABI {ABI_VERSION}); "
        f"loaded from {lib._name}"
    )

#: The library's version string, e.g. "0.1.0".
version = mcore_version_string().decode()


def error(status, message) -> McoreError:
    """A :class:`McoreError` of ``status`` with the library's words for it and ``message``."""
    return McoreError(status, mcore_status_str(status).decode(), message)


def check(status):
    """Raise :class:`McoreError` for a non-zero status, with the thread's last error message."""
    if status != 0:
        raise error(status, mcore_last_error_message().decode())
    return status


class OwnedHandle:
    """A library handle this object owns: ``close()`` (idempotent), context manager, destroyed
    when collected. Subclasses set ``_destroy`` (the ``mcore_*_destroy`` function) and ``_what``
    and store the handle in ``self._handle``."""

    _destroy = None
    _what = "handle"

    def close(self):
        """Destroy the handle (idempotent)."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            type(self)._destroy(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    @property
    def handle(self):
        if getattr(self, "_handle", None) is None:
            raise ValueError(f"{self._what} is closed")
        return self._handle
