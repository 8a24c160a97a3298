#!/usr/bin/env python3
"""What an idle job costs its store host: WORLD mcore-selftest ranks (Gloo, tp 2) initialize, then
hold the runtime idle (MCORE_SELFTEST_HOLD_S); over WINDOW seconds of that hold, the TCP segments
the store host received on the store port (`ss -ti` segs_in of its accepted connections, summed)
are counted. Prints one JSON line: segments per second per rank. A figure for docs/BENCHMARKS.md,
not a test (it asserts nothing about time)."""
import argparse
import json
import os
import re
import subprocess
import sys
import time

from ports import free_port  # scripts/lib/ports.py: MCORE_PORT_RANGE when set


def segs_in(port):
    """segs_in per accepted connection of the server on `port` (keyed by the client's address)."""
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    got, peer = {}, None
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            parts = line.split()
            peer = parts[-1] if parts else None
            continue
        m = re.search(r"\bsegs_in:(\d+)", line)
        if m and peer:
            got[peer] = int(m.group(1))
    return got


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--selftest", required=True)
    p.add_argument("--plugin-dir", required=True)
    p.add_argument("--world", type=int, default=32)
    p.add_argument("--window", type=float, default=4.0)
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--settle", type=float, default=6.0,
                   help="seconds from every rank's hold to the window (0: right after init)")
    p.add_argument("--group", action="append", default=[],
                   help="NAME:RANKS, a group every member creates after init, before its hold")
    a = p.parse_args()
    port = free_port()
    hold = a.window + 30
    env_base = dict(os.environ, WORLD_SIZE=str(a.world), LOCAL_WORLD_SIZE=str(a.world), MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(port), MCORE_SELFTEST_HOLD_S=str(hold),
                    LD_LIBRARY_PATH=a.plugin_dir + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    argv = [a.selftest, "--json", "--backend", "gloo", "--timeout", str(a.timeout), "--tp", "2"]
    for g in a.group:
        argv += ["--group", g]
    procs = []
    logs = []
    for r in range(a.world):
        log = open(f"/tmp/idle_load_{os.getpid()}_{r}.out", "w+")
        logs.append(log)
        procs.append(subprocess.Popen(argv, env=dict(env_base, RANK=str(r), LOCAL_RANK=str(r)), stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    try:
        # Every rank initialized, verified (and made its groups) and began its hold (it says so),
        # then --settle seconds more (6 by default: until issue 42 the watcher checked the host
        # for 5 s after the last store call).
        deadline = time.monotonic() + a.timeout
        while time.monotonic() < deadline:
            if all("holding the runtime idle" in open(log.name).read() for log in logs):
                break
            if any(pr.poll() is not None for pr in procs):
                sys.exit("a rank ended before its hold: " + open(logs[0].name).read()[-2000:])
            time.sleep(0.25)
        else:
            sys.exit("the ranks did not all reach their hold in time")
        time.sleep(a.settle)
        before = segs_in(port)
        t0 = time.monotonic()
        time.sleep(a.window)
        after = segs_in(port)
        took = time.monotonic() - t0
        segs = sum(after.get(k, 0) - v for k, v in before.items() if k in after)
        print(json.dumps({"world": a.world, "settle_s": a.settle, "groups": a.group,
                          "connections": len(after), "window_s": round(took, 2),
                          "segs_in": segs, "segs_per_s_per_rank": round(segs / took / a.world, 3)}))
    finally:
        for pr in procs:
            pr.kill()
            pr.wait()
        for log in logs:
            log.close()
            os.unlink(log.name)


if __name__ == "__main__":
    main()
