"""Loading libmcore_init.so, checking its ABI, and turning status codes into exceptions.

The library is found through ``MCORE_INIT_LIBRARY`` (a path), else next to this package
(``_native/``), else the repository's ``target/release``, else the loader's search path.
Every function used is declared with ``argtypes``/``restype`` in :func:`declare`.
"""

import ctypes
import os
from pathlib import Path

#: The ABI version these bindings were written for (``MCORE_ABI_VERSION`` in the header).
ABI_VERSION = 1

c_status = ctypes.c_int32


class McoreError(Exception):
    """A failed ``mcore_*`` call: ``status`` (int), ``status_name`` and the library's message."""

    def __init__(self, status, status_name, message):
        self.status = status
        self.status_name = status_name
        self.message = message
        super().__init__(f"{status_name}: {message}" if message else status_name)


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


#: Every function declared so far, by name (the tests check nothing is used undeclared).
DECLARED = {}


def declare(name, restype, *argtypes):
    """Declare ``name``'s signature on the loaded library and return the function."""
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    DECLARED[name] = fn
    return fn


mcore_abi_version = declare("mcore_abi_version", ctypes.c_uint32)
mcore_version_string = declare("mcore_version_string", ctypes.c_char_p)
mcore_status_str = declare("mcore_status_str", ctypes.c_char_p, ctypes.c_int32)
mcore_last_error_message = declare("mcore_last_error_message", ctypes.c_char_p)

_abi = mcore_abi_version()
if _abi != ABI_VERSION:
    raise ImportError(
        f"libmcore_init ABI version {_abi} does not match these bindings (ABI {ABI_VERSION}); "
        f"loaded from {lib._name}"
    )

#: The library's version string, e.g. "0.1.0".
version = mcore_version_string().decode()


def check(status):
    """Raise :class:`McoreError` for a non-zero status, with the thread's last error message."""
    if status != 0:
        raise McoreError(status, mcore_status_str(status).decode(), mcore_last_error_message().decode())
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
