"""Snapshots built by hand for unit tests of analysis and rendering."""

from __future__ import annotations

from typing import Any

from leakhound.model import ArenaStats, CyclicGarbage, HeapStats, Owner, ProcessStats, Snapshot, TypeStat

MB = 1024 * 1024


def make_snapshot(**overrides: Any) -> Snapshot:
    fields: dict[str, Any] = {
        "pid": 4242,
        "taken_at": 1_800_000_000.0,
        "python_version": "3.11.7",
        "method": "gdb",
        "leakhound_version": "0.1.0",  # pinned: exact-output tests must not change with a release
        "process": ProcessStats(
            rss_bytes=300 * MB, uss_bytes=290 * MB, pss_bytes=295 * MB, swap_bytes=0, num_threads=3,
            name="python", cmdline="python worker.py",
        ),
        "heap": HeapStats(objects=1_000_000, bytes=100 * MB, census_seconds=1.25, max_pause_ms=12.0),
        "arena": ArenaStats(
            malloc_in_use_bytes=60 * MB, malloc_free_bytes=150 * MB, trimmable_bytes=140 * MB,
            pymalloc_free_bytes=5 * MB,
        ),
        "types": (TypeStat("str", 600_000, 70 * MB), TypeStat("dict", 10_000, 20 * MB)),
        "owners": (
            Owner("__main__.WORKER.runtime.trajectories", "dict", 48, 60 * MB, 300_000),
            Owner("__main__.CACHE", "dict", 1000, 10 * MB, 2001),
        ),
        "cyclic_garbage": CyclicGarbage(objects=0, bytes=0),
        "probes": {"verifiers": {"skipped": "no verifiers v1 runtime in this process"}},
    }
    fields.update(overrides)
    return Snapshot(**fields)
