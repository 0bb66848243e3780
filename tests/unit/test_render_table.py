from __future__ import annotations

import io

import pytest

from leakhound.analysis.detectors import run_detectors
from leakhound.analysis.ledger import ledger
from leakhound.render import table
from tests.factories import make_snapshot

EXPECTED = """\
pid 4242 python  Python 3.11.7  2027-01-15 08:00 UTC  leakhound 0.1.0 via gdb
memory: RSS 300.0 MiB in RAM, 290.0 MiB of it its own (USS), swap 0 B, 3 threads
measured: 1,000,000 live Python objects (100.0 MiB) in 1.2 s, the worker running
the worker waited: at most 12 ms at once (no budget)
cost to the worker: 0 B for leakhound's bookkeeping at its peak
owners: each object counted under the first named root that reaches it (no
object graph)
next: leakhound patch 4242 --fix trim --dry-run  (140.0 MiB at stake)
memory ledger
 where RSS goes       ┃     bytes ┃ of RSS ┃ note
━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━
 live Python objects  │ 100.0 MiB │    33% │
 pymalloc free        │   5.0 MiB │     2% │ in arenas; trim cannot return it
 glibc free           │ 150.0 MiB │    50% │ freed, still held by malloc
   of which trimmable │ 140.0 MiB │    47% │ malloc_trim(0) would return it
 other                │  45.0 MiB │    15% │ interpreter, C, stacks
top owners (2 of 2): who holds the memory
 # ┃ owner                                ┃ type ┃ items ┃ retained
━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━╇━━━━━━━╇━━━━━━━━━━
 1 │ __main__.WORKER.runtime.trajectories │ dict │    48 │ 60.0 MiB
 2 │ __main__.CACHE                       │ dict │ 1,000 │ 10.0 MiB
top types
 type ┃   count ┃    bytes
━━━━━━╇━━━━━━━━━╇━━━━━━━━━━
 str  │ 600,000 │ 70.0 MiB
 dict │  10,000 │ 20.0 MiB
findings
CRITICAL arena_fragmentation  140.0 MiB
         glibc holds 140.0 MiB of free pages (47% of RSS) that malloc_trim(0)
         would return; RSS is 3.0x the live heap
         fix: leakhound patch 4242 --fix trim
not checked: registry, intercepts, steps (no verifiers v1 runtime in this
process)
"""


def test_snapshot_view_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    snap = make_snapshot()
    buf = io.StringIO()
    found = snap.with_findings(run_detectors(snap))
    table.render_snapshot(found, ledger(found), top=5, file=buf)
    assert buf.getvalue() == EXPECTED  # exactly: no line padded with trailing spaces


def test_no_color_means_no_escape_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    buf = io.StringIO()
    snap = make_snapshot()
    table.render_snapshot(snap, ledger(snap), file=buf)
    assert "\x1b[" not in buf.getvalue()


def test_a_long_owner_path_folds_rather_than_losing_its_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    from leakhound.model import Owner

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    path = "task:Task-1/run (env_worker.py:305).<EnvWorker>.env.harness.runtime.trajectories"
    buf = io.StringIO()
    snap = make_snapshot(owners=(Owner(path, "dict", 12, 64 << 20, 3000),))
    table.render_snapshot(snap, ledger(snap), file=buf)
    lines = buf.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" 1 │"))
    cells = "".join(line.split("│")[1].strip() for line in lines[start:start + 4] if line.count("│") >= 4)
    assert path.replace(" ", "") in cells.replace(" ", "")
    assert "…" not in buf.getvalue()


@pytest.mark.parametrize("walker", ["compiled", "python"])
def test_the_header_names_the_python_walk_only(monkeypatch: pytest.MonkeyPatch, walker: str) -> None:
    """The compiled walk is the norm; its slower Python twin is worth a word."""
    from leakhound.model import HeapStats

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    heap = HeapStats(objects=1_000_000, bytes=100 << 20, census_seconds=1.25, max_pause_ms=12.0, walker=walker)
    buf = io.StringIO()
    snap = make_snapshot(heap=heap, python_version="3.12.1")
    table.render_snapshot(snap, ledger(snap), file=buf)
    lines = buf.getvalue().splitlines()
    assert "Python 3.12.1" in lines[0]
    assert lines[2].startswith("measured: 1,000,000 live Python objects (100.0 MiB) in 1.2 s")
    assert ("the Python walk" in buf.getvalue()) is (walker == "python")


@pytest.mark.parametrize("examined", [False, True])
def test_the_header_says_what_was_not_examined(monkeypatch: pytest.MonkeyPatch, examined: bool) -> None:
    from leakhound.model import HeapStats

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    heap = HeapStats(objects=1_000, bytes=1 << 20, census_seconds=0.5, max_pause_ms=5.0, walker="compiled",
                     counted_in="graph",
                     unreached_examined=examined, unreached_note="" if examined else "over the pause budget")
    buf = io.StringIO()
    snap = make_snapshot(heap=heap)
    table.render_snapshot(snap, ledger(snap), file=buf)
    lines = buf.getvalue().splitlines()
    assert any(line.startswith("measured: 1,000 live Python objects") for line in lines)
    assert ("not examined: objects no named root reaches: over the pause budget" in lines) is not examined


def test_the_table_prints_the_ledger_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger is computed in analysis (analysis.ledger), the renderer only prints it."""
    from leakhound.analysis.ledger import LedgerRow

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    buf = io.StringIO()
    table.render_snapshot(make_snapshot(), (LedgerRow("as computed", 3 << 20, 0.01, "given"),), file=buf)
    rows = [line for line in buf.getvalue().splitlines() if "│" in line and "MiB" in line]
    assert rows[0].split("│")[0].strip() == "as computed" and "3.0 MiB" in rows[0]
    assert not [line for line in buf.getvalue().splitlines() if "│" in line and "live Python objects" in line]


def test_sizes_as_requested_are_said(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    snap = make_snapshot()
    shown = {}
    for sizes in ("pymalloc+glibc", "requested", ""):
        buf = io.StringIO()
        one = dataclasses.replace(snap, heap=dataclasses.replace(snap.heap, sizes=sizes))
        table.render_snapshot(one, ledger(one), top=5, file=buf)
        shown[sizes] = "sizes as requested (debug allocator hooks" in buf.getvalue()
    assert shown == {"pymalloc+glibc": False, "requested": True, "": False}


@pytest.mark.parametrize(("path", "said"), [
    ("task:Task-*/wait_for_reply", "each a root of its own: the tasks running wait_for_reply, together"),
    ("thread:Thread-* (serve)/serve", "each a root of its own: the threads running serve, together"),
    ("plugin_*", "each a root of its own: the modules named plugin_*, together"),
    ("task:Task-1/run", "a root of its own (task:Task-1/run)"),
    ("app.CACHE", "the attribute CACHE of app"),
])
def test_held_as_says_what_roots_alike_are(path: str, said: str) -> None:
    assert table.held_as(path) == said
