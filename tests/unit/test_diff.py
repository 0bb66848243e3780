"""Snapshot diff on hand-built snapshots: exact deltas, ordering and the JSON document."""

from __future__ import annotations

from leakhound.analysis.diff import DIFF_SCHEMA, diff_snapshots, diff_to_dict
from leakhound.model import (
    ArenaStats,
    CyclicGarbage,
    HeapStats,
    Owner,
    ProcessStats,
    Snapshot,
    TypeStat,
)


def _snap(t: float, rss: int, owners: list[Owner], types: list[TypeStat], *, pid: int = 10) -> Snapshot:
    return Snapshot(
        pid=pid,
        taken_at=t,
        python_version="3.11.7",
        method="gdb",
        process=ProcessStats(rss_bytes=rss, uss_bytes=0, pss_bytes=0, swap_bytes=0, num_threads=1, name="w"),
        heap=HeapStats(objects=sum(x.count for x in types), bytes=sum(x.bytes for x in types),
                       census_seconds=0.1, max_pause_ms=1.0),
        arena=ArenaStats(malloc_in_use_bytes=0, malloc_free_bytes=0, trimmable_bytes=100,
                         pymalloc_free_bytes=0),
        types=tuple(types),
        owners=tuple(owners),
        cyclic_garbage=CyclicGarbage(objects=0, bytes=0),
    )


BEFORE = _snap(
    1000.0, 50_000_000,
    [Owner("__main__.SESSIONS", "dict", 1000, 300_000), Owner("__main__.TABLE", "dict", 60_000, 17_000_000),
     Owner("m.GONE", "list", 5, 4000)],
    [TypeStat("str", 10_000, 1_000_000), TypeStat("dict", 100, 50_000)],
)
AFTER = _snap(
    1120.0, 56_000_000,
    [Owner("__main__.SESSIONS", "dict", 21_000, 6_300_000), Owner("__main__.TABLE", "dict", 60_000, 17_000_000),
     Owner("m.NEW", "set", 3, 900)],
    [TypeStat("str", 50_000, 5_000_000), TypeStat("dict", 100, 50_000), TypeStat("m.Node", 7, 700)],
)


def test_owners_sorted_by_growth_with_exact_deltas() -> None:
    diff = diff_snapshots(BEFORE, AFTER)
    assert diff.seconds == 120.0
    assert [(d.name, d.bytes, d.count, d.only_in) for d in diff.owners] == [
        ("__main__.SESSIONS", 6_000_000, 20_000, ""),
        ("m.NEW", 900, 3, "after"),
        ("__main__.TABLE", 0, 0, ""),
        ("m.GONE", -4000, -5, "before"),
    ]
    assert diff.per_minute(diff.owners[0].bytes) == 3_000_000.0
    assert (diff.rss.bytes, diff.heap.bytes, diff.trimmable.bytes) == (6_000_000, 4_000_700, 0)
    assert [(d.name, d.count) for d in diff.types][:2] == [("str", 40_000), ("m.Node", 7)]
    assert diff.warnings == ()


def test_json_document() -> None:
    doc = diff_to_dict(diff_snapshots(BEFORE, AFTER))
    assert doc["schema"] == DIFF_SCHEMA
    assert doc["owners"][0] == {
        "name": "__main__.SESSIONS", "type": "dict", "before_bytes": 300_000, "after_bytes": 6_300_000,
        "before_count": 1000, "after_count": 21_000, "only_in": "", "renamed_from": "", "bytes": 6_000_000,
        "count": 20_000,
        "bytes_per_min": 3_000_000.0,
    }
    assert doc["rss"]["bytes_per_min"] == 3_000_000.0


def test_different_processes_and_reversed_order_warn() -> None:
    other = _snap(900.0, 1, [], [], pid=11)
    diff = diff_snapshots(BEFORE, other)
    assert len(diff.warnings) == 2


def test_sizes_measured_two_ways_warn() -> None:
    import dataclasses

    blocks = dataclasses.replace(AFTER, heap=dataclasses.replace(AFTER.heap, sizes="pymalloc+glibc"))
    assert not diff_snapshots(BEFORE, AFTER).warnings  # "" is an older payload's: as requested
    assert not diff_snapshots(dataclasses.replace(BEFORE, heap=blocks.heap), blocks).warnings
    (warning,) = diff_snapshots(BEFORE, blocks).warnings
    assert "sizes measured two ways (before: requested, after: pymalloc+glibc)" in warning, warning


