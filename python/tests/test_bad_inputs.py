"""Inputs that used to hang init, panic inside the library or flood the error message are
refused at once with a bounded message naming the parameter (issue #23)."""

import json
import os
import subprocess
import sys
import tempfile

from mcore_init import McoreError, runtime

FIFO_INIT = r"""
import json, sys
from mcore_init import McoreError, runtime
try:
    runtime.initialize(comm_config_path=sys.argv[1], timeout=5)
    print(json.dumps(["initialized"]))
except McoreError as exc:
    print(json.dumps([exc.status_name, exc.message]))
"""


def test_a_fifo_comm_config_path_is_refused_instead_of_hanging():
    # A FIFO nobody writes to: opening it for reading used to block init forever (the timeout
    # never applied). In a child process with a bounded wait, so the test cannot hang.
    with tempfile.TemporaryDirectory() as d:
        fifo = os.path.join(d, "nccl.yaml")
        os.mkfifo(fifo)
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        try:
            out = subprocess.run([sys.executable, "-c", FIFO_INIT, fifo], env=env, capture_output=True, text=True,
                                 timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("initialize blocked on a FIFO comm_config_path") from None
        assert out.returncode == 0, out.stderr
        status, message = json.loads(out.stdout.strip().splitlines()[-1])
        assert status == "MCORE_STATUS_INVALID_ARGUMENT", message
        assert fifo in message and "FIFO" in message, message


def test_windows_a_duration_cannot_hold_are_invalid_arguments():
    # 1e300 s was an internal panic in the library (status 99). The package refuses it before
    # calling the library (naming its parameter, `window`); the library's own check
    # (`window_seconds`) is tested in Rust (ffi::recovery).
    for window in (1e300, 1.8e19, float("nan"), float("inf"), -1.0):
        try:
            runtime.check_health(window)
        except McoreError as exc:
            assert exc.status_name == "MCORE_STATUS_INVALID_ARGUMENT" and "window" in exc.message, exc
        else:
            raise AssertionError(f"check_health({window}) did not fail")
        try:
            runtime.reinitialize((), window)
        except McoreError as exc:
            assert exc.status_name == "MCORE_STATUS_INVALID_ARGUMENT" and "window" in exc.message, exc
        else:
            raise AssertionError(f"reinitialize(window={window}) did not fail")


BIG_BACKEND = r"""
import json
from mcore_init import McoreError, runtime
try:
    runtime.initialize(backend="b" * (1 << 20), timeout=5)
    print(json.dumps(["initialized", ""]))
except McoreError as exc:
    print(json.dumps([exc.status_name, exc.message]))
"""


def test_a_megabyte_backend_name_gives_a_short_error():
    # Neither registered nor a plugin file: the message names it, cut to a bounded size (it
    # echoed the whole name, twice). A world of one, in a child process.
    env = dict(os.environ, RANK="0", WORLD_SIZE="1")
    out = subprocess.run([sys.executable, "-c", BIG_BACKEND], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    status, message = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(message) < 1024 and "no backend named 'bbb" in message and "(1048576 bytes)" in message, (
        status, message[:300], len(message))
