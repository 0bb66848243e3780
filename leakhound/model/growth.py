"""What watching a process over time yields: samples, trends and the growth report, with their JSON.

Frozen, like the snapshot model; ``leakhound.analysis.growth`` computes them.
"""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from leakhound.model.names import EndedHow
from leakhound.model.snapshot import Finding, SiteTracking, Snapshot, TypeStat


class Verdict(str, enum.Enum):
    """How a series moved over the window (docs/watch.md)."""

    GROWING = "growing"  # grew by more than noise and still grows at the end (a leak)
    PLATEAUED = "plateaued"  # grew, then stopped (a bounded cache that filled up)
    STATIC = "static"  # did not grow by more than noise
    UNKNOWN = "unknown"  # too few samples to tell

    def __str__(self) -> str:
        return self.value


GROWING = Verdict.GROWING
PLATEAUED = Verdict.PLATEAUED
STATIC = Verdict.STATIC
UNKNOWN = Verdict.UNKNOWN


# "(worker.py:123)" in task and thread owners: the line a coroutine or frame is at right now.
_LINE = re.compile(r"\(([^()]*?):\d+\)")
# asyncio's and threading's automatic names: a new number for every task or thread started.
_AUTO_NAME = re.compile(r"\b(Task|Thread|ThreadPoolExecutor)-\d+(?:_\d+)?\b")


def normalized_path(path: str) -> str:
    """An owner path without what changes while the worker runs (a coroutine's line, the
    number asyncio or threading gave a task or thread):
    ``task:Task-7/run (worker.py:123).x`` -> ``task:Task-*/run (worker.py).x``."""
    return _AUTO_NAME.sub(r"\1-*", _LINE.sub(r"(\1)", path))


def named_binding(path: str) -> bool:
    """Whether ``path`` names its object by names alone, from a module: attributes and keys
    (``app.state.history``, ``REGISTRY['x']``), no position in a collection, no task, thread
    or object held from C. What such a name holds is one owner whichever object it is now (a
    linked list's new head, a table rebuilt and rebound): what watch and diff follow."""
    return not path.startswith("<") and not in_a_frame(path) and "[]" not in path and "<" not in path


def followed_by_steps(path: str, steps: tuple[str, ...]) -> bool:
    """Whether watch's samples follow the owner named ``path`` by its ``steps``
    (``Owner.path_steps``) whatever object each step holds now: from a module, each step an
    attribute, a str key, an instance's ``__dict__`` or the one referent of a type (a C field:
    ``EXTRA['df']._mgr.<tuple>[].<ndarray>``). Such a path is one owner whichever object it
    names, as a ``named_binding``'s (a DataFrame concatenated anew)."""
    return (bool(steps) and not path.startswith("<") and not in_a_frame(path)
            and all(s == "d" or (len(s) > 1 and s[0] in "ak=") for s in steps))


def in_a_frame(path: str) -> bool:
    """Whether ``path`` starts at a thread's frame or a task's coroutine: held only while
    that call runs."""
    return path.startswith(("task:", "thread:"))


SHARED_PREFIX = "<shared by "
_MORE_PARTS = re.compile(r" and \d+ more$")


def shared_parts(path: str) -> tuple[str, ...]:
    """The parts a shared owner is named by (``<shared by A, B and 2 more>``: A, B); () for
    any other owner."""
    if not (path.startswith(SHARED_PREFIX) and path.endswith(">")):
        return ()
    return tuple(_MORE_PARTS.sub("", path[len(SHARED_PREFIX):-1]).split(", "))


def enclosing_paths(path: str) -> list[str]:
    """The owner paths ``path`` extends (cut before each ``.`` or ``[``), longest first."""
    return [path[:i] for i in range(len(path) - 1, 0, -1) if path[i] in ".["]


@dataclass(frozen=True)
class OwnerSample:
    """One owner at one moment. ``estimated`` is True when ``bytes`` was scaled from the item
    count measured now and the bytes per item of the last full snapshot. ``object_id``: the
    owner object's id() in the target (dominator owners; 0: not known), what matches it
    across samples whatever path it was named by. ``by_steps``: its path is followed whatever
    object each step holds now (``followed_by_steps``): one owner however often rebound."""

    path: str
    type: str
    items: int
    bytes: int
    estimated: bool = False
    object_id: int = 0
    by_steps: bool = False


@dataclass(frozen=True)
class Sample:
    """What one watch tick saw in one process.

    ``full`` samples come from a complete census (``sample_from_snapshot``); cheap samples carry
    only the kernel's RSS, or RSS plus the item counts of known owners and gc-tracked type
    counts (``heap_bytes`` is then None).
    """

    pid: int
    taken_at: float
    rss_bytes: int
    heap_bytes: int | None = None
    owners: tuple[OwnerSample, ...] = ()
    types: tuple[TypeStat, ...] = ()
    full: bool = False
    name: str = ""
    method: str = ""
    pause_ms: float = 0.0
    # "all" (census: every object), "tracked" (gc-tracked objects only) or "" (none).
    types_scope: str = ""
    # How its owners were found: "dominator" or "first-reacher" (a cheap sample: its
    # reference's), "" when it has none (RSS only, files of before).
    owner_model: str = ""
    # Unreachable objects kept alive by cycles (full samples whose census looked; else None).
    cyclic_garbage_bytes: int | None = None
    cyclic_garbage_objects: int = 0
    # Owners of the reference a cheap sample could not find again by their ids (the path
    # from the root no longer leads to that object): left out, never another object counted
    # in their place.
    unresolved: tuple[str, ...] = ()


