#!/usr/bin/env bash
# tier: slow
# lane: wait
# srun with nothing set by hand (issue 28): a real single-node Slurm from Debian (slurm-wlm:
# slurmctld, slurmd; munge), configured, started, stopped and removed by this suite in a private
# directory, runs `srun -n 8 mcore-selftest --tp 2 --pp 2 --backend gloo --json` with no
# MASTER_ADDR/MASTER_PORT anywhere; every rank must verify every group, and rank 0 must say it met
# the others at the port the documented formula gives for the job and step ids srun handed out.
# Slurm's own traffic: SlurmctldHost and the node's NodeAddr are 127.0.0.1.
# Needs root (slurmd starts the tasks) and the packages, which it installs when missing.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
export PATH=$PATH:/usr/sbin:/sbin
suite_need slurm "slurmctld slurmd srun sinfo scontrol munged mungekey" slurmctld slurmd slurm-client munge
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: slurm: slurmd must run as root to start tasks, and this suite runs as $(id -un)"
  suite_end slurm " (skipped: not root)"
  exit 0
fi
echo "slurm: $(slurmctld -V), munge $(dpkg-query -W -f '${Version}' munge 2>/dev/null)"

cargo build --release --locked --quiet --bin mcore-selftest || suite_abort slurm "cargo build failed"
plugin=$(gloo_plugin)
[ -f "$plugin" ] || suite_abort slurm "the Gloo plugin did not build"

dir=$(mktemp -d /tmp/mcore-slurm.XXXXXX)
chmod 700 "$dir"
# Stop what was started (by its pid file, the daemon's own), wait up to 10 s each, remove the files.
stop_all() {
  local f pid i
  # Steps left by a failed check first (their tasks are not the daemons' children), up to 10 s.
  if [ -f "$dir/slurmctld.pid" ] && [ -n "$(timeout 5 squeue -h -o %i 2>/dev/null)" ]; then
    timeout 5 scancel --partition=mcore >/dev/null 2>&1
    for i in $(seq 20); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
  fi
  for f in slurmd slurmctld munged; do
    [ -f "$dir/$f.pid" ] || continue
    pid=$(cat "$dir/$f.pid" 2>/dev/null)
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null || continue
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { echo "slurm: $f ($pid) ignored SIGTERM for 10 s; killing it"; kill -9 "$pid" 2>/dev/null; }
  done
  rm -rf "$dir"
}
trap stop_all EXIT
trap 'exit 130' INT TERM
show_logs() {
  local f
  for f in munged slurmctld slurmd; do
    [ -f "$dir/$f.log" ] && { echo "--- $f.log (tail)"; tail -n 15 "$dir/$f.log"; }
  done
}

# munge: its own key, socket, pid, log and seed, all in $dir.
mungekey --create --keyfile="$dir/munge.key" >/dev/null 2>&1 \
  || { dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none && chmod 400 "$dir/munge.key"; }
if ! munged --force --socket="$dir/munge.sock" --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
     --log-file="$dir/munged.log" --seed-file="$dir/munged.seed"; then
  show_logs; suite_abort slurm "munged did not start"
fi

# Two free ports on 127.0.0.1 for slurmctld and slurmd.
read -r ctld_port d_port < <(free_port 2 | tr '\n' ' ')
host=$(hostname -s)
node=mcore-n01
cat >"$dir/slurm.conf" <<EOF
ClusterName=mcore
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.sock
StateSaveLocation=$dir/ctld-state
SlurmdSpoolDir=$dir/slurmd-spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$node NodeHostname=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=mcore Nodes=$node Default=YES MaxTime=10 State=UP
EOF
mkdir -p "$dir/ctld-state" "$dir/slurmd-spool"
export SLURM_CONF=$dir/slurm.conf
if ! slurmctld -i || ! slurmd -N "$node"; then
  show_logs; suite_abort slurm "slurmctld or slurmd did not start"
