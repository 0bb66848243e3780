"""The payload's answers (a snapshot, a sample, a patch, names), each decoded once into the model.

An answer comes from inside the target, whose owner controls what runs there: it is read
here, field by field (their names and shapes are ``leakhound/payload/wire.py``), into a
``Snapshot``, a ``SampleOutcome`` or a checked patch document. A wrong answer is one clear
error (ProtocolViolation), never a traceback from deep in the analysis; an answer of another
payload version is refused by its version before anything of it is read
(PayloadVersionMismatch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from leakhound.analysis.sites import SitesFound
from leakhound.errors import PayloadVersionMismatch, ProtocolViolation
from leakhound.model import ArenaStats, CyclicGarbage, HeapStats, Owner, ProcessStats, Snapshot, TypeStat
from leakhound.model.names import Method
from leakhound.model.snapshot import SchemaError, SiteFrame, snapshot_from_json, snapshot_to_json
from leakhound.patches import FIXES, Measurement
from leakhound.payload import wire

if TYPE_CHECKING:
    from leakhound.payload.wire import CyclicGarbage as wire_CyclicGarbage
    from leakhound.payload.wire import (
        Graph,
        Heap,
        Names,
        PatchAnswer,
        SampleAnswer,
        SnapshotAnswer,
        TargetCollections,
        Unreached,
    )

# The payload versions this CLI reads.
READABLE_VERSIONS = (wire.PAYLOAD_VERSION,)

Phases = dict[str, tuple[float, float]]  # phase: (wall s, CPU s) in the target

_NO_PROCESS = ProcessStats(rss_bytes=0, uss_bytes=0, pss_bytes=0, swap_bytes=0, num_threads=0)


@dataclass(frozen=True)
class GraphOutcome:
    """The object graph's document (its arrays for ``analysis.dominators.decode_graph``) and
    what the capture reads of it: why it was skipped, how its walk held the GIL."""

    doc: dict[str, Any]
    skipped: str = ""  # why it was not walked or not finished ("": it was)
    skipped_code: str = ""
    max_nodes: int = 0
    graph_seconds: float = 0.0
    max_step_ms: float = 0.0
    payload_peak_bytes: int = 0
    unreached_examined: bool = True  # gc.get_objects() listed (what no root reaches is in it)
    unreached_reason: str = ""
    counts_heap: bool = False  # its walk counted the heap: no census followed
    max_held_ms: float = 0.0
    max_held_where: tuple[str, str] | None = None
    yields: int = 0
    gc_collections: tuple[int, ...] = ()
    # on the debugger paths the records came as the walk wrote them: how many bytes of them
    # (None: they come with the document) and how many the document says there are
    records_streamed: int | None = None
    binary_bytes: object = None
    payload_version: object = None  # a graph handed over before the answer says it

    @property
    def readable(self) -> bool:
        """Of a payload version this CLI reads (for a graph handed over before the answer)."""
        return type(self.payload_version) is int and self.payload_version in READABLE_VERSIONS


@dataclass(frozen=True)
class Holds:
    """How the census held the target's GIL and where the request's time went (``-v``)."""

    payload_phases: Phases = field(default_factory=dict)
    census_phases: Phases = field(default_factory=dict)
    counted_in: str = wire.COUNTED_IN_CENSUS
    max_hold_ms: float | None = None
    yields: int = 0
    max_hold_after: str = ""
    max_hold_where: tuple[str, str] | None = None
    max_gap_ms: float | None = None
    max_gap_where: tuple[str, str] | None = None
    target_gc_collections: tuple[int, ...] = ()
    target_gc_seconds: float = 0.0
    target_gc_max_ms: float = 0.0


@dataclass(frozen=True)
class SnapshotOutcome:
    """A snapshot answer, decoded: the snapshot (no process numbers yet: the caller reads the
    kernel's) and what came beside it."""

    snapshot: Snapshot
    holds: Holds
    payload_version: int
    started_at: float | None  # the target's clock as the named roots' walk began
    graph_started_at: float | None  # likewise as the graph's walk began
    graph: GraphOutcome | None  # in the answer (not handed over before it)
    names: list[Any] | None  # labels of the paths the CLI posted, one a path


def check_version(pid: int, answer: Mapping[str, Any]) -> int:
    """The answer's payload version, when this CLI reads it; else PayloadVersionMismatch."""
    version = answer.get("payload_version")
    if type(version) is int and version in READABLE_VERSIONS:
        return version
    said = f"payload version {version}" if type(version) is int else "no payload version (version 1 or older)"
    raise PayloadVersionMismatch(
        f"process {pid} answered with {said}; this leakhound reads payload version "
        f"{', '.join(map(str, READABLE_VERSIONS))}: the worker's agent was started by another leakhound")


def decode_snapshot(pid: int, answer: Mapping[str, Any], *, method: Method, taken_at: float,
                    pause_ms: float) -> SnapshotOutcome:
    """``answer`` decoded (see the module's docstring); ProtocolViolation when it is not a
    snapshot answer of a version this CLI reads."""
    version = check_version(pid, answer)
    try:
        snap, holds = _snapshot(cast("SnapshotAnswer", answer), method=method, taken_at=taken_at,
                                pause_ms=pause_ms)
        snapshot_from_json(snapshot_to_json(snap, indent=None))  # every field has its type
        heap = cast("Heap", answer["heap"])
        graph = answer.get("graph")
        names = answer.get("names")
        labels = names.get("labels") if isinstance(names, dict) else None
        return SnapshotOutcome(
            snapshot=snap, holds=holds, payload_version=version,
            started_at=_time(heap.get("started_at")), graph_started_at=_time(heap.get("graph_started_at")),
            graph=decode_graph_outcome(graph) if isinstance(graph, dict) else None,
            names=labels if isinstance(labels, list) else None,
        )
    except (SchemaError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProtocolViolation(f"process {pid} answered with a malformed snapshot "
                                f"({type(exc).__name__}: {str(exc)[:120]})") from None


@dataclass(frozen=True)
class SampleOutcome:
    """A sample answer (watch's cheap samples, verify's points), decoded."""

    owners: tuple[tuple[bool, int | None], ...]  # (found, item count or None) per owner asked, in order
    types: tuple[TypeStat, ...]
    allocator_in_use_bytes: int | None
    finished_entries: int | None  # the trajectory registries' finished entries, when asked and counted
    max_step_ms: float
    started_at: float | None  # the target's clock as the sample began
    types_skipped: str = ""  # why there are no type counts (their listing was over the pause budget)
    # per owner asked, in order: its own size where it was asked for ("size") and found, else None
    owner_bytes: tuple[int | None, ...] = ()


def decode_sample(pid: int, answer: Mapping[str, Any], *, asked: int) -> SampleOutcome:
    """``answer`` to a sample request for ``asked`` owners, decoded; PayloadVersionMismatch
    for another payload version, ProtocolViolation when it is not a sample answer."""
    check_version(pid, answer)
    sample = cast("SampleAnswer", answer)
    try:
        owners, owner_bytes = _owner_answers(sample.get("owners"), asked)
        types = tuple(TypeStat(**t) for t in sample.get("types") or ())
        if not all(isinstance(t.type, str) and isinstance(t.count, int) and isinstance(t.bytes, int)
                   for t in types):
            raise TypeError("a type stat is not (name, count, bytes)")
        in_use = sample.get("allocator_in_use_bytes")
        if in_use is not None and (type(in_use) is not int or in_use < 0):
            raise TypeError("allocator_in_use_bytes is not a byte count")
        registry = sample.get("registry")
        finished = registry.get("finished_entries") if isinstance(registry, dict) else None
        if finished is not None and (type(finished) is not int or finished < 0):
            raise TypeError("registry.finished_entries is not a count")
        return SampleOutcome(owners=owners, types=types, allocator_in_use_bytes=in_use, finished_entries=finished,
                             max_step_ms=float(sample.get("max_step_ms", 0.0)),
                             started_at=_time(sample.get("started_at")),
                             types_skipped=str(sample.get("types_skipped") or "")[:300], owner_bytes=owner_bytes)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ProtocolViolation(f"process {pid} answered with a malformed sample "
                                f"({type(exc).__name__}: {str(exc)[:120]})") from None


def _owner_answers(doc: object, asked: int) -> tuple[tuple[tuple[bool, int | None], ...], tuple[int | None, ...]]:
    """(found, item count or None) per owner asked for, in order, and its own size where the
    answer has one (asked for with "size"), else None; TypeError unless the answer has that
    shape."""
    if not isinstance(doc, list) or len(doc) != asked:
        raise TypeError("owners is not one answer per owner asked for")
    out: list[tuple[bool, int | None]] = []
    sizes: list[int | None] = []
    for owner in doc:
        if not isinstance(owner, dict) or not isinstance(owner.get("found"), bool):
            raise TypeError("an owner's answer is not {found, items}")
        items, size = owner.get("items"), owner.get("bytes")
        if items is not None and (type(items) is not int or items < 0):
            raise TypeError("an owner's item count is not a count")
        if size is not None and (type(size) is not int or size < 0):
            raise TypeError("an owner's size is not a byte count")
        out.append((owner["found"], items))
        sizes.append(size)
    return tuple(out), tuple(sizes)


def decode_patch(pid: int, answer: Mapping[str, Any]) -> PatchAnswer:
    """``answer`` to a patch request, when it has the shape the patch commands read (each
    result a known fix with a status, measurements that decode, names of applied fixes);
    PayloadVersionMismatch for another payload version, else ProtocolViolation."""
    check_version(pid, answer)
    patch = cast("PatchAnswer", answer)
    try:
        results = patch["results"]
        if not isinstance(results, list):
            raise TypeError("results is not a list")
        for result in results:
            if not isinstance(result, dict) or result.get("fix") not in FIXES \
                    or not isinstance(result.get("status"), str):
                raise TypeError(f"a result is not a known fix with a status: {str(result)[:60]}")
            if not isinstance(result.get("functions") or [], list):
                raise TypeError("a result's functions are not a list")
            if not isinstance(result.get("counters") or {}, dict):
                raise TypeError("a result's counters are not an object")
        for key in ("measure", "measure_before"):
            if key in patch:
                Measurement.from_payload(answer[key])
        if not all(isinstance(name, str) for name in patch.get("applied") or ()):
            raise TypeError("applied is not a list of fix names")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProtocolViolation(f"process {pid} answered the patch request with a malformed document "
                                f"({type(exc).__name__}: {str(exc)[:120]})") from None
    return patch


def decode_names(pid: int, answer: Mapping[str, Any]) -> list[Any] | None:
    """The labels a names answer gives, one a path asked (each a list of an edge's labels, or
    None); None when it gives none. PayloadVersionMismatch for another payload version."""
    check_version(pid, answer)
    labels = cast("Names", answer).get("labels")
    return labels if isinstance(labels, list) else None


def decode_graph_outcome(doc: dict[str, Any]) -> GraphOutcome:
    """The graph's document, handed over before the answer or in it. Never raises: its
    arrays are checked as they are decoded (analysis.dominators.decode_graph), and what is
    read here of the wrong type reads as absent."""
    graph = cast("Graph", doc)
    where = graph.get("max_held_where")
    collections = graph.get("gc_collections")
    streamed = graph.get("records_streamed")
    unreached = graph.get("unreached")
    unreached = unreached if isinstance(unreached, dict) else {}
    return GraphOutcome(
        doc=doc,
        skipped=str(graph.get("skipped") or ""),
        skipped_code=str(graph.get("skipped_code") or ""),
        max_nodes=max(0, _int(graph.get("max_nodes"))),
        graph_seconds=_float(graph.get("graph_seconds")),
        max_step_ms=_float(graph.get("max_step_ms")),
        payload_peak_bytes=_int(graph.get("payload_peak_bytes")),
        unreached_examined=unreached.get("examined", True) is not False,
        unreached_reason=str(unreached.get("reason", "")),
        counts_heap=graph.get("counts_heap") is True,
        max_held_ms=_float(graph.get("max_held_ms")),
        max_held_where=(str(where[0]), str(where[1])) if isinstance(where, list) and len(where) == 2 else None,
        yields=_int(graph.get("yields")),
        gc_collections=tuple(_int(n) for n in collections) if isinstance(collections, list) else (),
        records_streamed=streamed if type(streamed) is int else None,
        binary_bytes=graph.get("binary_bytes"),
        payload_version=graph.get("payload_version"),
    )


def snapshot_from_answer(answer: Mapping[str, Any], *, pid: int = 0, method: Method | None = None,
                         process: ProcessStats = _NO_PROCESS, taken_at: float = 0.0,
                         pause_ms: float = 0.0) -> Snapshot:
    """The snapshot alone (tests, benchmarks); KeyError, TypeError or ValueError when the
    answer is not a snapshot answer (``decode_snapshot`` says which field)."""
    snap, _ = _snapshot(cast("SnapshotAnswer", answer), method=method, taken_at=taken_at, pause_ms=pause_ms)
    return replace(snap, pid=pid, process=process)


def _snapshot(answer: SnapshotAnswer, *, method: Method | None, taken_at: float,
              pause_ms: float) -> tuple[Snapshot, Holds]:
    heap = answer["heap"]
    if not isinstance(heap, dict):
        raise SchemaError("heap is not an object")
    target_gc: TargetCollections | dict[str, Any] = answer.get("target_gc_in_payload_thread") or {}
    garbage: wire_CyclicGarbage | dict[str, Any] = heap.get("cyclic_garbage") or {}
    unreached: Unreached | dict[str, Any] = heap.get("unreached") or {}
    census_phases = _phases(heap.get("phases"), "heap.phases")
    warnings = []
    arena = ArenaStats(**answer["arena"])
    if not arena.available:
        warnings.append(f"allocator statistics unavailable: {arena.reason}")
    elif "tracemalloc" in arena.reason:
        warnings.append(f"allocator statistics incomplete: {arena.reason}")
    warnings.extend(str(note) for note in heap.get("notes") or ())  # what the census could not read
    counted_in = wire.COUNTED_IN_GRAPH if heap.get("counted_in") == wire.COUNTED_IN_GRAPH \
        else wire.COUNTED_IN_CENSUS
    if not isinstance(answer.get("target_gc_in_payload_thread") or {}, dict):
        raise SchemaError("target_gc_in_payload_thread is not an object")
    collections = tuple(int(n) for n in target_gc.get("collections") or ())
    snap = Snapshot(
        pid=0,
        taken_at=taken_at,
        python_version=str(answer.get("python_version", "")),
        method=str(method or ""),
        process=_NO_PROCESS,
        heap=HeapStats(
            objects=int(heap["objects"]),
            bytes=int(heap["bytes"]),
            census_seconds=round(float(heap["census_seconds"]), 4),
            max_pause_ms=round(max(pause_ms, float(heap.get("max_step_ms", 0.0))), 2),
            gc_tracked=int(heap.get("gc_tracked", 0)),
            untracked=int(heap.get("untracked", 0)),
            payload_peak_bytes=int(heap.get("payload_peak_bytes", 0)),
            walker=str(heap.get("walker", "")),
            sizes=str(heap.get("sizes", "")),
            native_bytes=int(heap.get("native_bytes", 0)),
            native_mapped_bytes=int(heap.get("native_mapped_bytes", 0)),
            native_sqlite_bytes=int(heap.get("native_sqlite_bytes", 0)),
            native_ssl_bytes=int(heap.get("native_ssl_bytes", 0)),
            unreached_examined=bool(unreached.get("examined", True)),
            unreached_note=str(unreached.get("reason", "")),
            max_pause_budget_ms=float(heap.get("max_pause_budget_ms") or 0.0),
            max_hold_ms=float(heap.get("max_hold_ms") or 0.0),
            yields=int(heap.get("yields") or 0),
            census_cpu_seconds=round(sum(cpu for _, cpu in census_phases.values()), 4),
            counted_in=counted_in,
            target_gc_in_payload_thread=sum(collections),
            target_gc_in_payload_thread_max_ms=float(target_gc.get("max_ms") or 0.0),
        ),
        arena=arena,
        types=tuple(TypeStat(**t) for t in heap["types"]),
        owners=tuple(Owner(**o) for o in heap["owners"]),
        cyclic_garbage=CyclicGarbage(
            objects=int(garbage.get("objects", 0)),
            bytes=int(garbage.get("bytes", 0)),
            types=tuple(TypeStat(**t) for t in garbage.get("types", ())),
        ),
        probes=dict(answer.get("probes") or {}),
        warnings=tuple(warnings),
    )
    held = heap.get("max_hold_ms")
    gap = heap.get("max_gap_ms")
    holds = Holds(
        payload_phases=_phases(answer.get("phases"), "phases"),
        census_phases=census_phases,
        counted_in=counted_in,
        # no census ran when the graph's walk counted: the graph's own holds say it then
        max_hold_ms=float(held) if held is not None and counted_in == wire.COUNTED_IN_CENSUS else None,
        yields=int(heap.get("yields") or 0),
        max_hold_after=str(heap.get("max_hold_after") or ""),
        max_hold_where=_pair(heap.get("max_hold_where"), "heap.max_hold_where"),
        max_gap_ms=float(gap) if gap is not None else None,
        max_gap_where=_pair(heap.get("max_gap_where"), "heap.max_gap_where"),
        target_gc_collections=collections,
        target_gc_seconds=float(target_gc.get("seconds") or 0.0),
        target_gc_max_ms=float(target_gc.get("max_ms") or 0.0),
    )
    return snap, holds


def _phases(value: object, name: str) -> Phases:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SchemaError(f"{name} is not an object")
    out: Phases = {}
    for phase, spent in value.items():
        wall, cpu = cast("tuple[Any, Any]", spent)
        out[str(phase)] = (float(wall), float(cpu))
    return out


def _pair(value: object, name: str) -> tuple[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise SchemaError(f"{name} is not a pair")
    return str(value[0]), str(value[1])


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _time(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# The most stacks and sample rows an answer may carry (the tracker keeps at most 4096
# stacks and ~4M samples; grouped, far fewer rows): past it the answer is not the tracker's.
_MAX_SITE_ROWS = 1 << 22
_MAX_SITE_STACKS = 1 << 16


def decode_sites(pid: int, doc: object) -> SitesFound | None:
    """The allocation-site tracker's answer (wire.SitesFound) decoded; None when it was not
    available in the target (``reason`` then says why: raised by the caller as it sees fit).
    ProtocolViolation when it is malformed."""
    try:
        if not isinstance(doc, dict):
            raise TypeError("not an object")
        if doc.get("available") is not True:
            return None
        rows, stacks, tracker = doc["samples"], doc["stacks"], doc["tracker"]
        if not isinstance(rows, list) or not isinstance(stacks, list) or not isinstance(tracker, dict):
            raise TypeError("samples, stacks or tracker of the wrong type")
        if len(rows) > _MAX_SITE_ROWS or len(stacks) > _MAX_SITE_STACKS:
            raise ValueError("more rows than the tracker keeps")
        frames = tuple(tuple(SiteFrame(file=str(f[0])[:4096], line=int(f[1]), function=str(f[2])[:1024])
                             for f in stack) for stack in stacks)
        samples = []
        for row in rows:
            node, stack, nbytes, count, n = (int(v) for v in row)
            if not 0 <= stack < len(frames) or min(node, nbytes, count, n) < 0:
                raise ValueError("a sample out of range")
            samples.append((node, stack, nbytes, count, n))

        def number(key: str) -> int:
            value = tracker.get(key, 0)
            if type(value) not in (int, float) or not 0 <= value < 2**63:
                raise ValueError(f"tracker.{key} is not a count")
            return int(value)

        return SitesFound(samples=tuple(samples), stacks=frames, mean_bytes=number("mean_bytes"),
                          sampled=number("sampled"), allocated_bytes=number("allocated_bytes"),
                          table_bytes=number("table_bytes"), dropped=number("dropped") + number("dropped_stacks"),
                          expired=bool(tracker.get("expired")),
                          seconds=_site_seconds(tracker.get("seconds", 0.0)),
                          notes=("the tracker could not unhook itself: another allocator hook was installed on "
                                 "top of it, so it stays in the chain, only delegating",)
                          if tracker.get("unhook_refused") else ())
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ProtocolViolation(f"process {pid} answered with malformed allocation sites "
                                f"({type(exc).__name__}: {str(exc)[:120]})") from None


def _site_seconds(value: object) -> float:
    if type(value) not in (int, float) or not 0 <= value < 1e7:  # type: ignore[operator]
        raise ValueError("tracker.seconds is not a duration")
    return float(value)  # type: ignore[arg-type]
