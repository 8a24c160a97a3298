#!/usr/bin/env bash
# lane: wait
# The runtime with real processes over the Gloo plugin (tests/runtime/runtime_multiprocess.rs), and the
# README's main job (8 ranks through mcore-launch).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
plugin=$(gloo_plugin)
suite_check "tests/runtime/runtime_multiprocess.rs" \
  env MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test runtime runtime_multiprocess:: -- --test-threads 1
# Groups made after init by their members only (shuffled orders, a member that never calls, 16 ranks).
suite_check "tests/runtime/member_groups_multiprocess.rs" \
  env MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test runtime member_groups_multiprocess:: -- --test-threads 1
# Waits that speak: a line after 10 s naming the missing rank, and what a rank stopped by SIGINT
# or SIGTERM during a wait was waiting for.
suite_check "tests/runtime/waits_speak.rs" \
  env MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test runtime waits_speak::
# mcore-launch's signal handling with real mcore-selftest ranks (and the rest of that file).
suite_check "tests/cli/cli_launch_signals.rs" env MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test cli cli_launch_signals::
# MindSpeed's groups at init (docs/topology.md): 8 Gloo ranks under mcore-launch; the selftest checks
# every MindSpeed group of every rank (members as the topology layer gives them, a communicator of
# its own, an all-reduce over it). NAME GROUPS-PER-RANK SELFTEST-ARGS...
mindspeed_job() {
  local name=$1 want=$2 log=target/mindspeed-$1.log; shift 2
  cargo build --release --locked --quiet --bins \
    && LD_LIBRARY_PATH="$(dirname "$plugin")" ./target/release/mcore-launch --nproc 8 --timeout 120 -- \
      ./target/release/mcore-selftest --backend gloo --json "$@" >"$log" 2>&1 \
    && python3 - "$log" "$want" <<'PY'
import json, sys
lines = [json.loads(l.split("]: ", 1)[1]) for l in open(sys.argv[1]) if "]: {" in l]
ok = [l for l in lines if l.get("ok") and l.get("mindspeed_groups_verified") == int(sys.argv[2])]
print(f"{len(ok)}/8 ranks verified {sys.argv[2]} MindSpeed groups each")
sys.exit(0 if len(ok) == 8 else 1)
PY
}
# Hybrid CP: cp2, cp_ulysses, cp_ring, cp_ring_intra, cp_ring_intra_overlap.
suite_check "MindSpeed hybrid CP job (log: target/mindspeed-hybrid-cp.log)" mindspeed_job hybrid-cp 5 --cp 4 \
  --mindspeed context_parallel_algo=hybrid_cp_algo,ulysses_degree_in_cp=2,cp_window_size=1,use_cp_send_recv_overlap
# 2-D TP: nd1_dim1, nd1_dim2, nd2_dim1, nd2_dim2, tp-y-cp, tp-y-cp-overlap (per-group creation).
suite_check "MindSpeed 2-D TP job (log: target/mindspeed-tp-2d.log)" mindspeed_job tp-2d 6 --tp 4 \
  --comm-strategy per-group --mindspeed tp_2d,tp_x=2,tp_y=2
# The README's C, C++ and Python examples run in 40-cmake-package.sh (installed prefix) and
# 61-python-wheel.sh (the wheel).
if bash scripts/main-job.sh >target/main-job.log 2>&1; then
  suite_ok; tail -1 target/main-job.log
else
  suite_bad "scripts/main-job.sh (log: target/main-job.log)"; tail -30 target/main-job.log
fi
suite_end runtime
