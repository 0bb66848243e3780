"""Simulated workers never outlive the command that started them, and a simulation that fails
is one line and a documented exit code: real `leakhound simulate` processes, real signals."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.errors import LeakhoundError
from leakhound.simulate.fleet import FleetError

pytestmark = [pytest.mark.integration]

LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))


def _gone(pid: int) -> bool:
    """Dead: no such process, or a zombie (it exited; only its reaping is left)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if not _gone(p)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_workers_die_with_the_simulate_command(tmp_path: Path, signum: signal.Signals) -> None:
    # Before: SIGTERM (what `timeout`, `docker stop`, `kubectl delete` send) ended the parent at
    # once and left its workers running, reparented to init; SIGKILL always did.
    ready = tmp_path / "ready.json"
    # Its temporary directories (the workers' reports, the import shim) in this test's own: a
    # SIGKILLed `leakhound simulate` cannot remove them, and the test leaves nothing in /tmp.
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen(
        [LEAKHOUND, "simulate", "--workers", "2", "--turns", "3", "--rollouts", "forever", "--image-kb", "8",
         "--ready-file", str(ready)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "workers never became ready"
            time.sleep(0.1)
        pids = json.loads(ready.read_text())["pids"]
        assert len(pids) == 2 and not any(_gone(p) for p in pids)
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=60)
        # stop()'s grace period is 10 s, then SIGKILL: well within this.
        left = _wait_gone(pids, 30.0)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert left == [], f"workers {left} outlived `leakhound simulate` killed with {signum.name}"
    if signum != signal.SIGKILL:
        assert proc.returncode == 128 + signum, err
        assert "Traceback" not in err
        # nothing left behind: the workers' report directory goes with them
        reports = re.search(r"their own reports: (\S+)/<pid>\.json", err)
        assert reports is not None, err
        assert not Path(reports.group(1)).exists(), reports.group(1)


@pytest.mark.parametrize("where", ["missing-dir", "a-directory"])
def test_unwritable_ready_file_is_a_usage_error_before_any_worker(tmp_path: Path, where: str) -> None:
    # Before: the workers started, became ready, then the write raised a FileNotFoundError traceback.
    ready = tmp_path / "no" / "such" / "dir" / "ready.json" if where == "missing-dir" else tmp_path
    result = CliRunner().invoke(app, ["simulate", "--turns", "1", "--rollouts", "1", "--image-kb", "1",
                                      "--ready-file", str(ready)])
    assert result.exit_code == 2, result.output
    assert f"leakhound: error: cannot write --ready-file {ready}" in result.output
    assert "hint: Pass --ready-file a path in a directory you can write." in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(
    "argv",
    [
        ["confirm", "--rollouts", "1", "--turns", "1", "--image-kb", "1"],
        ["demo"],
        ["patch", "--fix", "trim"],
        ["simulate", "--turns", "1", "--rollouts", "1", "--image-kb", "1"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_simulated_worker_that_dies_is_exit_15_not_a_traceback(argv: list[str]) -> None:
    # Before: FleetError was a RuntimeError, so the CLI edge let its traceback through.
    assert issubclass(FleetError, LeakhoundError) and FleetError.EXIT_CODE == 15
    # The worker's python cannot start with this home (the CLI itself is already running).
    result = CliRunner().invoke(app, argv, env={"PYTHONHOME": "/nonexistent-python-home"})
    assert result.exit_code == 15, (result.output, result.exception)
    assert "exited with code 1 before it could" in result.output
    assert "hint: Each simulated worker needs" in result.output
    assert not isinstance(result.exception, FleetError)
