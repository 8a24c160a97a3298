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
        assert exc.status_name == "MCORE_STATUS_TIMEOUT"
        assert exc.status_text == "timed out"
        assert str(exc).startswith("MCORE_STATUS_TIMEOUT (timed out)")
    else:
        raise AssertionError("check(9) did not raise")
    assert _lib.check(0) == 0


def test_status_names_are_the_headers():
    import re
    from conftest import REPO
    header = (REPO / "include" / "mcore_backend.h").read_text()
    declared = {int(v): n for n, v in re.findall(r"^\s*(MCORE_STATUS_[A-Z_]+) = (\d+),", header, re.M)}
    assert declared and declared == _lib.STATUS_NAMES


def test_every_function_of_every_module_is_declared():
    import mcore_init.parallel_state
    import mcore_init.rng
    import mcore_init.runtime
    import mcore_init.nodes
    import mcore_init.topology
    from mcore_init import _types

    seen = 0
    for mod in (_lib, _types, mcore_init.topology, mcore_init.rng, mcore_init.runtime, mcore_init.parallel_state,
                mcore_init.nodes):
        values = list(vars(mod).values())
        values += [v for d in values if isinstance(d, dict) for v in d.values()]
        for fn in values:
            if isinstance(fn, ctypes._CFuncPtr):
                assert fn.argtypes is not None, fn.__name__
                assert _lib.DECLARED.get(fn.__name__) is fn, f"{fn.__name__} not declared through declare()"
                seen += 1
    assert seen > 60


def test_mirrors_match_library_struct_sizes():
    from mcore_init import _types

    assert _types.new_topology_config().struct_size == ctypes.sizeof(_types.TopologyConfig)
    assert _types.new_init_args().struct_size == ctypes.sizeof(_types.InitArgs)
    assert _types.new_rng_coords().struct_size == ctypes.sizeof(_types.RngCoords)
    assert not _types.new_init_args().topology, "the layout is a pointer, NULL by default"


def test_a_getter_failure_is_read_by_status_not_message():
    # The C getters report failure by -1: the status says which (here: not initialized).
    getter = _lib.declare("mcore_get_tensor_model_parallel_rank", ctypes.c_int32)
    assert getter() == -1
    assert _lib.mcore_last_error_status() == _lib.Status.NOT_INITIALIZED


def test_the_status_table_is_one_enum():
    assert {s.value: f"MCORE_STATUS_{s.name}" for s in _lib.Status} == _lib.STATUS_NAMES
    from mcore_init import _args, _types
    assert _types.NOT_MEMBER is _lib.Status.NOT_MEMBER and _args.INVALID_ARGUMENT is _lib.Status.INVALID_ARGUMENT
