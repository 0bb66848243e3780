"""Take a snapshot of a live process: attach, run the census, read the kernel's numbers.

The one place that turns a payload result into a ``Snapshot`` (and runs the detectors on it).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from leakhound.analysis import dominators
from leakhound.analysis.detectors import analyse
from leakhound.attach import run_request
from leakhound.attach.base import AttachLog
from leakhound.attach.channel import Post, Progress
from leakhound.attach.deadline import FOLLOW_PROGRESS as FOLLOW_PROGRESS  # the commands' default: they import no attach
from leakhound.attach.deadline import Deadline
from leakhound.attach.process import process_stats, resolve_target
from leakhound.core.targets import env_worker_children
from leakhound.errors import ProtocolViolation
from leakhound.model import (
    ArenaStats,
    CyclicGarbage,
    HeapStats,
    Owner,
    ProcessStats,
    RequestCost,
    Snapshot,
    TypeStat,
)
from leakhound.model.names import (
    PAYLOAD_OWNER,
    PAYLOAD_PACKAGE,
    NotAttributed,
    OwnerModel,
    not_attributed_owner,
)
from leakhound.model.snapshot import SchemaError, snapshot_from_json, snapshot_to_json


def snapshot_from_result(
    *,
    pid: int,
    method: str,
    result: dict[str, Any],
    process: Any,
    taken_at: float,
    pause_ms: float,
) -> Snapshot:
    heap = result["heap"]
    target_gc = result.get("target_gc_in_payload_thread") or {}
    garbage = heap.get("cyclic_garbage", {})
    unreached = heap.get("unreached") or {}
    warnings = []
    arena = ArenaStats(**result["arena"])
    if not arena.available:
        warnings.append(f"allocator statistics unavailable: {arena.reason}")
    elif "tracemalloc" in arena.reason:
        warnings.append(f"allocator statistics incomplete: {arena.reason}")
    warnings.extend(str(note) for note in heap.get("notes") or ())  # what the census could not read
    snap = Snapshot(
        pid=pid,
        taken_at=taken_at,
        python_version=str(result.get("python_version", "")),
        method=method,
        process=process,
        heap=HeapStats(
            objects=int(heap["objects"]),
            bytes=int(heap["bytes"]),
            census_seconds=round(float(heap["census_seconds"]), 4),
            max_pause_ms=round(max(pause_ms, float(heap.get("max_step_ms", 0.0))), 2),
            gc_tracked=int(heap.get("gc_tracked", 0)),
            untracked=int(heap.get("untracked", 0)),
            payload_peak_bytes=int(heap.get("payload_peak_bytes", 0)),
            walker=str(heap.get("walker", "")),
            native_bytes=int(heap.get("native_bytes", 0)),
            unreached_examined=bool(unreached.get("examined", True)),
            unreached_note=str(unreached.get("reason", "")),
            max_pause_budget_ms=float(heap.get("max_pause_budget_ms") or 0.0),
            max_hold_ms=float(heap.get("max_hold_ms") or 0.0),
            yields=int(heap.get("yields") or 0),
            census_cpu_seconds=round(sum(float(v[1]) for v in (heap.get("phases") or {}).values()), 4),
            counted_in="graph" if heap.get("counted_in") == "graph" else "census",
            target_gc_in_payload_thread=sum(int(n) for n in target_gc.get("collections") or ()),
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
        probes=dict(result.get("probes") or {}),
        warnings=tuple(warnings),
    )
    return snap


def check_snapshot_result(pid: int, result: dict[str, Any]) -> None:
    """ProtocolViolation unless ``result`` decodes into a Snapshot whose every field has its
    type (the saved-snapshot loader's check), with the timings the verbose log reads in their
    shapes. The result comes from inside the target, whose owner controls what runs there:
    a wrong one is one clear error, never a traceback from deep in the analysis."""
    try:
        process = ProcessStats(rss_bytes=0, uss_bytes=0, pss_bytes=0, swap_bytes=0, num_threads=0)
        snap = snapshot_from_result(pid=pid, method="", result=result, process=process, taken_at=0.0, pause_ms=0.0)
        snapshot_from_json(snapshot_to_json(snap, indent=None))
        heap = result["heap"]
        for spent in (result.get("phases"), heap.get("phases")):
            for wall, cpu in dict(spent or {}).values():
                float(wall), float(cpu)
        for key in ("max_hold_where", "max_gap_where"):
            if heap.get(key) is not None and (not isinstance(heap[key], list) or len(heap[key]) != 2):
                raise SchemaError(f"heap.{key} is not a pair")
        if not isinstance(result.get("collector_waits") or {}, dict):
            raise SchemaError("collector_waits is not an object")
    except (SchemaError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProtocolViolation(f"process {pid} answered with a malformed snapshot "
                                f"({type(exc).__name__}: {str(exc)[:120]})") from None


# The pause budget every command's census keeps by default: the worst event-loop lag an
# inspection may add (the hardening goal; docs/inspect.md).
DEFAULT_MAX_PAUSE_MS = 50.0


# The biggest object graph the target sends for the dominator owners, in nodes: what
# leakhound's own memory holds (~160 bytes a node with its edges while it reads and analyses
# the graph: a 7.2M-node graph peaked at 1.1 GiB), not what the heap has. An object one
# collection alone holds is folded into it (payload/_graph_walk.c), so a heap of registries
# of records is a graph of its shared objects: a 16.5M-object heap of 2.4M sessions in a
# dict was a few thousand nodes (3.3 s, leakhound's peak 41 MiB). Past it no owner is named
# (``not_attributed``) and the header says why (owner_model, owner_model_reason). The walk
# holds in the target its bitmaps (a bit per 16 bytes of the heap), its stack and a few
# blocks: within a quarter of the worker's RSS (at least 64 MiB, at most MAX_GRAPH_MEMORY)
# by default ("auto"); asked for explicitly (--owners dominator), no memory budget applies
# but the memory limit's.
DEFAULT_MAX_GRAPH_NODES = 6_000_000
DOMINATOR_MAX_GRAPH_NODES = 6_000_000
# Overrides both (a positive integer, at most the payload's 100,000,000): a bigger budget for a
# heap over it where leakhound's machine has the memory (~160 bytes a node), a small one in tests.
MAX_GRAPH_NODES_ENV = "LEAKHOUND_MAX_GRAPH_NODES"
MAX_GRAPH_NODES_CEILING = 100_000_000
GRAPH_MEMORY_SHARE = 0.25
MIN_GRAPH_MEMORY = 64 << 20
# A sick worker near its memory limit is what leakhound is pointed at: however big it is, the
# walk never holds more than this by default (the bitmaps of a ~30 GB heap).
MAX_GRAPH_MEMORY = 256 << 20


def graph_node_budget(owner_model: str, environ: Mapping[str, str] | None = None) -> int:
    """The node budget for ``owner_model``: ``LEAKHOUND_MAX_GRAPH_NODES`` when it is a positive
    integer (at most the ceiling), else the default."""
    text = (os.environ if environ is None else environ).get(MAX_GRAPH_NODES_ENV, "").strip().replace("_", "")
    if text.isdigit() and int(text) > 0:
        return min(int(text), MAX_GRAPH_NODES_CEILING)
    return DOMINATOR_MAX_GRAPH_NODES if owner_model == "dominator" else DEFAULT_MAX_GRAPH_NODES


def graph_memory_budget(pid: int) -> int:
    """What the graph's walk may hold in ``pid`` by default: a share of its RSS, within the
    floor and the ceiling."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        rss = 0
    return min(MAX_GRAPH_MEMORY, max(MIN_GRAPH_MEMORY, int(rss * GRAPH_MEMORY_SHARE)))


@dataclass
class Capture:
    """A snapshot and, with the dominator owner model, the graph and tree it came from."""

    snapshot: Snapshot
    graph: dominators.ObjectGraph | None = None
    tree: dominators.DominatorTree | None = None
    # ``why=``: the owners (or objects of a type) asked about, with their retainer paths
    why: tuple[Owner, ...] = ()


def take_snapshot(
    pid: int,
    *,
    method: str = "auto",
    top: int = 20,
    timeout: float = FOLLOW_PROGRESS,
    progress: Progress | None = None,
    log: AttachLog | None = None,
    max_pause_ms: float | None = DEFAULT_MAX_PAUSE_MS,
    owner_model: str = "census",
    force: bool = False,
) -> Snapshot:
    """One census of ``pid``. ``max_pause_ms``: skip the one step of the census that cannot be
    split (listing every gc-tracked object, needed to find objects no named root reaches)
    when it would hold the target longer than this; None or 0: never skip it.
    ``owner_model``: "census" (first reacher), "auto" (dominator owners when the graph fits
    its budget, else the census's) or "dominator". ``force``: go ahead with less headroom
    under the target's memory limit than the request's cost may reach (HeadroomTooSmall).
    ``timeout``: a hard wall-clock limit, or ``FOLLOW_PROGRESS``: given up when the request
    stops progressing or at a ceiling by the target's RSS (attach/deadline.py)."""
    return capture(pid, method=method, top=top, timeout=timeout, progress=progress, log=log,
                   max_pause_ms=max_pause_ms, owner_model=owner_model, force=force).snapshot


def capture(
    pid: int,
    *,
    method: str = "auto",
    top: int = 20,
    timeout: float = FOLLOW_PROGRESS,
    progress: Progress | None = None,
    log: AttachLog | None = None,
    max_pause_ms: float | None = DEFAULT_MAX_PAUSE_MS,
    owner_model: str = "auto",
    max_graph_nodes: int | None = None,
    retainers: int = 3,
    why: str | None = None,
    force: bool = False,
) -> Capture:
    """``take_snapshot``, keeping the object graph and its dominator tree when they were used."""
    target = resolve_target(pid)
    taken_at = time.time()
    request: dict[str, object] = {"op": "snapshot", "top_types": max(top, 50), "top_owners": max(top, 50)}
    if owner_model != "census":
        request["graph"] = True
        request["census_owners"] = False  # a skipped graph's owners are not attributed (not_attributed)
        if max_graph_nodes is None:
            max_graph_nodes = graph_node_budget(owner_model)
        request["max_graph_nodes"] = max_graph_nodes
        if owner_model == "auto":
            request["max_graph_bytes"] = graph_memory_budget(pid)
    if max_pause_ms:
        request["max_pause_ms"] = max_pause_ms
    if os.environ.get("LEAKHOUND_WALKER") == "python":
        # The pure-Python census loop even where the compiled one loads (benchmarks, tests).
        request["walker"] = "python"
    deadline = Deadline.for_request(pid, timeout)
    early = _EarlyOwners(top=max(top, 20), retainers=retainers, why=why, deadline=deadline, pid=pid) \
        if "graph" in request else None
    try:
        remote = run_request(
            pid,
            request,
            method=method,
            progress=progress,
            log=log,
            target=target,
            on_partial=early.on_partial if early is not None else None,
            force=force,
            deadline=deadline,
        )
    except BaseException:
        if early is not None:
            early.abandon()
        raise
    try:
        check_snapshot_result(pid, remote.result)
    except ProtocolViolation:
        if early is not None:
            early.abandon()
        raise
    if early is not None and not remote.result.get("graph_sent"):
        early.abandon()  # a payload or agent of before early_graph: the graph came in the result
        early = None
    if log is not None:  # where the payload's time went (-v): phase wall s / CPU s in the target
        for key, spent in (("payload", remote.result.get("phases")),
                           ("census", (remote.result.get("heap") or {}).get("phases"))):
            if isinstance(spent, dict) and spent:
                log(f"{key} phases: " + ", ".join(f"{k} {v[0]:.3f}/{v[1]:.3f} s" for k, v in spent.items()))
        held = (remote.result.get("heap") or {}).get("max_hold_ms")
        if (remote.result.get("heap") or {}).get("counted_in") == "graph":
            held = None  # no census ran: the graph's line below says how it held the GIL
        if held is not None:
            log(f"census held the GIL at most {held} ms between yields ({remote.result['heap'].get('yields')} yields;"
                f" after phase {remote.result['heap'].get('max_hold_after')!r})")
            heap = remote.result["heap"]
            if heap.get("max_hold_where"):
                log("census's longest stretch: from {} to {}; longest run between two looks at the clock"
                    " {} ms: from {} to {}".format(*heap["max_hold_where"], heap.get("max_gap_ms"),
                                                  *heap.get("max_gap_where", ("?", "?"))))
        graph_doc = early.doc if early is not None else remote.result.get("graph")
        if isinstance(graph_doc, dict) and graph_doc.get("max_held_where"):
            log("graph held the GIL at most {:.2f} ms between yields ({} yields), from {} to {};"
                " the target's collections meanwhile, per generation: {}".format(
                    float(graph_doc.get("max_held_ms") or 0.0), graph_doc.get("yields"), *graph_doc["max_held_where"],
                    graph_doc.get("gc_collections")))
        ran = remote.result.get("target_gc_in_payload_thread")
        if isinstance(ran, dict) and any(ran.get("collections") or ()):
            log("the target's own collections ran in the payload's thread (per generation {}): {} s, the longest"
                " {} ms; not counted in the holds above".format(ran.get("collections"), ran.get("seconds"),
                                                                ran.get("max_ms")))
    # RSS is read right after the census so the ledger compares like with like (or, when the
    # graph's walk counted the heap, as the graph arrived: read while the CLI analyses it).
    process = early.counted_process() if early is not None else None
    if process is None:
        process = process_stats(pid)
    snap = snapshot_from_result(
        pid=pid,
        method=remote.method,
        result=remote.result,
        process=process,
        taken_at=taken_at,
        pause_ms=max(remote.attach_stop_ms, remote.main_thread_ms),
    )
    snap = with_env_worker_children(snap)
    # The snapshot's time is when the target began counting (its own clock; the kernel's is
    # shared with containers), not when the CLI began attaching: the first inspection of a
    # process loads the payload, and diff's rates divide by the time between two snapshots.
    snap = replace(snap, taken_at=counted_at(remote.result.get("heap"), "started_at", taken_at))
    if remote.cost is not None:
        measured = {k: v for k, v in vars(remote.cost).items() if k != "note"}
        snap = replace(snap, cost=RequestCost(**measured),
                       warnings=snap.warnings + ((remote.cost.note,) if remote.cost.note else ()))
    if owner_model == "census":
        return _analysed(Capture(snap))
    doc = early.doc if early is not None else remote.result.get("graph")
    if not isinstance(doc, dict) or doc.get("skipped"):
        return _analysed(Capture(not_attributed(snap, doc if isinstance(doc, dict) else None, owner_model=owner_model)))
    if early is not None:
        # The dominator pass ran while the target counted; the names came with the result.
        graph, found = early.finish(remote.result.get("names"))
    else:
        def ask_names(paths: list[list[int]]) -> list[Any]:
            # The owners' paths walked again in the target, to name instance attributes there.
            left = timeout if deadline.follows_progress else max(5.0, deadline.limit_left())
            answer = run_request(pid, {"op": "names", "paths": paths}, method=remote.method, timeout=left,
                                 log=log, target=target, force=force)
            labels = answer.result.get("labels")
            return labels if isinstance(labels, list) else []

        graph, found = _dominator_owners(doc, top=max(top, 20), retainers=retainers, why=why, ask_names=ask_names)
    asked = tuple(_owner(o) for o in found.why)
    snap = replace(snap, taken_at=counted_at(remote.result.get("heap"), "graph_started_at", snap.taken_at))
    return _analysed(Capture(with_dominator_owners(snap, graph, found), graph, found.tree, asked))


# What would let the owners be computed, by why they were not (the header and the JSON note).
_CENSUS_INSTEAD = ("`inspect --owners census` lists first reachers instead (each object under the first named root "
                   "that reaches it: not what freeing it returns)")
_WHAT_WOULD_ALLOW = {
    NotAttributed.GRAPH_OVER_NODES: f"{MAX_GRAPH_NODES_ENV}=N raises the node budget (leakhound holds ~160 bytes "
                                    "a node while it analyses the graph)",
    NotAttributed.GRAPH_OVER_MEMORY_BUDGET: "`inspect --owners dominator` walks it without that budget (the memory "
                                            "limit's headroom still applies)",
    NotAttributed.GRAPH_NO_HEADROOM: "more headroom under the worker's memory limit would (--force lets the "
                                     "request use the headroom less 4 MiB: the kernel may then kill the worker)",
    NotAttributed.GRAPH_OUT_OF_TIME: "a longer --timeout gives the graph more time",
    NotAttributed.NO_GRAPH: "",
}


def not_attributed(snap: Snapshot, doc: dict[str, Any] | None, *, owner_model: str = "auto") -> Snapshot:
    """``snap`` (the census's first-reacher owners) when the object graph was asked for and
    not walked or not finished (``doc``: its ``{"skipped": reason, "skipped_code": ...}``, or
    None when none came): the heap's bytes are one owner, ``<not attributed: ...>``, never a
    first reacher presented as an owner (on the real worker past the budget, the first
    reacher was anyio's task states where trajectories held the bytes); the header says why
    and what would allow it; the per-type view stands."""
    code = doc.get("skipped_code") if doc is not None else None
    reason = NotAttributed(code) if code in {r.value for r in NotAttributed} else NotAttributed.NO_GRAPH
    if reason == NotAttributed.GRAPH_OVER_MEMORY_BUDGET and owner_model == "dominator":
        reason = NotAttributed.GRAPH_NO_HEADROOM  # (explicit dominators have no budget of their own)
    nodes = doc.get("max_nodes") if doc is not None else None
    nodes = nodes if type(nodes) is int and nodes > 0 else 0
    why = str(doc.get("skipped") or "") if doc is not None else "the target sent no object graph"
    allow = "; ".join(a for a in (_WHAT_WOULD_ALLOW[reason], _CENSUS_INSTEAD) if a)
    heap = replace(snap.heap, owner_model=OwnerModel.NOT_ATTRIBUTED.value, owner_model_reason=reason.value,
                   owner_model_note=f"{why or 'the object graph was not walked'}; {allow}")
    owner = Owner(path=not_attributed_owner(reason, nodes), type="", items=snap.heap.objects,
                  retained_bytes=snap.heap.bytes, retained_objects=snap.heap.objects)
    return replace(snap, heap=heap, owners=(owner,))


def _dominator_owners(doc: dict[str, Any], *, top: int, retainers: int, why: str | None,
                      ask_names: dominators.NameAsker) -> tuple[dominators.ObjectGraph, dominators.DominatorOwners]:
    """The graph the target sent, decoded and softened, and its dominator owners. The graph
    comes from inside the target, whose owner controls it: the passes check every index
    they follow (an edge, type or root out of range is their ValueError or IndexError), and
    a graph they cannot use is one clear error."""
    try:
        graph = dominators.soften(dominators.decode_graph(doc))
        return graph, dominators.find_owners(graph, top=top, retainers=retainers, ask_names=ask_names, why=why)
    except (ValueError, IndexError) as exc:  # GraphError is a ValueError
        raise ProtocolViolation(f"the object graph the target sent cannot be used: {exc}") from None


class _EarlyOwners:
    """The dominator pass run while the target is still counting (``early_graph``:
    attach.run_request, every method): the graph arrives before the result
    (``on_partial``), is analysed in a thread of leakhound's own, whose names request is
    posted back within the same request; the target answers it in the result, which
    ``finish`` hands to the thread. One attach instead of two, and the CLI's analysis and the
    target's census run at once, on two cores."""

    def __init__(self, *, top: int, retainers: int, why: str | None, deadline: Deadline, pid: int = 0) -> None:
        self.top, self.retainers, self.why, self.deadline, self.pid = top, retainers, why, deadline, pid
        self._process: ProcessStats | None = None
        self._process_thread: threading.Thread | None = None
        self.doc: dict[str, Any] | None = None
        self._labels: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        self._out: tuple[dominators.ObjectGraph, dominators.DominatorOwners] | None = None
        self._error: BaseException | None = None
        self._records = dominators.Records()
        self._records_error: dominators.GraphError | None = None

    def on_partial(self, name: str, doc: dict[str, Any], post: Post) -> None:
        if self.doc is not None:
            return
        if name == "records":  # the graph's records as the target writes them (debugger paths)
            if self._records_error is None:
                try:
                    self._records.feed(doc["piece"])
                except dominators.GraphError as exc:  # said when the graph is decoded
                    self._records_error = exc
            return
        if name != "graph":
            return
        self.doc = doc
        if "records_streamed" in doc:
            doc["records"] = self._records
            if self._records_error is None and doc["records_streamed"] != doc.get("binary_bytes"):
                self._records_error = dominators.GraphError(
                    f"the graph's records are cut short ({doc['records_streamed']} of {doc.get('binary_bytes')} bytes)")
            if self._records_error is not None:
                doc["records"] = self._records_error
        if doc.get("counts_heap") and self.pid:
            # The graph's walk counted the heap (no census runs after it): the kernel's numbers
            # now, /proc/PID/smaps read on one core while the dominator pass runs on the other.
            self._process_thread = threading.Thread(target=self._read_process, name="leakhound-process",
                                                    daemon=True)
            self._process_thread.start()
        if doc.get("skipped"):
            return  # the target counts owners itself then, and asks for no names
        # Until the names are asked for, the target waits for this work (once it has counted):
        # it is the request's progress, not a stall (the thread ends the hold).
        self.deadline.begin_hold()
        self._thread = threading.Thread(target=self._run, args=(doc, post), name="leakhound-dominators",
                                        daemon=True)
        self._thread.start()

    def _run(self, doc: dict[str, Any], post: Post) -> None:
        posted, held = False, True  # (on_partial began the hold)

        def ask_names(paths: list[list[int]]) -> list[Any]:
            nonlocal posted, held
            post("names", {"paths": paths})
            posted = True
            if held:  # the target's to answer from here on
                held = False
                self.deadline.end_hold()
            labels = self._labels.get(timeout=max(1.0, self.deadline.limit_left()))
            return labels if isinstance(labels, list) else []

        try:
            self._out = _dominator_owners(doc, top=self.top, retainers=self.retainers, why=self.why,
                                          ask_names=ask_names)
        except BaseException as exc:  # raised again on the caller's thread by finish()
            self._error = exc
        finally:
            if not posted:
                post("names", {"paths": []})  # the target waits for it: never leave it waiting
            if held:
                self.deadline.end_hold()

    def _read_process(self) -> None:
        try:
            self._process = process_stats(self.pid)
        except Exception:  # read again by the caller, where its errors are said
            self._process = None

    def counted_process(self) -> ProcessStats | None:
        """The kernel's numbers read as the graph that counted the heap arrived, else None."""
        if self._process_thread is None:
            return None
        self._process_thread.join()
        return self._process

    def finish(self, names: object) -> tuple[dominators.ObjectGraph, dominators.DominatorOwners]:
        """The graph and its owners, once the result (and with it the names) is here."""
        labels = names.get("labels") if isinstance(names, dict) else None
        self._labels.put(labels if isinstance(labels, list) else None)
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        if self._out is None:
            raise dominators.GraphError("the dominator pass did not run")
        return self._out

    def abandon(self) -> None:
        """The request failed or answered without early_graph: let the thread go."""
        try:
            self._labels.put_nowait(None)
        except queue.Full:
            pass


def counted_at(heap: object, key: str, default: float) -> float:
    """The target's time (``time.time()`` there) at which the walk behind the owners began,
    when it said so and it is plausible (within a day of the CLI's); else ``default``."""
    value = heap.get(key) if isinstance(heap, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value - default) < 86400:
        return float(value)
    return default


def with_env_worker_children(snap: Snapshot) -> Snapshot:
    """A process with no verifiers runtime whose children are env workers (the verifiers
    EnvServer, which routes requests to them) names them in its ``verifiers`` probe section,
    ``env_worker_children``: the detectors then say which pid to inspect instead. Read from
    /proc outside the target, by title."""
    section = snap.probes.get("verifiers")
    if not isinstance(section, dict) or "skipped" not in section:
        return snap
    children = env_worker_children(snap.pid)
    if not children:
        return snap
    named = [{"pid": pid, "title": title} for pid, title in children]
    return replace(snap, probes={**snap.probes, "verifiers": {**section, "env_worker_children": named}})


def _analysed(taken: Capture) -> Capture:
    """The detectors run on the finished snapshot (its owners final, from the census or the
    dominator tree), after the target was left: pure functions of it, as for a saved file."""
    taken.snapshot = analyse(taken.snapshot)
    return taken


def _owner(o: dominators.DominatorOwner, graph: dominators.ObjectGraph | None = None) -> Owner:
    return Owner(path=o.path, type=o.type, items=o.items, retained_bytes=o.retained_bytes,
                 retained_objects=o.retained_objects, retainers=o.retainers,
                 object_id=int(graph.ids[o.node]) if graph is not None else 0, path_ids=o.path_ids)


def with_dominator_owners(snap: Snapshot, graph: dominators.ObjectGraph,
                          found: dominators.DominatorOwners) -> Snapshot:
    """``snap`` with the dominator owners in place of the census's."""
    unreached = graph.info.get("unreached") or {}
    note = "" if found.named else "owner paths named from the graph only (the target did not answer names)"
    if not unreached.get("examined", True):
        note = (note + "; " if note else "") + str(unreached.get("reason", ""))
    heap = replace(
        snap.heap,
        owner_model="dominator",
        owner_model_note=note,
        graph_nodes=graph.nodes,
        graph_edges=graph.edges,
        graph_seconds=round(float(graph.info.get("graph_seconds") or 0.0), 4),
        dominator_seconds=round(found.analysis_seconds, 4),
        max_pause_ms=round(max(snap.heap.max_pause_ms, float(graph.info.get("max_step_ms") or 0.0)), 2),
        # the longest the target's GIL was held between two yields: the census's or the graph's
        max_hold_ms=round(max(snap.heap.max_hold_ms, float(graph.info.get("max_held_ms") or 0.0)), 2),
        payload_peak_bytes=max(snap.heap.payload_peak_bytes, int(graph.info.get("payload_peak_bytes") or 0)),
    )
    return replace(snap, heap=heap, owners=_payload_grouped([_owner(o, graph) for o in found.owners]))


_PAYLOAD_PREFIX = PAYLOAD_PACKAGE + "."


def _payload_grouped(owners: list[Owner]) -> tuple[Owner, ...]:
    """The loaded payload's own objects (its modules' classes, functions, code) as one owner,
    ``<leakhound payload>``, as the census counts them: not among the target's owners."""
    ours = [o for o in owners if o.path.startswith(_PAYLOAD_PREFIX)]
    if not ours:
        return tuple(owners)
    grouped = Owner(path=PAYLOAD_OWNER, type="module", items=sum(o.items for o in ours),
                    retained_bytes=sum(o.retained_bytes for o in ours),
                    retained_objects=sum(o.retained_objects for o in ours))
    rest = [o for o in owners if not o.path.startswith(_PAYLOAD_PREFIX)]
    return tuple(sorted([*rest, grouped], key=lambda o: -o.retained_bytes))
