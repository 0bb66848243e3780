"""What each owner retains, broken down: its biggest children in the dominator tree, a few levels
down, each with what it retains (the ``--html`` page's treemap opens an owner into these).
"""

from __future__ import annotations

import array
import heapq
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from leakhound.analysis.dominators.graph import ObjectGraph, raw_of
from leakhound.analysis.dominators.naming import _step
from leakhound.analysis.dominators.passes import DominatorTree, _csr_edges, tree_csr
from leakhound.model import Owner

# Children kept a node (the rest summed as one "N others" part), and levels below an owner.
PART_FANOUT = 12
PART_DEPTH = 3
# Parts over all owners: what the page can show without growing past a few hundred KB.
PART_BUDGET = 3000


@dataclass(frozen=True)
class Part:
    """One object an owner retains (a child in the dominator tree), or the rest of its siblings
    (``others`` of them, ``type`` empty), or the object's own bytes (``name`` "(its own)").
    ``name``: how its parent refers to it (``['key']``, ``.attr``, ``[]`` for an entry), or
    ``<type>`` when its parent holds it only through other objects."""

    name: str
    type: str
    retained_bytes: int
    parts: tuple[Part, ...] = ()
    others: int = 0


def owner_parts(graph: ObjectGraph, tree: DominatorTree, owners: Sequence[Owner], *,
                fanout: int = PART_FANOUT, depth: int = PART_DEPTH, budget: int = PART_BUDGET,
                ) -> tuple[tuple[Part, ...], ...]:
    """For each owner (in order), its parts: ``()`` for an owner not in the graph (no object
    id: a group of owners, the payload's own). Each owner's share of ``budget`` parts goes to
    its biggest objects first, down to ``depth`` levels."""
    nodes = _nodes_of(graph, [o.object_id for o in owners])
    offsets, kids, _counts = tree_csr(graph, tree)
    out_offsets, out_edges = _csr_edges(graph.nodes, graph.src)
    retained = tree.retained
    each = max(fanout + 2, budget // max(1, sum(1 for v in nodes if v > 0)))
    left = budget  # over all owners: the biggest owners first, the last ones may get none

    def names(parent: int, children: Sequence[int]) -> dict[int, str]:
        """How ``parent`` refers to each of ``children``: one pass over its references (a
        registry of 800k entries: once for its twelve biggest, not once each)."""
        wanted = set(children)
        out: dict[int, str] = {}
        for k in range(out_offsets[parent], out_offsets[parent + 1]):
            e = out_edges[k]
            child = graph.dst[e]
            if child not in wanted or child in out:
                continue
            label = graph.labels[graph.lab[e]] if graph.lab[e] >= 0 else ""
            if label.startswith("f"):  # an entry folded into its collection, then what it names
                out[child] = "[]" + _step(label[1:])
            elif label == "d":  # an instance's own attribute dict
                out[child] = ".__dict__"
            else:
                out[child] = _step(label) or "[]"
            if len(out) == len(wanted):
                break
        return out

    def breakdown(top: int) -> tuple[Part, ...]:
        nonlocal left
        opened: dict[int, Sequence[int]] = {}  # node -> its children (the biggest shown, the rest summed)
        queue = [(-int(retained[top]), top, 0)]
        mine = min(each, left)
        while queue and mine > 0:
            _, v, level = heapq.heappop(queue)
            children = kids[offsets[v]:offsets[v + 1]]  # biggest first
            if not len(children):
                continue
            opened[v] = children
            used = min(len(children), fanout) + 2
            mine -= used
            left -= used
            if level + 1 < depth:
                for c in children[:fanout]:
                    heapq.heappush(queue, (-int(retained[c]), c, level + 1))

        def freeze(v: int) -> tuple[Part, ...]:
            children = opened.get(v)
            if children is None:
                return ()
            biggest = list(children[:fanout])
            named = names(v, biggest)
            shown = [Part(named.get(c) or f"<{graph.type_of(c)}>", graph.type_of(c), int(retained[c]), freeze(c))
                     for c in biggest]
            # what a node retains is its own size and its children's: the rest by subtraction,
            # not a pass over a million entries
            own = int(graph.sizes[v])
            rest = len(children) - len(biggest)
            if rest:
                rest_bytes = int(retained[v]) - own - sum(p.retained_bytes for p in shown)
                shown.append(Part(f"{rest:,} others", "", rest_bytes, others=rest))
            if own > 0:
                shown.append(Part("(its own)", graph.type_of(v), own))
            return tuple(shown)

        return freeze(top)

    return tuple(breakdown(v) if v > 0 else () for v in nodes)


def _nodes_of(graph: ObjectGraph, object_ids: Sequence[int]) -> list[int]:
    """The node of each object id (0: not in the graph), by a byte search of the ids column (a
    5M-node graph: one pass in C an id, not a dict of five million)."""
    wanted = [i for i in object_ids if i]
    if not wanted:
        return [0] * len(object_ids)
    column = graph.ids
    if isinstance(column, memoryview):
        raw, code = raw_of(column), column.format
    elif isinstance(column, array.array):
        raw, code = raw_of(column), column.typecode
    else:  # a list (graphs built by hand)
        wanted_ids = set(wanted)
        found = {i: v for v, i in enumerate(graph.ids) if i in wanted_ids}
        return [found.get(i, 0) if i else 0 for i in object_ids]
    size = struct.calcsize(code)
    out = []
    for object_id in object_ids:
        node = 0
        if object_id:
            try:
                needle = struct.pack(code, object_id)
            except struct.error:
                needle = b""
            at = raw.find(needle) if needle else -1
            while at >= 0 and at % size:
                at = raw.find(needle, at + 1)
            node = at // size if at > 0 else 0  # node 0 is the super-root, never an owner
        out.append(node)
    return out
