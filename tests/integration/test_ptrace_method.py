"""The ptrace method against real targets: same answers as gdb, short stops, nothing left behind."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from leakhound.attach import ptrace, run_request
from leakhound.attach.ptrace import trampoline
from leakhound.attach.ptrace.plan import HANDBACK_FUNCTIONS
from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model.names import Method
from tests.utils import FIXTURES, Child, assert_only_the_payload_stays, spawn_target, wait_until, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

SYSTEM_PYTHON = "/usr/bin/python3"
LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
LIGHT = {"op": "snapshot", "top_types": 5, "top_owners": 5}


def _maps(pid: int) -> list[str]:
    with open(f"/proc/{pid}/maps") as fh:
        return fh.read().splitlines()


def _one_page_mapping_at(pid: int, address: int) -> bool:
    for line in _maps(pid):
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo == address and hi - lo == 0x1000:
            return True
    return False



def _once_the_payload_left(child: Child) -> dict[str, Any]:
    """The target's report once the payload's thread (payload/boot.py) has exited: it does
    right after writing its result, a moment after the CLI has that."""
    reports: list[dict[str, Any]] = []

    def left() -> bool:
        reports.append(child.report())
        return "leakhound-payload" not in reports[-1]["threads"]

    wait_until(left, what="the payload's thread to exit")
    return reports[-1]

def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_plan_resolves_the_addresses_this_interpreter_sees() -> None:
    # Ground truth: the dynamic linker's own answer for this process.
    plan = ptrace.plan(os.getpid())
    api = ctypes.pythonapi
    assert plan.add_pending_call == ctypes.cast(api.Py_AddPendingCall, ctypes.c_void_p).value
    assert plan.run_simple_string == ctypes.cast(api.PyRun_SimpleString, ctypes.c_void_p).value
    for field, name in (("gil_check", "PyGILState_Check"), ("gil_ensure", "PyGILState_Ensure"),
                        ("gil_release", "PyGILState_Release")):
        assert getattr(plan, field) == ctypes.cast(getattr(api, name), ctypes.c_void_p).value, field
    assert set(plan.trampoline) == {*trampoline.FUNCTIONS, "munmap"}
    for name, address in plan.trampoline.items():
        source = ctypes.CDLL(None) if name == "munmap" else api
        assert address == ctypes.cast(getattr(source, name), ctypes.c_void_p).value, name
    assert set(plan.handback) == set(HANDBACK_FUNCTIONS)
    for name, address in plan.handback.items():
        assert address == ctypes.cast(getattr(api, name), ctypes.c_void_p).value, name
    assert any(lo <= plan.add_pending_call < hi for lo, hi in plan.pending_ranges)
    with open(f"/proc/{os.getpid()}/mem", "rb") as mem:
        mem.seek(plan.syscall_insn)
        assert mem.read(2) == b"\x0f\x05"


def test_snapshot_matches_the_targets_own_truth(tmp_path: Path) -> None:
    with spawn_target("growing_cache", tmp_path) as child:
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method.PTRACE, timeout=60))
        truth = child.report()["truth"]
        after = _once_the_payload_left(child)
        assert _threads(child.pid) == 1
    assert snap.method == "ptrace"
    top = snap.owners[0]
    assert top.path == "__main__.CACHE"
    assert top.items == truth["cache_items"]
    assert within(top.retained_bytes, truth["cache_bytes"]), (top.retained_bytes, truth)
    assert_only_the_payload_stays(after["leakhound_modules"])
    assert after["threads"] == ["MainThread"]


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="no system python3")
def test_static_libpython_target(tmp_path: Path) -> None:
    # Debian's interpreter links libpython into a non-PIE executable: symbols come from it.
    with spawn_target("growing_cache", tmp_path, python=SYSTEM_PYTHON) as child:
        plan = ptrace.plan(child.pid)
        assert plan.python_object == os.path.realpath(f"/proc/{child.pid}/exe")
        snap = take_snapshot(child.pid, request=RequestOptions(method=Method.PTRACE, timeout=60))
        truth = child.report()["truth"]
    assert snap.owners[0].path == "__main__.CACHE"
    assert snap.owners[0].items == truth["cache_items"]


def test_fifty_injections_into_a_busy_worker(tmp_path: Path) -> None:
    env = {"FIXTURE_C_THREADS": "6"}
    with spawn_target("busy_worker", tmp_path, env=env) as child:
        for _ in range(2):  # warm-up: the first census loads modules and grows the allocators
            run_request(child.pid, LIGHT, method=Method.PTRACE, timeout=60)
        # the baseline without the warm-up's payload thread, which exits right after its result
        _once_the_payload_left(child)
        served_before = child.report()["truth"]["requests"]
        maps_before, threads_before = len(_maps(child.pid)), _threads(child.pid)
        stops, pages = [], []
        for _ in range(50):
            lines: list[str] = []
            remote = run_request(child.pid, LIGHT, method=Method.PTRACE, timeout=60, log=lines.append)
            assert remote.method == "ptrace"
            stops.append(remote.attach_stop_ms)
            found = re.search(r"bootstrap at (0x[0-9a-f]+)", "\n".join(lines))
            assert found, lines
            pages.append(int(found.group(1), 16))
        _once_the_payload_left(child)
        assert child.proc.poll() is None
        report = child.report()
        maps_after, threads_after = len(_maps(child.pid)), _threads(child.pid)
        leftover = [hex(p) for p in set(pages) if _one_page_mapping_at(child.pid, p)]
    assert threads_after == threads_before
    # The worker's allocators may add or drop an arena or two meanwhile; 50 leaked pages
    # would show here (unless merged into a neighbour), and below in any case.
    assert maps_after - maps_before <= 3, (maps_before, maps_after)
    assert leftover == []
    # Each page is unmapped before the next injection maps one, so the kernel hands the
    # same hole out again: a leak would give 50 distinct addresses.
    assert len(set(pages)) <= 10, sorted(hex(p) for p in set(pages))
    assert report["truth"]["requests"] > served_before  # it kept serving meanwhile
    assert_only_the_payload_stays(report["leakhound_modules"])
    print(f"\nptrace stop (tracer) ms: median {sorted(stops)[25]:.3f} max {max(stops):.3f}; "
          f"target's worst loop lag over the run (census included): {report['max_lag_ms']:.1f} ms")


RESTART_TARGET = FIXTURES / "restarting_syscalls.py"


def _syscall_of(pid: int, wanted: str, timeout: float = 2.0) -> str:
    """The system call ``pid`` is blocked in, once it is back in ``wanted`` (or the last seen)."""
    deadline = time.monotonic() + timeout
    while True:
        with open(f"/proc/{pid}/syscall") as fh:
            seen = fh.read().split()[0]
        if seen == wanted or time.monotonic() > deadline:
            return seen
        time.sleep(0.01)


def test_interrupted_system_calls_restart_unharmed() -> None:
    proc = subprocess.Popen([sys.executable, str(RESTART_TARGET)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        _, w = (int(x) for x in proc.stdout.readline().split())
        assert _syscall_of(proc.pid, "0") == "0"  # blocked in read(2)
        ptrace.inject(proc.pid, "0", timeout=10, log=lambda _: None)
        assert _syscall_of(proc.pid, "0") == "0", "the read must be blocked again (restarted)"
        with open(f"/proc/{proc.pid}/fd/{w}", "wb") as pipe:
            pipe.write(b"hello")
        assert proc.stdout.readline() == b"read 5 0 hello\n"
        began = time.monotonic()
        assert _syscall_of(proc.pid, "230") == "230"  # clock_nanosleep, from nanosleep(3)
        ptrace.inject(proc.pid, "0", timeout=10, log=lambda _: None)
        assert proc.stdout.readline() == b"slept 0 0\n"
        assert time.monotonic() - began >= 1.0  # the 3 s sleep resumed, not cut short
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()


def test_blocked_main_thread_stays_blocked_and_alive(tmp_path: Path) -> None:
    with spawn_target("blocked_main", tmp_path) as child:
        ptrace.inject(child.pid, "0", timeout=10, log=lambda _: None)
        # back in clock_nanosleep, or restart_syscall once the kernel has restarted it
        wait_until(lambda: _syscall_of(child.pid, "230", timeout=0) in ("230", "219"), what="the sleep again")
        assert child.proc.poll() is None


def test_permission_denied_is_classified(tmp_path: Path) -> None:
    with spawn_target("growing_cache", tmp_path) as child:
        result = subprocess.run(
            [*AS_NOBODY, LEAKHOUND, "inspect", str(child.pid), "--method", "ptrace"],
            capture_output=True, text=True, timeout=60,
        )
        assert child.proc.poll() is None
    assert result.returncode == 5, result.stderr
    assert "Traceback" not in result.stderr


def _waits_that_do_not_come(monkeypatch: pytest.MonkeyPatch, late: range, **more: float) -> None:
    """The tracer helper's waits numbered in ``late`` (from 1) report no stop, as if the
    thread sat in uninterruptible sleep past them; the stop is not consumed and comes on a
    later wait (the helper's test hook, LEAKHOUND_PTRACE_TEST)."""
    monkeypatch.setenv("LEAKHOUND_PTRACE_TEST", json.dumps({"late_waits": list(late), **more}))


def _let_go(pid: int) -> str:
    """/proc/PID/status once leakhound is done: not traced, not stopped (the helper detaches
    a moment after leakhound returns)."""
    def status() -> str:
        with open(f"/proc/{pid}/status") as fh:
            return fh.read()

    def let_go() -> str:
        now = status()
        return now if "TracerPid:\t0" in now and re.search(r"State:\s+[RS]", now) else ""

    try:
        return wait_until(let_go, what="the thread let go")
    except AssertionError:
        raise AssertionError(status()) from None


def test_a_stop_that_comes_late_is_still_let_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As if the main thread sat in uninterruptible sleep past the stop timeout: the injection
    # gives up, but the thread is still seized with a stop requested. Left like that it would
    # stop later and stay stopped for as long as this (long-lived) process runs.
    from leakhound.errors import AttachFailed

    _waits_that_do_not_come(monkeypatch, range(1, 2))  # the stop PTRACE_INTERRUPT asked for
    lines: list[str] = []
    with spawn_target("growing_cache", tmp_path) as child:
        with pytest.raises(AttachFailed, match="did not stop"):
            ptrace.inject(child.pid, "pass", timeout=5, log=lines.append)
        _let_go(child.pid)
        assert child.report()["pid"] == child.pid  # its loop still answers
    assert any("waiting for the main thread's stop" in line for line in lines), lines


def test_a_thread_late_in_the_middle_of_a_step_is_waited_for_and_put_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Once its registers and signal mask are ours, the thread is never let go unrestored:
    # leakhound waits past the late-stop timeout (here, three times over) until it stops.
    from leakhound.errors import AttachFailed

    # The first step's stop, then two late waits, with a 0.05 s late-stop timeout.
    _waits_that_do_not_come(monkeypatch, range(2, 5), late_stop_timeout=0.05)
    lines: list[str] = []
    with spawn_target("growing_cache", tmp_path) as child:
        with pytest.raises(AttachFailed):
            ptrace.inject(child.pid, "pass", timeout=5, log=lines.append)
        status = _let_go(child.pid)
        assert "SigBlk:\t0000000000000000" in status, status  # its mask is back
        assert child.report()["pid"] == child.pid
    assert sum("in the middle of an injection step" in line for line in lines) >= 1, lines
