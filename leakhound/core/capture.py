"""Take a snapshot of a live process: attach, run the census, read the kernel's numbers.

The one place that turns a payload's answer (decoded by ``core/decode.py``) into a
``Snapshot`` with its owners (and runs the detectors on it).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from leakhound.analysis import dominators
from leakhound.analysis.detectors import analyse
from leakhound.analysis.sites import SitesFound, attribute_sites
from leakhound.attach.base import AttachLog
from leakhound.attach.channel import Post, Progress
from leakhound.attach.deadline import FOLLOW_PROGRESS as FOLLOW_PROGRESS  # the commands' default: they import no attach
from leakhound.attach.deadline import Deadline
from leakhound.attach.process import process_stats, resolve_target
from leakhound.core.decode import (
    GraphOutcome,
    Holds,
    decode_graph_outcome,
    decode_names,
    decode_sites,
    decode_snapshot,
)
from leakhound.core.request import SNAPSHOT_REQUESTS, RequestOptions, ask
from leakhound.core.targets import env_worker_children
from leakhound.errors import ProtocolViolation
from leakhound.model import Owner, ProcessStats, RequestCost, Snapshot
from leakhound.model.names import (
    PAYLOAD_OWNER,
    PAYLOAD_PACKAGE,
    NotAttributed,
    OwnerModel,
    Owners,
    not_attributed_owner,
)
from leakhound.payload import wire

if TYPE_CHECKING:
    from leakhound.payload.wire import SnapshotRequest

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


def graph_node_budget(owners: Owners, environ: Mapping[str, str] | None = None) -> int:
    """The node budget for ``owners``: ``LEAKHOUND_MAX_GRAPH_NODES`` when it is a positive
    integer (at most the ceiling), else the default."""
    text = (os.environ if environ is None else environ).get(MAX_GRAPH_NODES_ENV, "").strip().replace("_", "")
    if text.isdigit() and int(text) > 0:
        return min(int(text), MAX_GRAPH_NODES_CEILING)
    return DOMINATOR_MAX_GRAPH_NODES if owners == Owners.DOMINATOR else DEFAULT_MAX_GRAPH_NODES


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
    request: RequestOptions = SNAPSHOT_REQUESTS,
    top: int = 20,
    progress: Progress | None = None,
    max_pause_ms: float | None = DEFAULT_MAX_PAUSE_MS,
    owners: Owners = Owners.CENSUS,
    sites: bool = False,
) -> Snapshot:
    """One census of ``pid``, made the way ``request`` says. ``max_pause_ms``: skip the one
    step of the census that cannot be split (listing every gc-tracked object, needed to find
    objects no named root reaches) when it would hold the target longer than this; None or
    0: never skip it. ``owners``: census (first reachers), auto (dominator owners when the
    graph fits its budgets, else none named) or dominator (model/names.py ``Owners``).
    ``sites``: read (and stop) the allocation-site tracker a watch started in the target as
    the graph's walk ends, and give each owner its sites."""
    return capture(pid, request=request, top=top, progress=progress, max_pause_ms=max_pause_ms,
                   owners=owners, sites=sites).snapshot


