#!/usr/bin/env bash
# tier: slow
# lane: wait
# Hostile clients against the store of a live 8-rank init (issue #24, tests/store/store_hostile.rs):
# MULTI_GETs of 1 MB key lists, 250,000 WAITs on one key then close, requests left half-sent,
# replies never read, 1,100 idle connections at an open-file limit of 1,024; and in a 4-rank job
# in the default mode, 1,100 connections each parking a WAIT at that limit (issue 42: they are
# evicted, the ranks get in). Every rank must come up, the store host must survive within its
# memory budget, a probe client must stay answered.
# The per-case figures (probe round trips, memory) are printed: docs/BENCHMARKS.md quotes them.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
plugin=$(gloo_plugin)
log=target/store-hostile.log
MCORE_GLOO_PLUGIN="$plugin" cargo test --release --locked --test store store_hostile:: -- --test-threads 1 --nocapture \
  >"$log" 2>&1
rc=$?
grep -oE 'store_hostile .*|  rank 0: .*' "$log"
suite_count_cargo "tests/store/store_hostile.rs" "$log" "$rc"
[ "$rc" -eq 0 ] || tail -n 40 "$log"
suite_end store-hostile
