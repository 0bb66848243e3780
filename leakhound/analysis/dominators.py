"""Retained sizes and owners from the target's object graph: the dominator tree.

The target streams a compact graph (``leakhound/payload/graph.py``); everything here runs
in leakhound's own process. An object's retained size is what freeing it would return: the
sizes of the objects it dominates (every path from the super-root to them passes through
it). The super-root's children are every named root (modules, classes, tasks, thread
frames) and the objects held from C.

Owners are accumulation points, as Eclipse MAT's leak suspects: from each big dominator
subtree, descend while one child holds most of it, down to the object whose entries hold
the bytes; namespaces (modules, classes, instances, tasks, frames) split into their big
children. Each owner is named by a path from a root, preferring the app's own modules and
tasks (root tiers) and avoiding back-references (a bound method's ``__self__``, parent
links, weak-keyed registries) with a higher edge cost.

The dominator pass is ``_dominators.c`` (semi-NCA) where it is built, else the same
algorithm in pure Python (correct, slower).
"""

from __future__ import annotations

import array
import base64
import dataclasses
import heapq
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    from leakhound.analysis import _dominators  # type: ignore[attr-defined]
except ImportError:  # no compiler at install: the pure-Python pass below
    _dominators = None

GRAPH_FORMAT = "leakhound.graph/1"
# Where one child holds this share of its parent's retained bytes, the parent is only a way
# to it: the owner is further down (MAT's "accumulation point").
DESCEND_SHARE = 0.8
# Naming an owner, paths compare as (root tier, back-references, task rank, length): an edge
# out of a back-reference costs more than any task rank and path length; each later task's
# root costs more than any path length (Task-1's name before a request task's, a stable one).
BACK_REFERENCE_COST = 1 << 24
TASK_RANK_COST = 1 << 12
_BACK_REFERENCE_TYPES = frozenset({
    "method", "builtin_function_or_method", "functools.partial", "weakref.WeakKeyDictionary",
    "weakref.WeakValueDictionary", "weakref.WeakSet", "weakref.WeakMethod", "weakref.finalize",
    "logging.Logger", "logging.RootLogger",
})
_BACK_REFERENCE_NAMES = frozenset({
    "__self__", "parent", "_parent", "owner", "_owner", "__wrapped__", "_loop", "loop", "manager",
    "_manager", "root", "_root", "app", "_app",
})
_CONTAINERS = frozenset({"list", "tuple", "set", "frozenset", "dict", "collections.deque",
                         "collections.OrderedDict", "collections.defaultdict", "collections.Counter"})
_TRANSPARENT_TYPES = frozenset({"coroutine", "generator", "async_generator", "frame"})
_LEAVES = frozenset({"str", "bytes", "bytearray", "int", "float", "complex", "array.array", "memoryview"})


class GraphError(ValueError):
    """A graph document leakhound cannot read."""


@dataclass
class ObjectGraph:
    """The decoded graph: node 0 is the super-root."""

    nodes: int
    sizes: array.array[int]
    types: array.array[int]
    ids: array.array[int]  # id() in the target: how a path is named afterwards
    lengths: array.array[int]  # entries of a list, tuple, set or dict; 0 for other objects
    src: array.array[int]
    dst: array.array[int]
    lab: array.array[int]
    type_names: list[str]
    labels: list[str]
    # (node, label, kind, tier) per root
    roots: list[tuple[int, str, str, int]]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def edges(self) -> int:
        return len(self.src)

    def type_of(self, node: int) -> str:
        return self.type_names[self.types[node]]


@dataclass
class DominatorTree:
    idom: array.array[int]  # per node; -1 for the root and unreachable nodes
    retained: array.array[int]  # per node
    seconds: float = 0.0
    peak_bytes: int = 0
    engine: str = ""


def _decode(chunks: Iterable[str], code: str, byteorder: str) -> array.array[int]:
    arr: array.array[int] = array.array(code)
    for chunk in chunks:
        arr.frombytes(base64.b64decode(chunk))
    if byteorder != sys.byteorder:
        arr.byteswap()
    return arr


