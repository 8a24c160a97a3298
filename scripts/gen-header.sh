#!/usr/bin/env bash
# Regenerate include/mcore_init.h (src/ffi) and include/mcore_backend.h (src/abi) with cbindgen (via the drift test in write mode).
set -euo pipefail
cd "$(dirname "$0")/.."
MCORE_UPDATE_HEADER=1 cargo test --quiet --test hygiene header_drift::