fi
state=""
deadline=$((SECONDS + 30))
while [ "$SECONDS" -lt "$deadline" ]; do
  state=$(timeout 5 sinfo -h -n "$node" -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  sleep 0.5
done
if [ "$state" != idle ]; then
  show_logs; suite_abort slurm "node $node is not idle after 30 s (state: '${state:-no answer}')"
fi
suite_ok "slurmctld and slurmd up, node $node idle"

# The launch: nothing of torchrun's or ours in the environment srun passes on.
unset_vars=(-u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MCORE_JOB_ID)
out=$dir/srun.out err=$dir/srun.err
env "${unset_vars[@]}" LD_LIBRARY_PATH="$PWD/target/gloo-plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MCORE_LOG=debug \
  timeout 240 srun -n 8 --time=4 target/release/mcore-selftest --tp 2 --pp 2 --backend gloo --json --timeout 120 \
  >"$out" 2>"$err"
rc=$?
if [ "$rc" -eq 0 ]; then suite_ok "srun -n 8 exited 0"; else suite_bad "srun -n 8 exited with status $rc"; tail -n 20 "$err"; fi
if python3 scripts/lib/selftest_lines.py "$out" 8 127.0.0.1; then
  suite_ok "8 JSON lines: ranks 0-7 at distinct coordinates, each ok with every group of its kinds verified, all on 127.0.0.1"
else
  suite_bad "srun's JSON lines:"; cat "$out"
fi
# Rank 0's MCORE_LOG=debug line: where it met the others, and why.
meet=$(grep -m1 'rank 0 meets the others at' "$err")
echo "slurm: $meet"
job=$(sed -n 's/.*SLURM_JOB_ID=\([0-9]*\), SLURM_STEP_ID=\([0-9]*\).*/\1/p' <<<"$meet")
step=$(sed -n 's/.*SLURM_JOB_ID=\([0-9]*\), SLURM_STEP_ID=\([0-9]*\).*/\2/p' <<<"$meet")
if [ -n "$job" ] && [ -n "$step" ] \
   && grep -q "at 127.0.0.1:$((20000 + (16 * (job % 12000) + step % 16) % 12000)) (address: the step runs on one node (SLURM_STEP_NODELIST='$node'): loopback" <<<"$meet"; then
  suite_ok "rank 0 met the others at 127.0.0.1:20000 + (16 x $job + $step mod 16) mod 12000"
else
  suite_bad "rank 0's debug line does not show the derived address and port: '${meet:-none}'"
  tail -n 20 "$err"
fi

# A step on several nodes meets at the first host of its list (here the list is overridden, so
# that the first host, localhost, still keeps the traffic on loopback).
env "${unset_vars[@]}" LD_LIBRARY_PATH="$PWD/target/gloo-plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MCORE_LOG=debug \
  timeout 120 srun -n 2 --time=2 env SLURM_STEP_NODELIST='localhost,mcore-n[02-03]' \
  target/release/mcore-selftest --tp 2 --backend gloo --json --timeout 60 >"$dir/first.out" 2>"$dir/first.err"
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c '"ok":true' "$dir/first.out")" -eq 2 ] \
   && grep -q "rank 0 meets the others at localhost:[0-9]* (address: the first host of SLURM_STEP_NODELIST='localhost,mcore-n\[02-03\]'" "$dir/first.err"; then
  suite_ok "a step listed on several nodes met at the first host of SLURM_STEP_NODELIST"
else
  suite_bad "first host of a several-node SLURM_STEP_NODELIST (status $rc):"; cat "$dir/first.out" "$dir/first.err" | tail -n 20
fi

# A node list that is not Slurm's syntax is named, at once, by every rank.
env "${unset_vars[@]}" timeout 120 srun -n 2 --time=2 env SLURM_STEP_NODELIST='mcore-n[01-02' \
  target/release/mcore-selftest --backend gloo --timeout 30 >"$dir/bad.out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$(grep -c "^mcore-selftest: MASTER_ADDR is not set, and SLURM_STEP_NODELIST='mcore-n\[01-02' is not a Slurm host list: a '\[' is never closed" "$dir/bad.out")" -eq 2 ]; then
  suite_ok "a malformed SLURM_STEP_NODELIST is named by both ranks"
else
  suite_bad "a malformed SLURM_STEP_NODELIST (status $rc):"; cat "$dir/bad.out"
