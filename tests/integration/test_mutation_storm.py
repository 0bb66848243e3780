"""A worker in which everything the payload reads changes all the time (module globals, a
class's dict, sys.modules, sets, threads, tasks; from threads, tasks and finalizers): inspect,
the census and watch all finish, on every CPython, and name the one owner of size with its
bytes as the target counts them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from tests.pythons import installed_pythons
from tests.utils import spawn_target, within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]

PYTHONS = installed_pythons()


@pytest.mark.parametrize("version", list(PYTHONS))
def test_inspect_census_and_watch_hold_up_in_a_storm_of_changes(tmp_path: Path, version: str) -> None:
    runner = CliRunner()
    with spawn_target("mutation_storm", tmp_path, python=PYTHONS[version]) as child:
        docs = []
        for owners in ("auto", "census", "auto"):
            result = runner.invoke(app, ["inspect", str(child.pid), "--owners", owners, "--json"])
            assert result.exit_code == 0, result.output
            docs.append(json.loads(result.stdout))
        watched = runner.invoke(app, ["watch", str(child.pid), "-i", "1", "-d", "4", "--json"])
        assert watched.exit_code == 0, watched.output
        truth = child.report()["truth"]
        assert child.proc.poll() is None
    for doc in docs[0], docs[2]:  # dominator owners: REG first, all its bytes
        first = doc["owners"][0]
        assert first["path"] == "__main__.REG", [o["path"] for o in doc["owners"][:5]]
        assert within(first["retained_bytes"], truth["reg_bytes"], 0.15), (first["retained_bytes"], truth)
    assert any(o["path"] == "__main__.REG" for o in docs[1]["owners"])
    lines = [json.loads(line) for line in watched.stdout.splitlines() if line.strip()]
    assert len(lines) >= 3  # samples, then the report
