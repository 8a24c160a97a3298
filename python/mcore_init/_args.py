"""Argument checks shared by every public function, run before anything reaches C.

ctypes alone truncates (``spares=1.9`` became 1), cuts strings at NUL (``"gloo\\0evil"`` became
``"gloo"``), wraps integers and lets a wrong type surface as an AttributeError far from the
call. Each public function makes one :class:`Args` named after itself and passes every argument
through it; the errors name the function, the parameter and the value, e.g.
``initialize(): spares must be an int, got 1.9 (float)``.

Wrong types raise :class:`ArgumentTypeError` (a ``TypeError``), bad values
:class:`ArgumentValueError` (a ``ValueError``; out of a C type's range also an
``OverflowError``). Both are :class:`~mcore_init.McoreError` too, status INVALID_ARGUMENT, as
the library would report them.
"""

import ctypes
import math
import numbers
import operator
import os

from ._lib import McoreError, Status, int_range, mcore_status_str

INVALID_ARGUMENT = Status.INVALID_ARGUMENT

#: The longest time in seconds the library accepts (its timeouts' "no limit", ``MCORE_TIMEOUT_MAX_MS``).
MAX_SECONDS = float(2**31)


class _ArgumentError(McoreError):
    def __init__(self, message):
        super().__init__(INVALID_ARGUMENT, mcore_status_str(INVALID_ARGUMENT).decode(), message)
        self.args = (message,)


class ArgumentTypeError(_ArgumentError, TypeError):
    """An argument of the wrong type (the message names the function, parameter and value)."""


class ArgumentValueError(_ArgumentError, ValueError):
    """An argument of the right type and a bad value (the message names them)."""


class ArgumentRangeError(ArgumentValueError, OverflowError):
    """An integer its C type cannot hold (ctypes would wrap it silently)."""


def _show(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Args:
    """The checks of one function's arguments; ``func`` prefixes every message and ``rename``
    maps a parameter to the name the caller used (``parallel_state`` passes Megatron's names)."""

    def __init__(self, func, rename=None):
        self.func = func
        self.rename = rename or {}

    def _name(self, name):
        base, bracket, rest = name.partition("[")
        return self.rename.get(base, base) + bracket + rest

    def type_error(self, name, want, value):
        return ArgumentTypeError(f"{self.func}(): {self._name(name)} must be {want}, "
                                 f"got {_show(value)} ({type(value).__name__})")

    def value_error(self, name, value, why):
        return ArgumentValueError(f"{self.func}(): {self._name(name)} {_show(value)} {why}")

    # integers ------------------------------------------------------------------------------
    def int(self, name, value, ctype=ctypes.c_int32, lo=None, hi=None, none=False):
        """An int (not a bool or a float; ``__index__`` types such as numpy's ints pass) that
        ``ctype`` holds, within ``lo``..``hi`` when given; None passes when ``none``."""
        if value is None and none:
            return None
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise self.type_error(name, "an int" + (" or None" if none else ""), value)
        value = operator.index(value)
        c_lo, c_hi = int_range(ctype)
        lo, hi = c_lo if lo is None else max(lo, c_lo), c_hi if hi is None else min(hi, c_hi)
        if not lo <= value <= hi:
            c_name = f"{'int' if c_lo < 0 else 'uint'}{8 * ctypes.sizeof(ctype)}_t"
            raise ArgumentRangeError(f"{self.func}(): {self._name(name)} {value!r} is out of range "
                                     f"{lo}..{hi}" + (f" ({c_name})" if (lo, hi) == (c_lo, c_hi) else ""))
        return value

    def ints(self, name, values, ctype=ctypes.c_uint32, none=False):
        """A list of ints from an iterable (not a string), each checked as ``name[i]``."""
        if values is None and none:
            return None
        if isinstance(values, (str, bytes, bytearray)) or not hasattr(values, "__iter__"):
            raise self.type_error(name, "a sequence of ints" + (" or None" if none else ""), values)
        return [self.int(f"{name}[{i}]", v, ctype) for i, v in enumerate(values)]

    def count(self, name, value, elem):
        """An element count for a buffer of ctypes ``elem``: an int >= 0 Python can allocate."""
        return self.int(name, value, ctypes.c_size_t, hi=(2**63 - 1) // ctypes.sizeof(elem))

    # flags, strings, bytes, objects -----------------------------------------------------------
    def flag(self, name, value):
        """A bool (an int 0 or 1 passes as one); anything else, a string included, is refused."""
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise self.type_error(name, "a bool", value)

    def text(self, name, value, none=False, path=False):
        """A ``str`` without NUL characters (C would end it there) that encodes to UTF-8; with
        ``path``, bytes and ``os.PathLike`` pass too (returned as ``str``, :func:`os.fsdecode`)."""
        if value is None and none:
            return None
        given = value
        if path and isinstance(value, (bytes, os.PathLike)):
            value = os.fspath(value)
            value = os.fsdecode(value) if isinstance(value, (str, bytes)) else value
        if not isinstance(value, str):
            want = "a str, bytes or os.PathLike" if path else "a str"
            raise self.type_error(name, want + (" or None" if none else ""), given)
        if "\0" in value:
            raise self.value_error(name, given, "contains a NUL character (C strings end there)")
        try:
            os.fsencode(value) if path else value.encode()
        except UnicodeEncodeError as exc:
            raise self.value_error(name, given, f"is not valid UTF-8 ({exc.reason})") from None
        return value

    def blob(self, name, value):
        """Bytes from a bytes-like object (bytes, bytearray, memoryview)."""
        try:
            return bytes(memoryview(value))
        except TypeError:
            raise self.type_error(name, "bytes-like", value) from None

    def instance(self, name, value, cls, none=False):
        """``value`` when it is a ``cls`` (or None when ``none``)."""
        if (value is None and none) or isinstance(value, cls):
            return value
        raise self.type_error(name, f"a {cls.__name__}" + (" or None" if none else ""), value)

    # seconds -------------------------------------------------------------------------------
    def seconds(self, name, value, none=True, zero=False, inf=False, max_s=MAX_SECONDS):
        """Seconds as a float: a real number (not a bool), not NaN, not negative; zero only with
        ``zero``; ``math.inf`` only with ``inf``; finite values below ``max_s`` (None: any)."""
        if value is None and none:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise self.type_error(name, "a number of seconds" + (" or None" if none else ""), value)
        seconds = float(value)
        if math.isnan(seconds):
            raise self.value_error(name, value, "is not a number of seconds")
        if seconds < 0 or (seconds == 0 and not zero):
            least = "zero or more" if zero else "more than zero"
            raise self.value_error(name, value, f"must be {least} seconds")
        if math.isinf(seconds):
            if not inf:
                raise self.value_error(name, value, "must be finite")
        elif max_s is not None and seconds >= max_s:
            raise self.value_error(name, value, f"must be less than {max_s:.0f} seconds")
        return seconds


def cstr(value):
    """A checked string (:meth:`Args.text`) as C bytes; None stays None."""
    return None if value is None else os.fsencode(value)
