"""Findings are listed by the memory at stake, not by kind: severity only breaks ties
(leakhound/analysis/ranking.py, docs/inspect.md "Findings")."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from leakhound.analysis.detectors import analyse
from leakhound.analysis.ledger import ledger
from leakhound.analysis.ranking import GROWTH_HORIZON_MINUTES, rank
from leakhound.model import Finding, snapshot_from_json
from leakhound.render import table

CAPTURE = Path(__file__).parent / "captures" / "churning_worker_pause_over_budget.json"
MiB = 1 << 20


def _finding(kind: str, severity: str, size: int, **details: object) -> Finding:
    return Finding(kind=kind, severity=severity, bytes=size, count=1, owner="", fix="", summary=kind,
                   details=dict(details))


def test_the_issue_s_worker_lists_15_mib_of_steps_above_510_bytes_of_intercepts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The real worker's README example: `WARNING intercepts 510 B` was listed above
    `INFO steps 15.0 MiB`. Here the same facts, in a real capture's probe."""
    snap = snapshot_from_json(CAPTURE.read_text())
    probes = json.loads(json.dumps(snap.probes))
    held = probes["verifiers"]["intercepts"]
    held.update(entries=1, delivered=1, pending=0, body_bytes=510, delivered_body_bytes=510, base64_bytes=0)
    probes["verifiers"]["steps"].update(redundant_bytes=15 * MiB)
    probes["verifiers"]["registry"].update(finished_entries=0)
    # a big worker: 15 MiB of steps is under 5% of its RSS (info), 510 B of bodies a warning
    process = replace(snap.process, rss_bytes=5 * 1024 * MiB)
    found = analyse(replace(snap, probes=probes, process=process, owners=()))
    kinds = [(f.severity, f.kind) for f in found.findings if not f.skipped]
    assert kinds.index(("info", "steps")) < kinds.index(("warning", "intercepts")), kinds
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    out = io.StringIO()
    table.render_snapshot(found, ledger(found), file=out)
    screen = out.getvalue()
    assert screen.index("steps  15.0 MiB") < screen.index("intercepts  510 B")
    assert "holds 1 request body: 1 already delivered (510 B)" in " ".join(screen.split())


def test_severity_breaks_ties_and_skipped_come_last() -> None:
    ranked = rank([
        _finding("skipped", "skipped", 0),
        _finding("info", "info", 10 * MiB),
        _finding("critical", "critical", 10 * MiB),
        _finding("small", "critical", 1),
        _finding("warning", "warning", 10 * MiB),
    ])
    assert [f.kind for f in ranked] == ["critical", "warning", "info", "small", "skipped"]


def test_a_growing_owner_counts_an_hour_of_its_growth() -> None:
    """A watch's growing owner of 10 MiB adding 5 MiB a minute (310 MiB in an hour) outranks
    a plateaued 200 MiB cache; an owner no longer growing counts its bytes only."""
    growing = _finding("leak", "warning", 10 * MiB, verdict="growing", bytes_per_min=5 * MiB)
    plateau = _finding("cache", "info", 200 * MiB, verdict="plateaued", bytes_per_min=3 * MiB)
    assert [f.kind for f in rank([plateau, growing])] == ["leak", "cache"]
    slow = replace(growing, details={"verdict": "growing", "bytes_per_min": 1 * MiB})
    assert 10 * MiB + GROWTH_HORIZON_MINUTES * MiB < 200 * MiB
    assert [f.kind for f in rank([slow, plateau])] == ["cache", "leak"]



def test_a_real_verifiers_0_1_14_worker_lists_its_findings_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A capture of the real verifiers 0.1.14 worker (tests/verifiers_target.py, 6 rollouts of
    4 turns, 2 parked): 523 KiB of bloated steps (info) are more at stake than 519 KiB of
    delivered intercept bodies (a warning), and are listed first."""
    snap = analyse(snapshot_from_json((CAPTURE.parent / "verifiers_0_1_14_worker.json").read_text()))
    listed = [(f.kind, f.severity) for f in snap.findings if not f.skipped]
    assert listed == [("registry", "warning"), ("steps", "info"), ("intercepts", "warning")]
    sizes = [f.bytes for f in snap.findings if not f.skipped]
    assert sizes == sorted(sizes, reverse=True)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    table.render_snapshot(snap, ledger(snap), file=out)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80 and not [line for line in lines if line != line.rstrip()]
    assert f"next: leakhound patch {snap.pid} --fix registry --dry-run  (3.1 MiB at stake)" in lines
