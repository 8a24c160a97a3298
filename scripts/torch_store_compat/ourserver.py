"""Our TCPStore server (src/store/tcp/server.rs) through the C API, for torch's clients.

As a module: `OurServer(lib_path)` serves on 127.0.0.1 (a free port unless given) in this process;
`.port`, `.close()`. As a program: `python ourserver.py LIB [PORT [MAX_SECONDS]]` serves, prints "port N"
once listening, and runs until SIGTERM/SIGINT or MAX_SECONDS (default 600) have passed, so a
test that dies without stopping it leaves nothing behind for long.
"""
import ctypes, signal, sys, threading, time

HOST = "127.0.0.1"


class OurServer:
    def __init__(self, lib_path, port=0, host=HOST):
        L = ctypes.CDLL(lib_path)
        P, c = ctypes.c_void_p, ctypes
        L.mcore_store_tcp_create.argtypes = [c.c_char_p, c.c_uint16, c.c_bool, c.c_uint64, c.POINTER(P)]
        L.mcore_store_tcp_port.argtypes = [P, c.POINTER(c.c_uint16)]
        L.mcore_store_destroy.argtypes = [P]
        L.mcore_store_destroy.restype = None
        L.mcore_last_error_message.restype = c.c_char_p
        self.L = L
        self.h = ctypes.c_void_p()
        if L.mcore_store_tcp_create(host.encode(), port, True, 10_000, ctypes.byref(self.h)) != 0:
            raise RuntimeError(f"our store server on {host}:{port}: {L.mcore_last_error_message().decode()}")
        p = ctypes.c_uint16()
        if L.mcore_store_tcp_port(self.h, ctypes.byref(p)) != 0:
            raise RuntimeError(f"port of our store server: {L.mcore_last_error_message().decode()}")
        self.port = p.value

    def close(self):
        if self.h:
            self.L.mcore_store_destroy(self.h)
            self.h = None


def main():
    if len(sys.argv) not in (2, 3, 4):
        sys.exit("usage: ourserver.py LIBMCORE_INIT_SO [PORT [MAX_SECONDS]]")
    server = OurServer(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    deadline = time.monotonic() + (float(sys.argv[3]) if len(sys.argv) > 3 else 600.0)
    done = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: done.set())
    print(f"port {server.port}", flush=True)
    while not done.wait(0.2) and time.monotonic() < deadline:
        pass
    server.close()


if __name__ == "__main__":
    main()