def decode_graph(doc: dict[str, Any]) -> ObjectGraph:
    """The graph from the payload's ``graph`` result (base64 chunks of native int arrays)."""
    if doc.get("format") != GRAPH_FORMAT:
        raise GraphError(f"unknown graph format {doc.get('format')!r}")
    try:
        order = str(doc["byteorder"])
        graph = ObjectGraph(
            nodes=int(doc["nodes"]),
            sizes=_decode(doc["sizes"], "q", order),
            types=_decode(doc["types"], "i", order),
            ids=_decode(doc["ids"], "q", order),
            lengths=_decode(doc["lengths"], "i", order),
            src=_decode(doc["edge_src"], "i", order),
            dst=_decode(doc["edge_dst"], "i", order),
            lab=_decode(doc["edge_label"], "i", order),
            type_names=[str(t) for t in doc["type_names"]],
            labels=[str(t) for t in doc["labels"]],
            roots=[(int(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in doc["roots"]],
            info={k: doc.get(k) for k in ("graph_seconds", "max_step_ms", "payload_peak_bytes", "unreached")},
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise GraphError(f"malformed graph: {exc}") from None
    n, m = graph.nodes, len(graph.src)
    per_node = (graph.sizes, graph.types, graph.ids, graph.lengths)
    if any(len(a) != n for a in per_node) or not len(graph.dst) == len(graph.lab) == m:
        raise GraphError("graph arrays of different lengths")
    return graph


def soften(graph: ObjectGraph) -> ObjectGraph:
    """``graph`` without the edges from what only threads' frames reach into what the other
    roots reach: a frame dominates only what nothing else holds. A function in the middle of
    iterating over a registry (a list of its entries in a local) would otherwise take every
    entry from the registry for as long as it runs (measured on the verifiers worker: its
    report thread split ``trajectories`` into per-entry owners)."""
    soft_roots = [node for node, _label, kind, _tier in graph.roots if kind == "thread"]
    if not soft_roots:
        return graph
    src: array.array[int] = array.array("i")
    dst: array.array[int] = array.array("i")
    lab: array.array[int] = array.array("i")
    if _dominators is not None:
        s_b, d_b, l_b = _dominators.soft(graph.nodes, graph.edges, graph.src.tobytes(), graph.dst.tobytes(),
                                         graph.lab.tobytes(), array.array("i", soft_roots).tobytes())
        src.frombytes(s_b)
        dst.frombytes(d_b)
        lab.frombytes(l_b)
    else:
        soft = set(soft_roots)
        succ_off, edge_ids = _csr_edges(graph.nodes, graph.src)
        hard = bytearray(graph.nodes)
        hard[0] = 1
        stack = [0]
        while stack:
            v = stack.pop()
            for k in range(succ_off[v], succ_off[v + 1]):
                w = graph.dst[edge_ids[k]]
                if not hard[w] and not (v == 0 and w in soft):
                    hard[w] = 1
                    stack.append(w)
        for s, d, lb in zip(graph.src, graph.dst, graph.lab, strict=True):
            if hard[s] or not hard[d]:
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
        idom_b, ret_b = _dominators.dominators(n, m, graph.src.tobytes(), graph.dst.tobytes(),
                                               graph.sizes.tobytes())
        idom: array.array[int] = array.array("i")
        idom.frombytes(idom_b)
        retained: array.array[int] = array.array("q")
        retained.frombytes(ret_b)
        # the copies passed in, CSR (2 x (n + m) int32), DFS arrays (9 x n int32), results
        peak = (8 * m + 8 * n) + 4 * (2 * (n + 1) + 2 * m) + 4 * 9 * n + 8 * 3 * n
        engine = "compiled"
    else:
        idom, retained = _dominators_python(n, graph.src, graph.dst, graph.sizes)
        peak = 0
        engine = "python"
    return DominatorTree(idom=idom, retained=retained, seconds=time.perf_counter() - started,
                         peak_bytes=peak, engine=engine)


def _csr(n: int, src: array.array[int], dst: array.array[int]) -> tuple[list[int], list[int]]:
    offsets = [0] * (n + 1)
    for s in src:
        offsets[s + 1] += 1
    for i in range(n):
        offsets[i + 1] += offsets[i]
    pos = offsets[:-1]
    targets = [0] * len(src)
    for s, d in zip(src, dst, strict=True):
        targets[pos[s]] = d
        pos[s] += 1
    return offsets, targets


def _dominators_python(
    n: int, src: array.array[int], dst: array.array[int], sizes: array.array[int]
) -> tuple[array.array[int], array.array[int]]:
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

    via: array.array[int]
    root_of: array.array[int]  # index in graph.roots


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
        type_back = bytes(name in _BACK_REFERENCE_TYPES for name in graph.type_names)
        label_back = bytes(len(t) > 1 and t[0] in "ak" and t[1:] in _BACK_REFERENCE_NAMES for t in graph.labels)
        blocked = bytearray(graph.nodes)
        for node, _label, _kind, _tier in graph.roots:
            blocked[node] = 1
        via_b, root_b = _dominators.paths(
            graph.nodes, graph.edges, graph.src.tobytes(), graph.dst.tobytes(), graph.types.tobytes(),
            graph.lab.tobytes(), type_back, label_back or b"\x00",
            array.array("i", [r[0] for r in graph.roots]).tobytes(),
            array.array("q", _root_distances(graph)).tobytes(), bytes(blocked), BACK_REFERENCE_COST, wanted)
        via: array.array[int] = array.array("i")
        via.frombytes(via_b)
        root_of: array.array[int] = array.array("i")
        root_of.frombytes(root_b)
        return Paths(via=via, root_of=root_of)
    return _preferred_paths_python(graph)


def _preferred_paths_python(graph: ObjectGraph) -> Paths:
    n = graph.nodes
    succ_off, edge_ids = _csr_edges(n, graph.src)
    back_types = [name in _BACK_REFERENCE_TYPES for name in graph.type_names]
    back_labels = [len(t) > 1 and t[0] in "ak" and t[1:] in _BACK_REFERENCE_NAMES for t in graph.labels]
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
            cost = BACK_REFERENCE_COST if back or (lab[e] >= 0 and back_labels[lab[e]]) else 1
            nd = dist + cost
            if best[w] < 0 or nd < best[w]:
                best[w] = nd
                via[w] = e
                root_of[w] = r
                heapq.heappush(heap, (nd, r, w, e))
    return Paths(via=array.array("i", via), root_of=array.array("i", root_of))


def _csr_edges(n: int, src: array.array[int]) -> tuple[Sequence[int], Sequence[int]]:
    """Edge ids grouped by ``src`` (or any per-edge key): (offsets, ids)."""
    if _dominators is not None:
        off_b, ids_b = _dominators.csr(n, len(src), src.tobytes())
        c_off: array.array[int] = array.array("i")
        c_off.frombytes(off_b)
        c_ids: array.array[int] = array.array("i")
        c_ids.frombytes(ids_b)
        return c_off, c_ids
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


def path_edges(graph: ObjectGraph, paths: Paths, node: int) -> list[int]:
    """The edges from a root to ``node``, root first."""
    out: list[int] = []
    seen = set()
    while node >= 0 and paths.via[node] >= 0 and node not in seen:
        seen.add(node)
        e = paths.via[node]
        out.append(e)
        node = graph.src[e]
    out.reverse()
    return out


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def path_ids(graph: ObjectGraph, paths: Paths, node: int) -> list[int]:
    """The target's ids along the path to ``node``, its root first: what ``names`` walks."""
    edges = path_edges(graph, paths, node)
    if not edges:
        return [graph.ids[node]]
    return [graph.ids[graph.src[edges[0]]], *(graph.ids[graph.dst[e]] for e in edges)]


def render_path(graph: ObjectGraph, paths: Paths, node: int, names: list[str] | None = None) -> str:
    """``__main__.APP.rows``, ``task:Task-1/run.<EnvWorker>.env.harness.runtime.trajectories``:
    the root's name, then one step per edge (attributes and str keys of attribute dicts as
    ``.name``, other dict keys as ``['key']``, container entries as ``[]``, a coroutine's or
    frame's local as ``.<Type>``). No line numbers: the name is stable across snapshots."""
    r = paths.root_of[node]
    if r < 0:
        return f"<unreached: {graph.type_of(node)}>"
    edges = path_edges(graph, paths, node)
    text = graph.roots[r][1]
    start = graph.src[edges[0]] if edges else node
    if start != graph.roots[r][0]:
        text = graph.roots[paths.root_of[start]][1]
    attribute_dict = False
    for step, e in enumerate(edges):
        if names is not None and step < len(names) and names[step]:
            label = names[step]
        else:
            label = graph.labels[graph.lab[e]] if graph.lab[e] >= 0 else ""
        src_type = graph.type_of(graph.src[e])
        dst_type = graph.type_of(graph.dst[e])
        entered_attribute_dict = False
        if label == "d":
            entered_attribute_dict = True
        elif label.startswith("a"):
            text += "." + label[1:]
        elif label.startswith("k"):
            key = label[1:]
            text += "." + key if attribute_dict and key.isidentifier() else f"[{key!r}]"
        elif label.startswith("t"):
            text += ".<" + label[1:] + ">"
        elif _short(dst_type) in _TRANSPARENT_TYPES:
            pass
        elif src_type in _CONTAINERS:
            text += "[]"
        else:
            text += ".<" + _short(dst_type) + ">"
        attribute_dict = entered_attribute_dict
    return text


# -- owners ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetainerPath:
    """A path from a root: the root (an index in ``graph.roots``) and the edges from it."""

    root: int
    edges: tuple[int, ...]


@dataclass(frozen=True)
class DominatorOwner:
    node: int
    path: str
    type: str
    retained_bytes: int
    retained_objects: int
    items: int
    retainers: tuple[str, ...] = ()


def children_of(graph: ObjectGraph, tree: DominatorTree) -> tuple[Sequence[int], Sequence[int]]:
    """The dominator tree as CSR: (offsets, children), children by retained size, biggest first."""
    if _dominators is not None:
        off_b, kids_b, _counts = _dominators.tree(graph.nodes, tree.idom.tobytes(), tree.retained.tobytes())
        c_offsets: array.array[int] = array.array("i")
        c_offsets.frombytes(off_b)
        c_kids: array.array[int] = array.array("i")
        c_kids.frombytes(kids_b)
        return c_offsets, c_kids
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


class OwnerFinder:
    """Accumulation points of the dominator tree and their paths from the roots."""

    def __init__(self, graph: ObjectGraph, tree: DominatorTree) -> None:
        self.graph = graph
        self.tree = tree
        self.offsets, self.kids = children_of(graph, tree)
        self._paths: Paths | None = None
        self.root_kind = {node: kind for node, _label, kind, _tier in graph.roots}
        self._counts: Sequence[int] | None = None
        self._pred: tuple[Sequence[int], Sequence[int]] | None = None
        self._out: Sequence[int] | None = None

    @property
    def paths(self) -> Paths:
        """Every node's preferred path (``settle`` first computes only the ones wanted)."""
        if self._paths is None:
            self._paths = preferred_paths(self.graph)
        return self._paths

    def settle(self, targets: Iterable[int]) -> None:
        """Compute the preferred paths of ``targets`` only (and what lies on them)."""
        self._paths = preferred_paths(self.graph, targets=targets)

    def referrers(self, v: int) -> list[int]:
        offsets, edge_ids = self._preds()
        return [self.graph.src[edge_ids[k]] for k in range(offsets[v], offsets[v + 1])]

    def children(self, v: int) -> Sequence[int]:
        return self.kids[self.offsets[v]:self.offsets[v + 1]]

    def _namespace(self, v: int) -> bool:
        """Nodes whose children are distinct named parts (modules, classes, instances, tasks,
        frames, attribute dicts), not the entries of one collection."""
        if v == 0 or v in self.root_kind:
            return True
        name = self.graph.type_of(v)
        if name == "dict":
            # A module's or class's dict, or an instance's attribute dict (the instance's only
            # reference: 3.11+ keep attributes inline, and then a dict under an instance is an
            # attribute's value, a collection).
            p = self.tree.idom[v]
            if p > 0 and p in self.root_kind:
                return True
            return p > 0 and self.graph.type_of(p) not in _CONTAINERS and self._out_degree(p) == 1
        return name not in _CONTAINERS and name not in _LEAVES

    def _out_degree(self, v: int) -> int:
        if self._out is None:
            self._out = _csr_edges(self.graph.nodes, self.graph.src)[0]
        return self._out[v + 1] - self._out[v]

    def find(self, *, top: int = 20, min_bytes: int | None = None) -> list[int]:
        """The accumulation points, biggest first: from each big subtree, descend while one
        child holds most of it; a namespace splits into its big children."""
        retained = self.tree.retained
        total = retained[0]
        threshold = min_bytes if min_bytes is not None else max(total // 500, 4096)
        found: list[int] = []
        stack = [0]
        while stack:
            v = stack.pop()
            while True:
                kids = self.children(v)
                if kids and retained[kids[0]] >= DESCEND_SHARE * retained[v] and retained[kids[0]] >= threshold:
                    v = kids[0]
                    continue
                break
            big = [c for c in self.children(v) if retained[c] >= threshold]
            if v != 0 and (not big or not self._namespace(v)):
                found.append(v)
                continue
            stack.extend(big)
        found.sort(key=lambda v: -retained[v])
        return found[:top]

    def dominated_objects(self, v: int) -> int:
        if self._counts is None and _dominators is not None:
            c_counts: array.array[int] = array.array("q")
            c_counts.frombytes(_dominators.tree(self.graph.nodes, self.tree.idom.tobytes(),
                                                self.tree.retained.tobytes())[2])
            self._counts = c_counts
        if self._counts is None:
            counts = [1] * self.graph.nodes
            order: list[int] = []
            stack = [0]
            while stack:
                x = stack.pop()
                order.append(x)
                stack.extend(self.children(x))
            idom = self.tree.idom
            for x in reversed(order):
                if idom[x] >= 0:
                    counts[idom[x]] += counts[x]
            self._counts = counts
        return self._counts[v]

    def preferred(self, v: int) -> RetainerPath:
        return RetainerPath(self.paths.root_of[v], tuple(path_edges(self.graph, self.paths, v)))

    def _preds(self) -> tuple[Sequence[int], Sequence[int]]:
        if self._pred is None:
            self._pred = _csr_edges(self.graph.nodes, self.graph.dst)
        return self._pred

    def retainer_paths(self, v: int, *, limit: int = 3) -> list[RetainerPath]:
        """A few distinct paths from roots to ``v``: the preferred one, then one through each
        other referrer outside ``v``'s own dominator subtree, distinct by root."""
        out = [self.preferred(v)]
        first = self.paths.via[v]
        roots_seen = {(self.paths.root_of[v], self.graph.src[first] if first >= 0 else -1)}
        offsets, edge_ids = self._preds()
        for k in range(offsets[v], offsets[v + 1]):
            if len(out) >= limit:
                break
            e = edge_ids[k]
            p = self.graph.src[e]
            r = self.paths.root_of[p]
            if p == 0 or r < 0 or (r, p) in roots_seen or self._dominates(v, p):
                continue
            roots_seen.add((r, p))
            out.append(RetainerPath(r, (*path_edges(self.graph, self.paths, p), e)))
        return out

    def _dominates(self, a: int, b: int) -> bool:
        idom = self.tree.idom
        while b >= 0:
            if b == a:
                return True
            b = idom[b]
        return False

    def ids_of(self, path: RetainerPath) -> list[int]:
        """The target's ids along ``path``, its root first: what the ``names`` request walks."""
        graph = self.graph
        return [graph.ids[graph.roots[path.root][0]], *(graph.ids[graph.dst[e]] for e in path.edges)]

    def render(self, path: RetainerPath, names: list[str] | None = None) -> str:
        return render_edges(self.graph, path, names)

    def owner(self, v: int, path: str, retainers: tuple[str, ...] = ()) -> DominatorOwner:
        return DominatorOwner(
            node=v,
            path=path,
            type=self.graph.type_of(v),
            retained_bytes=int(self.tree.retained[v]),
            retained_objects=self.dominated_objects(v),
            items=self.graph.lengths[v] or len(self.children(v)),
            retainers=retainers,
        )


def render_edges(graph: ObjectGraph, path: RetainerPath, names: list[str] | None = None) -> str:
    """``__main__.APP.rows``, ``task:Task-1/run.<EnvWorker>.env.harness.runtime.trajectories``:
    the root's name, then one step per edge (attributes and str keys of attribute dicts as
    ``.name``, other dict keys as ``['key']``, container entries as ``[]``, a coroutine's or
    frame's local as ``.<Type>``). ``names``: labels from the target's ``names`` request,
    which override the graph's. No line numbers: the name is stable across snapshots."""
    if path.root < 0:
        return "<unreached>"
    text = graph.roots[path.root][1]
    attribute_dict = False
    for step, e in enumerate(path.edges):
        if names is not None and step < len(names) and names[step]:
            label = names[step]
        else:
            label = graph.labels[graph.lab[e]] if graph.lab[e] >= 0 else ""
        src_type = graph.type_of(graph.src[e])
        dst_type = graph.type_of(graph.dst[e])
        entered_attribute_dict = False
        if label == "d":
            entered_attribute_dict = True
        elif label.startswith("a"):
            text += "." + label[1:]
        elif label.startswith("k"):
            key = label[1:]
            text += "." + key if attribute_dict and key.isidentifier() else f"[{key!r}]"
        elif label.startswith("t"):
            text += ".<" + label[1:] + ">"
        elif _short(dst_type) in _TRANSPARENT_TYPES:
            pass
        elif src_type in _CONTAINERS:
            text += "[]"
        else:
            text += ".<" + _short(dst_type) + ">"
        attribute_dict = entered_attribute_dict
    return text


NameAsker = Callable[[list[list[int]]], list[Any]]


@dataclass
class DominatorOwners:
    owners: list[DominatorOwner]
    tree: DominatorTree
    analysis_seconds: float
    named: bool
    # ``--why QUERY``: the owners or the biggest objects of a type it names, with their paths
    why: list[DominatorOwner] = field(default_factory=list)


def why_nodes(finder: OwnerFinder, owners: list[int], paths: list[str], query: str,
              of_type: list[int]) -> list[int]:
    """What ``--why QUERY`` asks about: the owner whose path is (or ends with) QUERY, else the
    objects of the type QUERY (``of_type``)."""
    for v, text in zip(owners, paths, strict=True):
        if text == query:
            return [v]
    for v, text in zip(owners, paths, strict=True):
        if text.endswith(query) or query in text:
            return [v]
    return of_type


def why_of_type(finder: OwnerFinder, query: str, *, limit: int = 3) -> list[int]:
    """The objects of the type ``query`` (full or short name) that retain the most."""
    graph = finder.graph
    wanted = {t for t, name in enumerate(graph.type_names) if name == query or _short(name) == query}
    if not wanted:
        return []
    types, retained = graph.types, finder.tree.retained
    matches = [v for v in range(1, graph.nodes) if types[v] in wanted]
    matches.sort(key=lambda v: -retained[v])
    return matches[:limit]


def find_owners(graph: ObjectGraph, *, top: int = 20, retainers: int = 3, ask_names: NameAsker | None = None,
                compiled: bool = True, tree: DominatorTree | None = None, why: str | None = None,
                ) -> DominatorOwners:
    """The dominator pass and the owners: accumulation points, each with its preferred path
    and, for the first few, up to ``retainers`` distinct retainer paths. ``ask_names``: sends
    the paths' ids to the target (the ``names`` request) and returns their labels."""
    import time  # noqa: PLC0415

    started = time.perf_counter()
    tree = tree or dominators(graph, compiled=compiled)
    finder = OwnerFinder(graph, tree)
    nodes = finder.find(top=top)
    asked = list(nodes)
    of_type = why_of_type(finder, why) if why else []
    # Paths only for what will be named: the owners, the objects asked about, and the
    # referrers their retainer paths go through.
    targets = set(nodes) | set(of_type)
    for v in [*nodes[:5], *of_type]:
        targets.update(finder.referrers(v))
    finder.settle(targets)
    if why:
        unnamed = [render_edges(graph, finder.preferred(v)) for v in nodes]
        asked += why_nodes(finder, nodes, unnamed, why, of_type)
    plans = [finder.retainer_paths(v, limit=retainers) if i < 5 and retainers > 1 else [finder.preferred(v)]
             for i, v in enumerate(nodes)]
    plans += [finder.retainer_paths(v, limit=max(retainers, 5)) for v in asked[len(nodes):]]
    flat = [p for plan in plans for p in plan]
    labels: list[Any] = [None] * len(flat)
    named = False
    if ask_names is not None and flat:
        try:
            answer = ask_names([finder.ids_of(p) for p in flat])
            if isinstance(answer, list) and len(answer) == len(flat):
                labels = answer
                named = True
        except Exception:  # names are a nicety: the graph's own labels stand in
            labels = [None] * len(flat)
    texts = [finder.render(p, labels[i] if isinstance(labels[i], list) else None) for i, p in enumerate(flat)]
    owners = []
    k = 0
    for v, plan in zip(asked, plans, strict=True):
        mine = texts[k:k + len(plan)]
        k += len(plan)
        distinct = tuple(dict.fromkeys(mine))
        owners.append(finder.owner(v, mine[0], distinct if len(plan) > 1 else ()))
    return DominatorOwners(owners=owners[:len(nodes)], tree=tree, analysis_seconds=time.perf_counter() - started,
                           named=named, why=owners[len(nodes):])
