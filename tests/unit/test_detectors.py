from __future__ import annotations

from leakhound.analysis.detectors import arena_fragmentation, cyclic_garbage, run_detectors
from leakhound.analysis.ledger import ledger
from leakhound.model import ArenaStats, CyclicGarbage, HeapStats, Snapshot, TypeStat
from tests.factories import MB, make_snapshot


def test_trimmable_glibc_memory_is_critical_with_fix_trim() -> None:
    (finding,) = arena_fragmentation.detect(make_snapshot())
    assert finding.kind == "arena_fragmentation"
    assert finding.severity == "critical"
    assert finding.fix == "trim"
    assert finding.bytes == 140 * MB
    assert "140.0 MiB" in finding.summary and "3.0x the live heap" in finding.summary


def test_pymalloc_free_space_is_reported_without_a_trim_fix() -> None:
    arena = ArenaStats(malloc_in_use_bytes=0, malloc_free_bytes=0, trimmable_bytes=0, pymalloc_free_bytes=90 * MB)
    (finding,) = arena_fragmentation.detect(make_snapshot(arena=arena))
    assert finding.severity == "info"
    assert finding.fix == ""


def test_no_fragmentation_finding_on_a_tight_heap() -> None:
    arena = ArenaStats(malloc_in_use_bytes=0, malloc_free_bytes=MB, trimmable_bytes=MB, pymalloc_free_bytes=MB)
    assert arena_fragmentation.detect(make_snapshot(arena=arena)) == []


def test_missing_allocator_stats_is_a_skipped_finding() -> None:
    arena = ArenaStats(0, 0, 0, 0, available=False, reason="no glibc")
    (finding,) = arena_fragmentation.detect(make_snapshot(arena=arena))
    assert finding.skipped
    assert "no glibc" in finding.summary


def test_cyclic_garbage_names_the_types() -> None:
    garbage = CyclicGarbage(objects=6000, bytes=2 * MB, types=(TypeStat("app.Node", 4000, MB),))
    (finding,) = cyclic_garbage.detect(make_snapshot(cyclic_garbage=garbage))
    assert finding.severity == "warning"
    assert finding.count == 6000
    assert "app.Node x4000" in finding.summary


def test_findings_are_ordered_by_severity_then_bytes() -> None:
    garbage = CyclicGarbage(objects=10, bytes=100, types=())
    kinds = [f.severity for f in run_detectors(make_snapshot(cyclic_garbage=garbage))]
    assert kinds == sorted(kinds, key=["critical", "warning", "info", "skipped"].index)


def test_ledger_rows_add_up_to_rss() -> None:
    rows = {row.name: row.bytes for row in ledger(make_snapshot())}
    total = sum(v for k, v in rows.items() if not k.startswith("  "))
    assert total == 300 * MB
    assert rows["live Python objects"] == 100 * MB


def test_sqlites_bytes_its_connections_owners_hold_leave_its_row() -> None:
    """SQLite's own count (its row) less what it counts for the connections sized natively
    (under their owners, in the native buffers row): no byte twice, the rows still RSS."""
    from dataclasses import replace

    from leakhound.analysis.detectors import native_state

    arena = ArenaStats(malloc_in_use_bytes=0, malloc_free_bytes=MB, trimmable_bytes=0, pymalloc_free_bytes=MB,
                       sqlite_bytes=80 * MB)
    heap = HeapStats(objects=1, bytes=100 * MB, census_seconds=1.0, max_pause_ms=1.0, native_bytes=70 * MB,
                     native_sqlite_bytes=70 * MB)
    types = (TypeStat("sqlite3.Connection", 100, 22_000),)
    snap = make_snapshot(arena=arena, heap=heap, types=types)
    rows = {row.name: row.bytes for row in ledger(snap)}
    assert (rows["SQLite"], rows["native buffers"]) == (10 * MB, 70 * MB), rows
    assert sum(v for k, v in rows.items() if not k.startswith("  ")) == 300 * MB
    # the finding says SQLite's bytes in no owner, and nothing under 32 MiB of them
    assert native_state.detect(snap) == []
    unsized = replace(snap, heap=replace(heap, native_bytes=0, native_sqlite_bytes=0))
    (finding,) = native_state.detect(unsized)
    assert finding.bytes == 80 * MB


def test_ssl_contexts_sized_are_no_longer_called_unmeasured() -> None:
    """Where the graph's walk sized OpenSSL's contexts (``heap.native_ssl_bytes``), the finding
    leaves them out; unsized (the census's walk), it names them while "other" is big."""
    from dataclasses import replace

    from leakhound.analysis.detectors import native_state

    heap = HeapStats(objects=1, bytes=100 * MB, census_seconds=1.0, max_pause_ms=1.0)
    types = (TypeStat("ssl.SSLContext", 60, 60 * 144), TypeStat("_ssl._SSLSocket", 5, 5 * 300))
    snap = make_snapshot(heap=heap, types=types)  # (its ledger's "other": 100 MB)
    (finding,) = native_state.detect(snap)
    assert finding.count == 65 and "60 ssl.SSLContext" in finding.summary, finding
    sized = replace(snap, heap=replace(heap, native_bytes=50 * MB, native_ssl_bytes=50 * MB),
                    types=(TypeStat("ssl.SSLContext", 60, 50 * MB), TypeStat("_ssl._SSLSocket", 50, MB)))
    assert native_state.detect(sized) == []  # (the sockets too: scanned with the contexts)