@dataclass(frozen=True)
class Trend:
    """How one series (an owner, RSS, live heap or a type) moved over the window."""

    name: str
    kind: str  # owner | rss | heap | type | cyclic_garbage
    verdict: str
    bytes_per_min: float
    items_per_min: float
    recent_bytes_per_min: float
    recent_items_per_min: float
    first_bytes: int
    last_bytes: int
    first_items: int
    last_items: int
    points: int
    seconds: float
    type: str = ""
    # The other paths the same owner (its object_id, else its normalized path) was named by
    # in earlier samples; ``name`` is the latest.
    was: tuple[str, ...] = ()
    # The owner this one lies inside (its path extends that one's; never owners in the same
    # census): of the two, one growth finding. "" if none.
    within: str = ""
    # The --fix a detector of the last full snapshot recommends for this owner (or the shape
    # it lies in or holds); "" if none.
    fix: str = ""


@dataclass(frozen=True)
class GrowthReport:
    pid: int
    name: str
    samples: int
    full_samples: int
    seconds: float
    rss: Trend
    heap: Trend | None
    owners: tuple[Trend, ...]
    types: tuple[Trend, ...]
    findings: tuple[Finding, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    # Unreachable objects kept alive by cycles, over the full samples that looked for them.
    cyclic_garbage: Trend | None = None
    # The owner model its owners were followed in ("dominator", "first-reacher",
    # "not-attributed", ""), and with "not-attributed" why (names.NotAttributed).
    owner_model: str = ""
    owner_model_reason: str = ""
    # watch --sites: the allocation-site tracker's totals (the sites are on the growth findings).
    sites: SiteTracking | None = None

    @property
    def verdict(self) -> str:
        """The process as a whole, from its owners; RSS decides only when it keeps growing and
        no owner does (a leak outside Python objects). A one-off RSS step (e.g. the census's
        own working memory, which glibc keeps) does not make a static process plateaued."""
        verdicts = {t.verdict for t in self.owners}
        if self.cyclic_garbage is not None:
            verdicts.add(self.cyclic_garbage.verdict)
        if GROWING in verdicts or self.rss.verdict == GROWING:
            return GROWING
        if PLATEAUED in verdicts:
            return PLATEAUED
        if self.rss.verdict == UNKNOWN:
            return UNKNOWN
        return STATIC


@dataclass(frozen=True)
class TargetEnded:
    """A watched process that ended during the watch, and how (leakhound.attach.death)."""

    pid: int
    name: str
    how: EndedHow
    message: str
    signal: int | None = None
    exit_status: int | None = None


def sample_from_snapshot(snapshot: Snapshot) -> Sample:
    examined = snapshot.heap.unreached_examined
    return Sample(
        pid=snapshot.pid,
        taken_at=snapshot.taken_at,
        rss_bytes=snapshot.process.rss_bytes,
        heap_bytes=snapshot.heap.bytes,
        owners=tuple(
            OwnerSample(path=o.path, type=o.type, items=o.items, bytes=o.retained_bytes, object_id=o.object_id,
                        by_steps=followed_by_steps(o.path, o.path_steps))
            for o in snapshot.owners
        ),
        types=snapshot.types,
        full=True,
        name=snapshot.process.name,
        method=snapshot.method,
        pause_ms=snapshot.heap.max_pause_ms,
        types_scope="all",
        owner_model=snapshot.heap.owner_model,
        cyclic_garbage_bytes=snapshot.cyclic_garbage.bytes if examined else None,
        cyclic_garbage_objects=snapshot.cyclic_garbage.objects if examined else 0,
    )


def sample_to_dict(sample: Sample) -> dict[str, Any]:
    return asdict(sample)


def sample_from_dict(doc: dict[str, Any]) -> Sample:
    return Sample(
        pid=int(doc["pid"]),
        taken_at=float(doc["taken_at"]),
        rss_bytes=int(doc["rss_bytes"]),
        heap_bytes=None if doc.get("heap_bytes") is None else int(doc["heap_bytes"]),
        owners=tuple(OwnerSample(**o) for o in doc.get("owners", ())),
        types=tuple(TypeStat(**t) for t in doc.get("types", ())),
        full=bool(doc.get("full", False)),
        name=str(doc.get("name", "")),
        method=str(doc.get("method", "")),
        pause_ms=float(doc.get("pause_ms", 0.0)),
        types_scope=str(doc.get("types_scope", "")),
        owner_model=str(doc.get("owner_model", "")),
        cyclic_garbage_bytes=None if doc.get("cyclic_garbage_bytes") is None else int(doc["cyclic_garbage_bytes"]),
        cyclic_garbage_objects=int(doc.get("cyclic_garbage_objects", 0)),
        unresolved=tuple(str(p) for p in doc.get("unresolved", ())),
    )


def trend_to_dict(t: Trend) -> dict[str, Any]:
    out = asdict(t)
    out["was"] = list(t.was)
    for key in ("bytes_per_min", "items_per_min", "recent_bytes_per_min", "recent_items_per_min", "seconds"):
        out[key] = round(out[key], 3)
    return out


def report_to_dict(report: GrowthReport) -> dict[str, Any]:
    return {
        "pid": report.pid,
        "name": report.name,
        "verdict": report.verdict,
        "samples": report.samples,
        "full_samples": report.full_samples,
        "seconds": round(report.seconds, 3),
        "rss": trend_to_dict(report.rss),
        "heap": None if report.heap is None else trend_to_dict(report.heap),
        "owners": [trend_to_dict(t) for t in report.owners],
        "types": [trend_to_dict(t) for t in report.types],
        "cyclic_garbage": None if report.cyclic_garbage is None else trend_to_dict(report.cyclic_garbage),
        "owner_model": report.owner_model,
        "owner_model_reason": report.owner_model_reason,
        "findings": [asdict(f) for f in report.findings],
        "warnings": list(report.warnings),
        "sites": None if report.sites is None else asdict(report.sites),
    }
