#!/usr/bin/env bash
# Regenerate include/mcore_init.h from src/ffi with cbindgen (via the drift test in write mode).
set -euo pipefail
cd "$(dirname "$0")/.."
MCORE_UPDATE_HEADER=1 cargo test --quiet --test header_drift
