"""torchelastic's c10d rendezvous (torch.distributed.elastic.rendezvous, backend "c10d") on our
TCPStore server: the backend's compare-and-set state directly, then three nodes (processes)
joining one rendezvous through `rendezvous_handler_registry`, with the endpoint pointing at our
server.

Usage: python rdzv.py LIBMCORE_INIT_SO
Prints "ok: ..." / "FAIL: ..." per check and "N passed, M failed"; exits non-zero on a failure.
Every wait is bounded (the rendezvous's join timeout, subprocess timeouts).
"""
import json, os, subprocess, sys, time, warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ourserver import HOST, OurServer  # noqa: E402

NODES = 3


def node(port, run_id, explicit_host):
    """One node: join the rendezvous, check the store it hands out, print a JSON line."""
    from datetime import timedelta
    from torch.distributed.elastic.rendezvous import RendezvousParameters, rendezvous_handler_registry

    conf = {"join_timeout": 60, "last_call_timeout": 1, "close_timeout": 10, "read_timeout": 30}
    if explicit_host:
        conf["is_host"] = False  # else torch guesses it hosts 127.0.0.1, fails to bind, and connects
    params = RendezvousParameters(backend="c10d", endpoint=f"{HOST}:{port}", run_id=run_id,
                                  min_nodes=NODES, max_nodes=NODES, **conf)
    handler = rendezvous_handler_registry.create_handler(params)
    info = handler.next_rendezvous()
    store = info.store
    store.set(f"hello/{info.rank}", str(os.getpid()))
    store.wait([f"hello/{r}" for r in range(info.world_size)], timedelta(seconds=30))
    peers = store.multi_get([f"hello/{r}" for r in range(info.world_size)])
    bs = info.bootstrap_store_info
    out = {
        "rank": info.rank,
        "world_size": info.world_size,
        "backend": handler.get_backend(),
        "peers": sorted(p.decode() for p in peers),
        "pid": str(os.getpid()),
        "master": [bs.master_addr, bs.master_port] if bs else None,
        "closed_before": handler.is_closed(),
    }
    store.barrier("done", NODES, timedelta(seconds=30))
    if info.rank == 0:
        handler.set_closed()
    store.add("closed-wait", 1)
    if info.rank != 0:
        store.wait(["closed-seen"], timedelta(seconds=30))
    # is_closed reads the shared state at most once a second (torch's cache): poll, bounded.
    deadline = time.monotonic() + 30
    while not handler.is_closed() and time.monotonic() < deadline:
        time.sleep(0.2)
    out["closed_after"] = handler.is_closed()
    if info.rank == 0:
        store.set("closed-seen", "1")
    handler.shutdown()
    print("RESULT " + json.dumps(out), flush=True)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--node":
        return node(int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1")
    if len(sys.argv) != 2:
        sys.exit("usage: rdzv.py LIBMCORE_INIT_SO")
    from datetime import timedelta
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

    server = OurServer(sys.argv[1])
    passed, failed = 0, 0

    def check(name, cond, detail=""):
        nonlocal passed, failed
        if cond:
            passed += 1
            print(f"ok: {name}")
        else:
            failed += 1
            print(f"FAIL: {name} {detail}")

    # The backend's state: a compare-and-set on one base64 key.
    store = dist.TCPStore(HOST, server.port, is_master=False, timeout=timedelta(seconds=10))
    be = C10dRendezvousBackend(store, "direct")
    check("backend name", be.name == "c10d", be.name)
    check("no state at first", be.get_state() is None)
    s1 = be.set_state(b"state-1")
    check("first set_state wins", s1 is not None and s1[0] == b"state-1" and s1[2], repr(s1))
    s2 = be.set_state(b"state-2", token=None)
    check("set_state with a stale token loses, returning the current state",
          s2 is not None and s2[0] == b"state-1" and not s2[2], repr(s2))
    s3 = be.set_state(b"state-3", token=s1[1])
    check("set_state with the current token wins", s3 is not None and s3[0] == b"state-3" and s3[2], repr(s3))
    got = be.get_state()
    check("get_state sees the last state", got is not None and got[0] == b"state-3", repr(got))

    # Three nodes, each its own process, two with is_host=False and one guessing.
    procs = [subprocess.Popen([sys.executable, "-W", "ignore", __file__, "--node", str(server.port), "rdzv-test",
                               "1" if i < 2 else "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(NODES)]
    results, errors = [], []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        lines = [line[7:] for line in out.splitlines() if line.startswith("RESULT ")]
        if p.returncode == 0 and lines:
            results.append(json.loads(lines[-1]))
        else:
            errors.append(f"exit {p.returncode}: {err[-2000:]}")
    check(f"{NODES} nodes completed the rendezvous", len(results) == NODES, "; ".join(errors))
    if results:
        check("ranks are 0..n-1", sorted(r["rank"] for r in results) == list(range(NODES)),
              repr([r["rank"] for r in results]))
        check("every node sees the world size", all(r["world_size"] == NODES for r in results))
        check("the backend is c10d", all(r["backend"] == "c10d" for r in results))
        pids = sorted(r["pid"] for r in results)
        check("the store handed out is shared: every node read every node's key",
              all(r["peers"] == pids for r in results), repr([r["peers"] for r in results]))
        masters = {tuple(r["master"]) for r in results if r["master"]}
        check("one bootstrap address for all nodes", len(masters) == 1, repr(masters))
        check("not closed during the round", not any(r["closed_before"] for r in results))
        check("closed once rank 0 closed it", all(r["closed_after"] for r in results))
    server.close()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
