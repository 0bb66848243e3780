"""Owners as accumulation points of the dominator tree (Eclipse MAT's leak suspects), each named
by its preferred path from a root and a few distinct retainer paths; ``--why``'s objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from leakhound.analysis.dominators.graph import ObjectGraph
from leakhound.analysis.dominators.naming import (
    _CONTAINERS,
    RetainerPath,
    _short,
    path_edges,
    render_edges,
)
from leakhound.analysis.dominators.passes import (
    DominatorTree,
    Paths,
    _csr_edges,
    dominators,
    preferred_paths,
    subtree_counts,
    tree_csr,
)

# Where one child holds this share of its parent's retained bytes, the parent is only a way
# to it: the owner is further down (MAT's "accumulation point").
DESCEND_SHARE = 0.8
_LEAVES = frozenset({"str", "bytes", "bytearray", "int", "float", "complex", "array.array", "memoryview"})


@dataclass(frozen=True)
class DominatorOwner:
    node: int
    path: str
    type: str
    retained_bytes: int
    retained_objects: int
    items: int
    retainers: tuple[str, ...] = ()
    # the target's ids along the preferred path, the root's first (what ``sample`` re-walks)
    path_ids: tuple[int, ...] = ()



class OwnerFinder:
    """Accumulation points of the dominator tree and their paths from the roots."""

    def __init__(self, graph: ObjectGraph, tree: DominatorTree) -> None:
        self.graph = graph
        self.tree = tree
        self.offsets, self.kids, counts = tree_csr(graph, tree)
        self._paths: Paths | None = None
        self.root_kind = {node: kind for node, _label, kind, _tier in graph.roots}
        self.held_groups = graph.held_groups()
        self._counts: Sequence[int] | None = counts
        self._pred: tuple[Sequence[int], Sequence[int]] | None = None
        self._out: Sequence[int] | None = None
        self._out_ids: Sequence[int] | None = None

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
        if v == 0:
            return True
        if v in self.root_kind:
            # a group of the objects of one type held from C is a collection of alike
            # objects, each no part with a name
            return v not in self.held_groups
        name = self.graph.type_of(v)
        if name == "dict":
            # A module's or class's dict, or an instance's attribute dict (the instance's only
            # reference: 3.11+ keep attributes inline, and then a dict under an instance is an
            # attribute's value, a collection).
            p = self.tree.idom[v]
            if p > 0 and p in self.root_kind:
                return True
            if p <= 0 or self.graph.type_of(p) in _CONTAINERS:
                return False
            if self.graph.info.get("dict_labels"):
                # 3.11+: the walk labelled the instance's own __dict__ "d" (an instance whose
                # other attributes are all leaves has one edge, to an attribute's dict too)
                return self._labelled(p, v, "d")
            return self._out_degree(p) == 1
        return name not in _CONTAINERS and name not in _LEAVES

    def _labelled(self, p: int, v: int, text: str) -> bool:
        """Whether an edge from ``p`` to ``v`` carries the label ``text``."""
        if self._out is None or self._out_ids is None:
            self._out, self._out_ids = _csr_edges(self.graph.nodes, self.graph.src)
        g = self.graph
        for k in range(self._out[p], self._out[p + 1]):
            e = self._out_ids[k]
            if g.dst[e] == v and g.lab[e] >= 0 and g.labels[g.lab[e]] == text:
                return True
        return False

    def _out_degree(self, v: int) -> int:
        if self._out is None:
            self._out, self._out_ids = _csr_edges(self.graph.nodes, self.graph.src)
        return self._out[v + 1] - self._out[v]

    def find(self, *, top: int = 20, min_bytes: int | None = None) -> list[int]:
        """The accumulation points, biggest first: from each big subtree, descend while one
        child holds most of it; a namespace splits into its big children. What the other big
        children of a node descended through hold is looked at in its own right: a 40 MB leak
        in a 50 MB heap took the search from the super-root straight into it, and the other
        10 MB (a second cache, a module's table) was in no owner the table listed."""
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
                    for c in kids[1:]:  # biggest first (tree_csr)
                        if retained[c] < threshold:
                            break
                        stack.append(c)
                    v = kids[0]
                    continue
                break
            big = []
            for c in self.children(v):  # biggest first (tree_csr): the rest are smaller still
                if retained[c] < threshold:
                    break
                big.append(c)
            if v != 0 and (not big or not self._namespace(v)):
                found.append(v)
                continue
            stack.extend(big)
        found.sort(key=lambda v: -retained[v])
        return found[:top]

    def dominated_objects(self, v: int) -> int:
        if self._counts is None:
            self._counts = subtree_counts(self.graph, self.tree, self.children)
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


@dataclass
class OwnerPlan:
    """The owners found, before they are named: ``name_paths`` are the target's object ids
    along each path that names them (the root's first). The target can label those paths'
    edges as it walks them again (instance attributes the graph has no label for); the
    labels, or None, finish the owners (``name_owners``)."""

    finder: OwnerFinder
    nodes: list[int]  # the owners
    asked: list[int]  # the owners, then the objects ``--why`` asks about
    plans: list[list[RetainerPath]]  # each asked node's paths, its preferred one first
    analysis_seconds: float

    @property
    def paths(self) -> list[RetainerPath]:
        return [p for plan in self.plans for p in plan]

    @property
    def name_paths(self) -> list[list[int]]:
        return [self.finder.ids_of(p) for p in self.paths]


def plan_owners(graph: ObjectGraph, *, top: int = 20, retainers: int = 3, compiled: bool = True,
                tree: DominatorTree | None = None, why: str | None = None) -> OwnerPlan:
    """The dominator pass and the owners: accumulation points, each with its preferred path
    and, for the first few, up to ``retainers`` distinct retainer paths."""
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
    return OwnerPlan(finder=finder, nodes=nodes, asked=asked, plans=plans,
                     analysis_seconds=time.perf_counter() - started)


def name_owners(plan: OwnerPlan, labels: Sequence[Any] | None = None) -> DominatorOwners:
    """The planned owners named: by ``labels`` (the target's, one a path of ``name_paths``,
    each a list of edge labels or None) where they fit, else by the graph's own labels."""
    import time  # noqa: PLC0415

    started = time.perf_counter()
    finder, flat = plan.finder, plan.paths
    named = labels is not None and len(labels) == len(flat) and len(flat) > 0
    given = list(labels) if labels is not None and named else [None] * len(flat)
    texts = [finder.render(p, given[i] if isinstance(given[i], list) else None) for i, p in enumerate(flat)]
    owners = []
    k = 0
    for v, paths in zip(plan.asked, plan.plans, strict=True):
        mine = texts[k:k + len(paths)]
        k += len(paths)
        distinct = tuple(dict.fromkeys(mine))
        found = finder.owner(v, mine[0], distinct if len(paths) > 1 else ())
        owners.append(replace(found, path_ids=tuple(finder.ids_of(paths[0]))))
    seconds = plan.analysis_seconds + time.perf_counter() - started
    return DominatorOwners(owners=owners[:len(plan.nodes)], tree=finder.tree, analysis_seconds=seconds,
                           named=named, why=owners[len(plan.nodes):])


def find_owners(graph: ObjectGraph, *, top: int = 20, retainers: int = 3, compiled: bool = True,
                tree: DominatorTree | None = None, why: str | None = None,
                labels: Sequence[Any] | None = None) -> DominatorOwners:
    """``plan_owners`` and ``name_owners`` in one step, named by ``labels`` when they are
    known (else by the graph's own labels)."""
    return name_owners(plan_owners(graph, top=top, retainers=retainers, compiled=compiled, tree=tree, why=why),
                       labels)
