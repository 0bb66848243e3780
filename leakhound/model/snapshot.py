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
from dataclasses import asdict, dataclass, field, fields, replace
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
    # libraries, mmapped files), from /proc/PID/pagemap; 0 when it could not be read.
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
    # "compiled" (the C walk, payload/_census_walk.c) or "python" (its pure-Python twin)
    walker: str = ""
    # What an object's bytes are: the blocks the target's allocators give it ("pymalloc+glibc",
    # "glibc", "pymalloc": payload/sizes.py heap_block) or its __sizeof__ as "requested" (another
    # allocator, debug hooks, or a payload from before the rounding: "").
    sizes: str = ""
    # Of ``bytes``: memory outside the Python heap sized natively (torch storages, mmaps,
    # Pillow pixels; payload/sizes.py), attributed to owners like any object.
    native_bytes: int = 0
    # Of ``native_bytes``: resident pages of mmaps and torch storages that are a file's or
    # shared memory's (a mapping with a path: a file, an anonymous shared map's ``/dev/zero
    # (deleted)``), which ProcessStats.file_mapped_bytes counts too: the ledger takes them out
    # of its "mapped files".
    native_mapped_bytes: int = 0
    # Of ``native_bytes``: what SQLite counts for the connections sized (their page caches,
    # schemas and statements), which ArenaStats.sqlite_bytes counts too: the ledger takes them
    # out of its "SQLite" row.
    native_sqlite_bytes: int = 0
    # Of ``native_bytes``: what OpenSSL's contexts and connections hold in its heap (their
    # certificate stores; sessions, peer certificates), sized after the walk (payload/sizes.py
    # scanned_object_sizes); 0 where they were not (none met, or a scan that could not finish):
    # then they are what sys.getsizeof says, and the native_state finding names them.
    native_ssl_bytes: int = 0
    # False when a pause budget ruled out listing every gc-tracked object: then objects no
    # named root reaches (held from C, cyclic garbage) were not looked for; the note says why.
    unreached_examined: bool = True
    unreached_note: str = ""
    # How owners were found: "dominator" (retained = what freeing the owner returns, from the
    # object graph's dominator tree), "first-reacher" (the census: each object to the first
    # named root that reaches it; every /1 snapshot, --owners census) or "not-attributed" (the
    # graph was asked for and not walked or not finished: one "<not attributed: ...>" owner).
    # The note says why the graph was not used, and what would allow it.
    owner_model: str = "first-reacher"
    owner_model_note: str = ""
    # With "not-attributed" (dominators asked for, not computed: names.OwnerModel): why, as a
    # code (names.NotAttributed); "" otherwise.
    owner_model_reason: str = ""
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
    # tracemalloc's own tables (its traces of every allocation) while it traces; 0 when not
    tracemalloc_bytes: int = 0
    # SQLite's own count of what it holds (sqlite3_memory_used), where sqlite3 is loaded; 0 when not
    sqlite_bytes: int = 0
    available: bool = True
    reason: str = ""


@dataclass(frozen=True)
class TypeStat:
    type: str
    count: int
    bytes: int


@dataclass(frozen=True)
class SiteFrame:
    """One frame of an allocation site's Python stack."""

    file: str
    line: int
    function: str


@dataclass(frozen=True)
class AllocationSite:
    """A Python stack that allocated bytes still alive at the end of a watch, estimated from
    sampled allocations (``--sites``): ``bytes`` and ``count`` are the sampled blocks
    scaled by their chance of being sampled; ``samples`` is how many were sampled. The
    innermost frame comes first."""

    stack: tuple[SiteFrame, ...]
    bytes: int
    count: int
    samples: int = 0


@dataclass(frozen=True)
class SiteTracking:
    """What the allocation-site tracker saw in the target over a watch (``--sites``)."""

    mean_bytes: int  # one sample per this many bytes allocated, on average
    seconds: float  # how long it ran in the target
    sampled: int  # allocations sampled
    allocated_bytes: int  # bytes allocated while it ran (the payload's own left out)
    surviving: int  # samples still alive at the end
    attributed_bytes: int  # their estimated bytes found in an owner
    not_attributed_bytes: int  # ...in no owner (not in the graph, or no owner dominates them)
    table_bytes: int  # the tracker's tables: its extra memory in the target
    dropped: int = 0  # samples not kept (its table full)
    expired: bool = False  # its own deadline passed before it was read: no samples
    not_attributed: tuple[AllocationSite, ...] = ()  # the biggest of those in no owner
    note: str = ""
    # the biggest sites of every surviving sample, in an owner or not: the whole process's
    process: tuple[AllocationSite, ...] = ()


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
    # With the dominator model: the owner object's id() in the target (0: not known), and the
    # ids along its path from the root, the root's first. What the owner *is*, while its path
    # is only how it was reached: watch re-reads the owner by these ids, and samples and
    # snapshots of one process match owners by (object_id, type) before their paths.
    object_id: int = 0
    path_ids: tuple[int, ...] = ()
    # The label of each step of ``path_ids`` after the root's, as the graph has it ("a" and an
    # attribute, "k" and a str key, "" none): a step whose id no longer leads on is followed by
    # its label in watch's samples (an attribute rebound as it grows: ``self.rows = self.rows +
    # [row]``, ``buf = np.concatenate(...)``): the object there now is the owner.
    path_steps: tuple[str, ...] = ()
    # A shared owner (``<shared by A, B>``, no object, no path_ids): the ids along the path of
    # one of its parts that is a collection of about its items (``BY_ID``, an LRU's ``map``) and
    # that collection's type: what watch's cheap samples count it by (its length).
    count_ids: tuple[int, ...] = ()
    count_type: str = ""
    # The head of a chain of links of its own type (a linked list, hooks each wrapping the one
    # it replaced): its items are its links, which watch's cheap samples count link by link.
    chain: bool = False
    # Its id of the link after its last, which others hold too (0: none): where they stop
    # counting (a thread keeps the ``sys.excepthook`` it was made with, and the hooks it wraps).
    chain_end: int = 0
    # With --sites: the stacks that allocated its bytes that survived the watch, biggest first.
    sites: tuple[AllocationSite, ...] = ()


