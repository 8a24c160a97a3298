#!/usr/bin/env bash
# Fault injection (issue #23): Gloo worlds of 8 and 16 real mcore-selftest processes, init timeout
# T = 5 s, in which one rank (rank 0 in every third trial, else one drawn from a fixed seed)
# SIGKILLs or SIGSTOPs itself at a drawn point: before init, at check-in, with its communicators
# made, in verification after init, or before destroy (mcore-selftest --fault). Every survivor
# must end within T + 2 s of its start, and every survivor that fails must name the victim's rank
# (scripts/lib/fault_trials.py; per-trial records in target/faults.json). Then rank 5 of 16 is
# killed with T = 60 s: its store connection's close notice ends every survivor's wait within 2 s.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
plugin=$(gloo_plugin)
cargo build --release --locked --quiet --bin mcore-selftest
suite_check "fault trials (32, seed 23)" python3 scripts/lib/fault_trials.py --selftest target/release/mcore-selftest \
  --plugin-dir "$(dirname "$plugin")" --trials 32 --seed 23 --timeout 5 --json-out target/faults.json
# A killed rank found through its store connection (issue #24): 16 ranks, T = 60 s, rank 5 killed
# once every rank checked in (creating groups) or with its communicators made: every survivor ends
# within 2 s of the kill (not at T), naming rank 5 and its host.
suite_check "a killed rank found at once (16 ranks, T = 60 s)" python3 scripts/lib/fault_trials.py \
  --selftest target/release/mcore-selftest --plugin-dir "$(dirname "$plugin")" --trials 2 --worlds 16 --victim 5 \
  --only checkin:kill,created:kill --seed 1 --timeout 60 --after-kill 2 --expect "on host '" \
  --json-out target/faults-death.json
suite_end faults
