#!/usr/bin/env bash
# The main job: set up this machine, build the library, the tools and the Gloo plugin, then bring
# up 8 ranks on CPU (tp=2 pp=2 cp=2, Gloo backend) with mcore-launch, verify every group of every
# rank with a collective, and print a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# A long step says so every 20 s (a first build takes minutes on 2 cores); its output is shown
# only when it fails.
step() {  # LABEL COMMAND...
  local label=$1 start=$SECONDS out rc=0 pid ticker; shift
  echo "== $label"
  out=$(mktemp)
  ( while sleep 20; do echo "   ... $label: still running, $((SECONDS - start)) s"; done ) &
  ticker=$!
  "$@" >"$out" 2>&1 || rc=$?
  kill "$ticker" 2>/dev/null || true; wait "$ticker" 2>/dev/null || true
  if [ "$rc" != 0 ]; then cat "$out"; rm -f "$out"; echo "== $label failed (exit status $rc)"; exit "$rc"; fi
  rm -f "$out"
  echo "   done in $((SECONDS - start)) s"
}
step "building the library and tools (cargo build --release; minutes the first time)" \
  cargo build --release --locked --bins --lib
plugin_dir=target/gloo-plugin
. scripts/lib/gloo-plugin.sh
step "building the Gloo plugin (cmake, against Debian's libgloo-dev)" gloo_plugin_build /dev/stdout
export LD_LIBRARY_PATH="$PWD/$plugin_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "== mcore-launch --nproc 8 -- mcore-selftest --tp 2 --pp 2 --cp 2 --backend gloo --json"
log=$(mktemp)
status=0
# The JSON lines go to the log; one readable line per rank (the "line" field) is printed below.
./target/release/mcore-launch --nproc 8 --timeout 300 -- \
  ./target/release/mcore-selftest --tp 2 --pp 2 --cp 2 --backend gloo --json >"$log" || status=$?
python3 - "$log" "$status" <<'PY'
import json, sys
raw = open(sys.argv[1]).read().splitlines()
lines = [json.loads(l.split("]: ", 1)[1]) for l in raw if "]: {" in l]
for l in sorted(lines, key=lambda l: (l.get("rank") is None, l.get("rank") or 0)):
    print("  " + (l.get("line") or f"rank {l.get('rank')} FAILED: {str(l.get('error'))[:180]}"))
for l in raw:
    if "]: {" not in l:
        print("  " + l[:200])
ok = [l for l in lines if l.get("ok")]
if ok:
    kinds = {}
    for l in ok:
        for k, s in l.get("create_s", {}).items():
            kinds[k] = max(kinds.get(k, 0.0), s)
    slow = sorted(((k, s) for k, s in kinds.items() if s >= 5e-5), key=lambda kv: -kv[1])
    if slow:
        print(f"== communicator creation per kind (slowest rank, ms; {len(kinds) - len(slow)} more kinds reuse one):")
        for i in range(0, len(slow), 3):
            print("  " + "  ".join(f"{k[:36]:<36}{s * 1e3:>7.1f}" for k, s in slow[i:i + 3]))
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
