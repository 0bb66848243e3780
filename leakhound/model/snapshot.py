"""The snapshot model: what one inspection of one process saw.

Every report, diff, plot and metric is computed from these frozen dataclasses, so a
snapshot saved with ``--save`` can be re-analysed offline. JSON (de)serialisation lives
here and nowhere else; the schema is documented in ``docs/snapshot-schema.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from leakhound import __version__
from leakhound.model.names import OLD_FINDING_KINDS

SNAPSHOT_SCHEMA = "leakhound.snapshot/2"
# Schemas this version reads: /1 (owners by first reacher only) and /2 (docs/snapshot-schema.md).
READABLE_SCHEMAS = ("leakhound.snapshot/1", SNAPSHOT_SCHEMA)


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
    # Resident bytes of the threads' stacks and of file-backed mappings (the executable,
    # libraries, mmapped files), from /proc/PID/smaps; 0 when it could not be read.
    stack_bytes: int = 0
    file_mapped_bytes: int = 0


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
    # Of ``bytes``: memory outside the Python heap sized natively (torch storages, mmaps,
    # Pillow pixels; payload/sizes.py), attributed to owners like any object.
    native_bytes: int = 0
    # False when a pause budget ruled out listing every gc-tracked object: then objects no
    # named root reaches (held from C, cyclic garbage) were not looked for; the note says why.
    unreached_examined: bool = True
    unreached_note: str = ""
    # How owners were found: "dominator" (retained = what freeing the owner returns, from the
    # object graph's dominator tree) or "first-reacher" (the census: each object to the first
    # named root that reaches it; every /1 snapshot). The note says why the graph was not used.
    owner_model: str = "first-reacher"
    owner_model_note: str = ""
    graph_nodes: int = 0
    graph_edges: int = 0
    graph_seconds: float = 0.0  # the graph's walk in the target
    dominator_seconds: float = 0.0  # the dominator pass and owners, in leakhound's process
    # The pause budget (--max-pause) and how the census kept it: the longest it ran between
    # two yields of the GIL (its own CPU time: an upper bound on one hold) and how often it
    # yielded; the census's own CPU seconds (census_seconds minus this is time it waited, for
    # the GIL or a core). 0 in files written before these were recorded.
    max_pause_budget_ms: float = 0.0
    max_hold_ms: float = 0.0
    yields: int = 0
    census_cpu_seconds: float = 0.0
    # Which walk counted the objects, types and totals: "census" (its own walk), or "graph"
    # (the object graph's walk counted them on the way and no census walk ran: a pause budget
    # ruled out what only the census adds, the split of what no root reaches).
    counted_in: str = "census"
    # Collections of the target's own that ran in the payload's thread during the request (its
    # allocation was the one over the collector's threshold: due anyway, not the payload's
    # pause, and not in max_hold_ms), and the longest of them. 0 in files written before.
    target_gc_in_payload_thread: int = 0
    target_gc_in_payload_thread_max_ms: float = 0.0


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
    """Who holds memory and how much. With the dominator model (``HeapStats.owner_model``) an
    owner is an accumulation point of the dominator tree, named by a path from a root, and
    ``retained_bytes`` is what freeing it would return; ``retainers`` are a few distinct
    paths from roots that keep it alive. With the first-reacher census it is a named root
    and what it reached first. Owners never double count."""

    path: str
    type: str
    items: int
    retained_bytes: int
    retained_objects: int = 0
    retainers: tuple[str, ...] = ()


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
    # The functions the fix replaced (``module.Class.name``), not the processes it ran in.
    functions: tuple[str, ...] = ()
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
    # The leakhound that took it ("" in files written before it was recorded).
    leakhound_version: str = __version__
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


# Numbers in a snapshot are counts, bytes and times: anything beyond 2**63 or not finite is
# not something leakhound wrote, and would overflow the arithmetic done on it (float(), rates).
_INT_LIMIT = 2**63


def _check(value: Any, hint: Any, where: str) -> Any:
    """``value`` (decoded JSON) as the annotated type ``hint``, or SchemaError naming ``where``.

    Dataclasses check nothing themselves, so every field is checked here against its
    annotation: a file with a string where bytes belong must fail on load, not deep inside
    a diff's arithmetic or a renderer.
    """
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        (inner,) = [o for o in options if o is not type(None)]
        return _check(value, inner, where)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _build(hint, value, where)
    if hint is bool:
        if type(value) is not bool:
            raise SchemaError(f"{where} is not true or false")
        return value
    if hint is int:
        if type(value) is float and math.isfinite(value) and value.is_integer():
            value = int(value)  # 3.0: a count some writer kept as a float
        if type(value) is not int or not -_INT_LIMIT < value < _INT_LIMIT:
            raise SchemaError(f"{where} is not an integer")
        return value
    if hint is float:
        if type(value) not in (int, float) or not math.isfinite(value) or abs(value) >= _INT_LIMIT:
            raise SchemaError(f"{where} is not a finite number")
        return float(value)
    if hint is str:
        if type(value) is not str:
            raise SchemaError(f"{where} is not a string")
        return value
    if origin in (tuple, list):
        if type(value) is not list:
            raise SchemaError(f"{where} is not a list")
        (item,) = typing.get_args(hint)[:1]
        items = [_check(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if type(value) is not dict:
            raise SchemaError(f"{where} is not an object")
        _key, item = typing.get_args(hint)
        return {k: _check(v, item, f"{where}.{k}") for k, v in value.items()}
    return value  # an annotation this loader has no rule for: taken as it is


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(cls: type, doc: Any, where: str) -> Any:
    if type(doc) is not dict:
        raise SchemaError(f"{where} is not an object")
    hints = _hints(cls)
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(doc) - set(known))
    if unknown:
        raise SchemaError(f"{where or 'the snapshot'} has an unexpected field {_short(unknown[0])}")
    kwargs = {}
    for name, spec in known.items():
        if name in doc:
            kwargs[name] = _check(doc[name], hints[name], f"{where}.{name}" if where else name)
        elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise SchemaError(f"{where}.{name} is missing" if where else f"{name} is missing")
    return cls(**kwargs)


def snapshot_from_dict(doc: Any) -> Snapshot:
    if not isinstance(doc, dict):
        raise SchemaError("not a JSON object")
    schema = doc.get("schema")
    if schema not in READABLE_SCHEMAS:
        raise SchemaError(f"schema is {_short(schema)}, expected {SNAPSHOT_SCHEMA!r}")
    if schema != SNAPSHOT_SCHEMA:
        # /1 had no owner model (always the first reacher) and no retainers: the defaults.
        for name in ("owner_model", "owner_model_note", "graph_nodes", "graph_edges", "graph_seconds",
                     "dominator_seconds"):
            if isinstance(doc.get("heap"), dict) and name in doc["heap"]:
                raise SchemaError(f"malformed snapshot: heap.{name} is not in {schema}")
        doc = {**doc, "schema": SNAPSHOT_SCHEMA}
    if isinstance(doc.get("findings"), list):  # kinds renamed since: read as today's names
        doc = {**doc, "findings": [
            {**f, "kind": OLD_FINDING_KINDS.get(f["kind"], f["kind"])}
            if isinstance(f, dict) and isinstance(f.get("kind"), str) else f for f in doc["findings"]]}
    if "leakhound_version" not in doc:  # written before the version was recorded: not this one's
        doc = {**doc, "leakhound_version": ""}
    if doc.get("cyclic_garbage") is None:  # older files may leave it out
        doc = {**doc, "cyclic_garbage": {"objects": 0, "bytes": 0}}
    try:
        snapshot: Snapshot = _build(Snapshot, doc, "")
    except SchemaError as exc:
        raise SchemaError(f"malformed snapshot: {exc}") from None
    return snapshot


def _short(value: Any) -> str:
    if not isinstance(value, str):
        return "missing" if value is None else f"a JSON {type(value).__name__}, not a string"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def snapshot_from_json(text: str) -> Snapshot:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise SchemaError("nested too deeply") from None
    except ValueError:  # json.loads' only other error: an integer of more than 4300 digits
        raise SchemaError("a number has more digits than Python reads") from None
    return snapshot_from_dict(doc)
