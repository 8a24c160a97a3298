"""Every public method of torch's TCPStore and PrefixStore, through torch's own client, against
our server (src/store/tcp/server.rs, via the C API) and against torch's server (TCPStore
is_master=True, libuv) as the reference.

Usage: python store_api.py LIBMCORE_INIT_SO

Each case states the result it expects; it passes when our server gives that result and torch's
server gives it too (a case where torch's server differs from the stated expectation fails too:
the expectation is then wrong). The few cases where our server differs from torch's on purpose
(docs/wire-protocol.md) state torch's result as well, and check both. Exceptions compare by class. Prints one
line per failure, the counts of methods (each public method must be called at least once) and
cases, and exits non-zero on any failure. Every wait is bounded (client timeouts of at most a few
seconds, thread joins with timeouts); no case asserts a duration.
"""
import datetime, os, sys, threading, time
import warnings

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ourserver import HOST, OurServer  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

SHORT = datetime.timedelta(milliseconds=300)
LONG = datetime.timedelta(seconds=10)
TCP_METHODS = sorted(m for m in dir(dist.TCPStore) if not m.startswith("_"))
PREFIX_METHODS = sorted(m for m in dir(dist.PrefixStore) if not m.startswith("_") or m == "_underlying_non_prefix_store")


class Counted:
    """A store whose public method calls are counted under `kind` ("TCPStore" or "PrefixStore")."""

    def __init__(self, store, kind, calls):
        self._s, self._kind, self._calls = store, kind, calls

    def __getattr__(self, name):
        self._calls.add((self._kind, name))
        return getattr(self._s, name)

    @property
    def raw(self):
        return self._s


def outcome(fn):
    """The result of fn(), or the class name of what it raised."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001: the class is the result
        return ("raised", type(e).__name__)


def in_thread(fn, delay=0.0):
    """Start fn() after `delay` seconds in a thread; returns a function giving its outcome."""
    box = {}

    def run():
        time.sleep(delay)
        box["r"] = outcome(fn)

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def result(timeout=15.0):
        """fn's return value (raising what it raised, or TimeoutError if it has not returned)."""
        t.join(timeout)
        kind, v = box.get("r", ("still running", None))
        if kind == "ok":
            return v
        raise RuntimeError(f"in thread: {v}") if kind == "raised" else TimeoutError("thread still running")

    return result


def until(cond, limit=15.0):
    """Poll cond() until true (a bounded wait); returns its last value."""
    deadline = time.monotonic() + limit
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
    return cond()


