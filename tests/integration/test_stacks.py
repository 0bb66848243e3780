"""stacks: py-spy's view of a real target's threads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from tests.utils import spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


def test_stacks_json_and_text(tmp_path: Path) -> None:
    with spawn_target("steady_leak", tmp_path) as child:
        as_json = CliRunner().invoke(app, ["stacks", str(child.pid), "--json"])
        text = CliRunner().invoke(app, ["stacks", str(child.pid)], env={"COLUMNS": "120"})
        threads_truth = child.report()["threads"]
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.stdout)
    assert doc["schema"] == "leakhound.stacks/1" and doc["pid"] == child.pid
    names = {t["name"] for t in doc["threads"]}
    assert names == set(threads_truth)
    grower = next(t for t in doc["threads"] if t["name"] == "grower")
    assert grower["frames"][0]["filename"].endswith("steady_leak.py")
    assert any(f["function"] == "grow" for f in grower["frames"])
    assert text.exit_code == 0
    assert "thread grower" in text.stdout and "steady_leak.py" in text.stdout


def test_stacks_of_a_missing_process() -> None:
    result = CliRunner().invoke(app, ["stacks", "999999"])
    assert result.exit_code == 3
    assert "Traceback" not in result.output
