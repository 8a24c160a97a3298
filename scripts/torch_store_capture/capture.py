#!/usr/bin/env python3
"""Capture c10d TCPStore byte exchanges with real torch, and cross-check our store both ways.

Runs one scenario of store calls three times through a recording TCP proxy:
  torch_client_torch_server  torch client  -> proxy -> torch server (libuv)   (the reference)
  torch_client_our_server    torch client  -> proxy -> our server (C API, ctypes)
  our_client_torch_server    our client (C API, ctypes) -> proxy -> torch server
and checks that every call returns the same result in all three runs, that our server's reply
bytes equal torch's server's, and that our client's request bytes equal torch's client's (the
PING nonce is the client's pid and is compared masked). Writes one JSON file per run into the
fixture folder: a list of exchanges {"op", "result", "c2s", "s2c", "flow"} with bytes in hex;
"flow" is the exchange as it happened: alternating [direction, bytes] runs (a GET is WAIT, its
reply, then GET and its reply).

Usage: capture.py LIBMCORE_INIT_SO FIXTURE_DIR   (see README.md)
"""
import ctypes, datetime, json, os, socket, sys, threading, time

import torch
import torch.distributed as dist

HOST = "127.0.0.1"
SETTLE = 0.15  # seconds for one-way messages to cross the proxy before a snapshot


class Proxy:
    """Forwards one client connection at a time to upstream and records both directions."""

    def __init__(self, upstream_port):
        self.up = upstream_port
        self.ls = socket.socket()
        self.ls.bind((HOST, 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.buf = {"c2s": bytearray(), "s2c": bytearray()}
        self.flow = []  # [direction, bytes] in arrival order, same-direction runs merged
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            c, _ = self.ls.accept()
            u = socket.create_connection((HOST, self.up))
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump, args=(c, u, "c2s"), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, "s2c"), daemon=True).start()

    def _pump(self, a, b, d):
        while True:
            try:
                data = a.recv(65536)
            except OSError:
                data = b""
            if not data:
                try:
                    b.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            with self.lock:  # recorded before forwarding: a reply is always recorded after its request
                self.buf[d] += data
                if self.flow and self.flow[-1][0] == d:
                    self.flow[-1][1] += data
                else:
                    self.flow.append([d, bytearray(data)])
            b.sendall(data)

    def take(self):
        time.sleep(SETTLE)
        with self.lock:
            out = {k: bytes(v).hex() for k, v in self.buf.items()}
            out["flow"] = [[d, bytes(v).hex()] for d, v in self.flow]
            for v in self.buf.values():
                v.clear()
            self.flow = []
        return out


class OurLib:
    def __init__(self, path):
        L = ctypes.CDLL(path)
        P, c = ctypes.c_void_p, ctypes
        L.mcore_store_tcp_create.argtypes = [c.c_char_p, c.c_uint16, c.c_bool, c.c_uint64, c.POINTER(P)]
        L.mcore_store_tcp_port.argtypes = [P, c.POINTER(c.c_uint16)]
        L.mcore_store_destroy.argtypes = [P]
        L.mcore_store_destroy.restype = None
        L.mcore_store_set.argtypes = [P, c.c_char_p, c.c_char_p, c.c_size_t]
        L.mcore_store_get.argtypes = [P, c.c_char_p, c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)]
        L.mcore_store_add.argtypes = [P, c.c_char_p, c.c_int64, c.POINTER(c.c_int64)]
        L.mcore_store_check.argtypes = [P, c.POINTER(c.c_char_p), c.c_size_t, c.POINTER(c.c_bool)]
        L.mcore_store_wait.argtypes = [P, c.POINTER(c.c_char_p), c.c_size_t, c.c_uint64]
        L.mcore_store_delete_key.argtypes = [P, c.c_char_p, c.POINTER(c.c_bool)]
        if hasattr(L, "mcore_store_compare_set"):  # absent from older builds: those steps then fail
            L.mcore_store_compare_set.argtypes = [P, c.c_char_p, c.c_char_p, c.c_size_t, c.c_char_p, c.c_size_t,
                                                  c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)]
        L.mcore_store_num_keys.argtypes = [P, c.POINTER(c.c_int64)]
        L.mcore_last_error_message.restype = c.c_char_p
        self.L = L

    def ok(self, st):
        if st != 0:
            raise RuntimeError(f"status {st}: {self.L.mcore_last_error_message().decode()}")

    def create(self, port, is_server, timeout_ms):
        h = ctypes.c_void_p()
        self.ok(self.L.mcore_store_tcp_create(HOST.encode(), port, is_server, timeout_ms, ctypes.byref(h)))
        return h

    def port(self, h):
        p = ctypes.c_uint16()
        self.ok(self.L.mcore_store_tcp_port(h, ctypes.byref(p)))
        return p.value


