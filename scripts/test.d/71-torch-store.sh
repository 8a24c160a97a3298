#!/usr/bin/env bash
# tier: slow
# lane: wait
# Our TCPStore server (src/store/tcp/server/) under real torch clients (PyPI's torch, pinned; the
# venv of scripts/torchrun-venv.sh, target/torchrun-venv, shared with 70-multihost.sh), all on
# 127.0.0.1 (scripts/torch_store_compat/):
#   1. store_api.py: every public method of torch's TCPStore and PrefixStore (libuv and legacy
#      client flags) through torch's client, each case's result compared with the one torch's own
#      server gives; one count per case;
#   2. rdzv.py: torchelastic's c10d rendezvous backend and 3 rendezvous nodes (processes) on our
#      server;
#   3. a real torchrun job, --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:<our port>, 2 agents x 2
#      Gloo (CPU) workers, whose process group is built on our server too; every worker must
#      finish its all-reduce, queue and barrier, and our server must hold the rendezvous state;
#   4. torch and mcore_init in one process (same_process.py): 4 ranks initialize mcore_init (Gloo,
#      tp 2) and build torch's Gloo process group on mcore_init.torch_store(), under mcore-launch
#      (MCORE_STORE_KEEP_OPEN=1, nothing else set) and under torchrun (torchrun's agent store); both
#      all-reduces must give the world's sums.
# MCORE_SKIP_TORCHRUN=1 skips this suite, saying so (as 70-multihost.sh's torchrun check does);
# MCORE_TORCHRUN_VENV names another venv with torch. About 1-2 minutes once the venv exists.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"

venv=${MCORE_TORCHRUN_VENV:-target/torchrun-venv}
tmp=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ "${MCORE_SKIP_TORCHRUN:-0}" = 1 ]; then
  echo "SKIP: torch clients against our store server (MCORE_SKIP_TORCHRUN=1)"
  suite_end torch-store ", all skipped"
  exit 0
fi
if ! scripts/torchrun-venv.sh "$venv" >"$tmp/venv.log" 2>&1; then
  tail -20 "$tmp/venv.log"
  suite_abort torch-store "installing torch into $venv (scripts/torchrun-venv.sh)"
fi
cargo build --release --locked --quiet || suite_abort torch-store "building the library and tools"
lib=$PWD/target/release/libmcore_init.so
py=$venv/bin/python
compat=scripts/torch_store_compat