@dataclass(frozen=True)
class CyclicGarbage:
    """Objects alive only because they sit in reference cycles the GC has not collected."""

    objects: int
    bytes: int
    types: tuple[TypeStat, ...] = ()


@dataclass(frozen=True)
class AppliedFix:
    """A fix leakhound applied in the target, as the target recorded it (its ``patches``
    probe): when (Unix time, read in the target; None when the leakhound that applied it did
    not record it) and by whom (the applying CLI's uid, user name and version)."""

    fix: str
    applied_at: float | None = None
    uid: int = -1
    user: str = ""
    leakhound_version: str = ""
    functions: tuple[str, ...] = ()


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
    # The fix this finding recommends, applied in the target already (None: not applied, or
    # a file written before it was recorded); ``fix`` is then empty and the summary says what
    # stays until the worker restarts and which fix is next.
    applied: AppliedFix | None = None
    # A growth finding of a watch with --sites: the owner's allocation sites (Owner.sites).
    sites: tuple[AllocationSite, ...] = ()

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
    # When (Unix time, read in the target) and by whom the fix was applied, as the target
    # recorded it (applied and --status answers; None: not applied, or not recorded).
    applied: AppliedFix | None = None


@dataclass(frozen=True)
class RequestCost:
    """What taking the snapshot cost the target's memory, measured while it ran (not an
    estimate): the most its memory cgroup was charged over what it was before (None: no
    cgroup leakhound could read), the growth of its VmHWM and RSS, and the peak RSS growth the
    payload measured in itself; with the memory budget the request kept to
    (``max(16 MiB, 1% RSS)`` under a limit; None: no limit) and the headroom and tightest
    limit it found before starting (docs/inspect.md, "Near the memory limit")."""

    cgroup_peak_bytes: int | None = None
    hwm_bytes: int = 0
    rss_bytes: int = 0
    payload_peak_bytes: int | None = None
    budget_bytes: int | None = None
    headroom_bytes: int | None = None
    limit: str = ""
    # the RSS the payload's first load in the target added (its modules, kept for the next
    # request; 0 when it was loaded already): leakhound's, not the target's growth
    payload_load_bytes: int = 0


@dataclass(frozen=True)
class OverBudget:
    """A budget leakhound promised to keep in the target and did not: ``code`` names which
    (``pause_over_budget``), ``text`` says it in words, ``measured`` and ``budget`` are the
    two numbers in ``unit`` (``ms``)."""

    code: str
    text: str
    measured: float
    budget: float
    unit: str


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
    # The budgets this look did not keep (computed from ``heap`` by analysis.budgets, like the
    # findings: a saved snapshot re-analysed gets them too).
    over_budget: tuple[OverBudget, ...] = ()
    # What taking it cost the target's memory (None in files written before it was measured).
    cost: RequestCost | None = None
    # The allocation-site tracker's totals, with --sites (its sites are on the owners).
    sites: SiteTracking | None = None
    # The leakhound that took it ("" in files written before it was recorded).
    leakhound_version: str = __version__
    schema: str = SNAPSHOT_SCHEMA

    def with_findings(self, findings: tuple[Finding, ...]) -> Snapshot:
        return replace(self, findings=findings)


def snapshot_to_dict(snapshot: Snapshot) -> dict[str, Any]:
    doc = asdict(snapshot)
    # Put schema first so `head` on a saved file tells what it is.
    return {"schema": doc.pop("schema"), **doc}


def snapshot_to_json(snapshot: Snapshot, *, indent: int | None = 2) -> str:
    return json.dumps(snapshot_to_dict(snapshot), indent=indent)


# Numbers in a snapshot are counts, bytes and times: anything beyond 2**63 or not finite is
# not something leakhound wrote, and would overflow the arithmetic done on it (float(), rates).
_INT_LIMIT = 2**63


class _Invalid(Exception):
    """A value that is not what its annotation says; the path to it is added while unwinding
    (built only for the one bad value, not for every value checked)."""

    def __init__(self, rest: str) -> None:
        self.rest = rest
        self.path: list[str] = []

    def error(self, where: str = "") -> SchemaError:
        path = (where + "".join(reversed(self.path))).lstrip(".")
        return SchemaError(f"{path or 'the snapshot'} {self.rest}")