class OurClient:
    """The scenario's store interface over our C API (same results as torch's Python API)."""

    def __init__(self, lib, port, timeout_ms):
        self.lib, self.L = lib, lib.L
        self.h = lib.create(port, False, timeout_ms)

    def _keys(self, keys):
        return (ctypes.c_char_p * len(keys))(*[k.encode() for k in keys])

    def set(self, k, v):
        self.lib.ok(self.L.mcore_store_set(self.h, k.encode(), v, len(v)))

    def get(self, k):
        n = ctypes.c_size_t()
        buf = ctypes.create_string_buffer(1 << 16)
        self.lib.ok(self.L.mcore_store_get(self.h, k.encode(), buf, len(buf), ctypes.byref(n)))
        return buf.raw[: n.value]

    def add(self, k, d):
        v = ctypes.c_int64()
        self.lib.ok(self.L.mcore_store_add(self.h, k.encode(), d, ctypes.byref(v)))
        return v.value

    def check(self, keys):
        r = ctypes.c_bool()
        self.lib.ok(self.L.mcore_store_check(self.h, self._keys(keys), len(keys), ctypes.byref(r)))
        return r.value

    def wait(self, keys, timeout=None):
        ms = 0 if timeout is None else int(timeout.total_seconds() * 1000)
        st = self.L.mcore_store_wait(self.h, self._keys(keys), len(keys), ms)
        if st != 0:
            raise RuntimeError(self.L.mcore_last_error_message().decode())

    def compare_set(self, k, e, d):
        n = ctypes.c_size_t()
        buf = ctypes.create_string_buffer(1 << 16)
        self.lib.ok(self.L.mcore_store_compare_set(self.h, k.encode(), e, len(e), d, len(d), buf, len(buf),
                                                   ctypes.byref(n)))
        return buf.raw[: n.value]

    def delete_key(self, k):
        r = ctypes.c_bool()
        self.lib.ok(self.L.mcore_store_delete_key(self.h, k.encode(), ctypes.byref(r)))
        return r.value

    def num_keys(self):
        n = ctypes.c_int64()
        self.lib.ok(self.L.mcore_store_num_keys(self.h, ctypes.byref(n)))
        return n.value

    def close(self):
        self.L.mcore_store_destroy(self.h)


def scenario(s, with_multi):
    """(op, callable) steps; every result is JSON-serializable."""
    short = datetime.timedelta(milliseconds=300)
    steps = [
        ("set", lambda: s.set("alpha", b"one")),
        ("get", lambda: s.get("alpha").hex()),
        ("add", lambda: s.add("ctr", 5)),
        ("add", lambda: s.add("ctr", -2)),
        ("get", lambda: s.get("ctr").hex()),
        ("check", lambda: s.check(["alpha", "ctr"])),
        ("check", lambda: s.check(["alpha", "missing"])),
        ("wait", lambda: s.wait(["alpha"])),
        ("wait_timeout", lambda: _raises(lambda: s.wait(["never"], short))),
        ("compare_set", lambda: s.compare_set("cas", b"", b"first").hex()),
        ("compare_set", lambda: s.compare_set("cas", b"first", b"second").hex()),
        ("compare_set", lambda: s.compare_set("cas", b"wrong", b"third").hex()),
        ("compare_set", lambda: s.compare_set("nokey", b"exp", b"des").hex()),
        ("num_keys", lambda: s.num_keys()),
        ("delete_key", lambda: s.delete_key("alpha")),
        ("delete_key", lambda: s.delete_key("alpha")),
        ("num_keys", lambda: s.num_keys()),
    ]
    if with_multi:
        steps += [
            ("multi_set", lambda: s.multi_set(["m1", "m2"], [b"x", b"yy"])),
            ("multi_get", lambda: [v.hex() for v in s.multi_get(["m1", "m2"])]),
            ("append", lambda: s.append("m1", b"zz")),
            ("get", lambda: s.get("m1").hex()),
        ]
    return steps