def capture(
    pid: int,
    *,
    request: RequestOptions = SNAPSHOT_REQUESTS,
    top: int = 20,
    progress: Progress | None = None,
    max_pause_ms: float | None = DEFAULT_MAX_PAUSE_MS,
    owners: Owners = Owners.AUTO,
    max_graph_nodes: int | None = None,
    retainers: int = 3,
    why: str | None = None,
    sites: bool = False,
) -> Capture:
    """``take_snapshot``, keeping the object graph and its dominator tree when they were used."""
    target = resolve_target(pid)
    taken_at = time.time()
    owners = Owners(owners)
    asked: SnapshotRequest = {"op": wire.OP_SNAPSHOT, "top_types": max(top, 50), "top_owners": max(top, 50)}
    if owners != Owners.CENSUS:
        asked["graph"] = True
        asked["census_owners"] = False  # a skipped graph's owners are not attributed (not_attributed)
        if max_graph_nodes is None:
            max_graph_nodes = graph_node_budget(owners)
        asked["max_graph_nodes"] = max_graph_nodes
        if owners == Owners.AUTO:
            asked["max_graph_bytes"] = graph_memory_budget(pid)
    if max_pause_ms:
        asked["max_pause_ms"] = max_pause_ms
    if sites:
        asked["sites"] = True
    if os.environ.get("LEAKHOUND_WALKER") == "python":
        # The pure-Python census loop even where the compiled one loads (benchmarks, tests).
        asked["walker"] = "python"
    deadline = Deadline.for_request(pid, request.timeout)
    early = _EarlyOwners(top=max(top, 20), retainers=retainers, why=why, deadline=deadline, pid=pid) \
        if "graph" in asked else None
    try:
        remote = ask(pid, dict(asked), request=request, progress=progress, target=target,
                     on_partial=early.on_partial if early is not None else None, deadline=deadline)
        answer = decode_snapshot(pid, remote.result, method=remote.method, taken_at=taken_at,
                                 pause_ms=max(remote.attach_stop_ms, remote.main_thread_ms))
    except BaseException:
        if early is not None:
            early.abandon()
        raise
    # The payload hands the graph over before its answer (wire.PARTIAL_GRAPH) on every
    # method; an answer may carry it instead (wire.SnapshotAnswer.graph).
    graph = early.graph if early is not None else None
    in_answer = graph is None and answer.graph is not None
    if in_answer:
        graph = answer.graph
    _log_holds(request.log, answer.holds, graph)
    # RSS is read right after the census so the ledger compares like with like (or, when the
    # graph's walk counted the heap, as the graph arrived: read while the CLI analyses it).
    process = early.counted_process() if early is not None else None
    if process is None:
        process = process_stats(pid)
    snap = with_env_worker_children(replace(answer.snapshot, pid=pid, process=process))
    # The snapshot's time is when the target began counting (its own clock; the kernel's is
    # shared with containers), not when the CLI began attaching: the first inspection of a
    # process loads the payload, and diff's rates divide by the time between two snapshots.
    snap = replace(snap, taken_at=counted_at(answer.started_at, taken_at))
    if remote.cost is not None:
        measured = {k: v for k, v in vars(remote.cost).items() if k != "note"}
        snap = replace(snap, cost=RequestCost(**measured),
                       warnings=snap.warnings + ((remote.cost.note,) if remote.cost.note else ()))
    found_sites = decode_sites(pid, remote.result.get("sites")) if sites else None
    if owners == Owners.CENSUS:
        return _analysed(Capture(_with_sites(snap, found_sites, None, None, {})))
    if early is None or graph is None or graph.skipped:
        if early is not None:
            early.abandon()
        return _analysed(Capture(_with_sites(not_attributed(snap, graph, owners=owners), found_sites, None, None, {})))
    if in_answer:
        early.abandon()

        def names(paths: list[list[int]], types: list[list[str]]) -> list[Any] | None:
            # The owners' paths walked again in the target, to name instance attributes there.
            left = request.timeout if deadline.follows_progress else max(5.0, deadline.limit_left())
            named = ask(pid, {"op": wire.OP_NAMES, "paths": paths, "types": types},
                        request=request.via(remote.method).within(left),
                        target=target)
            return decode_names(pid, named.result)

        object_graph, found = _owners_named_after(graph.doc, names, top=max(top, 20), retainers=retainers, why=why)
    else:
        # The dominator pass ran while the target counted; the names came with the answer.
        object_graph, found = early.finish(answer.names)
    snap = replace(snap, taken_at=counted_at(answer.graph_started_at, snap.taken_at))
    snap = _with_sites(with_dominator_owners(snap, object_graph, found, graph), found_sites, object_graph, found.tree,
                       {o.node: o.path for o in found.owners})
    return _analysed(Capture(snap, object_graph, found.tree, tuple(_owner(o) for o in found.why)))


def _with_sites(snap: Snapshot, found: SitesFound | None, graph: dominators.ObjectGraph | None,
                tree: dominators.DominatorTree | None, owner_nodes: dict[int, str]) -> Snapshot:
    """``snap`` with the tracker's surviving samples attributed to its owners (analysis/sites.py)."""
    if found is None:
        return snap
    per_owner, tracking = attribute_sites(found, graph, tree, owner_nodes)
    owners = tuple(replace(o, sites=per_owner[o.path]) if o.path in per_owner else o for o in snap.owners)
    return replace(snap, owners=owners, sites=tracking)


