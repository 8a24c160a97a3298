#!/usr/bin/env bash
# The runtime's NCCL paths against the libnccl test double (tests/nccl_double/nccl_double.rs), with
# the double built with AddressSanitizer and libasan preloaded into every process, so that a write
# NCCL makes after a call returned, into memory the caller already freed, is reported. (Plain
# `cargo test` runs the same tests without ASan; scripts/test.sh leaves them to this suite.) A
# double for the runtime's logic only: the real libnccl.so.2 is tested by 30-nccl-cpu.sh and
# scripts/gpu-tests.sh.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
asan=$(cc -print-file-name=libasan.so 2>/dev/null)
if [ ! -e "$asan" ]; then
  echo "nccl-double: libasan not found (cc -print-file-name=libasan.so gave '$asan'; install gcc)"
  suite_abort "nccl-double (ASan)" "no libasan"
fi
log=$(mktemp)
MCORE_NCCL_DOUBLE_ASAN=1 cargo test --release --locked --test nccl_double 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
suite_count_cargo "tests/nccl_double/nccl_double.rs" "$log" "$rc"
grep -q 'AddressSanitizer' "$log" && suite_bad "nccl-double: AddressSanitizer reported an error"
# The GPU tests' own logic (tests/backends/nccl_gpu.rs, normally run by scripts/gpu-tests.sh) against the
# double, which stands in for libcuda.so.1 too: not evidence about GPUs, a check that the tests
# themselves do what they say.
dbl=$PWD/target/tmp/nccl-double-asan
rv=$(mktemp -d)
# (libasan is preloaded into the test binary only: the compiler does not run under it.)
exe=$(cargo test --release --locked --test backends --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "backends"][-1])')
if [ -x "$exe" ] && LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 MCORE_NCCL_LIBRARY=$dbl/libnccl_double.so \
     LD_LIBRARY_PATH=$dbl MCORE_NCCL_DOUBLE_DIR=$rv "$exe" nccl_gpu:: --ignored --skip _child --test-threads=1 >"$log" 2>&1; then
  echo "nccl-double: tests/backends/nccl_gpu.rs against the double: $(grep -E '^test result:' "$log" | tail -n1)"
else
  cat "$log"; suite_bad "nccl-double: tests/backends/nccl_gpu.rs against the double failed"
fi
rm -rf "$rv"
rm -f "$log"
suite_end "nccl-double (ASan)"