Checker = typing.Callable[[Any], Any]


def _check_int(value: Any) -> int:
    if type(value) is float and math.isfinite(value) and value.is_integer():
        value = int(value)  # 3.0: a count some writer kept as a float
    if type(value) is not int or not -_INT_LIMIT < value < _INT_LIMIT:
        raise _Invalid("is not an integer")
    return value


def _check_float(value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or abs(value) >= _INT_LIMIT:
        raise _Invalid("is not a finite number")
    return float(value)


def _check_str(value: Any) -> str:
    if type(value) is not str:
        raise _Invalid("is not a string")
    return value


def _check_bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _Invalid("is not true or false")
    return value


def _as_is(value: Any) -> Any:
    return value


@functools.cache
def _checker(hint: Any, in_place: bool) -> Checker:
    """The function that checks (and converts) a decoded JSON value against ``hint``: compiled
    once per annotation (reading the annotation again for every value took 26 s of a 270 MB
    file's 31 s). ``in_place``: the decoded lists are the loader's own, to replace item by
    item."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return _as_is
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        (inner,) = [o for o in options if o is not type(None)]
        inner_check = _checker(inner, in_place)
        optional = type(None) in options
        return lambda value: None if value is None and optional else inner_check(value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return functools.partial(_build_checked, hint, in_place)
    simple = {bool: _check_bool, int: _check_int, float: _check_float, str: _check_str}
    if hint in simple:
        return simple[hint]
    if origin in (tuple, list):
        item_check = _checker(typing.get_args(hint)[0], in_place)
        as_tuple = origin is tuple

        def check_list(value: Any) -> Any:
            if type(value) is not list:
                raise _Invalid("is not a list")
            # In place: each decoded item is let go as soon as its checked value replaces it,
            # so a large file is not held twice (decoded JSON and snapshot) at its peak.
            out = value if in_place else [None] * len(value)
            i = 0
            try:
                for i, item in enumerate(value):
                    out[i] = item_check(item)
            except _Invalid as exc:
                exc.path.append(f"[{i}]")
                raise
            return tuple(out) if as_tuple else out

        return check_list
    if origin is dict:
        value_check = _checker(typing.get_args(hint)[1], in_place)

        def check_dict(value: Any) -> Any:
            if type(value) is not dict:
                raise _Invalid("is not an object")
            out = {}
            k = ""
            try:
                for k, v in value.items():
                    out[k] = value_check(v)
            except _Invalid as exc:
                exc.path.append(f".{k}")
                raise
            return out

        return check_dict
    return _as_is  # an annotation this loader has no rule for: taken as it is


@functools.cache
def _fields_of(cls: type, in_place: bool) -> tuple[tuple[tuple[str, Checker, bool], ...], frozenset[str]]:
    """(name, its checker, whether it is required) for each field of ``cls``; the names."""
    hints = typing.get_type_hints(cls)
    spec = tuple(
        (f.name, _checker(hints[f.name], in_place),
         f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in fields(cls)
    )
    return spec, frozenset(f.name for f in fields(cls))


def _build_checked(cls: type, in_place: bool, doc: Any) -> Any:
    if type(doc) is not dict:
        raise _Invalid("is not an object")
    spec, names = _fields_of(cls, in_place)
    if not names.issuperset(doc):
        raise _Invalid(f"has an unexpected field {_short(sorted(set(doc) - names)[0])}")
    kwargs = {}
    for name, check, required in spec:
        if name in doc:
            try:
                kwargs[name] = check(doc[name])
            except _Invalid as exc:
                exc.path.append(f".{name}")
                raise
        elif required:
            missing = _Invalid("is missing")
            missing.path.append(f".{name}")
            raise missing
    return cls(**kwargs)


def _build(cls: type, doc: Any, where: str, *, in_place: bool = False) -> Any:
    try:
        return _build_checked(cls, in_place, doc)
    except _Invalid as exc:
        raise exc.error(where) from None


def snapshot_from_dict(doc: Any, *, owned: bool = False) -> Snapshot:
    """The snapshot in a decoded document. ``owned``: the caller hands ``doc`` over (decoded
    for this call), and its lists are reused item by item instead of copied."""
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
        snapshot: Snapshot = _build(Snapshot, doc, "", in_place=owned)
    except SchemaError as exc:
        raise SchemaError(f"malformed snapshot: {exc}") from None
    return snapshot


def _short(value: Any) -> str:
    if not isinstance(value, str):
        return "missing" if value is None else f"a JSON {type(value).__name__}, not a string"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def json_document(text: str | bytes) -> Any:
    """``text`` decoded as JSON, or SchemaError saying why not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"not JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise SchemaError("nested too deeply") from None
    except ValueError:  # json.loads' only other error: an integer of more than 4300 digits
        raise SchemaError("a number has more digits than Python reads") from None


def snapshot_from_json(text: str) -> Snapshot:
    return snapshot_from_dict(json_document(text), owned=True)
