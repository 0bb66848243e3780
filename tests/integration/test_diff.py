"""diff of two real snapshots of a leaking target; bad files are one-line errors."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from tests.utils import spawn_target, wait_for_agent_socket, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


def test_diff_of_two_real_snapshots(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    runner = CliRunner()
    with spawn_target("steady_leak", tmp_path, env={"LEAKHOUND_AGENT": "1"}) as child:
        wait_for_agent_socket(child.pid)
        first = runner.invoke(app, ["inspect", str(child.pid), "--json", "--save", str(a)])
        time.sleep(2.0)
        second = runner.invoke(app, ["inspect", str(child.pid), "--json", "--save", str(b)])
        truth = child.report()["truth"]
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    result = runner.invoke(app, ["diff", str(a), str(b), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "leakhound.diff/1"
    top = doc["owners"][0]
    assert top["name"] == "__main__.SESSIONS"
    # The target adds rate_items_per_s entries per second; the diff must see that rate.
    assert within(top["count"] * 60.0 / doc["seconds"], truth["rate_items_per_s"] * 60.0, 0.10), top
    per_item = truth["sessions_bytes"] / truth["sessions_items"]
    assert within(top["bytes"], top["count"] * per_item, 0.15), (top, per_item)
    assert doc["types"][0]["bytes"] > 0
    text = runner.invoke(app, ["diff", str(a), str(b)], env={"COLUMNS": "100"})
    assert text.exit_code == 0
    assert "__main__.SESSIONS" in text.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ('{"schema": "something/9"}', "schema is 'something/9'"),
        ('{"schema": "leakhound.snapshot/1", "pid": 1}', "malformed snapshot"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = CliRunner().invoke(app, ["diff", str(bad), str(bad)])
    assert result.exit_code == 11
    assert f"leakhound: error: {bad} is not a leakhound snapshot" in result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["diff", str(tmp_path / "nope.json"), str(tmp_path / "nope.json")])
    assert result.exit_code == 11
    assert "cannot read" in result.output
