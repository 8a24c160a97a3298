"""Run PyTorch's own store tests (test/distributed/test_store.py, not part of this repository)
with our server in place of torch's: every `TCPStore(..., is_master=True)` the tests make starts
our server (src/store/tcp/server.rs, C API) on the asked port and hands back a torch client of it
(is_master=False, the other arguments as given), so each test drives our server through torch's
client exactly as it would drive torch's server.

Usage: MCORE_LIB=target/release/libmcore_init.so python torch_test_store_shim.py test_store.py [unittest args]
(test_store.py needs torch's test dependencies: expecttest, numpy.) What this cannot stand in
for: the server-owning constructor's own behaviour (its error messages for a port in use, its
wait for workers, `master_listen_fd`, its repr): docs/wire-protocol.md lists the outcome.
"""
import os, runpy, sys, warnings
from datetime import timedelta

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ourserver import OurServer  # noqa: E402

import torch  # noqa: E402,F401
import torch.distributed as dist  # noqa: E402

_Real = dist.TCPStore
_LIB = os.environ["MCORE_LIB"]
_servers = {}  # port -> OurServer, kept for the life of the process (as torch's tests keep theirs)


class _Meta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _Real)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, _Real)


class TCPStore(metaclass=_Meta):
    """dist.TCPStore with our server behind every is_master=True store; 127.0.0.1 for localhost."""

    def __new__(cls, host_name, port, world_size=None, is_master=False, timeout=timedelta(seconds=300),
                wait_for_workers=True, multi_tenant=False, master_listen_fd=None, use_libuv=True):
        host = "127.0.0.1" if host_name in ("localhost", "127.0.0.1") else host_name
        if is_master:
            agent = (os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() in ("1", "true")
                     and os.environ.get("MASTER_PORT") == str(port))
            if master_listen_fd is not None:
                raise NotImplementedError("shim: our server cannot take over a listening descriptor from Python")
            if not agent and not (multi_tenant and port in _servers):
                srv = OurServer(_LIB, port, host)
                _servers[srv.port] = srv
                port = srv.port
        return _Real(host, port, world_size=world_size, is_master=False, timeout=timeout,
                     wait_for_workers=wait_for_workers, multi_tenant=multi_tenant, use_libuv=use_libuv)


def _patch():
    for mod in list(sys.modules.values()):
        if getattr(mod, "TCPStore", None) is _Real:
            setattr(mod, "TCPStore", TCPStore)


if __name__ == "__main__":
    import torch.distributed.rendezvous  # noqa: F401  (imports TCPStore by name)
    import torch.testing._internal.common_distributed  # noqa: F401

    _patch()
    path = sys.argv[1]
    sys.argv = [path] + sys.argv[2:]
    runpy.run_path(path, run_name="__main__")