def _log_holds(log: AttachLog, holds: Holds, graph: GraphOutcome | None) -> None:
    """Where the payload's time went (-v): phase wall s / CPU s in the target, and how long
    the census and the graph held the target's GIL between yields."""
    for key, spent in (("payload", holds.payload_phases), ("census", holds.census_phases)):
        if spent:
            log(f"{key} phases: " + ", ".join(f"{k} {wall:.3f}/{cpu:.3f} s" for k, (wall, cpu) in spent.items()))
    if holds.max_hold_ms is not None:  # (None: no census ran; the graph's line says how it held the GIL)
        log(f"census held the GIL at most {holds.max_hold_ms} ms between yields ({holds.yields} yields;"
            f" after phase {holds.max_hold_after!r})")
        if holds.max_hold_where is not None:
            gap_where = holds.max_gap_where or ("?", "?")
            log("census's longest stretch: from {} to {}; longest run between two looks at the clock"
                " {} ms: from {} to {}".format(*holds.max_hold_where, holds.max_gap_ms, *gap_where))
    if graph is not None and graph.max_held_where is not None:
        log("graph held the GIL at most {:.2f} ms between yields ({} yields), from {} to {};"
            " the target's collections meanwhile, per generation: {}".format(
                graph.max_held_ms, graph.yields, *graph.max_held_where, list(graph.gc_collections)))
    if any(holds.target_gc_collections):
        log(f"the target's own collections ran in the payload's thread (per generation "
            f"{list(holds.target_gc_collections)}): {holds.target_gc_seconds} s, the longest "
            f"{holds.target_gc_max_ms} ms; not counted in the holds above")


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


def not_attributed(snap: Snapshot, graph: GraphOutcome | None, *, owners: Owners = Owners.AUTO) -> Snapshot:
    """``snap`` (the census's first-reacher owners) when the object graph was asked for and
    not walked or not finished (``graph``: why, ``skipped`` and ``skipped_code``, or None
    when none came): the heap's bytes are one owner, ``<not attributed: ...>``, never a
    first reacher presented as an owner (on the real worker past the budget, the first
    reacher was anyio's task states where trajectories held the bytes); the header says why
    and what would allow it; the per-type view stands."""
    code = graph.skipped_code if graph is not None else ""
    reason = NotAttributed(code) if code in {r.value for r in NotAttributed} else NotAttributed.NO_GRAPH
    if reason == NotAttributed.GRAPH_OVER_MEMORY_BUDGET and owners == Owners.DOMINATOR:
        reason = NotAttributed.GRAPH_NO_HEADROOM  # (explicit dominators have no budget of their own)
    nodes = graph.max_nodes if graph is not None else 0
    why = graph.skipped if graph is not None else "the target sent no object graph"
    allow = "; ".join(a for a in (_WHAT_WOULD_ALLOW[reason], _CENSUS_INSTEAD) if a)
    heap = replace(snap.heap, owner_model=OwnerModel.NOT_ATTRIBUTED.value, owner_model_reason=reason.value,
                   owner_model_note=f"{why or 'the object graph was not walked'}; {allow}")
    owner = Owner(path=not_attributed_owner(reason, nodes), type="", items=snap.heap.objects,
                  retained_bytes=snap.heap.bytes, retained_objects=snap.heap.objects)
    return replace(snap, heap=heap, owners=(owner,))


def _unusable_graph(exc: Exception) -> ProtocolViolation:
    """The graph comes from inside the target, whose owner controls it: the passes check
    every index they follow (an edge, type or root out of range is their ValueError or
    IndexError), and a graph they cannot use is one clear error."""
    return ProtocolViolation(f"the object graph the target sent cannot be used: {exc}")