def test_a_census_under_pause_budget_says_what_it_did_not_look_at() -> None:
    heap = HeapStats(objects=1_000_000, bytes=100 * MB, census_seconds=0.5, max_pause_ms=12.0,
                     unreached_examined=False, unreached_note="over the 50 ms pause budget")
    snap = make_snapshot(heap=heap, cyclic_garbage=CyclicGarbage(objects=0, bytes=0))
    (finding,) = cyclic_garbage.detect(snap)
    assert finding.severity == "skipped" and "50 ms pause budget" in finding.summary
    live = next(row for row in ledger(snap) if row.name == "live Python objects")
    assert "named roots only" in live.note


def test_a_saved_snapshot_is_re_analysed_from_its_facts() -> None:
    """Findings are a pure function of the snapshot (capture runs them once it is complete), so
    a file saved without findings, or by an older leakhound, gets today's findings on load."""
    import json

    from leakhound.analysis.detectors import analyse
    from leakhound.model import snapshot_from_json, snapshot_to_json
    from tests.unit.test_verifiers_detectors import OWNERS, _probe

    snap = make_snapshot(probes={"verifiers": _probe()}, owners=OWNERS)
    expected = run_detectors(snap)
    assert {f.kind for f in expected} >= {"arena_fragmentation", "registry", "intercepts", "steps"}
    doc = json.loads(snapshot_to_json(snap))
    assert doc["findings"] == []
    assert analyse(snapshot_from_json(json.dumps(doc))).findings == expected
    # Stale findings in a file are replaced, not kept beside the new ones.
    doc["findings"] = [{"kind": "step_bloat", "severity": "critical", "bytes": 1, "count": 1, "owner": "",
                        "fix": "steps", "summary": "old"}]
    assert analyse(snapshot_from_json(json.dumps(doc))).findings == expected


def test_objects_holding_a_c_librarys_memory_are_named_when_other_is_big() -> None:
    """100 ``ssl.SSLContext`` and 60 MiB of RSS in no row: the finding names them, what they
    hold and how to find who holds them, and says no bytes (none were measured)."""
    from leakhound.analysis.detectors import native_state
    from leakhound.payload.wire import OPAQUE_NATIVE_TYPES

    assert set(native_state.HOLDS) == set(OPAQUE_NATIVE_TYPES)
    arena = ArenaStats(malloc_in_use_bytes=0, malloc_free_bytes=MB, trimmable_bytes=0, pymalloc_free_bytes=MB)
    types = (TypeStat("str", 600_000, 70 * MB), TypeStat("ssl.SSLContext", 100, 14_400),
             TypeStat("pyexpat.xmlparser", 3, 300))
    snap = make_snapshot(arena=arena, types=types)  # RSS 300 MiB, 100 MiB live: 198 MiB "other"
    (finding,) = native_state.detect(snap)
    assert (finding.severity, finding.bytes, finding.count) == ("info", 0, 103)
    assert "100 ssl.SSLContext (OpenSSL's context" in finding.summary
    assert finding.summary.endswith("--why ssl.SSLContext")
    # none of those types, or little memory outside the heap: nothing to say
    assert native_state.detect(make_snapshot(arena=arena)) == []
    # an HTTP client's two contexts are a program's usual few, however big "other" is
    few = (TypeStat("str", 600_000, 70 * MB), TypeStat("ssl.SSLContext", 2, 288))
    assert native_state.detect(make_snapshot(arena=arena, types=few)) == []
    small = make_snapshot(arena=arena, types=types, heap=HeapStats(objects=1, bytes=290 * MB, census_seconds=1.0,
                                                                     max_pause_ms=1.0))
    assert native_state.detect(small) == []


def test_tracemalloc_tracing_is_a_ledger_row_and_a_finding() -> None:
    """tracemalloc's tables (read in the target) are their own ledger row, out of "other", and a
    finding: a warning from 64 MiB or 10% of RSS, info under, nothing when it is not tracing."""
    from leakhound.analysis.detectors import tracemalloc_on
    from leakhound.analysis.ledger import TRACEMALLOC, ledger

    def with_traces(n: int) -> Snapshot:
        return make_snapshot(arena=ArenaStats(malloc_in_use_bytes=0, malloc_free_bytes=MB, trimmable_bytes=0,
                                              pymalloc_free_bytes=MB, tracemalloc_bytes=n))

    snap = with_traces(70 * MB)  # RSS 300 MiB
    rows = {row.name: row.bytes for row in ledger(snap)}
    before = {row.name: row.bytes for row in ledger(with_traces(0))}
    assert rows[TRACEMALLOC] == 70 * MB and TRACEMALLOC not in before
    assert rows["other"] == before["other"] - 70 * MB
    (finding,) = tracemalloc_on.detect(snap)
    assert (finding.severity, finding.bytes, finding.owner) == ("warning", 70 * MB, "<tracemalloc>")
    assert "tracemalloc.stop()" in finding.summary
    assert tracemalloc_on.detect(with_traces(2 * MB))[0].severity == "info"
    assert tracemalloc_on.detect(with_traces(0)) == []
