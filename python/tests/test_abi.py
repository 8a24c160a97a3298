import ctypes

import mcore_init
from mcore_init import _lib


def test_loaded_library_matches_abi_and_version():
    assert _lib.mcore_abi_version() == mcore_init.ABI_VERSION
    assert mcore_init.version.count(".") == 2


def test_every_declared_function_has_argtypes_and_restype():
    for name in ("mcore_abi_version", "mcore_version_string", "mcore_status_str", "mcore_last_error_message"):
        fn = getattr(_lib.lib, name)
        assert fn.argtypes is not None, name
        assert fn.restype is not None, name


def test_check_raises_with_status_name():
    try:
        _lib.check(9)
    except mcore_init.McoreError as exc:
        assert exc.status == 9
        assert exc.status_name == "timed out"
    else:
        raise AssertionError("check(9) did not raise")
    assert _lib.check(0) == 0
