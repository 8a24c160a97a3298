"""mcore_init: Megatron-Core's parallel state (topology, RNG seeds, runtime init) via ctypes."""

from ._lib import ABI_VERSION, McoreError, version

__all__ = ["ABI_VERSION", "McoreError", "version"]
