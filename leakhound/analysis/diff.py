"""What changed between two snapshots of the same worker: per owner, per type, in total.

Pure arithmetic over two ``Snapshot``s (e.g. two files saved with ``inspect --save``). Types
are matched by name. Owners are matched by what they are, not by the path they were named by:
in two snapshots of one process, the same object (its id() in the target and its type); where
an object is not known (another process, a first-reacher owner), the same path without the
numbers that change while the worker runs (a task's, a line), or, for two objects, the same
names from a module (the name rebound: ``named_binding``); else an owner whose path lies
inside the other's (the owner model's accumulation point moved down or
up the same chain). A renamed owner says its old path in ``renamed_from``. One missing on a side
counts as zero there (it was below that snapshot's top-N or did not exist yet), flagged by
``only_in``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from leakhound.model import Owner, Snapshot
from leakhound.model.growth import enclosing_paths, named_binding, normalized_path

DIFF_SCHEMA = "leakhound.diff/1"


@dataclass(frozen=True)
class Delta:
    name: str
    type: str
    before_bytes: int
    after_bytes: int
    before_count: int  # items for owners, objects for types
    after_count: int
    only_in: str = ""  # "before" | "after" | ""
    renamed_from: str = ""  # an owner's path in the first snapshot, when it was named otherwise

    @property
    def bytes(self) -> int:
        return self.after_bytes - self.before_bytes

    @property
    def count(self) -> int:
        return self.after_count - self.before_count


@dataclass(frozen=True)
class SnapshotDiff:
    before_pid: int
    after_pid: int
    seconds: float
    rss: Delta
    heap: Delta
    trimmable: Delta
    owners: tuple[Delta, ...]
    types: tuple[Delta, ...]
    warnings: tuple[str, ...] = ()

    def per_minute(self, delta: int) -> float:
        return delta * 60.0 / self.seconds if self.seconds > 0 else 0.0


def _match(
    before: dict[str, tuple[str, int, int]], after: dict[str, tuple[str, int, int]]
) -> list[Delta]:
    # Sorted as plain tuples, made Deltas once in order: a file of 700k owners spent 19 s
    # sorting frozen dataclasses by their properties.
    rows = []
    for name in before.keys() | after.keys():
        b, a = before.get(name), after.get(name)
        only = "after" if b is None else "before" if a is None else ""
        type_name, after_bytes, after_count = a or b or ("", 0, 0)
        if a is None:
            after_bytes = after_count = 0
        before_bytes, before_count = (b[1], b[2]) if b is not None else (0, 0)
        rows.append((before_bytes - after_bytes, before_count - after_count, name, type_name,
                     before_bytes, after_bytes, before_count, after_count, only))
    rows.sort()
    return [Delta(name, type_name, before_bytes, after_bytes, before_count, after_count, only)
            for _, _, name, type_name, before_bytes, after_bytes, before_count, after_count, only in rows]


def _enclosed_by(inner: dict[int, Owner], outer: dict[int, Owner]) -> Iterator[tuple[int, int]]:
    """Each owner left in ``inner`` (deepest path first) with the owner left in ``outer`` whose
    path encloses its path, each outer owner once. Lazy: ``outer`` is read as the caller pairs."""
    outer_paths = {normalized_path(o.path): k for k, o in outer.items()}
    for k, o in sorted(inner.items(), key=lambda ko: -len(ko[1].path)):
        for prefix in enclosing_paths(normalized_path(o.path)):
            hit = outer_paths.pop(prefix, None)
            if hit is not None and hit in outer:
                yield k, hit
                break


def _pair_owners(before: tuple[Owner, ...], after: tuple[Owner, ...],
                 same_process: bool) -> list[tuple[Owner | None, Owner | None]]:
    """Owners of the two snapshots paired by identity (see the module's docstring), each once."""
    pairs: list[tuple[Owner | None, Owner | None]] = []
    left_before = dict(enumerate(before))
    left_after = dict(enumerate(after))

    def pair(i: int, j: int) -> None:
        pairs.append((left_before.pop(i), left_after.pop(j)))

    if same_process:
        by_object = {(o.object_id, o.type): i for i, o in left_before.items() if o.object_id}
        for j, o in list(left_after.items()):
            found = by_object.pop((o.object_id, o.type), None) if o.object_id else None
            if found is not None:
                pair(found, j)
    # By path where either object is not known (ids of two processes say nothing): two known
    # objects are two owners, whatever they were named (two short-lived tasks' lists), but
    # for one name from a module rebound to another object of its type (named_binding).
    by_path: dict[str, int] = {}
    for i, o in left_before.items():
        by_path.setdefault(normalized_path(o.path), i)
    for j, o in list(left_after.items()):
        hit = by_path.get(normalized_path(o.path))
        if hit is not None and hit in left_before and not (
                same_process and o.object_id and left_before[hit].object_id
                and not (named_binding(o.path) and left_before[hit].path == o.path
                         and left_before[hit].type == o.type)):
            del by_path[normalized_path(o.path)]
            pair(hit, j)
    # The accumulation point moved along one chain: an owner inside the other's path.
    for j, i in _enclosed_by(left_after, left_before):
        pair(i, j)
    for i, j in _enclosed_by(left_before, left_after):
        pair(i, j)
    pairs.extend((o, None) for o in left_before.values())
    pairs.extend((None, o) for o in left_after.values())
    return pairs


def _owner_deltas(pairs: list[tuple[Owner | None, Owner | None]]) -> list[Delta]:
    rows = []
    for b, a in pairs:
        only = "after" if b is None else "before" if a is None else ""
        named = a or b
        assert named is not None
        before_bytes, before_count = (b.retained_bytes, b.items) if b is not None else (0, 0)
        after_bytes, after_count = (a.retained_bytes, a.items) if a is not None else (0, 0)
        renamed = b.path if a is not None and b is not None and b.path != a.path else ""
        rows.append((before_bytes - after_bytes, before_count - after_count, named.path, named.type,
                     before_bytes, after_bytes, before_count, after_count, only, renamed))
    rows.sort()
    return [Delta(name, type_name, before_bytes, after_bytes, before_count, after_count, only, renamed)
            for _, _, name, type_name, before_bytes, after_bytes, before_count, after_count, only, renamed in rows]


def diff_snapshots(before: Snapshot, after: Snapshot) -> SnapshotDiff:
    """``after`` minus ``before``; owners and types sorted by bytes gained, biggest first."""
    warnings = []
    if before.pid != after.pid:
        warnings.append(f"snapshots are of different processes ({before.pid} and {after.pid})")
    if after.taken_at < before.taken_at:
        warnings.append("the second snapshot is older than the first")
    if before.heap.owner_model != after.heap.owner_model:
        warnings.append(f"owners found by two models ({before.heap.owner_model} and {after.heap.owner_model}): "
                        "their owners are not the same places, compare the heap and types")
    measures = (before.heap.sizes or "requested", after.heap.sizes or "requested")
    if measures[0] != measures[1]:
        # a snapshot of a payload from before the blocks (or with debug hooks) against one with
        # them: every small object's bytes differ by the allocator's rounding (ints 10%,
        # floats 20%, 3-tuples 31%) with nothing in the heap changed
        warnings.append(f"sizes measured two ways (before: {measures[0]}, after: {measures[1]}): "
                        "byte changes include the change of measure, compare counts")
    same_process = before.pid == after.pid and before.python_version == after.python_version
    owners = _owner_deltas(_pair_owners(before.owners, after.owners, same_process))
    types = _match(
        {t.type: (t.type, t.bytes, t.count) for t in before.types},
        {t.type: (t.type, t.bytes, t.count) for t in after.types},
    )
    return SnapshotDiff(
        before_pid=before.pid,
        after_pid=after.pid,
        seconds=after.taken_at - before.taken_at,
        rss=Delta("rss", "", before.process.rss_bytes, after.process.rss_bytes, 0, 0),
        heap=Delta("live heap", "", before.heap.bytes, after.heap.bytes,
                   before.heap.objects, after.heap.objects),
        trimmable=Delta("trimmable", "", before.arena.trimmable_bytes, after.arena.trimmable_bytes, 0, 0),
        owners=tuple(owners),
        types=tuple(types),
        warnings=tuple(warnings),
    )


def _delta_dict(d: Delta, diff: SnapshotDiff) -> dict[str, Any]:
    # Its fields by hand, not asdict(): asdict deep-copies every value (half the time of a
    # large diff's --json).
    return {
        "name": d.name, "type": d.type, "before_bytes": d.before_bytes, "after_bytes": d.after_bytes,
        "before_count": d.before_count, "after_count": d.after_count, "only_in": d.only_in,
        "renamed_from": d.renamed_from,
        "bytes": d.bytes,
        "count": d.count,
        "bytes_per_min": round(diff.per_minute(d.bytes), 1),
    }


def diff_to_dict(diff: SnapshotDiff) -> dict[str, Any]:
    return {
        "schema": DIFF_SCHEMA,
        "before_pid": diff.before_pid,
        "after_pid": diff.after_pid,
        "seconds": round(diff.seconds, 3),
        "rss": _delta_dict(diff.rss, diff),
        "heap": _delta_dict(diff.heap, diff),
        "trimmable": _delta_dict(diff.trimmable, diff),
        "owners": [_delta_dict(d, diff) for d in diff.owners],
        "types": [_delta_dict(d, diff) for d in diff.types],
        "warnings": list(diff.warnings),
    }
