"""A large snapshot file, as a long-running worker's `inspect --save --top 1000` of many
owners with retainers and many types grows to (tests of show and diff on big files)."""

from __future__ import annotations

from pathlib import Path

from leakhound.model import Owner, TypeStat, snapshot_to_json
from tests.factories import make_snapshot


def write_large_snapshot(path: Path, *, owners: int, grown: int = 0) -> int:
    """Write it; ``grown`` adds that many bytes to every owner (an "after" file). Its size."""
    rows = tuple(
        Owner(f"__main__.WORKER.runtime.trajectories['{i:08d}'].steps[{i % 50}].response", "dict", i % 1000,
              1000 + i + grown, 10 + i % 100,
              (f"__main__.WORKER.runtime.trajectories['{i:08d}']", f"task:Task-{i}/run (worker.py:{i % 500})"))
        for i in range(owners)
    )
    types = tuple(TypeStat(f"module_{i % 1000}.Class_{i}", i, i * 64) for i in range(owners // 2))
    path.write_text(snapshot_to_json(make_snapshot(owners=rows, types=types)))
    return path.stat().st_size
