"""arena_fragmentation for free glibc memory that malloc_trim cannot return (issue 11: 42.8 MB
of untrimmable free, 27% of RSS, raised no finding)."""

from __future__ import annotations

from leakhound.analysis.detectors import arena_fragmentation
from leakhound.model import ArenaStats
from tests.factories import MB, make_snapshot


def test_large_untrimmable_glibc_free_is_a_warning_without_a_fix() -> None:
    arena = ArenaStats(malloc_in_use_bytes=60 * MB, malloc_free_bytes=84 * MB, trimmable_bytes=2 * MB,
                       pymalloc_free_bytes=MB)
    (finding,) = arena_fragmentation.detect(make_snapshot(arena=arena))
    assert finding.kind == "arena_fragmentation"
    assert finding.severity == "warning"
    assert finding.fix == ""  # trimming cannot return it
    assert finding.bytes == 82 * MB
    assert finding.owner == "<glibc arenas: untrimmable>"
    assert "82.0 MiB" in finding.summary and "27% of RSS" in finding.summary
    assert "cannot return" in finding.summary


def test_trimmable_and_untrimmable_are_two_findings() -> None:
    arena = ArenaStats(malloc_in_use_bytes=0, malloc_free_bytes=150 * MB, trimmable_bytes=90 * MB,
                       pymalloc_free_bytes=0)
    found = arena_fragmentation.detect(make_snapshot(arena=arena))
    assert [(f.owner, f.bytes, f.fix) for f in found] == [
        ("<glibc arenas>", 90 * MB, "trim"), ("<glibc arenas: untrimmable>", 60 * MB, "")]


def test_small_untrimmable_free_is_no_finding() -> None:
    arena = ArenaStats(malloc_in_use_bytes=0, malloc_free_bytes=10 * MB, trimmable_bytes=0, pymalloc_free_bytes=0)
    assert arena_fragmentation.detect(make_snapshot(arena=arena)) == []
