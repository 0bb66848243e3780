"""``inspect --why OWNER`` prints only what was asked: the owner, how it is held, and the
other paths from roots that keep it alive; not the whole report, and not the owner's own
path as its retainer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from leakhound.commands import inspect
from leakhound.commands.common import new_reporter
from leakhound.core.capture import Capture
from leakhound.core.request import RequestOptions
from leakhound.model import HeapStats, Owner
from tests.factories import make_snapshot

MiB = 1 << 20
TRAJECTORIES = "task:Task-1/run.self.env.harness.runtime.trajectories"
ENTRY = TRAJECTORIES + "['b1b1aa963c41469593e25f161c3b0fdc']"
SHARED_BY = ("task:Task-1/run.self.env.harness.endpoint.server.active_rollouts['rollout_9feda5cc']"
             "['state']['trajectory']")


def _why(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], query: str,
         found: tuple[Owner, ...]) -> str:
    heap = HeapStats(objects=1000, bytes=100 * MiB, census_seconds=1.0, max_pause_ms=3.0, owner_model="dominator")
    snapshot = make_snapshot(heap=heap, owners=found)

    def capture(*_: Any, **__: Any) -> Capture:
        return Capture(snapshot=snapshot, why=found)

    monkeypatch.setattr(inspect, "capture", capture)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    inspect.run(pid=4242, request=RequestOptions(timeout=10.0), top=10, as_json=False, save=None,
                reporter=new_reporter(quiet=True), why=query)
    return capsys.readouterr().out


def test_why_prints_the_owner_and_how_it_is_held_only(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    owner = Owner(TRAJECTORIES, "dict", 12, 52 * MiB, 3000, retainers=(TRAJECTORIES,))
    out = _why(monkeypatch, capsys, "trajectories", (owner,))
    assert out.splitlines() == [
        "why trajectories: 1 match",
        f"{TRAJECTORIES} (dict, 12 items)",
        "  retains 52.0 MiB: what freeing it would give back",
        "  held as: the attribute trajectories of task:Task-1/run.self.env.harness.runtime",
        "  no other path from a root keeps it alive: dropping that reference frees it",
    ]
    for report_part in ("memory ledger", "top owners", "findings", "kept alive by " + TRAJECTORIES):
        assert report_part not in out


def test_why_lists_the_other_paths_that_keep_it_alive(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    owner = Owner(ENTRY, "list", 21, 3 * MiB, 400, retainers=(ENTRY, SHARED_BY))
    out = _why(monkeypatch, capsys, "list", (owner,))
    assert out.splitlines()[3:] == [
        f"  held as: the entry 'b1b1aa963c41469593e25f161c3b0fdc' of the dict {TRAJECTORIES}",
        f"  also kept alive by {SHARED_BY}",
        "  freeing it takes dropping every one of these references",
    ]


def test_why_without_a_match_says_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _why(monkeypatch, capsys, "nothing", ()) == "why nothing: no owner path or type of that name\n"


def test_the_report_without_why_is_whole(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    owner = Owner(TRAJECTORIES, "dict", 12, 52 * MiB, 3000, retainers=(TRAJECTORIES,))
    snapshot = replace(make_snapshot(owners=(owner,)))
    monkeypatch.setattr(inspect, "capture", lambda *_a, **_k: Capture(snapshot=snapshot))
    monkeypatch.setenv("NO_COLOR", "1")
    inspect.run(pid=4242, request=RequestOptions(timeout=10.0), top=10, as_json=False, save=None,
                reporter=new_reporter(quiet=True))
    out = capsys.readouterr().out
    assert "memory ledger" in out and "top owners" in out and "why" not in out.splitlines()[0]
