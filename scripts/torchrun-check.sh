#!/usr/bin/env bash
# mcore-selftest unchanged under real torchrun (--no-python): torchrun's agent serves the store
# (TORCHELASTIC_USE_AGENT_STORE=True) and every rank, rank 0 included, joins as a client.
# Needs a Python environment with torch: TORCH_VENV=/path/to/venv (pip install torch).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TORCH_VENV:?set TORCH_VENV to a virtualenv with torch installed}
cargo build --release --locked --bins --quiet
. scripts/lib/gloo-plugin.sh
gloo_plugin >/dev/null
out=$(mktemp)
LD_LIBRARY_PATH="$PWD/target/gloo-plugin" "$venv/bin/torchrun" --nproc-per-node "${NPROC:-8}" --no-python \
  "$PWD/target/release/mcore-selftest" --json --tp 2 --pp 2 --cp 2 --backend gloo --seed 1234 >"$out" 2>&1
ok=$(grep -c '"ok":true' "$out" || true)
echo "torchrun $("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null): $ok/${NPROC:-8} ranks ok"
[ "$ok" -eq "${NPROC:-8}" ]
