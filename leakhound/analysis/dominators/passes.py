"""The passes over the graph, each in C (``_dominators.c``) where it is built and in pure
Python otherwise (the same algorithm and arrays: correct, slower): the dominator tree and
retained sizes (semi-NCA), softening the threads' frames, the preferred paths from the roots
(Dijkstra), CSR grouping, the tree's children and dominated counts.
"""

from __future__ import annotations

import array
import dataclasses
import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from leakhound.analysis.dominators.graph import Ints, ObjectGraph, ints, raw_of

try:
    from leakhound.analysis import _dominators  # type: ignore[attr-defined]
except ImportError:  # no compiler at install: the pure-Python pass below
    _dominators = None

# Naming an owner, paths compare as (root tier, back-references, task rank, length, unnamed
# steps): an edge out of a back-reference costs more than any task rank and path length; each
# later task's root costs more than any path length (Task-1's name before a request task's, a
# stable one); an instance's materialized ``__dict__`` is a step its attributes' names pass
# through (3.10 materializes every one, 3.11+ some), which costs next to nothing: a path is not
# longer for the dicts it passes through; of two paths as long, the one with fewer steps
# without a name (a container's entry, a local named by its type) names the owner. (A watch of
# the verifiers worker named its Runtime's registry, in one sample in several, through a
# rollout in flight's ``<coroutine>.<coroutine>.<set>[]``, not the task's
# ``self.env.harness.runtime``.)
NAMED_STEP_COST = 16
UNNAMED_STEP_COST = NAMED_STEP_COST + 1
PASS_STEP_COST = 1
BACK_REFERENCE_COST = NAMED_STEP_COST << 24
TASK_RANK_COST = NAMED_STEP_COST << 12
_BACK_REFERENCE_TYPES = frozenset({
    "method", "builtin_function_or_method", "functools.partial", "weakref.WeakKeyDictionary",
    "weakref.WeakValueDictionary", "weakref.WeakSet", "weakref.WeakMethod", "weakref.finalize",
    "logging.Logger", "logging.RootLogger",
})


def _is_back_reference_type(name: str) -> bool:
    """A type whose outgoing references are not a name for what they reach: bound methods,
    weak registries, loggers, event loops (a loop's ready queue and timers reach every
    task scheduled at that moment: a path through them named the Runtime after Task-1's
    local loop variable, ``run.<_UnixSelectorEventLoop>._ready[]._callback.<Task>``) and
    contexts (a pending future's callback holds the context of the task that waits: a path
    through it named a consumer's context variable after the task holding the queue,
    ``serve.queue._getters[].<Context>.<hamt>...``; the task names its own variables)."""
    return (name in _BACK_REFERENCE_TYPES or name.endswith("EventLoop") or name == "uvloop.Loop"
            or name == "_contextvars.Context")


_BACK_REFERENCE_NAMES = frozenset({
    "__self__", "parent", "_parent", "owner", "_owner", "__wrapped__", "_loop", "loop", "manager",
    "_manager", "root", "_root", "app", "_app",
})


def compiled() -> Any:
    """The C passes where they were built, else None (looked up at each call: the tests run
    the pure-Python passes by setting ``_dominators`` to None)."""
    return _dominators


@dataclass
class DominatorTree:
    idom: Ints  # per node; -1 for the root and unreachable nodes
    retained: Ints  # per node
    seconds: float = 0.0
    peak_bytes: int = 0
    engine: str = ""


# Roots that dominate only what no other root reaches (soften), however reached.
SOFT_ROOT_KINDS = frozenset({"thread", "held"})
# Roots soft until another root reaches them, then objects like any other (held, and walked
# through, as any): a class (the subclass tree that lists it holds none), a signal handler (one
# that is the app's bound method, ``server.handle_exit``, does not take the server from
# ``__main__``).
YIELDING_ROOT_KINDS = frozenset({"class", "signal"})


