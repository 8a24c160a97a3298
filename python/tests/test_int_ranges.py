"""Integers a C type cannot hold raise instead of wrapping (ctypes alone wraps silently:
seed=2**64+5 seeded like 5, a group kind of 2**40 read as tensor-parallel)."""

import ctypes
import math

import pytest

from mcore_init import _types as T
from mcore_init import rng, runtime, topology


def test_function_arguments_are_range_checked():
    # mcore_group_kind_name takes an int32_t kind: 2**40 wrapped to 0 (tensor_model_parallel).
    # The package's checks name the parameter (test_argument_checks.py); ctypes' declared
    # argtypes refuse it too, without the name, for a call that bypasses them.
    with pytest.raises(OverflowError, match=r"kind_name\(\): kind 1099511627776 is out of range .*int32_t"):
        topology.kind_name(2**40)
    with pytest.raises(ctypes.ArgumentError, match="1099511627776 is out of range for int32_t"):
        topology._kind_name(2**40, None, 0, None)
    assert topology.kind_name(0) == "tensor_model_parallel"
    # philox seed/subsequence/offset are uint64_t.
    with pytest.raises(OverflowError, match=r"seed 18446744073709551621 is out of range .*uint64_t"):
        rng.philox_fill_u32(2**64 + 5, 0, 0, 4)
    with pytest.raises(OverflowError, match=r"subsequence -1 is out of range .*uint64_t"):
        rng.philox_fill_u32(5, -1, 0, 4)
    assert rng.philox_fill_u32(2**64 - 1, 0, 0, 2) != rng.philox_fill_u32(0, 0, 0, 2)


def test_seeds_do_not_wrap():
    with topology.Topology(8, tp=2) as topo:
        assert rng.stream_seeds(topo, 0, 5) != []
        with pytest.raises(OverflowError, match="seed 18446744073709551621"):
            rng.stream_seeds(topo, 0, 2**64 + 5)
        with pytest.raises((ctypes.ArgumentError, OverflowError), match="out of range"):
            rng.Tracker(topo, 0).add("x", 2**64)


def test_struct_fields_are_range_checked():
    args = T.new_init_args()
    with pytest.raises(OverflowError, match=r"InitArgs.seed 18446744073709551621 is out of range for int64_t"):
        args.seed = 2**64 + 5
    with pytest.raises(OverflowError, match=r"InitArgs.device 4294967296"):
        args.device = 2**32
    with pytest.raises(OverflowError, match=r"RngGroupPosition.rank"):
        T.RngGroupPosition(2**32, 1)
    args.seed = 2**63 - 1
    assert args.seed == 2**63 - 1


def test_initialize_refuses_before_calling_the_library():
    # No launcher environment is needed: the values are refused before mcore_initialize runs.
    with pytest.raises(OverflowError, match="seed"):
        runtime.initialize(seed=2**64 + 5)
    with pytest.raises(OverflowError, match="device"):
        runtime.initialize(device=2**31)
    with pytest.raises(OverflowError, match=r"values\[1\]"):
        T.int_array(ctypes.c_int64, [1, 2**63], "values")
    for bad in (0, -1, math.nan):
        with pytest.raises(ValueError, match="timeout"):
            runtime.initialize(timeout=bad)
    with pytest.raises(TypeError, match="timeout"):
        runtime.initialize(timeout="10")


def test_timeouts_saturate_to_no_limit_instead_of_wrapping():
    assert T.timeout_ms(1.5) == 1500
    assert T.timeout_ms(1e-9) == 1
    assert T.timeout_ms(math.inf) == T.TIMEOUT_NONE_MS
    assert T.timeout_ms(1e300) == T.TIMEOUT_NONE_MS
    # 2**64 ms + 5 ms used to wrap to 5 ms.
    assert T.timeout_ms((2**64 + 5) / 1000) == T.TIMEOUT_NONE_MS
