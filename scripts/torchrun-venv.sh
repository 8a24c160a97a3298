#!/usr/bin/env bash
# Make target/torchrun-venv: a virtualenv with PyPI's torch (pinned), for the real-torchrun checks
# (scripts/test.d/70-multihost.sh; TORCH_VENV for scripts/torchrun-check.sh). PyPI's torch wheel
# needs its CUDA packages even to import on a machine without a GPU: about 4.5 GB, 3-4 minutes
# to install. Kept across runs; a failed install leaves nothing behind.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-target/torchrun-venv}
if [ -x "$venv/bin/torchrun" ] && "$venv/bin/python" -c 'import torch' 2>/dev/null; then exit 0; fi
rm -rf "$venv"
trap '[ -x "$venv/bin/torchrun" ] || rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install -q --no-cache-dir torch==2.15.0 || { rm -rf "$venv"; exit 1; }