def soften(graph: ObjectGraph) -> ObjectGraph:
    """``graph`` without the edges from what only soft roots (threads' frames, objects held
    from C) reach into what the other roots reach: a soft root dominates only what nothing
    else holds. A function in the middle of iterating over a registry (a list of its entries
    in a local) would otherwise take every entry from the registry for as long as it runs
    (measured on the verifiers worker: its report thread split ``trajectories`` into
    per-entry owners). A frame is soft however it is reached: a running generator (held from
    C by the ``sum()`` consuming it) links its frame to its caller's, and the caller's
    variables (the registry itself) then shared the registry with it (the verifiers worker's
    report task: ``Runtime`` retained 3 KB).

    An object held from C is, by its name, one no Python name reaches; what a named root
    reaches too is not its. Its edges into the rest are mostly the walk's own artefacts: the
    walk takes seconds while the target runs, so an object made after its referrer was
    walked looks held from C (its referrer's reference is outside the unreached set), and
    the compiled walk names nodes by address, so a new object at the address of one that
    died meanwhile carries the dead one's edges. On the simulated verifiers worker a step's
    new ``tool_calls[0]`` at the address of the report's dead ``dict(trajectories)`` copy
    (a running frame's variable when the roots were read) gave every trajectory a second
    path from ``<held from C: dict>``: each a per-entry owner, the registry none, in 3 of 8
    inspections. A value-stack temporary of a running frame or a C call in flight (json's
    encoder, ``sorted()``) holds what it holds for as long as the frame, as a frame does.

    A yielding root (a class, a signal handler) is soft until the other roots reach it, then no
    root at all: an object like any other, held by what holds it and walked through as any (the
    subclass tree that lists a class holds none: its references are weak), so that 200 classes
    made with ``type()`` and kept in a list are that list's, not 200 owners of their own caches,
    and ``logging.Logger.manager`` still names the manager (walked through its class, not cut
    off as a soft root's edge into what the named roots reach)."""
    soft_roots = [node for node, _label, kind, _tier in graph.roots if kind in SOFT_ROOT_KINDS]
    yielding = [node for node, _label, kind, _tier in graph.roots if kind in YIELDING_ROOT_KINDS]
    if not soft_roots and not yielding:
        return graph
    if _dominators is not None:
        s_b, d_b, l_b = _dominators.soft(graph.nodes, graph.edges, raw_of(graph.src), raw_of(graph.dst),
                                         raw_of(graph.lab), array.array("i", soft_roots).tobytes(),
                                         array.array("i", yielding).tobytes())
        src: Ints = ints(s_b, "i")
        dst: Ints = ints(d_b, "i")
        lab: Ints = ints(l_b, "i")
    else:
        src, dst, lab = array.array("i"), array.array("i"), array.array("i")
        soft = set(soft_roots) | set(yielding)
        yields = set(yielding)
        succ_off, edge_ids = _csr_edges(graph.nodes, graph.src)
        hard = bytearray(graph.nodes)
        hard[0] = 1
        stack = [0]
        held = set()  # yielding roots something named holds
        while stack:
            v = stack.pop()
            for k in range(succ_off[v], succ_off[v + 1]):
                w = graph.dst[edge_ids[k]]
                if w in yields and v != 0:
                    held.add(w)  # a yielding root something named holds: an object like any other
                if not hard[w] and (w not in soft or w in held):
                    hard[w] = 1
                    stack.append(w)
        for s, d, lb in zip(graph.src, graph.dst, graph.lab, strict=True):
            if (hard[s] or not hard[d]) and not (s == 0 and d in held):
                src.append(s)
                dst.append(d)
                lab.append(lb)
    info = {**graph.info, "soft_edges_dropped": graph.edges - len(src)}
    return dataclasses.replace(graph, src=src, dst=dst, lab=lab, info=info)


# -- the dominator pass ------------------------------------------------------------------------


