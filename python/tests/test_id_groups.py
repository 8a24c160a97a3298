"""Groups joined from unique-id bytes (mcore_init.id_groups): base64, vLLM's init info, argument
checks, and with the real libnccl (MCORE_NCCL_LIBRARY, set by scripts/test.d/30-nccl-cpu.sh)
ids minted by ncclGetUniqueId and the loader binding a libnccl loaded first with ctypes. The
NCCL tests skip without the library, unless MCORE_NCCL_TEST_REQUIRE=1 (CI's nccl-cpu suite)."""

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, child_env
from mcore_init import McoreError, Status, id_groups

ID = bytes((i * 37 + 11) % 256 for i in range(128))


def nccl_path():
    path = os.environ.get("MCORE_NCCL_LIBRARY")
    if not path or not Path(path).is_file():
        if os.environ.get("MCORE_NCCL_TEST_REQUIRE") == "1":
            pytest.fail(f"MCORE_NCCL_LIBRARY={path!r} must name libnccl.so.2 here")
        pytest.skip("no libnccl.so.2 (MCORE_NCCL_LIBRARY unset; scripts/test.d/30-nccl-cpu.sh sets it)")
    return path


def test_base64_is_standard_and_round_trips():
    text = id_groups.to_base64(ID)
    assert text == base64.b64encode(ID).decode() and len(text) == 172
    assert id_groups.from_base64(text) == ID
    with pytest.raises(McoreError) as e:
        id_groups.from_base64(base64.urlsafe_b64encode(b"\xfb\xff").decode())
    assert e.value.status == Status.INVALID_ARGUMENT and "URL-safe" in e.value.message


def test_vllm_init_info_has_vllms_field_names_and_values():
    info = id_groups.vllm_init_info(ID, 5, rank_offset=1)
    assert set(info) == {"nccl_unique_id_b64", "world_size", "rank_offset", "packed", "packed_buffer_size_bytes",
                         "packed_num_buffers"}
    assert base64.b64decode(info["nccl_unique_id_b64"], validate=True) == ID
    assert (info["world_size"], info["rank_offset"], info["packed"]) == (5, 1, True)
    assert (info["packed_buffer_size_bytes"], info["packed_num_buffers"]) == (1 << 30, 2)
    json.dumps(info)  # the body vLLM's HTTP endpoint takes
    m2n = id_groups.vllm_init_info(ID, 6, rank_offset=2, packed=False, packed_num_buffers=3)
    assert (m2n["rank_offset"], m2n["packed"], m2n["packed_num_buffers"]) == (2, False, 3)
    with pytest.raises(ValueError, match="128 bytes"):
        id_groups.vllm_init_info(ID[:127], 5)
    with pytest.raises(ValueError, match="rank_offset"):
        id_groups.vllm_init_info(ID, 5, rank_offset=5)


def test_join_refuses_bad_arguments_by_name_before_any_nccl_call():
    cases = [
        (dict(uid=ID[:100], world_size=2, rank=0), Status.INVALID_ARGUMENT, "128 bytes, got 100"),
        (dict(uid=ID, world_size=2, rank=2), Status.INVALID_ARGUMENT, "args->rank 2"),
        (dict(uid=ID, world_size=2, rank=0, backend="gloo"), Status.UNSUPPORTED, "only \"nccl\""),
    ]
    for kwargs, status, text in cases:
        with pytest.raises(McoreError) as e:
            id_groups.join(**kwargs, timeout=1)
        assert e.value.status == status and text in e.value.message, e.value
    with pytest.raises(McoreError) as e:
        id_groups.unique_id("gloo")
    assert e.value.status == Status.UNSUPPORTED


def test_real_libnccl_mints_distinct_128_byte_ids():
    nccl_path()
    ids = [id_groups.unique_id() for _ in range(3)]
    assert all(len(i) == 128 for i in ids) and len(set(ids)) == 3, [i[:16].hex() for i in ids]
    for i in ids:
        assert id_groups.from_base64(id_groups.to_base64(i)) == i
    lib = id_groups.nccl_library()
    assert lib["version"].startswith("2.") and lib["version_code"] >= 21800, lib


_QUERY = """
import ctypes, json, os, sys
if sys.argv[1] == "preload":
    ctypes.CDLL(sys.argv[2])          # another user of NCCL in the process loads it first
from mcore_init import id_groups
print(json.dumps(id_groups.nccl_library()))
"""


def _query(mode, path, **env):
    e = child_env(**env)
    res = subprocess.run([sys.executable, "-c", _QUERY, mode, path], capture_output=True, text=True, timeout=120,
                         env=e, cwd=REPO / "python")
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_loader_binds_a_libnccl_loaded_first_with_ctypes():
    path = nccl_path()
    # Loaded first by ctypes, found by the loader without MCORE_NCCL_LIBRARY: the same file, shared.
    shared = _query("preload", path, MCORE_NCCL_LIBRARY="")
    assert shared["shared"] is True and Path(shared["path"]).resolve() == Path(path).resolve(), shared
    # Nothing loaded first: mcore_init opens its own (the explicit path), not shared.
    own = _query("none", path, MCORE_NCCL_LIBRARY=path)
    assert own["shared"] is False and Path(own["path"]).resolve() == Path(path).resolve(), own
    assert own["version"] == shared["version"]
