"""``watch`` of eight targets at once over ptrace: one thread per target, each injecting into
its own, all sharing the injector's live helpers (attach/ptrace/inject.py). It crashed in 2
of 8 runs with ``ValueError: list.remove(x): x not in list``."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from tests.utils import spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


def test_watch_of_eight_targets_over_ptrace_samples_each(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        children = [stack.enter_context(spawn_target("steady_leak", tmp_path / str(i)))
                    for i in range(8) if (tmp_path / str(i)).mkdir() is None]
        result = CliRunner().invoke(
            app, ["watch", *(str(c.pid) for c in children), "--method", "ptrace", "-i", "0.5", "-d", "4",
                  "--full-every", "100", "--json"])
    assert result.exit_code == 0, result.output[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    sampled = {s["pid"] for s in lines if s.get("event") == "sample" and s.get("method") == "ptrace"}
    assert sampled == {c.pid for c in children}
    assert lines[-1]["event"] == "report" and len(lines[-1]["processes"]) == 8