def dominators(graph: ObjectGraph, *, compiled: bool = True) -> DominatorTree:
    """Immediate dominators and retained sizes from node 0."""
    import time  # noqa: PLC0415

    started = time.perf_counter()
    n, m = graph.nodes, graph.edges
    if compiled and _dominators is not None:
        idom_b, ret_b = _dominators.dominators(n, m, raw_of(graph.src), raw_of(graph.dst), raw_of(graph.sizes))
        idom: Ints = ints(idom_b, "i")
        retained: Ints = ints(ret_b, "q")
        # the copies passed in, CSR (2 x (n + m) int32), DFS arrays (9 x n int32), results
        peak = (8 * m + 8 * n) + 4 * (2 * (n + 1) + 2 * m) + 4 * 9 * n + 8 * 3 * n
        engine = "compiled"
    else:
        idom, retained = _dominators_python(n, graph.src, graph.dst, graph.sizes)
        peak = 0
        engine = "python"
    return DominatorTree(idom=idom, retained=retained, seconds=time.perf_counter() - started,
                         peak_bytes=peak, engine=engine)


def _csr(n: int, src: Ints, dst: Ints) -> tuple[list[int], list[int]]:
    offsets, ids = _csr_python(n, src)
    return offsets, [dst[e] for e in ids]


def _dominators_python(
    n: int, src: Ints, dst: Ints, sizes: Ints
) -> tuple[Ints, Ints]:
    """Semi-NCA, as _dominators.c, in Python (the same arrays, slower)."""
    succ_off, succ = _csr(n, src, dst)
    pred_off, pred = _csr(n, dst, src)
    pre = [-1] * n
    order: list[int] = [0]
    parent: list[int] = [-1]
    pre[0] = 0
    stack = [0]
    pos = succ_off[:-1]
    while stack:
        v = stack[-1]
        if pos[v] < succ_off[v + 1]:
            w = succ[pos[v]]
            pos[v] += 1
            if pre[w] < 0:
                pre[w] = len(order)
                parent.append(pre[v])
                order.append(w)
                stack.append(w)
        else:
            stack.pop()
    count = len(order)
    semi = list(range(count))
    label = list(range(count))
    anc = [-1] * count
    path: list[int] = []
    for w in range(count - 1, 0, -1):
        node = order[w]
        s = semi[w]
        for e in range(pred_off[node], pred_off[node + 1]):
            v = pre[pred[e]]
            if v < 0:
                continue
            u = v
            if anc[v] >= 0:
                x = v
                while anc[anc[x]] >= 0:
                    path.append(x)
                    x = anc[x]
                while path:
                    x = path.pop()
                    a = anc[x]
                    if semi[label[a]] < semi[label[x]]:
                        label[x] = label[a]
                    anc[x] = anc[a]
                u = label[v]
            if semi[u] < s:
                s = semi[u]
        semi[w] = s
        anc[w] = parent[w]
    idom = [0] * count
    for w in range(1, count):
        d = parent[w]
        while d > semi[w]:
            d = idom[d]
        idom[w] = d
    ret = [sizes[order[w]] for w in range(count)]
    for w in range(count - 1, 0, -1):
        ret[idom[w]] += ret[w]
    idom_node = array.array("i", [-1]) * n
    ret_node = array.array("q", [0]) * n
    for w in range(1, count):
        idom_node[order[w]] = order[idom[w]]
    for w in range(count):
        ret_node[order[w]] = ret[w]
    return idom_node, ret_node


# -- naming: preferred paths from the roots ----------------------------------------------------


@dataclass
class Paths:
    """For every node, the edge it is best reached by (-1: a root or unreached) and its root."""

    via: Ints
    root_of: Ints  # index in graph.roots


_NAMED, _BACK, _UNNAMED, _PASS = 0, 1, 2, 3


