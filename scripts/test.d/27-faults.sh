#!/usr/bin/env bash
# Fault injection (issue #23): Gloo worlds of 8 and 16 real mcore-selftest processes, init timeout
# T = 5 s, in which one rank (rank 0 in every third trial, else one drawn from a fixed seed)
# SIGKILLs or SIGSTOPs itself at a drawn point: before init, at check-in, with its communicators
# made, in verification after init, or before destroy (mcore-selftest --fault). Every survivor
# must end within T + 2 s of its start, and every survivor that fails must name the victim's rank
# (scripts/lib/fault_trials.py; per-trial records in target/faults.json).
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
plugin=$(gloo_plugin)
cargo build --release --locked --quiet --bin mcore-selftest
suite_check "fault trials (32, seed 23)" python3 scripts/lib/fault_trials.py --selftest target/release/mcore-selftest \
  --plugin-dir "$(dirname "$plugin")" --trials 32 --seed 23 --timeout 5 --json-out target/faults.json
suite_end faults
