"""The wheel's console commands (mcore_init/_tools.py), as logic: a command execs the program of
its name in the package's _native/ directory with the command's arguments, and says so clearly
when the installation carries none. The program here is a stand-in shell script (a unit test of
the exec logic only); scripts/test.d/61-python-wheel.sh runs the real programs from the wheel."""
import os
import subprocess
import sys
import textwrap

from mcore_init import _tools


def _run(native_dir, command, *args):
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import mcore_init._tools as t
        t.NATIVE_DIR = Path({str(native_dir)!r})
        sys.argv = [{command!r}] + {list(args)!r}
        getattr(t, {command.split('-')[1]!r})()
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_command_execs_the_carried_program_with_its_arguments(tmp_path):
    for name in ("mcore-launch", "mcore-selftest", "mcore-topo"):
        prog = tmp_path / name
        prog.write_text(f"#!/bin/sh\necho \"{name}|$*\"\nexit 7\n")
        prog.chmod(0o755)
        out = _run(tmp_path, name, "--nproc", "2", "a b")
        # The program's exit status and output are the command's (exec, not a child).
        assert out.returncode == 7, out
        assert out.stdout.strip() == f"{name}|--nproc 2 a b", out


def test_a_command_without_its_program_names_the_path(tmp_path):
    out = _run(tmp_path, "mcore-topo", "--world-size", "8")
    assert out.returncode != 0
    assert f"mcore-topo: not carried by this mcore_init installation ({tmp_path / 'mcore-topo'} is missing)" in out.stderr
    assert "target/release/mcore-topo" in out.stderr


def test_the_console_scripts_point_at_these_functions():
    text = (_tools.Path(_tools.__file__).resolve().parent.parent / "pyproject.toml")
    if not text.exists():  # an installed wheel: no pyproject beside the package
        return
    toml = text.read_text()
    for name, fn in (("mcore-launch", "launch"), ("mcore-selftest", "selftest"), ("mcore-topo", "topo")):
        assert f'{name} = "mcore_init._tools:{fn}"' in toml
        assert callable(getattr(_tools, fn))
    assert os.path.basename(str(_tools.NATIVE_DIR)) == "_native"
