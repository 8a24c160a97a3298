#!/usr/bin/env bash
# Issue 34.4: every handle type (topology, recovery plan, RNG tracker, store, group) destroyed
# while another thread is inside a call on it, 100 runs each, in a C program built with
# AddressSanitizer (tests/c/handle_races.c; libasan intercepts the Rust library's allocations
# too, so a call reading a freed handle is a report or a crash). Issue 46 F1: every communicator
# handle cached at init, 20 suspend/resume runs in recreate mode (Gloo), the cached handles used
# through the plugin itself while mcore_comm_generation says they are current. The Python half (a thread in
# Group.wait() while the group is destroyed, 100 runs) is in python/tests/test_member_groups.py.
set -uo pipefail
. "$(dirname "$0")/../lib/suite.sh"
asan=$(cc -print-file-name=libasan.so 2>/dev/null)
[ -e "$asan" ] || suite_abort "handle-races (ASan)" "no libasan (cc -print-file-name=libasan.so gave '$asan')"
stage_c_library || suite_abort "handle-races (ASan)" "cannot build and stage libmcore_init.so"
plugin=$(gloo_plugin)
lib=target/c-examples/lib
exe=target/c-examples/handle_races
log=target/handle-races.log
cc -std=c11 -g -fsanitize=address -fno-omit-frame-pointer -Wall -Wextra -Werror -Iinclude tests/c/handle_races.c \
  -L"$lib" -lmcore_init -lpthread -ldl -Wl,-rpath,"$PWD/$lib" -o "$exe" || suite_abort "handle-races (ASan)" "cannot build"
port=$(free_port)
if ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
     MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 300 "$exe" "$plugin" >"$log" 2>&1 \
   && ! grep -q AddressSanitizer "$log"; then
  grep '^handle_races' "$log"
  suite_ok "5 handle types x 100 destroy-while-in-a-call runs under ASan"
  suite_ok "cached communicator handles across 20 suspend/resume runs (recreate mode) under ASan"
else
  tail -n 40 "$log"
  suite_bad "handle races under ASan (log: $log)"
fi
suite_end "handle-races (ASan)"