def _raises(f):
    try:
        f()
    except Exception as e:  # torch raises DistStoreError, ours RuntimeError
        return "timeout" if ("never" in str(e) or "imeout" in str(e) or "timed out" in str(e)) else repr(e)
    return "no error"


def run(make_client, upstream_port, with_multi):
    proxy = Proxy(upstream_port)
    client = make_client(proxy.port)
    rec = [dict(op="connect", result=None, **proxy.take())]
    for op, f in scenario(client, with_multi):
        try:
            result = f()
        except Exception as e:  # recorded, and reported as a mismatch against the reference
            result = f"error: {e!r}"
        rec.append(dict(op=op, result=result, **proxy.take()))
    return client, rec


def masked(c2s_hex):
    """A handshake's c2s with the PING nonce (the client's pid) zeroed."""
    b = bytearray.fromhex(c2s_hex)
    i = b.find(bytes([13]), 5)  # after VALIDATE (1 + 4 bytes)
    if i == 5:
        b[6:10] = b"\0\0\0\0"
    return b.hex()


def main():
    lib_path, outdir = sys.argv[1], sys.argv[2]
    lib = OurLib(lib_path)
    timeout = datetime.timedelta(seconds=10)
    torch_server = lambda: dist.TCPStore(HOST, 0, None, True, timeout=timeout, use_libuv=True, wait_for_workers=False)
    torch_client = lambda p: dist.TCPStore(HOST, p, None, False, timeout=timeout, use_libuv=True)

    runs = {}
    srv = torch_server()
    c, runs["torch_client_torch_server"] = run(torch_client, srv.port, True)
    del c, srv

    ours = lib.create(0, True, 10000)
    c, runs["torch_client_our_server"] = run(torch_client, lib.port(ours), True)
    del c
    lib.L.mcore_store_destroy(ours)

    srv = torch_server()
    c, runs["our_client_torch_server"] = run(lambda p: OurClient(lib, p, 10000), srv.port, False)
    c.close()
    del srv

    ref = runs["torch_client_torch_server"]
    failures = []
    for name, rec in runs.items():
        for i, (a, b) in enumerate(zip(ref, rec)):
            if a["op"] != b["op"] or a["result"] != b["result"]:
                failures.append(f"{name} step {i} {b['op']}: result {b['result']!r}, torch gives {a['result']!r}")
            if name == "torch_client_our_server" and a["s2c"] != b["s2c"]:
                failures.append(f"{name} step {i} {b['op']}: reply {b['s2c']}, torch's server {a['s2c']}")
            if name == "our_client_torch_server":
                ca, cb = (masked(a["c2s"]), masked(b["c2s"])) if i == 0 else (a["c2s"], b["c2s"])
                if ca != cb:
                    failures.append(f"{name} step {i} {b['op']}: request {b['c2s']}, torch's client {a['c2s']}")
    os.makedirs(outdir, exist_ok=True)
    for name, rec in runs.items():
        doc = {"torch_version": torch.__version__, "libuv_server": True, "host": HOST, "exchanges": rec}
        with open(os.path.join(outdir, name + ".json"), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    for m in failures:
        print("MISMATCH", m)
    print(f"torch {torch.__version__}: {sum(len(r) for r in runs.values())} exchanges, {len(failures)} mismatches")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