def test_a_delta_as_json_has_every_field_of_the_delta() -> None:
    from dataclasses import fields

    from leakhound.analysis.diff import Delta, diff_snapshots, diff_to_dict
    from tests.factories import make_snapshot

    doc = diff_to_dict(diff_snapshots(make_snapshot(), make_snapshot(taken_at=1_800_000_060.0)))
    assert set(doc["owners"][0]) == {f.name for f in fields(Delta)} | {"bytes", "count", "bytes_per_min"}


def test_an_owner_renamed_between_snapshots_is_the_same_owner() -> None:
    # The same dict (same id in the same process) named by another preferred path after: one
    # owner that grew by 3 MB, not one "only before" and one "only after" of their whole sizes.
    before = _snap(1000.0, 50_000_000, [Owner("m.client._event_hooks", "dict", 10, 1_000_000, object_id=0xA0),
                                       Owner("m.TABLE", "dict", 5, 700, object_id=0xB0),
                                       Owner("m.CACHE", "dict", 5, 700)], [])
    after = _snap(1060.0, 53_000_000, [Owner("m.RECORDER.responses", "dict", 40, 4_000_000, object_id=0xA0),
                                      Owner("m.TABLE", "dict", 6, 800, object_id=0xB1),
                                      Owner("m.CACHE", "dict", 6, 900, object_id=0xC0)], [])
    diff = diff_snapshots(before, after)
    assert [(d.name, d.bytes, d.only_in, d.renamed_from) for d in diff.owners] == [
        ("m.RECORDER.responses", 3_000_000, "", "m.client._event_hooks"),
        ("m.CACHE", 200, "", ""),  # an object not known on one side: matched by its path
        ("m.TABLE", 100, "", ""),  # another object by the same name (rebuilt and rebound): that name's
    ]
    assert diff_to_dict(diff)["owners"][0]["renamed_from"] == "m.client._event_hooks"


def test_two_objects_by_one_name_are_one_owner_but_not_by_one_position_or_task() -> None:
    before = _snap(1000.0, 1, [Owner("m.HISTORY", "m.Entry", 40, 4_000, object_id=1),
                               Owner("m.QUEUES[]", "list", 5, 500, object_id=2),
                               Owner("task:Task-3/run.rows", "list", 5, 500, object_id=3)], [])
    after = _snap(1060.0, 1, [Owner("m.HISTORY", "m.Entry", 90, 9_000, object_id=4),
                              Owner("m.QUEUES[]", "list", 6, 600, object_id=5),
                              Owner("task:Task-3/run.rows", "list", 6, 600, object_id=6)], [])
    rows = [(d.name, d.bytes, d.only_in) for d in diff_snapshots(before, after).owners]
    assert ("m.HISTORY", 5_000, "") in rows  # a linked list's new head: the list grew
    assert ("m.QUEUES[]", 600, "after") in rows and ("task:Task-3/run.rows", 600, "after") in rows


def test_ids_match_only_within_one_process_and_an_owner_moving_down_its_chain_is_matched() -> None:
    before = _snap(1000.0, 1, [Owner("m.A", "dict", 1, 100, object_id=7),
                               Owner("task:Task-3/run.<W>.runtime", "m.Runtime", 1, 5_000, object_id=8)], [])
    after = _snap(1060.0, 1, [Owner("m.B", "dict", 1, 100, object_id=7),
                              Owner("task:Task-9/run.<W>.runtime.trajectories", "dict", 9, 9_000, object_id=9)],
                  [], pid=11)
    diff = diff_snapshots(before, after)
    rows = {d.name: (d.bytes, d.only_in, d.renamed_from) for d in diff.owners}
    assert rows["task:Task-9/run.<W>.runtime.trajectories"] == (4_000, "", "task:Task-3/run.<W>.runtime")
    assert rows["m.B"] == (100, "after", "") and rows["m.A"] == (-100, "before", "")
