"""Every budget past which no owner is named is said by its ``owner_model_reason`` in what
``export`` and ``watch`` put out: export's metrics (``leakhound_owners_not_attributed{reason}``)
and its stderr line, watch's report and its warning. Each budget forced on a small target: the
node budget (LEAKHOUND_MAX_GRAPH_NODES) and the walk's memory budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.core import capture as capture_module
from leakhound.core.export import Exporter
from leakhound.core.request import RequestOptions
from leakhound.model.names import NotAttributed
from leakhound.render.prometheus import collect_metrics
from tests.utils import spawn_target

pytestmark = pytest.mark.integration

SHAPE = {"SHAPE": "callbacks"}


def _force(budget: NotAttributed, monkeypatch: pytest.MonkeyPatch) -> None:
    if budget == NotAttributed.GRAPH_OVER_NODES:
        monkeypatch.setenv("LEAKHOUND_MAX_GRAPH_NODES", "1000")
    else:  # the walk's memory in the target: 1 MiB at most
        monkeypatch.setattr(capture_module, "MIN_GRAPH_MEMORY", 1 << 20)
        monkeypatch.setattr(capture_module, "GRAPH_MEMORY_SHARE", 0.001)


BUDGETS = [NotAttributed.GRAPH_OVER_NODES, NotAttributed.GRAPH_OVER_MEMORY_BUDGET]


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: b.value)
def test_export_says_which_budget(budget: NotAttributed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _force(budget, monkeypatch)
    notes: list[str] = []
    with spawn_target("dominator_shapes", tmp_path, env=SHAPE) as child:
        exporter = Exporter(pids=(child.pid,), match=None, request=RequestOptions(timeout=60.0), interval=60.0,
                            note=notes.append)
        exporter.refresh()
        (view,) = exporter.views()
    assert view.snapshot is not None and view.snapshot.heap.owner_model_reason == budget.value, notes
    families = {f.name: f for f in collect_metrics([view])}
    flags = {s.labels["reason"]: s.value for s in families["leakhound_owners_not_attributed"].samples}
    assert flags == {code.value: float(code == budget) for code in NotAttributed}
    said = [n for n in notes if "owners not attributed" in n]
    assert len(said) == 1 and said[0].endswith(f"(owner_model_reason: {budget.value})"), notes


@pytest.mark.parametrize("budget", BUDGETS, ids=lambda b: b.value)
def test_watch_says_which_budget(budget: NotAttributed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _force(budget, monkeypatch)
    with spawn_target("dominator_shapes", tmp_path, env=SHAPE) as child:
        watched = CliRunner().invoke(app, ["watch", str(child.pid), "-i", "1", "-d", "4", "--full-every", "2",
                                           "--json"])
    assert watched.exit_code == 0, watched.output
    (process,) = json.loads(watched.stdout.splitlines()[-1])["processes"]
    assert (process["owner_model"], process["owner_model_reason"]) == ("not-attributed", budget.value)
    said = [w for w in process["warnings"] if w.startswith("owners not attributed: ")]
    assert len(said) == 1 and said[0].endswith(f"(owner_model_reason: {budget.value})"), process["warnings"]
