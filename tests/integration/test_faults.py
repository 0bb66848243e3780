"""Faults and bad input: one clear line, a documented exit code, no traceback, target alive."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from leakhound.capture import take_snapshot
from leakhound.errors import LeakhoundError, TargetBusy, TargetExited, TargetNotFound
from tests.utils import assert_only_the_payload_stays, spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))
SYSTEM_PYTHON = "/usr/bin/python3"
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _cli(*args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(prefix or []), LEAKHOUND, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _clean(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("leakhound: error: ")
    assert "hint: " in result.stderr


def test_main_thread_blocked_in_a_syscall_times_out_with_its_stack(tmp_path: Path) -> None:
    with spawn_target("blocked_main", tmp_path) as child:
        result = _cli("inspect", str(child.pid), "--method", "gdb", "--timeout", "3")
        assert child.proc.poll() is None, "the target must survive"
    assert result.returncode == 6, result.stderr
    _clean(result)
    assert "did not reach a safe point" in result.stderr
    assert "blocked_main.py" in result.stderr  # where the main thread is, from py-spy


def test_zombie_is_reported_as_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while open(f"/proc/{child.pid}/stat").read().split()[2] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        result = _cli("inspect", str(child.pid))
    finally:
        child.wait()
    assert result.returncode == 3
    _clean(result)
    assert "zombie" in result.stderr


def test_gdb_missing_is_a_clear_error(tmp_path: Path) -> None:
    with spawn_target("growing_cache", tmp_path) as child:
        result = _cli("inspect", str(child.pid), "--method", "gdb", env={"PATH": str(tmp_path)})
    assert result.returncode == 7
    _clean(result)
    assert "gdb is not installed" in result.stderr


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON) or shutil.which("setpriv") is None,
                    reason="needs the system python and setpriv")
def test_another_users_target_on_another_python_build() -> None:
    """A target owned by nobody, on Debian's python (a different build), nothing installed."""
    shared = Path(tempfile.mkdtemp(prefix="leakhound-test-"))  # pytest's tmp is private to root
    os.chmod(shared, 0o777)
    with spawn_target("growing_cache", shared, python=SYSTEM_PYTHON, prefix=AS_NOBODY) as child:
        snap = take_snapshot(child.pid, method="gdb", timeout=60)
        truth = child.report()["truth"]
        # Without CAP_SYS_PTRACE, root may not trace another user's process.
        denied = _cli("inspect", str(child.pid), prefix=["setpriv", "--bounding-set=-sys_ptrace",
                                                          "--inh-caps=-sys_ptrace"])
        assert child.proc.poll() is None
    shutil.rmtree(shared, ignore_errors=True)
    assert snap.owners[0].path == "__main__.CACHE"
    assert within(snap.owners[0].retained_bytes, truth["cache_bytes"])
    assert denied.returncode == 5, denied.stderr
    _clean(denied)
    assert "CAP_SYS_PTRACE" in denied.stderr


def test_target_exiting_mid_inspect(tmp_path: Path) -> None:
    env = {"FIXTURE_ENTRIES": "1500000"}  # a census of a few seconds
    with spawn_target("growing_cache", tmp_path, env=env, timeout=120) as child:
        killer = threading.Timer(0.8, child.proc.kill)
        killer.start()
        with pytest.raises((TargetExited, TargetNotFound)):
            take_snapshot(child.pid, method="gdb", timeout=60)
        killer.join()


def test_two_inspections_of_one_process_at_once(tmp_path: Path) -> None:
    env = {"FIXTURE_ENTRIES": "600000"}
    outcomes: list[object] = []

    def inspect(pid: int) -> None:
        try:
            outcomes.append(take_snapshot(pid, method="gdb", timeout=60))
        except LeakhoundError as exc:
            outcomes.append(exc)

    with spawn_target("growing_cache", tmp_path, env=env, timeout=120) as child:
        threads = [threading.Thread(target=inspect, args=(child.pid,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = child.report()
    errors = [o for o in outcomes if isinstance(o, LeakhoundError)]
    assert len(outcomes) - len(errors) >= 1
    assert all(isinstance(e, TargetBusy) for e in errors), errors
    assert_only_the_payload_stays(after["leakhound_modules"])


def test_target_exiting_mid_patch(tmp_path: Path) -> None:
    from leakhound.patching import patch_process
    from leakhound.simulate.fleet import start_fleet

    with start_fleet(workers=1, concurrency=2, turns=6, rollouts=None, image_kb=8, group_size=1, fixes="none",
                     hold=0, report_dir=tmp_path, stats_interval=1.0) as fleet:
        fleet.wait_ready(timeout=60)
        pid = fleet.pids[0]
        killer = threading.Timer(1.0, fleet.kill)
        killer.start()
        with pytest.raises((TargetExited, TargetNotFound)):
            patch_process(pid, fixes=["registry"], method="gdb", verify_seconds=3)
        killer.join()
