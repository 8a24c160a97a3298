"""Console commands of the wheel: ``mcore-launch``, ``mcore-selftest`` and ``mcore-topo`` run the
programs the wheel carries in ``mcore_init/_native/`` (scripts/build-wheel.sh puts them there),
replacing this Python process (``os.execv``: signals, exit status and output are the program's)."""

import os
import sys
from pathlib import Path

#: Where the wheel carries the programs (the same directory as libmcore_init.so and its plugins,
#: so a program finds the plugins beside itself).
NATIVE_DIR = Path(__file__).resolve().parent / "_native"


def program(name):
    """The path of the carried program ``name``; SystemExit naming it when this install has none
    (a source checkout: build it with cargo, ``target/release/<name>``)."""
    path = NATIVE_DIR / name
    if not os.access(path, os.X_OK):
        raise SystemExit(f"{name}: not carried by this mcore_init installation ({path} is missing); "
                         f"install the wheel (scripts/build-wheel.sh), or run target/release/{name} of a checkout")
    return path


def _run(name):
    os.execv(program(name), [name] + sys.argv[1:])


def launch():
    _run("mcore-launch")


def selftest():
    _run("mcore-selftest")


def topo():
    _run("mcore-topo")
