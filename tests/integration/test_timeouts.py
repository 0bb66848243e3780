"""Timeouts are definitive, and signals to leakhound leave nothing behind (issues 12 and 13).

The target (fixtures/payload_trap.py) stalls leakhound's payload thread at a chosen function,
deterministically: a payload starved of the GIL or stuck in one long step, without relying on
a slow machine. What is left running and what is applied is read from the target itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.utils import LEAKHOUND, Child, gdb_or_ptrace, run_cli, spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

METHOD = gdb_or_ptrace()  # (these tests are of timeouts, not of gdb)


def _private_tmp(tmp_path: Path) -> Path:
    """Where the CLI makes its private directories in these tests (TMPDIR), to count them."""
    tmp = tmp_path / "cli-tmp"
    tmp.mkdir()
    return tmp


def _left_behind(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("leakhound-"))


def _wait_for(child: Child, key: str, value: Any, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        truth = child.report()["truth"]
        if truth[key] == value:
            return truth
        assert time.monotonic() < deadline, (key, value, truth)
        time.sleep(0.2)


def _trap(at: str, seconds: float) -> dict[str, str]:
    return {"TRAP_AT": at, "TRAP": "stall", "TRAP_SECONDS": str(seconds)}


def _nothing_left_running(child: Child) -> None:
    """The stalled request ended on its own (no payload thread), and the target takes the
    next request at once: no lock was left behind."""
    _wait_for(child, "stall_over", True)
    _wait_for(child, "payload_threads", 0, timeout=10)


@pytest.mark.parametrize(("owners", "phase"), [("census", "census"), ("auto", "graph")])
def test_a_census_past_its_deadline_is_cancelled_in_the_target_and_says_so(tmp_path: Path, owners: str,
                                                                          phase: str) -> None:
    tmp = _private_tmp(tmp_path)
    # Stalled 5 s at its first progress report; the payload's deadline is --timeout - 2 = 4 s.
    # With the default owners the graph is walked first (handed to the CLI early, its
    # dominator pass beside the census): the stall is in it.
    with spawn_target("payload_trap", tmp_path, env=_trap("progress", 5)) as child:
        result = run_cli("inspect", str(child.pid), "--timeout", "6", "--owners", owners, "--method", METHOD,
                         env={"TMPDIR": str(tmp)})
        assert result.returncode == 6, result.stderr
        assert f"stopped inside the target during {phase} (deadline)" in result.stderr
        assert "nothing of it is left running" in result.stderr
        assert "Traceback" not in result.stderr
        assert child.report()["truth"]["payload_threads"] == 0
        again = run_cli("inspect", str(child.pid), "--timeout", "60", "--json", "--method", METHOD,
                        env={"TMPDIR": str(tmp)})
        assert again.returncode == 0, again.stderr  # not 9: the lock was released
        assert child.proc.poll() is None
    assert _left_behind(tmp) == []


def test_a_request_that_cannot_confirm_its_cancel_says_so_and_stops_once_it_runs(tmp_path: Path) -> None:
    tmp = _private_tmp(tmp_path)
    # Stalled longer than the CLI waits (3 s + the 5 s grace for the cancel).
    with spawn_target("payload_trap", tmp_path, env=_trap("progress", 10)) as child:
        result = run_cli("inspect", str(child.pid), "--timeout", "3", "--method", METHOD, env={"TMPDIR": str(tmp)})
        assert result.returncode == 14, result.stderr
        assert "told the request to stop" in result.stderr
        assert _left_behind(tmp) == []
        _nothing_left_running(child)
        again = run_cli("inspect", str(child.pid), "--timeout", "60", "--json", "--method", METHOD,
                        env={"TMPDIR": str(tmp)})
        assert again.returncode == 0, again.stderr


def test_a_patch_that_times_out_before_landing_never_lands_and_is_read_back(tmp_path: Path) -> None:
    """The issue's case: the patch timed out (exit 6) and landed ~30 s later."""
    tmp = _private_tmp(tmp_path)
    # Stalled 10 s in the measurement taken before the fix lands.
    with spawn_target("payload_trap", tmp_path, env=_trap("_measure", 10)) as child:
        result = run_cli("patch", str(child.pid), "--fix", "trim", "--timeout", "3", "--method", METHOD,
                         env={"TMPDIR": str(tmp)})
        assert result.returncode == 6, result.stderr
        assert "nothing was changed (read back: applied now: none)" in result.stderr
        _nothing_left_running(child)  # no payload thread is left that could land it later
        assert child.report()["truth"]["applied"] == []
        status = run_cli("patch", str(child.pid), "--status", "--fix", "trim", "--json", "--method", METHOD,
                         env={"TMPDIR": str(tmp)})
        assert status.returncode == 0, status.stderr
        assert '"status": "not-applied"' in status.stdout
    assert _left_behind(tmp) == []


