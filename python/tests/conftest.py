import functools
import gzip
import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(os.environ.get("MCORE_REPO_ROOT", Path(__file__).resolve().parents[2]))


def conformance_dir() -> Path:
    env = os.environ.get("MCORE_CONFORMANCE_DIR")
    return Path(env) if env else REPO / "tests" / "data" / "conformance"


def conformance_file(name: str) -> Path:
    """A file of the conformance vectors; fails the test, naming the path, when it is missing
    (the vectors are part of the repository: tests/data/conformance, see docs/conformance.md)."""
    path = conformance_dir() / name
    if not path.is_file():
        pytest.fail(
            f"conformance vector file {path} is missing: the repository's copy is "
            "tests/data/conformance (docs/conformance.md); MCORE_CONFORMANCE_DIR overrides it"
        )
    return path


@functools.lru_cache(maxsize=None)
def megatron_groups(release=""):
    """The 0.16.1 vectors, or with ``release="v0.19.2"`` those of Megatron-Core 0.19.2."""
    path = conformance_file(f"{release}/megatron_groups.json.gz" if release else "megatron_groups.json.gz")
    with gzip.open(path, "rt") as f:
        return json.load(f)


def gloo_plugin():
    """The Gloo backend plugin, or skip the test with the reason."""
    env = os.environ.get("MCORE_GLOO_PLUGIN")
    path = Path(env) if env else REPO / "target" / "gloo-plugin" / "libmcore_init_gloo.so"
    if not env and not path.is_file():
        import mcore_init._lib as lib  # an installed wheel carries the plugin

        path = lib.NATIVE_DIR / "libmcore_init_gloo.so"
    if not path.is_file():
        pytest.skip(f"Gloo plugin not built at {path} (cmake -S backends/gloo -B target/gloo-plugin && "
                    "cmake --build target/gloo-plugin, or set MCORE_GLOO_PLUGIN)")
    return path


def free_port() -> int:
    """A free port on 127.0.0.1, from MCORE_PORT_RANGE when set (scripts/lib/ports.py)."""
    sys.path.insert(0, str(REPO / "scripts" / "lib"))
    try:
        import ports
    finally:
        sys.path.pop(0)
    return ports.free_port()


def child_env(**extra):
    """The environment for a child Python: the package on PYTHONPATH, the same library."""
    env = dict(os.environ)
    pkg = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = pkg + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    import mcore_init._lib as lib

    env["MCORE_INIT_LIBRARY"] = lib.lib._name
    env.update({k: str(v) for k, v in extra.items()})
    return env


def mcore_launch():
    """The repository's launcher (``MCORE_LAUNCH``, else target/release/mcore-launch), or skip
    the test with the reason."""
    env = os.environ.get("MCORE_LAUNCH")
    path = Path(env) if env else REPO / "target" / "release" / "mcore-launch"
    if not path.is_file():
        pytest.skip(f"mcore-launch not built at {path} (cargo build --release --bin mcore-launch, or set MCORE_LAUNCH)")
    return path