fi
# srun --mpi=pmix (issue 35; Slurm's mpi_pmix plugin comes with slurmd, in
# slurm-wlm-basic-plugins): the ranks meet through PMIx, at the port rank 0 published, not the
# derived one; tp 2 pp 2 cp 2, every group verified. Debian's plugin dlopens PMIx by its
# unversioned name, pmix2/lib/libpmix.so, which only libpmix-dev ships (mcore_init itself needs
# only libpmix.so.2).
pmix_dir=/usr/lib/x86_64-linux-gnu/pmix2/lib
[ -e "$pmix_dir/libpmix.so" ] || { echo "slurm: installing libpmix-dev (for Slurm's mpi_pmix plugin)"; apt_install libpmix-dev; }
if [ -e "$pmix_dir/libpmix.so" ] && srun --mpi=list 2>&1 | grep -q pmix; then
  env "${unset_vars[@]}" LD_LIBRARY_PATH="$PWD/target/gloo-plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MCORE_LOG=debug \
    timeout 240 srun --mpi=pmix -n 8 --time=4 target/release/mcore-selftest --tp 2 --pp 2 --cp 2 --backend gloo --json \
    --timeout 120 >"$dir/pmix.out" 2>"$dir/pmix.err"
  rc=$?
  if [ "$rc" -eq 0 ] && python3 scripts/lib/selftest_lines.py "$dir/pmix.out" 8 127.0.0.1 \
     && [ "$(grep -c '"rendezvous":"pmix"' "$dir/pmix.out")" -eq 8 ] \
     && [ "$(grep -c 'meets the others at 127.0.0.1:[0-9]* (address: every rank runs on this node (PMIx: pmix.local.size = pmix.job.size = 8): loopback; port: an ephemeral port of rank 0.s store, published through PMIx)' "$dir/pmix.err")" -eq 8 ]; then
    suite_ok "srun --mpi=pmix -n 8 (tp 2 pp 2 cp 2): every rank ok, every group verified, rendezvous through PMIx"
  else
    suite_bad "srun --mpi=pmix -n 8 (status $rc):"; tail -n 20 "$dir/pmix.err"; head -c 2000 "$dir/pmix.out"
  fi
  # A rank killed during init (rank 5 SIGKILLs itself once every rank has checked in): Slurm's
  # mpi/pmix takes the lost PMIx connection for an error and cancels the step, often before any
  # survivor has printed its line; every line that did come out names rank 5 through the store's
  # liveness. Slurm sends the clients no PMIx event: registering a handler is refused
  # ("SERVER FAILED REQUEST"), counted here (docs/pmix.md).
  env "${unset_vars[@]}" LD_LIBRARY_PATH="$PWD/target/gloo-plugin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MCORE_LOG=debug \
    timeout 240 srun --mpi=pmix -n 8 --time=4 --kill-on-bad-exit=0 target/release/mcore-selftest --tp 2 --pp 2 \
    --backend gloo --json --timeout 60 --fail-rank 5 --fail-at during --recovery-window 5 \
    >"$dir/killed.out" 2>"$dir/killed.err"
  lines=$(grep -c '^{' "$dir/killed.out")
  if killed=$(python3 scripts/lib/killed_in_init.py "$dir/killed.out" 8 5 60 --launcher-may-end-it 2>"$dir/killed.why") \
     && { [ "$lines" -eq 7 ] || grep -q "CANCELLED AT\|Force Terminated" "$dir/killed.err"; }; then
    suite_ok "srun --mpi=pmix, a rank killed during init: Slurm ended the step: $(grep -c 'CANCELLED AT\|Force Terminated' "$dir/killed.err"); the $lines survivors' lines that came out named rank 5 (at most ${killed} s after init began); handler registrations refused: $(grep -c 'no PMIx event handler' "$dir/killed.err"); PMIx events seen: $(grep -c 'mcore_init: PMIx event ' "$dir/killed.err")"
  else
    suite_bad "srun --mpi=pmix, a rank killed during init:"; tail -n 5 "$dir/killed.why"; tail -n 20 "$dir/killed.err"
    head -c 2000 "$dir/killed.out"
  fi
else
  echo "slurm: no mpi_pmix plugin (srun --mpi=list: $(srun --mpi=list 2>&1 | tr '\n' ' ')); srun --mpi=pmix not checked"
fi
suite_end slurm
