"""A free-threaded CPython (3.13t) is refused before anything is attached: its objects' header
(a thread id, two reference counts) is not the one the payload reads, and the payload's pauses
are the GIL's, which it has not. No 3.13t can be had on this machine, so the target is a
stand-in built here: a process that maps a library named and shaped as such a libpython (it
exports ``Py_Version`` and ``_Py_MergeZeroLocalRefcount``, the function only a free-threaded
build exports). The payload's own refusal is tests/unit/test_boot.py's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leakhound.attach import process

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the stand-in")]

LEAKHOUND = Path(sys.executable).with_name("leakhound")
LIBRARY = """
const unsigned int Py_Version = 0x030D00F0;  /* 3.13.0 final */
%s
"""
FREE_THREADED = "void _Py_MergeZeroLocalRefcount(void *op) { (void)op; }"
STANDIN = """
#include <dlfcn.h>
#include <unistd.h>
int main(int argc, char **argv) { if (argc < 2 || !dlopen(argv[1], RTLD_NOW)) return 2; for (;;) pause(); }
"""


def _build(tmp_path: Path, name: str, body: str) -> Path:
    (tmp_path / "lib.c").write_text(LIBRARY % body)
    (tmp_path / "standin.c").write_text(STANDIN)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / name), str(tmp_path / "lib.c")], check=True)
    subprocess.run(["gcc", "-o", str(tmp_path / "standin"), str(tmp_path / "standin.c"), "-ldl"], check=True)
    return tmp_path / name


@pytest.fixture
def standin(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    name, body = request.param
    library = _build(tmp_path, name, body)
    proc = subprocess.Popen([str(tmp_path / "standin"), str(library)])
    try:
        deadline = time.monotonic() + 10
        while name not in Path(f"/proc/{proc.pid}/maps").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, "the stand-in never mapped its library"
            time.sleep(0.02)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("standin", [
    ("libpython3.13t.so.1.0", FREE_THREADED),  # named and built as one
    ("libpython3.13.so.1.0", FREE_THREADED),  # built as one, named as the default build
], indirect=True, ids=["named-3.13t", "symbol-only"])
def test_a_free_threaded_cpython_is_refused_before_attaching(standin: int) -> None:
    assert process.python_version(standin) == (3, 13) and process.free_threaded(standin)
    run = subprocess.run([str(LEAKHOUND), "inspect", str(standin)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 4, run.stderr
    assert f"process {standin} runs a free-threaded CPython 3.13 (3.13t): not supported" in run.stderr
    assert "Traceback" not in run.stderr and "not a free-threaded 3.13t" in run.stderr  # the hint
    status = Path(f"/proc/{standin}/status").read_text()
    assert "\nTracerPid:\t0\n" in status and "State:\tS" in status  # never attached, not left stopped
    assert not [d for d in os.listdir("/tmp") if d.startswith("leakhound-") and str(standin) in d]


@pytest.mark.parametrize("standin", [("libpython3.13.so.1.0", "")], indirect=True, ids=["default-build"])
def test_the_default_build_of_the_same_version_is_not_free_threaded(standin: int) -> None:
    assert process.python_version(standin) == (3, 13) and not process.free_threaded(standin)


def test_leakhounds_own_interpreter_is_not_free_threaded() -> None:
    assert not process.free_threaded(os.getpid())


def test_the_agent_does_not_start_in_a_free_threaded_interpreter(tmp_path: Path) -> None:
    """LEAKHOUND_AGENT=1 in a free-threaded worker: its start-up says why the agent did not
    start and goes on; no socket is made. (This interpreter is told it is one.)"""
    # (set in the script: at start-up, leakhound_agent.pth would start it before sys is patched)
    script = ("import os, sys; sys.abiflags = 't'; os.environ['LEAKHOUND_AGENT'] = '1'\n"
              "from leakhound.payload import agent_server\n"
              "agent_server.maybe_start()\n"
              "print(agent_server._started)\n")
    env = {k: v for k, v in os.environ.items() if k != "LEAKHOUND_AGENT"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env={**env, "TMPDIR": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert "leakhound agent not started: leakhound agent: a free-threaded CPython" in run.stderr
    assert run.stdout.strip() == "[]"
