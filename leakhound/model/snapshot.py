"""The snapshot model: what one inspection of one process saw.

Every report, diff, plot and metric is computed from these frozen dataclasses, so a
snapshot saved with ``--save`` can be re-analysed offline. JSON (de)serialisation lives
here and nowhere else; the schema is documented in ``docs/snapshot-schema.md``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SNAPSHOT_SCHEMA = "leakhound.snapshot/1"


class SchemaError(ValueError):
    """A document is not a leakhound snapshot this version can read."""


@dataclass(frozen=True)
class ProcessStats:
    """Kernel-side memory of the target, read with psutil from outside."""

    rss_bytes: int
    uss_bytes: int
    pss_bytes: int
    swap_bytes: int
    num_threads: int
    name: str = ""
    cmdline: str = ""


@dataclass(frozen=True)
class HeapStats:
    """The census of live Python objects and what taking it cost."""

    objects: int
    bytes: int
    census_seconds: float
    max_pause_ms: float
    gc_tracked: int = 0
    untracked: int = 0
    payload_peak_bytes: int = 0
    # "compiled" (the C walk, payload/_walk.c) or "python" (its pure-Python twin)
    walker: str = ""
    # False when a pause budget ruled out listing every gc-tracked object: then objects no
    # named root reaches (held from C, cyclic garbage) were not looked for; the note says why.
    unreached_examined: bool = True
    unreached_note: str = ""


@dataclass(frozen=True)
class ArenaStats:
    """Allocator state: glibc (mallinfo2/malloc_info) and pymalloc, measured in the target.

    ``available`` is False when the target has no glibc or no pymalloc; the reason says why.
    """

    malloc_in_use_bytes: int
    malloc_free_bytes: int
    trimmable_bytes: int
    pymalloc_free_bytes: int
    pymalloc_in_use_bytes: int = 0
    pymalloc_arenas: int = 0
    malloc_mmapped_bytes: int = 0
    available: bool = True
    reason: str = ""


@dataclass(frozen=True)
class TypeStat:
    type: str
    count: int
    bytes: int


@dataclass(frozen=True)
class Owner:
    """A named root (module global, class attribute, attribute chain, thread frame) and what
    it retains. Every object is attributed to exactly one owner, so owners never double count."""

    path: str
    type: str
    items: int
    retained_bytes: int
    retained_objects: int = 0


@dataclass(frozen=True)
class CyclicGarbage:
    """Objects alive only because they sit in reference cycles the GC has not collected."""

    objects: int
    bytes: int
    types: tuple[TypeStat, ...] = ()


@dataclass(frozen=True)
class Finding:
    """A recognised problem. ``severity`` is ``info|warning|critical`` or ``skipped`` when the
    detector could not check (``summary`` then says why)."""

    kind: str
    severity: str
    bytes: int
    count: int
    owner: str
    fix: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def skipped(self) -> bool:
        return self.severity == "skipped"


@dataclass(frozen=True)
class PatchOutcome:
    """What one fix did in one process: its status and the number it moved.

    ``status``: applied, already-applied, would-apply (dry run), reverted, not-applied,
    refused. ``before``/``after`` are the fix's declared ``metric`` measured in the target.
    """

    fix: str
    pid: int
    status: str
    metric: str = ""
    before: float | None = None
    after: float | None = None
    effect: str = ""
    reason: str = ""
    targets: tuple[str, ...] = ()
    counters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    pid: int
    taken_at: float
    python_version: str
    method: str
    process: ProcessStats
    heap: HeapStats
    arena: ArenaStats
    types: tuple[TypeStat, ...]
    owners: tuple[Owner, ...]
    cyclic_garbage: CyclicGarbage
    findings: tuple[Finding, ...] = ()
    # Facts gathered in the target by known-shape probes (e.g. the verifiers registry);
    # detectors read them. Keyed by probe name; each value is a plain JSON object.
    probes: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    schema: str = SNAPSHOT_SCHEMA

    def with_findings(self, findings: tuple[Finding, ...]) -> Snapshot:
        return Snapshot(**{**self._shallow(), "findings": findings})

    def _shallow(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def snapshot_to_dict(snapshot: Snapshot) -> dict[str, Any]:
    doc = asdict(snapshot)
    # Put schema first so `head` on a saved file tells what it is.
    return {"schema": doc.pop("schema"), **doc}


def snapshot_to_json(snapshot: Snapshot, *, indent: int | None = 2) -> str:
    return json.dumps(snapshot_to_dict(snapshot), indent=indent)


def _types(items: Any) -> tuple[TypeStat, ...]:
    return tuple(TypeStat(**t) for t in items)


def snapshot_from_dict(doc: Any) -> Snapshot:
    if not isinstance(doc, dict):
        raise SchemaError("not a JSON object")
    schema = doc.get("schema")
    if schema != SNAPSHOT_SCHEMA:
        raise SchemaError(f"schema is {schema!r}, expected {SNAPSHOT_SCHEMA!r}")
    try:
        garbage = doc.get("cyclic_garbage") or {"objects": 0, "bytes": 0}
        return Snapshot(
            schema=schema,
            pid=int(doc["pid"]),
            taken_at=float(doc["taken_at"]),
            python_version=str(doc["python_version"]),
            method=str(doc["method"]),
            process=ProcessStats(**doc["process"]),
            heap=HeapStats(**doc["heap"]),
            arena=ArenaStats(**doc["arena"]),
            types=_types(doc["types"]),
            owners=tuple(Owner(**o) for o in doc["owners"]),
            cyclic_garbage=CyclicGarbage(
                objects=int(garbage["objects"]),
                bytes=int(garbage["bytes"]),
                types=_types(garbage.get("types", ())),
            ),
            findings=tuple(Finding(**f) for f in doc.get("findings", ())),
            probes=dict(doc.get("probes") or {}),
            warnings=tuple(doc.get("warnings", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SchemaError(f"malformed snapshot: {exc}") from None


def snapshot_from_json(text: str) -> Snapshot:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
    return snapshot_from_dict(doc)
