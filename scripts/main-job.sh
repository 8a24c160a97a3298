#!/usr/bin/env bash
# The main job: set up this machine, build the library, the tools and the Gloo plugin, then bring
# up 8 ranks on CPU (tp=2 pp=2 cp=2, Gloo backend) with mcore-launch, verify every group of every
# rank with a collective, and print a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "== building (cargo, release) and the Gloo plugin (cmake)"
cargo build --release --locked --bins --lib --quiet
plugin_dir=target/gloo-plugin
cmake -S backends/gloo -B "$plugin_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$plugin_dir" -j 2 >/dev/null
export LD_LIBRARY_PATH="$PWD/$plugin_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "== mcore-launch --nproc 8 -- mcore-selftest --tp 2 --pp 2 --cp 2 --backend gloo"
log=$(mktemp)
status=0
./target/release/mcore-launch --nproc 8 --timeout 300 -- \
  ./target/release/mcore-selftest --tp 2 --pp 2 --cp 2 --backend gloo | tee "$log" || status=$?
python3 - "$log" "$status" <<'PY'
import json, sys
lines = [json.loads(l.split("]: ", 1)[1]) for l in open(sys.argv[1]) if "]: {" in l]
ok = [l for l in lines if l.get("ok")]
print(f"== summary: {len(ok)}/8 ranks ok", end="")
if ok:
    groups = sum(l["groups"] for l in ok)
    comms = sum(l["communicators"] for l in ok)
    ready = max(l["ready_since_process_start_s"] for l in ok)
    init = max(l["init_seconds"] for l in ok)
    rt = sum(l["store_round_trips"] for l in ok) / len(ok)
    print(f"; {groups} rank-group memberships verified ({comms} communicators); "
          f"all groups ready {ready:.3f} s after process start (init {init:.3f} s); "
          f"{rt:.0f} store round trips per rank")
else:
    print()
sys.exit(0 if len(ok) == 8 and int(sys.argv[2]) == 0 else 1)
PY
