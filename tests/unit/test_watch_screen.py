"""The watch's report at 80 columns: the process line whole, the owner column readable, every
verdict whole, and the finding's numbers as the table says them."""

from __future__ import annotations

import io

import pytest

from leakhound.analysis.growth import analyse_growth
from leakhound.model.growth import OwnerSample, Sample
from leakhound.render.watch import render_reports

T0 = 1_700_000_000.0
LEAK = "task:Task-1/run.self.env.harness.runtime.trajectories"


def _sample(t: float) -> Sample:
    owners = {LEAK: (int(300 * (1000 + 100 * t)), int(1000 + 100 * t)),
              "asyncio.base_events.BaseEventLoop": (112_700, 76), "__main__.TABLE": (20_000_000, 60_000)}
    return Sample(pid=42, taken_at=T0 + t, rss_bytes=50_000_000 + int(30_000 * t), heap_bytes=None,
                  owners=tuple(OwnerSample(p, "dict", items, size) for p, (size, items) in owners.items()),
                  full=t in (0, 11), name="Verifiers::EnvWorker0")


def test_the_watch_report_reads_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    report = analyse_growth([_sample(float(t)) for t in range(12)])
    out = io.StringIO()
    render_reports((report,), file=out)
    text = out.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and not [line for line in lines if line != line.rstrip()]
    assert " ".join(" ".join(lines[:2]).split()).startswith(
        "pid 42 Verifiers::EnvWorker0: growing RSS 48.0 MiB (+1.7 MiB/min) 12 samples over 11 s")
    rows = [line.split("│") for line in lines if line.count("│") == 6]
    assert LEAK in "".join(cells[0].strip() for cells in rows)
    assert {cells[6].strip() for cells in rows if cells[6].strip()} == {"growing", "static"}
    leak = next(cells for cells in rows if cells[0].strip().startswith("task:"))
    size, per_min = leak[3].strip(), leak[4].strip()
    summary = " ".join(text[text.index("findings"):].split())
    assert f"keeps growing: {per_min.lstrip('+')}/min" in summary and f"(now {size}, 2,100 items)" in summary
