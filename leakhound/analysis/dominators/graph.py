"""The target's object graph as leakhound reads it: the ``graph`` result decoded into int arrays.

The target streams a compact graph (``leakhound/payload/graph.py``): base64 chunks of native
int arrays, node 0 the super-root, whose children are every named root (modules, classes,
tasks, thread frames) and the objects held from C.
"""

from __future__ import annotations

import array
import base64
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

GRAPH_FORMAT = "leakhound.graph/1"


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
