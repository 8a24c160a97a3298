"""A free TCP port on 127.0.0.1 for a store that a process about to start binds: the Python twin
of mcore_init::store::tcp::free_port (src/store/tcp/free_port.rs; cpp_tests/test_util.h has the
C++ one). With MCORE_PORT_RANGE=LO-HI set (scripts/test.sh gives each of its lanes its own), the
port comes from that range, skipping the kernel's ephemeral range, which the kernel never hands to
an outgoing connection or a bind to port 0 of a suite running beside it; unset, the kernel picks.

    python3 scripts/lib/ports.py [N]   print N free ports (default 1), one per line
"""
import itertools
import os
import random
import socket
import sys

RANGE_VAR = "MCORE_PORT_RANGE"
_calls = itertools.count()


def _ephemeral():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(v) for v in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return None


def _free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return s.getsockname()[1]


def free_port() -> int:
    spec = os.environ.get(RANGE_VAR, "").strip()
    if not spec:
        return _free(0)
    try:
        lo, hi = (int(v) for v in spec.split("-"))
        if not 1 <= lo <= hi <= 65535:
            raise ValueError
    except ValueError:
        raise SystemExit(f"{RANGE_VAR}='{spec}': not a range LO-HI of ports 1-65535") from None
    eph = _ephemeral()
    span = hi - lo + 1
    start = random.Random(os.getpid() * 7919 + next(_calls) * 104729 + random.getrandbits(32)).randrange(span)
    for i in range(span):
        port = lo + (start + i) % span
        if eph and eph[0] <= port <= eph[1]:
            continue
        if _free(port):
            return port
    raise SystemExit(f"{RANGE_VAR}='{spec}': no free port in it outside the kernel's ephemeral range")


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    ports = []
    while len(ports) < n:
        p = free_port()
        if p not in ports:
            ports.append(p)
    print("\n".join(map(str, ports)))