def _owners_named_after(doc: dict[str, Any], names: Callable[[list[list[int]], list[list[str]]], list[Any] | None],
                        *, top: int,
                        retainers: int, why: str | None) -> tuple[dominators.ObjectGraph, dominators.DominatorOwners]:
    """The owners of a graph that came in the answer: planned, then named with what ``names``
    gets from the target for their paths (another request; None: the graph's own labels)."""
    try:
        graph = dominators.soften(dominators.decode_graph(doc))
        plan = dominators.plan_owners(graph, top=top, retainers=retainers, why=why)
    except (ValueError, IndexError) as exc:  # GraphError is a ValueError
        raise _unusable_graph(exc) from None
    labels = None
    if plan.name_paths:
        try:
            labels = names(plan.name_paths, plan.name_types)
        except Exception:  # names are a nicety: the graph's own labels stand in
            labels = None
    try:
        return graph, dominators.name_owners(plan, labels)
    except (ValueError, IndexError) as exc:
        raise _unusable_graph(exc) from None


class _EarlyOwners:
    """The dominator pass run while the target is still counting (``early_graph``:
    attach.run_request, every method): the graph arrives before the answer
    (``on_partial``) and is analysed in a thread of leakhound's own, which posts the paths
    the owners need named back within the same request; the target names them in its
    answer, which ``finish`` hands to the thread. One attach instead of two, and the CLI's
    analysis and the target's census run at once, on two cores. The analysis itself
    (``dominators.plan_owners``, ``name_owners``) never talks to the target."""

    def __init__(self, *, top: int, retainers: int, why: str | None, deadline: Deadline, pid: int = 0) -> None:
        self.top, self.retainers, self.why, self.deadline, self.pid = top, retainers, why, deadline, pid
        self._process: ProcessStats | None = None
        self._process_thread: threading.Thread | None = None
        self.graph: GraphOutcome | None = None
        self._labels: queue.Queue[list[Any] | None] = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        self._out: tuple[dominators.ObjectGraph, dominators.DominatorOwners] | None = None
        self._error: BaseException | None = None
        self._records = dominators.Records()
        self._records_error: dominators.GraphError | None = None

    def on_partial(self, name: str, doc: dict[str, Any], post: Post) -> None:
        if self.graph is not None:
            return
        if name == wire.PARTIAL_RECORDS:  # the graph's records as the target writes them (debugger paths)
            if self._records_error is None:
                try:
                    self._records.feed(doc["piece"])
                except dominators.GraphError as exc:  # said when the graph is decoded
                    self._records_error = exc
            return
        if name != wire.PARTIAL_GRAPH:
            return
        graph = self.graph = decode_graph_outcome(doc)
        if not graph.readable:
            # Another payload version: its answer is refused (decode_snapshot), so nothing is
            # analysed, and the target is told at once that no names are wanted.
            post(wire.REPLY_NAMES, {"paths": []})
            return
        if graph.records_streamed is not None:
            doc["records"] = self._records
            if self._records_error is None and graph.records_streamed != graph.binary_bytes:
                self._records_error = dominators.GraphError(
                    f"the graph's records are cut short ({graph.records_streamed} of {graph.binary_bytes} bytes)")
            if self._records_error is not None:
                doc["records"] = self._records_error
        if graph.counts_heap and self.pid:
            # The graph's walk counted the heap (no census runs after it): the kernel's numbers
            # now, /proc/PID/pagemap read on one core while the dominator pass runs on the other.
            self._process_thread = threading.Thread(target=self._read_process, name="leakhound-process",
                                                    daemon=True)
            self._process_thread.start()
        if graph.skipped:
            return  # the target counts owners itself then, and asks for no names
        # Until the names are asked for, the target waits for this work (once it has counted):
        # it is the request's progress, not a stall (the thread ends the hold).
        self.deadline.begin_hold()
        self._thread = threading.Thread(target=self._run, args=(doc, post), name="leakhound-dominators",
                                        daemon=True)
        self._thread.start()

    def _run(self, doc: dict[str, Any], post: Post) -> None:
        paths: list[list[int]] = []
        types: list[list[str]] = []
        # The target waits for the paths as long as these beats come (wire.names_working).
        beating = threading.Event()
        beats = threading.Thread(target=_beat, args=(post, beating), name="leakhound-names-beat", daemon=True)
        beats.start()
        try:
            try:
                graph = dominators.soften(dominators.decode_graph(doc))
                plan = dominators.plan_owners(graph, top=self.top, retainers=self.retainers, why=self.why)
                paths, types = plan.name_paths, plan.name_types
            except (ValueError, IndexError) as exc:  # GraphError is a ValueError
                raise _unusable_graph(exc) from None
        except BaseException as exc:  # raised again on the caller's thread by finish()
            self._error = exc
        finally:
            beating.set()
            beats.join()  # its last beat must not land after the paths
            try:
                # the target waits for it: never leave it waiting
                post(wire.REPLY_NAMES, {"paths": paths, "types": types})
            except Exception:  # names are a nicety: the graph's own labels stand in
                paths = []
            self.deadline.end_hold()  # the target's to answer from here on
        if self._error is not None:
            return
        labels = None
        if paths:
            try:
                labels = self._labels.get(timeout=max(1.0, self.deadline.limit_left()))
            except queue.Empty:  # names are a nicety: the graph's own labels stand in
                pass
        try:
            self._out = graph, dominators.name_owners(plan, labels)
        except (ValueError, IndexError) as exc:
            self._error = _unusable_graph(exc)
        except BaseException as exc:
            self._error = exc

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

    def finish(self, labels: list[Any] | None) -> tuple[dominators.ObjectGraph, dominators.DominatorOwners]:
        """The graph and its owners, once the answer (and with it the names) is here."""
        self._labels.put(labels)
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        if self._out is None:
            raise dominators.GraphError("the dominator pass did not run")
        return self._out

    def abandon(self) -> None:
        """The request failed, or its answer is not used: let the thread go."""
        try:
            self._labels.put_nowait(None)
        except queue.Full:
            pass