def scenario(port, calls):
    """Run every case against the server on `port`; returns [(name, got, want, torch_want)]."""
    out = []

    def case(name, fn, want, torch_gives=None):
        """`torch_gives`: torch's server's result where ours differs on purpose (else `want`)."""
        out.append((name, outcome(fn), want, want if torch_gives is None else torch_gives))

    def client(timeout=LONG, **kw):
        return Counted(dist.TCPStore(HOST, port, is_master=False, timeout=timeout, **kw), "TCPStore", calls)

    ok = lambda v=None: ("ok", v)  # noqa: E731
    raised = lambda cls: ("raised", cls)  # noqa: E731
    a, b = client(), client()

    # Properties and flags.
    case("host", lambda: a.host, ok(HOST))
    case("port", lambda: a.port == port, ok(True))
    case("libuvBackend (client flag)", lambda: a.libuvBackend, ok(True))
    case("has_extended_api", lambda: a.has_extended_api(), ok(True))
    case("timeout", lambda: a.timeout, ok(LONG))

    # set / get.
    case("set str", lambda: a.set("k1", "v1"), ok())
    case("get", lambda: a.get("k1"), ok(b"v1"))
    case("set bytes with NUL", lambda: a.set("k2", b"\x00\xffz"), ok())
    case("get bytes with NUL (other client)", lambda: b.get("k2"), ok(b"\x00\xffz"))
    case("set empty value", lambda: a.set("empty", b""), ok())
    case("get empty value", lambda: a.get("empty"), ok(b""))
    case("overwrite", lambda: (a.set("k1", "v1b"), b.get("k1"))[1], ok(b"v1b"))
    case("set 1 MiB", lambda: a.set("big", b"x" * (1 << 20)), ok())
    case("get 1 MiB", lambda: b.get("big") == b"x" * (1 << 20), ok(True))
    short = client(SHORT)
    case("get missing key times out", lambda: short.get("missing"), raised("DistStoreError"))
    case("get after the timeout on that client", lambda: short.get("k1"), ok(b"v1b"))
    late = in_thread(lambda: b.get("late"))
    case("get blocks until another client sets", lambda: (time.sleep(0.2), a.set("late", "L"), late())[2], ok(b"L"))

    # set_timeout.
    c = client()
    case("set_timeout", lambda: c.set_timeout(SHORT), ok())
    case("timeout after set_timeout", lambda: c.timeout, ok(SHORT))
    case("get missing under set_timeout", lambda: c.get("missing2"), raised("DistStoreError"))

    # add.
    case("add new key", lambda: a.add("ctr", 5), ok(5))
    case("add negative", lambda: b.add("ctr", -2), ok(3))
    case("add zero", lambda: a.add("ctr", 0), ok(3))
    case("counter stored as ASCII", lambda: a.get("ctr"), ok(b"3"))
    case("add to a set decimal", lambda: (a.set("dec", "41"), a.add("dec", 1))[1], ok(42))
    bad = client()
    case("add to a non-integer value fails", lambda: (bad.set("notnum", "abc"), bad.add("notnum", 1))[1],
         raised("DistNetworkError"))

    # compare_set: the four cases.
    case("compare_set missing key, empty expected: sets", lambda: a.compare_set("cs1", "", "new"), ok(b"new"))
    case("compare_set missing key, expected given: returns expected",
         lambda: a.compare_set("cs2", "exp", "new"), ok(b"exp"))
    case("compare_set missing key leaves it missing", lambda: a.check(["cs2"]), ok(False))
    case("compare_set match: swaps", lambda: a.compare_set("cs1", "new", "newer"), ok(b"newer"))
    case("compare_set mismatch: current value", lambda: a.compare_set("cs1", "zzz", "x"), ok(b"newer"))

    # check.
    case("check present", lambda: a.check(["k1"]), ok(True))
    case("check missing", lambda: a.check(["nope"]), ok(False))
    case("check several, one missing", lambda: a.check(["k1", "nope"]), ok(False))
    case("check several present", lambda: a.check(["k1", "k2", "ctr"]), ok(True))

    # wait, both overloads.
    case("wait present", lambda: a.wait(["k1"]), ok())
    case("wait present, explicit timeout", lambda: a.wait(["k1", "k2"], SHORT), ok())
    case("wait missing, explicit timeout", lambda: a.wait(["w-missing"], SHORT), raised("DistStoreError"))
    case("same client usable after a timed-out wait", lambda: a.get("k1"), ok(b"v1b"))
    case("wait missing, store timeout", lambda: short.wait(["w-missing"]), raised("DistStoreError"))
    for how, act in [
        ("set", lambda k: b.set(k, "1")),
        ("add", lambda k: b.add(k, 1)),
        ("append", lambda k: b.append(k, "1")),
        ("compare_set", lambda k: b.compare_set(k, "", "1")),
        ("multi_set", lambda k: b.multi_set([k], ["1"])),
    ]:
        key = f"w-{how}"
        waiter = in_thread(lambda key=key: a.wait([key], LONG))
        case(f"wait released by {how}", lambda act=act, key=key, waiter=waiter: (time.sleep(0.1), act(key), waiter())[2],
             ok())
    waiter = in_thread(lambda: a.wait(["wm1", "wm2"], LONG))
    case("wait on two keys released once both exist",
         lambda: (time.sleep(0.1), b.set("wm1", "1"), time.sleep(0.1), b.set("wm2", "2"), waiter())[4], ok())

    # delete_key / num_keys.
    n0 = outcome(lambda: a.num_keys())
    case("num_keys counts a new key",
         lambda: (a.set("nk", "1"), a.num_keys() - n0[1] if n0[0] == "ok" else None)[1], ok(1))
    case("delete_key existing", lambda: a.delete_key("nk"), ok(True))
    case("delete_key missing", lambda: a.delete_key("nk"), ok(False))
    case("num_keys after delete", lambda: a.num_keys() - n0[1] if n0[0] == "ok" else None, ok(0))
    case("deleted key is missing", lambda: a.check(["nk"]), ok(False))

    # append.
    case("append creates", lambda: (a.append("ap", "ab"), a.get("ap"))[1], ok(b"ab"))
    case("append extends", lambda: (b.append("ap", b"\x00c"), a.get("ap"))[1], ok(b"ab\x00c"))

    # multi_set / multi_get.
    case("multi_set", lambda: a.multi_set(["m1", "m2", "m3"], ["1", b"", "3"]), ok())
    case("multi_get", lambda: b.multi_get(["m3", "m1", "m2"]), ok([b"3", b"1", b""]))
    case("multi_get empty list", lambda: b.multi_get([]), ok([]))
    case("multi_get with a missing key times out", lambda: short.multi_get(["m1", "m-missing"]), raised("DistStoreError"))

    # Queues.
    q = client()
    case("queue_len of no queue", lambda: q.queue_len("q1"), ok(0))
    case("queue_push", lambda: [q.queue_push("q1", v) for v in ("one", b"t\x00wo", "")], ok([None] * 3))
    case("queue_len", lambda: b.queue_len("q1"), ok(3))
    case("check takes a non-empty queue as present", lambda: b.check(["q1"]), ok(True))
    case("wait takes a non-empty queue as present", lambda: b.wait(["q1"], SHORT), ok())
    # get = WAIT (a non-empty queue passes it) + GET of a key that does not exist: empty.
    case("a queue is not a key for get", lambda: short.get("q1"), ok(b""))
    case("a queue is not a key for delete_key", lambda: q.delete_key("q1"), ok(False))
    case("queue_pop FIFO, non-blocking", lambda: q.queue_pop("q1", False), ok(b"one"))
    case("queue_pop FIFO, blocking with an item", lambda: b.queue_pop("q1"), ok(b"t\x00wo"))
    case("queue_pop an empty item", lambda: q.queue_pop("q1", block=False), ok(b""))
    case("queue_len after popping all", lambda: q.queue_len("q1"), ok(0))
    case("check of an emptied queue", lambda: q.check(["q1"]), ok(False))
    case("queue_pop non-blocking on empty", lambda: q.queue_pop("q1", False), raised("QueueEmptyError"))
    case("queue_pop blocking on empty times out", lambda: short.queue_pop("q1"), raised("DistStoreError"))
    case("client usable after a timed-out pop", lambda: short.queue_len("q1"), ok(0))
    popper = in_thread(lambda: a.queue_pop("q2"))
    case("blocking queue_pop woken by a push", lambda: (time.sleep(0.2), b.queue_push("q2", "hi"), popper())[2],
         ok(b"hi"))
    p1, p2 = client(), client()
    r1 = in_thread(lambda: p1.queue_pop("q3"))
    r2 = in_thread(lambda: p2.queue_pop("q3"))
    time.sleep(0.5)  # both pops parked (nothing on the wire tells): a late one could take the item
    q.queue_push("q3", "only")
    time.sleep(0.3)
    first = sorted(str(outcome(lambda r=r: r(0.5))) for r in (r1, r2))
    case("one push wakes one of two blocked pops", lambda: first,
         ok(sorted([str(("ok", b"only")), str(("raised", "TimeoutError"))])))
    q.queue_push("q3", "second")
    case("the second push wakes the other", lambda: sorted([r1(), r2()]), ok([b"only", b"second"]))
    case("queue drained", lambda: q.queue_len("q3"), ok(0))
    waitq = in_thread(lambda: a.wait(["q4"], LONG))
    case("wait on a queue name released by a push",
         lambda: (time.sleep(0.2), b.queue_push("q4", "x"), waitq())[2], ok())
    case("queue_pop after that wait", lambda: a.queue_pop("q4", False), ok(b"x"))
    case("queue and key of one name are apart",
         lambda: (a.set("both", "key"), a.queue_push("both", "item"), a.get("both"), a.queue_pop("both"))[2:],
         ok((b"key", b"item")))

    # Barrier.
    case("barrier of one", lambda: a.barrier("bar1", 1), ok())
    case("barrier counter", lambda: a.get("bar1"), ok(b"1"))
    other = in_thread(lambda: b.barrier("bar2", 2, LONG))
    case("barrier of two (two clients)", lambda: (time.sleep(0.2), a.barrier("bar2", 2, LONG), other())[1:],
         ok((None, None)))
    case("barrier of two counter", lambda: a.get("bar2"), ok(b"2"))
    case("barrier key reused passes at once", lambda: a.barrier("bar2", 2, SHORT), ok())
    case("barrier not reached times out", lambda: a.barrier("bar3", 2, SHORT), raised("DistStoreError"))
    case("barrier arrival counted after its timeout", lambda: a.get("bar3"), ok(b"1"))
    case("client usable after a barrier timeout", lambda: a.get("k1"), ok(b"v1b"))
    case("late arrival completes the barrier", lambda: b.barrier("bar3", 2, SHORT), ok())
    w3 = [in_thread(lambda s=s: s.barrier("bar4", 3, LONG)) for s in (client(), client())]
    case("barrier of three", lambda: (time.sleep(0.3), a.barrier("bar4", 3, LONG), [w() for w in w3])[2],
         ok([None, None]))
    case("barrier on a non-integer key fails", lambda: (c2 := client(), c2.set("barbad", "x"), c2.barrier("barbad", 2, SHORT))[2],
         raised("DistNetworkError"))
    for how, act in [("set", lambda k: b.set(k, "1")), ("add", lambda k: b.add(k, 0)),
                     ("append", lambda k: b.append(k, "0")), ("multi_set", lambda k: b.multi_set([k], ["1"]))]:
        key = f"bar-{how}"
        arrival = in_thread(lambda key=key: a.barrier(key, 5, LONG))
        case(f"a {how} of a barrier counter releases the parked arrivals (torch's server does)",
             lambda act=act, key=key, arrival=arrival: (until(lambda: b.check([key])), act(key), arrival())[2],
             ok())
    # A WAIT for a counter parked before the first arrival: the arrival creates the key but
    # releases nothing (torch's barrier writes the counter without waking); completion does.
    early = in_thread(lambda: b.wait(["bar6"], LONG))
    time.sleep(0.5)  # the WAIT parked first (nothing on the wire tells)
    first = in_thread(lambda: a.barrier("bar6", 2, LONG))
    until(lambda: c.check(["bar6"]))
    case("a WAIT parked before a barrier's first arrival is not released by it",
         lambda: outcome(lambda: early(0.5)), ok(("raised", "TimeoutError")))
    case("the barrier's completion releases it", lambda: (c.barrier("bar6", 2, LONG), first(), early())[1:],
         ok((None, None)))
    waitb = in_thread(lambda: a.wait(["bar5"], LONG))
    case("wait on a barrier key released by its first arrival",
         lambda: (time.sleep(0.2), b.barrier("bar5", 1), waitb())[2], ok())

    # Where our server differs from torch's on purpose (docs/wire-protocol.md).
    # (torch's server counts the queue's name as missing when the WAIT parks.)
    b.queue_push("dq", "x")
    dw = in_thread(lambda: a.wait(["dq", "dk"], datetime.timedelta(seconds=3)))
    time.sleep(0.3)
    case("WAIT on [non-empty queue, missing key] is released by setting the key",
         lambda: (b.set("dk", "1"), outcome(dw))[1],
         ok(("ok", None)), torch_gives=ok(("raised", "RuntimeError")))
    dc = in_thread(lambda: a.wait(["dcs"], datetime.timedelta(seconds=2)))
    time.sleep(0.5)  # the WAIT parked first (nothing on the wire tells)
    case("a COMPARE_SET that stores nothing does not release a WAIT for the missing key",
         lambda: (b.compare_set("dcs", "expected", "new"), outcome(dc))[1],
         ok(("raised", "RuntimeError")), torch_gives=ok(("ok", None)))

    # list_keys: this client's keys ("/"-prefixed on the wire), not queues, not "init/".
    lk = client()
    case("list_keys", lambda: sorted(lk.list_keys()), ok(sorted(
        ["k1", "k2", "empty", "big", "late", "ctr", "dec", "notnum", "cs1", "w-set", "w-add", "w-append",
         "w-compare_set", "w-multi_set", "wm1", "wm2", "ap", "m1", "m2", "m3", "both", "bar1", "bar2", "bar3",
         "bar4", "barbad", "bar5", "bar-set", "bar-add", "bar-append", "bar-multi_set", "bar6", "dk"])))

    # clone.
    cl = outcome(lambda: a.clone())
    case("clone", lambda: cl[0], ok("ok"))
    if cl[0] == "ok":
        cc = Counted(cl[1], "TCPStore", calls)
        case("clone sees the data", lambda: cc.get("k1"), ok(b"v1b"))
        case("clone is its own connection", lambda: (cc.set("cl", "1"), a.get("cl"))[1], ok(b"1"))

    # PrefixStore over our TCPStore.
    p = Counted(dist.PrefixStore("pfx", a.raw), "PrefixStore", calls)
    case("PrefixStore set/get", lambda: (p.set("x", "1"), p.get("x"))[1], ok(b"1"))
    case("PrefixStore key under the prefix", lambda: a.get("pfx/x"), ok(b"1"))
    case("PrefixStore add", lambda: p.add("c", 2), ok(2))
    case("PrefixStore compare_set", lambda: p.compare_set("x", "1", "2"), ok(b"2"))
    case("PrefixStore check", lambda: p.check(["x", "c"]), ok(True))
    case("PrefixStore wait", lambda: p.wait(["x"]), ok())
    case("PrefixStore wait timeout", lambda: p.wait(["nope"], SHORT), raised("DistStoreError"))
    case("PrefixStore append", lambda: (p.append("x", "3"), p.get("x"))[1], ok(b"23"))
    case("PrefixStore multi_set/multi_get", lambda: (p.multi_set(["y", "z"], ["Y", "Z"]), p.multi_get(["z", "y"]))[1],
         ok([b"Z", b"Y"]))
    case("PrefixStore delete_key", lambda: p.delete_key("z"), ok(True))
    case("PrefixStore num_keys (whole store)", lambda: p.num_keys() == a.num_keys(), ok(True))
    case("PrefixStore queue push/len/pop", lambda: (p.queue_push("pq", "a"), p.queue_len("pq"), p.queue_pop("pq", False))[1:],
         ok((1, b"a")))
    case("PrefixStore queue is prefixed", lambda: a.queue_len("pfx/pq"), ok(0))
    # PrefixStore's barrier is Store's generic one (keys <key>/num_members and <key>/last_member),
    # not the BARRIER query.
    case("PrefixStore barrier", lambda: p.barrier("pb", 1, LONG), ok())
    case("PrefixStore list_keys", lambda: sorted(p.list_keys()),
         ok(["c", "pb/last_member", "pb/num_members", "x", "y"]))
    case("PrefixStore set_timeout/timeout", lambda: (p.set_timeout(SHORT), p.timeout)[1], ok(SHORT))
    case("PrefixStore get missing under its timeout", lambda: p.get("nope"), raised("DistStoreError"))
    case("PrefixStore has_extended_api", lambda: p.has_extended_api(), ok(True))
    case("PrefixStore underlying_store", lambda: isinstance(p.underlying_store, dist.TCPStore), ok(True))
    pp = Counted(dist.PrefixStore("outer", p.raw), "PrefixStore", calls)
    case("PrefixStore _underlying_non_prefix_store (nested prefixes)",
         lambda: isinstance(pp._underlying_non_prefix_store, dist.TCPStore), ok(True))
    case("nested PrefixStore key", lambda: (pp.set("n", "1"), a.get("pfx/outer/n"))[1], ok(b"1"))
    case("PrefixStore clone", lambda: Counted(p.clone(), "PrefixStore", calls).get("y"), ok(b"Y"))

    # The legacy client (use_libuv=False): the key-value API; queues are refused by the client itself.
    legacy = client(use_libuv=False)
    case("legacy client libuvBackend", lambda: legacy.libuvBackend, ok(False))
    case("legacy client set/get", lambda: (legacy.set("lg", "1"), legacy.get("lg"))[1], ok(b"1"))
    case("legacy client add", lambda: legacy.add("lgc", 3), ok(3))
    case("legacy client wait timeout", lambda: legacy.wait(["lg-missing"], SHORT), raised("DistStoreError"))
    case("legacy client multi_get", lambda: legacy.multi_get(["lg", "lgc"]), ok([b"1", b"3"]))
    case("legacy client list_keys", lambda: "lg" in legacy.list_keys(), ok(True))
    case("legacy client barrier", lambda: legacy.barrier("lgb", 1), ok())
    case("legacy client queue_push refused", lambda: legacy.queue_push("lq", "x"), raised("NotImplementedError"))

    # Clients started with a world size check in under "init/" (not under "/"), so it is in
    # num_keys but not in list_keys.
    wa = outcome(lambda: [dist.TCPStore(HOST, port, world_size=2, is_master=False, timeout=LONG) for _ in range(2)])
    case("clients with world_size connect", lambda: wa[0], ok("ok"))
    case("init/ is not listed", lambda: "init/" in lk.list_keys(), ok(False))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: store_api.py LIBMCORE_INIT_SO")
    ref = dist.TCPStore(HOST, 0, is_master=True, wait_for_workers=False, timeout=LONG)
    ours = OurServer(sys.argv[1])
    calls = set()
    theirs = scenario(ref.port, set())
    mine = scenario(ours.port, calls)
    failures, bad_cases = [], 0
    for (name, got, want, _), (_, ref_got, _, torch_want) in zip(mine, theirs):
        if got != want:
            failures.append(f"{name}: our server gave {got!r}, expected {want!r}")
        if ref_got != torch_want:
            failures.append(f"{name}: torch's server gave {ref_got!r}, expected {torch_want!r} (wrong expectation?)")
        bad_cases += got != want or ref_got != torch_want
    coverage_bad = 0
    for kind, methods in (("TCPStore", TCP_METHODS), ("PrefixStore", PREFIX_METHODS)):
        missed = [m for m in methods if (kind, m) not in calls]
        if missed:
            failures.append(f"{kind} methods never called: {', '.join(missed)}")
            coverage_bad += 1
        print(f"{kind}: {len(methods) - len(missed)}/{len(methods)} public methods called")
    for f in failures:
        print("FAIL:", f)
    print(f"torch {torch.__version__}: {len(mine) - bad_cases}/{len(mine)} cases give the expected result on our "
          "server and torch's (the same result but for the cases marked as differing on purpose)")
    print(f"{len(mine) - bad_cases + 2 - coverage_bad} passed, {bad_cases + coverage_bad} failed")
    ours.close()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