# Add the counts of a script's last "P passed, F failed" line; no such line or a non-zero exit
# without counted failures is one failure.
count_script() {  # NAME LOG RC
  local name=$1 log=$2 rc=$3 line p f
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
  p=${line%% passed*}; f=${line#*, }; f=${f%% failed}
  grep -E '^(FAIL|ok):|^torch |public methods called' "$log" | grep -v '^ok:' | head -40
  if [ -z "$line" ]; then
    tail -30 "$log"; suite_bad "$name printed no counts (exit status $rc)"; return
  fi
  suite_pass=$((suite_pass + p)); suite_fail=$((suite_fail + f))
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then suite_bad "$name exited with status $rc"; fi
  echo "$name: $p passed, $f failed"
}

# 1. The API, case by case against torch's server.
rc=0; OMP_NUM_THREADS=1 timeout 300 "$py" -W ignore "$compat/store_api.py" "$lib" >"$tmp/api.log" 2>"$tmp/api.err" || rc=$?
count_script store-api "$tmp/api.log" "$rc"

# 2. torchelastic's c10d rendezvous.
rc=0; OMP_NUM_THREADS=1 timeout 300 "$py" -W ignore "$compat/rdzv.py" "$lib" >"$tmp/rdzv.log" 2>&1 || rc=$?
count_script c10d-rendezvous "$tmp/rdzv.log" "$rc"

# 3. torchrun with the c10d rendezvous on our server (a process of its own, bounded lifetime).
timeout 300 "$py" -W ignore "$compat/ourserver.py" "$lib" 0 280 >"$tmp/server.out" 2>"$tmp/server.err" &
server_pid=$!
for _ in $(seq 100); do grep -q '^port ' "$tmp/server.out" 2>/dev/null && break; sleep 0.1; done
port=$(awk '/^port / { print $2 }' "$tmp/server.out")
if [ -z "$port" ]; then
  cat "$tmp/server.err"; suite_bad "our store server did not start"
else
  run_id=torchrun-$$
  for n in 0 1; do
    MCORE_TEST_STORE_PORT=$port OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo timeout 180 "$venv/bin/torchrun" \
      --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$run_id" \
      --local-addr 127.0.0.1 --max-restarts 0 --monitor-interval 0.5 "$compat/train.py" >"$tmp/agent$n" 2>&1 &
    eval "agent$n=\$!"
  done
  rc0=0; rc1=0; wait "$agent0" || rc0=$?; wait "$agent1" || rc1=$?
  n_ok=$(cat "$tmp/agent0" "$tmp/agent1" | grep -oE 'WORKER_OK [0-3] 4 10' | awk '{print $2}' | sort -u | wc -l)
  # Our server holds the rendezvous state and the workers' BARRIER counter.
  state=$("$py" -W ignore -c '
import sys, datetime, torch.distributed as d
s = d.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=10))
keys = s.list_keys()
print(int("torch.rendezvous." + sys.argv[2] in keys), s.get("train/" + sys.argv[2] + "/done").decode())
' "$port" "$run_id" 2>"$tmp/state.err")
  if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ "$n_ok" = 4 ] && [ "$state" = "1 4" ]; then
    suite_ok "torchrun --rdzv-backend c10d on our store: 2 agents x 2 Gloo workers, all-reduce, queue and barrier on our store"
  else
    tail -40 "$tmp/agent0" "$tmp/agent1"; cat "$tmp/state.err"
    suite_bad "torchrun c10d: agent exit codes $rc0/$rc1, $n_ok/4 workers ok, rendezvous key and barrier count: '$state' (want '1 4')"
  fi
fi

# 4. torch + mcore_init in one process, under mcore-launch and under torchrun.
plugin=$(gloo_plugin) || suite_abort torch-store "building the Gloo plugin"
same_process() {  # NAME COMMAND...
  local name=$1 rc=0 n_ok; shift
  env -u MCORE_BACKEND_PLUGIN PYTHONPATH="$PWD/python" MCORE_INIT_LIBRARY="$lib" OMP_NUM_THREADS=1 \
    GLOO_SOCKET_IFNAME=lo timeout 240 "$@" >"$tmp/$name.log" 2>&1 || rc=$?
  # The ranks' lines may run together in the launcher's output: count each rank's report once.
  n_ok=$(grep -oE 'SAME_PROCESS_OK [0-3] 4 10 (13|1|5|9)' "$tmp/$name.log" | awk '{print $2}' | sort -u | wc -l)
  if [ "$rc" = 0 ] && [ "$n_ok" = 4 ]; then
    suite_ok "torch + mcore_init in one process under $name: 4 ranks, torch's group on mcore_init.torch_store()"
  else
    tail -30 "$tmp/$name.log"; suite_bad "torch + mcore_init under $name: exit status $rc, $n_ok/4 ranks ok"
  fi
}
same_process mcore-launch env MCORE_STORE_KEEP_OPEN=1 target/release/mcore-launch --nproc 4 --timeout 200 -- \
  "$py" -W ignore "$compat/same_process.py" "$plugin"
port=$(free_port)
same_process torchrun "$venv/bin/torchrun" --nnodes 1 --nproc-per-node 4 --master-addr 127.0.0.1 \
  --master-port "$port" --max-restarts 0 --monitor-interval 0.5 "$compat/same_process.py" "$plugin"

suite_end torch-store
