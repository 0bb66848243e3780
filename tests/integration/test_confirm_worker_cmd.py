"""confirm --worker-cmd: the A/B table on the user's own workload, started afresh per fix
configuration, fixes applied live to its worker, peak and resting RSS read from the kernel.

On a plain workload (no code any fix recognises, so every fix is refused and says so) through
the CLI, and on the real verifiers 0.1.14 env worker (its own venv, fixtures/verifiers_env/):
the fixes land in the worker, each run is a fresh worker, nothing is left running.
"""

from __future__ import annotations

import json
import shlex
import sys
import time

import psutil
import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.core.confirm_workload import WorkerCommand, run_workload_confirm
from tests.utils import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]
MB = 1024 * 1024


def test_cli_runs_the_users_command_once_per_configuration() -> None:
    command = f"{shlex.quote(sys.executable)} {FIXTURES / 'allocating_workload.py'} {{ready}} {{go}} {{done}}"
    began = time.time()
    result = CliRunner().invoke(app, ["confirm", "--worker-cmd", command, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "leakhound.confirm-worker/1"
    rows = doc["rows"]
    assert [r["fixes"] for r in rows] == ["none", "steps", "registry", "intercepts", "trim", "all"]
    # A fresh worker per configuration, gone afterwards.
    pids = [r["worker_pid"] for r in rows]
    assert len(set(pids)) == 6
    assert not [pid for pid in pids if _left_running(pid, began)]
    for row in rows:
        # It allocated and touched 64 MiB after {go}: the kernel's peak and resting RSS hold them.
        assert row["peak_rss_bytes"] >= 64 * MB and row["resting_rss_bytes"] >= 64 * MB, row
        assert row["resting_rss_bytes"] <= row["peak_rss_bytes"]
    # Only trim (malloc_trim on a cadence) applies to any glibc process; the other three find
    # no verifiers code to patch, and the row says so.
    applied = {r["fixes"]: (r["applied"], r["refused"]) for r in rows}
    assert applied == {
        "none": ([], []), "steps": ([], ["steps"]), "registry": ([], ["registry"]),
        "intercepts": ([], ["intercepts"]), "trim": (["trim"], []),
        "all": (["trim"], ["intercepts", "registry", "steps"]),
    }


def _left_running(pid: int, since: float) -> bool:
    """Whether this run's worker ``pid`` outlived its configuration. Only a process started
    during the run and orphaned (the workload's group was killed) can be it: pids wrap on
    this machine (pid_max 32768), so another test's process may hold the number by now."""
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() >= since and proc.ppid() == 1
    except psutil.NoSuchProcess:
        return False


@pytest.mark.verifiers
@pytest.mark.timeout(900)
def test_the_real_verifiers_worker_measured_per_configuration() -> None:
    from tests.verifiers_target import _venv_python, ensure_verifiers_venv

    python = _venv_python(ensure_verifiers_venv())
    workload = FIXTURES / "verifiers_env" / "workload.py"
    worker = WorkerCommand(
        command=f"{python} {workload} --dir {{dir}} --ready {{ready}} --go {{go}} --done {{done}} "
                "--rollouts 6 --turns 6 --screenshot-kb 24",
        match="Verifiers::EnvWorker", rest=3.0,
    )
    began = time.time()
    rows = run_workload_confirm(worker=worker, configs=(("none", "none"), ("all", "all")))
    none, fixed = rows
    assert none["worker_pid"] != fixed["worker_pid"]
    assert (none["applied"], none["refused"]) == ([], [])
    # Every fix recognised verifiers 0.1.14's code in its worker and landed there.
    assert fixed["statuses"] == dict.fromkeys(("steps", "registry", "intercepts", "trim"), "applied")
    for row in rows:
        assert 100 * MB < row["resting_rss_bytes"] <= row["peak_rss_bytes"], row
        assert not _left_running(row["worker_pid"], began)
    print(f"\nverifiers worker, none -> all fixes: peak {none['peak_rss_bytes'] / MB:.0f} -> "
          f"{fixed['peak_rss_bytes'] / MB:.0f} MiB, resting {none['resting_rss_bytes'] / MB:.0f} -> "
          f"{fixed['resting_rss_bytes'] / MB:.0f} MiB")