def _label_kind(label: str) -> int:
    """An edge label's kind for the path costs: a back-reference (``_BACK``), a step with a
    name (an attribute, a variable, a key, a context variable, an entry folded into its
    collection then what names it), one a name passes through (an instance's ``__dict__``:
    ``_PASS``), or one without a name (a local named by its type, ``t``)."""
    if len(label) > 1 and label[0] in "ak" and label[1:] in _BACK_REFERENCE_NAMES:
        return _BACK
    if label == "d":
        return _PASS
    if label[:1] in ("a", "k", "c") or label[:2] in ("fa", "fk"):
        return _NAMED
    return _UNNAMED


def _root_distances(graph: ObjectGraph) -> list[int]:
    tier_span = 1 << 40
    tasks = 0
    out = []
    for _node, _label, kind, tier in graph.roots:
        dist = tier * tier_span
        if kind == "task":
            # Task-1 (the worker's main coroutine) before the tasks of one request: a name that
            # holds from one snapshot to the next (the target sends tasks in natural order).
            dist += tasks * TASK_RANK_COST
            tasks += 1
        out.append(dist)
    return out


def preferred_paths(graph: ObjectGraph, *, compiled: bool = True, targets: Iterable[int] | None = None) -> Paths:
    """Cheapest paths from the roots: tier first (the app's globals and tasks before a
    library's), then edge cost (plain 1, out of a back-reference ``BACK_REFERENCE_COST``).
    ``targets``: the nodes whose paths are wanted (the search stops once they are settled);
    None: every node's."""
    wanted = b""
    if targets is not None:
        marks = bytearray(graph.nodes)
        for v in targets:
            marks[v] = 1
        wanted = bytes(marks) if any(marks) else b""
    if compiled and _dominators is not None:
        type_back = bytes(_is_back_reference_type(name) for name in graph.type_names)
        label_back = bytes(_label_kind(t) for t in graph.labels)
        blocked = bytearray(graph.nodes)
        for node, _label, _kind, _tier in graph.roots:
            blocked[node] = 1
        via_b, root_b = _dominators.paths(
            graph.nodes, graph.edges, raw_of(graph.src), raw_of(graph.dst), raw_of(graph.types),
            raw_of(graph.lab), type_back, label_back or b"\x00",
            array.array("i", [r[0] for r in graph.roots]).tobytes(),
            array.array("q", _root_distances(graph)).tobytes(), bytes(blocked), BACK_REFERENCE_COST, wanted,
            NAMED_STEP_COST, UNNAMED_STEP_COST, PASS_STEP_COST)
        return Paths(via=ints(via_b, "i"), root_of=ints(root_b, "i"))
    return _preferred_paths_python(graph)


def _preferred_paths_python(graph: ObjectGraph) -> Paths:
    n = graph.nodes
    succ_off, edge_ids = _csr_edges(n, graph.src)
    back_types = [_is_back_reference_type(name) for name in graph.type_names]
    label_kinds = [_label_kind(t) for t in graph.labels]
    types, dst, lab = graph.types, graph.dst, graph.lab
    best = [-1] * n
    via = [-1] * n
    root_of = [-1] * n
    heap: list[tuple[int, int, int, int]] = []
    for r, ((node, _label, _kind, _tier), dist) in enumerate(zip(graph.roots, _root_distances(graph), strict=True)):
        if best[node] < 0 or dist < best[node]:
            best[node] = dist
            root_of[node] = r
            heapq.heappush(heap, (dist, r, node, -1))
    done = bytearray(n)
    # A root is named as itself: a path from a global through the event loop's queues to a
    # task is not the task's name (the census claims tasks up front for the same reason).
    for node, _label, _kind, _tier in graph.roots:
        done[node] = 2
    while heap:
        dist, r, v, _e = heapq.heappop(heap)
        if done[v] == 1 or dist > best[v]:
            continue
        done[v] = 1
        back = back_types[types[v]]
        for k in range(succ_off[v], succ_off[v + 1]):
            e = edge_ids[k]
            w = dst[e]
            if done[w]:
                continue  # settled, or a root
            kind = label_kinds[lab[e]] if lab[e] >= 0 else _UNNAMED
            cost = (BACK_REFERENCE_COST if back or kind == _BACK else UNNAMED_STEP_COST if kind == _UNNAMED
                    else PASS_STEP_COST if kind == _PASS else NAMED_STEP_COST)
            nd = dist + cost
            if best[w] < 0 or nd < best[w]:
                best[w] = nd
                via[w] = e
                root_of[w] = r
                heapq.heappush(heap, (nd, r, w, e))
    return Paths(via=array.array("i", via), root_of=array.array("i", root_of))


