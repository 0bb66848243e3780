"""gdb is never killed while it calls functions in the target (attach/gdb.py run_gdb).

A gdb killed during an inferior call leaves the target's thread in gdb's dummy frame, and the
target dies when the call returns: measured with a real gdb and a sleeping CPython 3.11 target
(``call (unsigned)sleep(3)``, then SIGKILL, SIGTERM or SIGHUP to gdb: the target died each
time; SIGINT: gdb unwound the call). Here a stand-in for gdb (a Python script run as gdb would
be) does what gdb_inject.py does: it writes the "calling" file before its first call into the
target. The real gdb's path is the integration tier's (test_ptrace_pages, test_gdb_signals...).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from leakhound.attach import gdb

STAND_IN = """
import os, sys, time
open(os.environ["OUT"], "w").write("%d %d" % (os.getpid(), os.getsid(0)))
if os.environ.get("CALL"):
    open(os.environ["LEAKHOUND_GDB_CALLING"], "w").close()
time.sleep(float(os.environ["TAKES"]))
print("done")
"""


def _run(tmp_path: Path, *, calling: bool, takes: float, timeout: float) -> tuple[int | None, str, float, Path]:
    out = tmp_path / "who"
    marker = tmp_path / "calling"
    env = {**os.environ, "OUT": str(out), "TAKES": str(takes), "LEAKHOUND_GDB_CALLING": str(marker)}
    if calling:
        env["CALL"] = "1"
    said: list[str] = []
    began = time.monotonic()
    code, output = gdb.run_gdb([sys.executable, "-c", STAND_IN], env, timeout, str(marker), said.append)
    return code, output, time.monotonic() - began, out


def test_a_gdb_still_loading_at_the_timeout_is_stopped_then(tmp_path: Path) -> None:
    code, output, took, _ = _run(tmp_path, calling=False, takes=5.0, timeout=0.5)
    assert code is None and "done" not in output
    assert took < 3.0


def test_a_gdb_calling_into_the_target_at_the_timeout_is_let_finish(tmp_path: Path) -> None:
    code, output, took, _ = _run(tmp_path, calling=True, takes=1.5, timeout=0.3)
    assert code == 0 and "done" in output  # not killed: its call returned, the target intact
    assert took >= 1.4


def test_a_gdb_calling_past_the_grace_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gdb, "CALL_GRACE", 0.5)
    code, _, took, _ = _run(tmp_path, calling=True, takes=10.0, timeout=0.2)
    assert code is None
    assert took < 5.0


def test_gdb_runs_in_a_session_of_its_own(tmp_path: Path) -> None:
    """A Ctrl-C, a hang-up or ``kill -- -PGID`` meant for leakhound does not reach it."""
    code, _, _, out = _run(tmp_path, calling=False, takes=0.0, timeout=10.0)
    assert code == 0
    pid, sid = (int(x) for x in out.read_text().split())
    assert sid == pid != os.getsid(0)