def test_a_patch_that_lands_and_runs_out_of_time_reports_what_is_applied(tmp_path: Path) -> None:
    tmp = _private_tmp(tmp_path)
    # Stalled 5 s right after the fix landed (listing what is applied); deadline 4 s.
    with spawn_target("payload_trap", tmp_path, env=_trap("applied", 5)) as child:
        result = run_cli("patch", str(child.pid), "--fix", "trim", "--timeout", "6", "--method", METHOD,
                         env={"TMPDIR": str(tmp)})
        assert result.returncode == 13, result.stderr
        assert "applied: trim" in result.stderr
        assert child.report()["truth"]["applied"] == ["trim"]
        reverted = run_cli("patch", str(child.pid), "--revert", "--fix", "trim", "--method", METHOD,
                           env={"TMPDIR": str(tmp)})
        assert reverted.returncode == 0, reverted.stderr
        assert child.report()["truth"]["applied"] == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_leakhound_mid_census_cancels_it_and_leaves_nothing(tmp_path: Path, sig: int) -> None:
    tmp = _private_tmp(tmp_path)
    with spawn_target("payload_trap", tmp_path, env=_trap("progress", 12)) as child:
        cli = subprocess.Popen([LEAKHOUND, "inspect", str(child.pid), "--method", METHOD, "--timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(tmp)})
        try:
            # Signals to the target (its report) only once the injection is over.
            deadline = time.monotonic() + 60
            while not list(tmp.glob("leakhound-*/started.json")):
                assert time.monotonic() < deadline and cli.poll() is None
                time.sleep(0.05)
            _wait_for(child, "trapped", True)
            # The request's channel only (gdb's own directory goes when gdb has exited, which
            # can be a moment after the target ran the call: CI, on a loaded machine).
            while len(_left_behind(tmp)) != 1:
                assert time.monotonic() < deadline, _left_behind(tmp)
                time.sleep(0.05)
            cli.send_signal(sig)
            _out, err = cli.communicate(timeout=30)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
        assert cli.returncode == 128 + sig, err
        assert f"interrupted by {signal.Signals(sig).name}" in err
        assert "Traceback" not in err
        assert _left_behind(tmp) == []
        # The request stops at its next step once its thread runs: it never finishes unobserved.
        _nothing_left_running(child)
        again = run_cli("inspect", str(child.pid), "--timeout", "60", "--json", "--method", METHOD,
                        env={"TMPDIR": str(tmp)})
        assert again.returncode == 0, again.stderr
        assert child.proc.poll() is None


def test_a_failure_on_a_later_worker_still_reports_what_landed_on_the_earlier_ones(tmp_path: Path) -> None:
    tmp = _private_tmp(tmp_path)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that runs nothing now
    with spawn_target("payload_trap", tmp_path) as child:
        result = run_cli("patch", str(child.pid), str(gone.pid), "--fix", "trim", "--json", "--method", METHOD,
                         env={"TMPDIR": str(tmp)})
        assert result.returncode == 3, result.stderr
        assert child.report()["truth"]["applied"] == ["trim"]
    assert '"fix": "trim"' in result.stdout and '"status": "applied"' in result.stdout


def _agent_trap(at: str, seconds: float) -> dict[str, str]:
    return {**_trap(at, seconds), "TRAP_AGENT": "1", "LEAKHOUND_AGENT": "0"}


def test_the_agent_confirms_a_cancel_sent_on_its_socket(tmp_path: Path) -> None:
    # Stalled 5 s; the CLI gives up at 4 s, sends "cancel" and reads the agent's answer.
    with spawn_target("payload_trap", tmp_path, env=_agent_trap("progress", 5)) as child:
        result = subprocess.run([LEAKHOUND, "inspect", str(child.pid), "--method", "agent", "--timeout", "4"],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 6, result.stderr
        # (the default owners: the graph is walked first, handed over early on the socket too)
        assert "stopped inside the target during graph" in result.stderr
        assert child.report()["truth"]["busy"] is False


def test_a_signal_to_leakhound_cancels_its_agent_request(tmp_path: Path) -> None:
    with spawn_target("payload_trap", tmp_path, env=_agent_trap("progress", 5)) as child:
        cli = subprocess.Popen([LEAKHOUND, "inspect", str(child.pid), "--method", "agent", "--timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for(child, "trapped", True)
            cli.send_signal(signal.SIGTERM)
            _out, err = cli.communicate(timeout=30)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
        assert cli.returncode == 143, err
        # The closed connection stops the request at its next step: the lock is free again
        # as soon as the stall is over, not after a whole census.
        _wait_for(child, "stall_over", True)
        _wait_for(child, "busy", False, timeout=5)
        again = subprocess.run([LEAKHOUND, "inspect", str(child.pid), "--method", "agent", "--json"],
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