def _csr_edges(n: int, src: Ints) -> tuple[Sequence[int], Sequence[int]]:
    """Edge ids grouped by ``src`` (or any per-edge key): (offsets, ids)."""
    if _dominators is not None:
        off_b, ids_b = _dominators.csr(n, len(src), raw_of(src))
        return ints(off_b, "i"), ints(ids_b, "i")
    return _csr_python(n, src)


def _csr_python(n: int, src: Ints) -> tuple[list[int], list[int]]:
    offsets = [0] * (n + 1)
    for s in src:
        offsets[s + 1] += 1
    for i in range(n):
        offsets[i + 1] += offsets[i]
    pos = offsets[:-1]
    ids = [0] * len(src)
    for e, s in enumerate(src):
        ids[pos[s]] = e
        pos[s] += 1
    return offsets, ids


# -- the dominator tree ------------------------------------------------------------------------


def children_of(graph: ObjectGraph, tree: DominatorTree) -> tuple[Sequence[int], Sequence[int]]:
    """The dominator tree as CSR: (offsets, children), children by retained size, biggest first."""
    offsets, kids, _counts = tree_csr(graph, tree)
    return offsets, kids


def tree_csr(graph: ObjectGraph, tree: DominatorTree
             ) -> tuple[Sequence[int], Sequence[int], Sequence[int] | None]:
    """``children_of``'s (offsets, children) and, where the C pass computed them in the same
    pass, ``subtree_counts`` (else None): one pass over a million-node tree, not two."""
    if _dominators is not None:
        off_b, kids_b, counts_b = _dominators.tree(graph.nodes, raw_of(tree.idom), raw_of(tree.retained))
        return ints(off_b, "i"), ints(kids_b, "i"), ints(counts_b, "q")
    offsets, kids = _children_of_python(graph, tree)
    return offsets, kids, None


def _children_of_python(graph: ObjectGraph, tree: DominatorTree) -> tuple[Sequence[int], Sequence[int]]:
    n = graph.nodes
    counts = [0] * (n + 1)
    idom = tree.idom
    for v in range(1, n):
        p = idom[v]
        if p >= 0:
            counts[p + 1] += 1
    for i in range(n):
        counts[i + 1] += counts[i]
    pos = counts[:-1]
    kids = [0] * counts[n]
    for v in range(1, n):
        p = idom[v]
        if p >= 0:
            kids[pos[p]] = v
            pos[p] += 1
    retained = tree.retained
    for p in range(n):
        a, b = counts[p], counts[p + 1]
        if b - a > 1:
            kids[a:b] = sorted(kids[a:b], key=lambda v: -retained[v])
    return counts, kids


def subtree_counts(graph: ObjectGraph, tree: DominatorTree,
                   children: Callable[[int], Sequence[int]]) -> Sequence[int]:
    """How many objects each node dominates, itself included (``children``: the tree's)."""
    if _dominators is not None:
        return ints(_dominators.tree(graph.nodes, raw_of(tree.idom), raw_of(tree.retained))[2], "q")
    counts = [1] * graph.nodes
    order: list[int] = []
    stack = [0]
    while stack:
        x = stack.pop()
        order.append(x)
        stack.extend(children(x))
    idom = tree.idom
    for x in reversed(order):
        if idom[x] >= 0:
            counts[idom[x]] += counts[x]
    return counts