def _beat(post: Post, stop: threading.Event) -> None:
    """A new ``wire.names_working`` beat every ``wire.NAMES_BEAT_SECONDS`` until ``stop``."""
    beat = 0
    while not stop.wait(wire.NAMES_BEAT_SECONDS):
        beat += 1
        try:
            post(wire.REPLY_NAMES, wire.names_working(beat))
        except Exception:  # names are a nicety: the target's own wait stands
            return


def counted_at(value: object, default: float) -> float:
    """``value``, the target's time (``time.time()`` there) at which the walk behind the
    owners began, when it is one and plausible (within a day of the CLI's); else ``default``."""
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


def _owner(o: dominators.DominatorOwner, graph: dominators.ObjectGraph | None = None,
           groups: frozenset[int] = frozenset()) -> Owner:
    # a group of objects held from C is no object of the target: matched by its path
    # (nor is a shared owner, node < -1: what several objects hold together)
    object_id = int(graph.ids[o.node]) if graph is not None and o.node >= 0 and o.node not in groups else 0
    return Owner(path=o.path, type=o.type, items=o.items, retained_bytes=o.retained_bytes,
                 retained_objects=o.retained_objects, retainers=o.retainers,
                 object_id=object_id, path_ids=o.path_ids, path_steps=o.path_steps, count_ids=o.count_ids,
                 count_type=o.count_type, chain=o.chain, chain_end=o.chain_end)


def with_dominator_owners(snap: Snapshot, graph: dominators.ObjectGraph, found: dominators.DominatorOwners,
                          walked: GraphOutcome) -> Snapshot:
    """``snap`` with the dominator owners in place of the census's (``walked``: how the
    target walked the graph)."""
    note = "" if found.named else "owner paths named from the graph only (the target did not answer names)"
    if not walked.unreached_examined:
        note = (note + "; " if note else "") + walked.unreached_reason
    heap = replace(
        snap.heap,
        owner_model="dominator",
        owner_model_note=note,
        graph_nodes=graph.nodes,
        graph_edges=graph.edges,
        graph_seconds=round(walked.graph_seconds, 4),
        dominator_seconds=round(found.analysis_seconds, 4),
        max_pause_ms=round(max(snap.heap.max_pause_ms, walked.max_step_ms), 2),
        # the longest the target's GIL was held between two yields: the census's or the graph's
        max_hold_ms=round(max(snap.heap.max_hold_ms, walked.max_held_ms), 2),
        payload_peak_bytes=max(snap.heap.payload_peak_bytes, walked.payload_peak_bytes),
    )
    groups = graph.stand_ins()
    return replace(snap, heap=heap, owners=_payload_grouped([_owner(o, graph, groups) for o in found.owners]))


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
