#!/usr/bin/env python3
"""A foreign rank of a group joined from a unique id, built only on NCCL's own API through CuPy's
binding (cupy.cuda.nccl), as a rollout engine's worker is: no mcore_init in this process.

    id_peer_cupy.py RANK WORLD ID_FILE [TIMEOUT_S [BYTES [DEVICE]]]

Waits for the standard base64 id in ID_FILE (rank 0, an mcore_init trainer, writes it), enters
ncclCommInitRank as RANK of WORLD, issues vLLM's warm-up (a one-element float32 all-reduce), then
receives BYTES bytes broadcast from rank 0 and checks them (byte i = (i * 131 + 7) % 251). One
line on stdout; exit status 0 when every byte is right. Run by scripts/gpu-tests.sh section 6.
"""

import base64
import sys
import time

import cupy
import numpy
from cupy.cuda import nccl


def main():
    rank, world, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 120.0
    nbytes = int(sys.argv[5]) if len(sys.argv) > 5 else 1 << 20
    device = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    start = time.monotonic()
    while True:
        try:
            text = open(path).read()
            break
        except FileNotFoundError:
            if time.monotonic() - start > timeout:
                raise SystemExit(f"peer rank {rank}: no id in {path} after {timeout} s")
            time.sleep(0.005)
    uid = base64.b64decode(text, validate=True)
    assert len(uid) == 128, len(uid)
    cupy.cuda.Device(device).use()
    t0 = time.monotonic()
    # CuPy takes the id as 128 signed chars.
    comm = nccl.NcclCommunicator(world, tuple(b - 256 if b > 127 else b for b in uid), rank)
    stream = cupy.cuda.Stream(non_blocking=True)
    warm = cupy.zeros(1, dtype=cupy.float32)
    comm.allReduce(warm.data.ptr, warm.data.ptr, 1, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
    stream.synchronize()
    joined = time.monotonic() - t0
    buf = cupy.zeros(nbytes, dtype=cupy.uint8)
    t1 = time.monotonic()
    comm.broadcast(buf.data.ptr, buf.data.ptr, nbytes, nccl.NCCL_UINT8, 0, stream.ptr)
    stream.synchronize()
    took = time.monotonic() - t1
    want = ((numpy.arange(nbytes, dtype=numpy.uint64) * 131 + 7) % 251).astype(numpy.uint8)
    wrong = int((buf.get() != want).sum())
    print(f"peer rank {rank} of {world} (CuPy NCCL {nccl.get_version()}): joined with warm-up in {joined * 1e3:.0f} ms, "
          f"broadcast of {nbytes} bytes in {took * 1e3:.1f} ms ({wrong} wrong)", flush=True)
    comm.destroy()
    raise SystemExit(0 if wrong == 0 else 1)


if __name__ == "__main__":
    main()
