"""confirm, demo and simulate through the CLI, checked against the workers' own reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.cli import app

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))


def test_confirm_table_on_a_small_workload() -> None:
    result = CliRunner().invoke(app, ["confirm", "--rollouts", "4", "--turns", "6", "--image-kb", "16", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "leakhound.confirm/1"
    rows = {row["fixes"]: row for row in doc["rows"]}
    assert list(rows) == ["none", "steps", "registry", "intercepts", "trim", "all"]
    # Each leak is present without its fix and gone with it (the workers' own accounting).
    assert rows["none"]["registry_finished_entries"] == 4
    assert rows["registry"]["registry_finished_entries"] == rows["all"]["registry_finished_entries"] == 0
    assert rows["none"]["intercept_peak_delivered"] > 0
    assert rows["intercepts"]["intercept_peak_delivered"] == rows["all"]["intercept_peak_delivered"] == 0
    assert rows["none"]["step_redundant_bytes"] > 0
    assert rows["steps"]["step_redundant_bytes"] == rows["all"]["step_redundant_bytes"] == 0
    for row in rows.values():
        assert row["rollouts_completed"] == 4
        assert 0 < row["resting_rss_bytes"] <= row["peak_rss_bytes"]


def test_simulate_writes_the_ready_file_and_stops_on_sigint(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [LEAKHOUND, "simulate", "--turns", "3", "--rollouts", "2", "--image-kb", "8", "--ready-file", str(ready),
         "--hold", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.1)
        pids = json.loads(ready.read_text())["pids"]
        assert len(pids) == 1 and os.path.exists(f"/proc/{pids[0]}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert not os.path.exists(f"/proc/{pids[0]}") or open(f"/proc/{pids[0]}/stat").read().split()[2] == "Z"


def test_demo_tells_the_whole_story(tmp_path: Path) -> None:
    result = subprocess.run([LEAKHOUND, "demo", "--verify", "3"], capture_output=True, text=True, timeout=180,
                            env={**os.environ, "NO_COLOR": "1", "COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for kind in ("registry", "intercepts", "steps"):
        assert kind in out
    assert out.count(" applied ") >= 4 or out.count("applied") >= 4
    assert "\x1b[" not in out
