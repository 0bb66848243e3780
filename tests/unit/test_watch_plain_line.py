"""A watch's line per sample where stderr is no terminal (render.watch.plain_line)."""

from __future__ import annotations

from leakhound.analysis.growth import analyse_growth
from leakhound.model.growth import GROWING, sample_from_snapshot
from leakhound.model.snapshot import Owner
from leakhound.render.watch import plain_line
from tests.factories import MB, make_snapshot


def _report(small_kib: list[int], big_mb: int = 50):
    samples = [sample_from_snapshot(make_snapshot(taken_at=1_800_000_000.0 + 5 * k, owners=(
        Owner("__main__.CULPRIT", "list", 50, big_mb * MB, 50),
        Owner("sys.path_importer_cache", "dict", 40, kib << 10, 40),
    ))) for k, kib in enumerate(small_kib)]
    return analyse_growth(samples)


def test_the_largest_owner_is_said_when_none_grows() -> None:
    """A 140 KiB cache that grew by the payload's first imports (a rate, verdict unknown) was
    said as the "top owner" before a 50 MiB list that did not grow."""
    report = _report([100, 140, 140])
    assert not any(t.verdict == GROWING for t in report.owners)
    line = plain_line(report)
    assert "largest owner __main__.CULPRIT 50.0 MiB" in line and "path_importer_cache" not in line, line


def test_the_owner_growing_most_is_said_when_one_grows() -> None:
    report = _report([100 + 400 * k for k in range(12)])
    grows = [t for t in report.owners if t.verdict == GROWING]
    assert grows and grows[0].name == "sys.path_importer_cache"
    assert "growing most sys.path_importer_cache" in plain_line(report)
