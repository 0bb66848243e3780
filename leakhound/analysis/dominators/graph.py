"""The target's object graph as leakhound reads it: the ``graph`` result decoded into int arrays.

The target streams a compact graph (``leakhound/payload/graph.py``): native int arrays, raw
after the JSON that describes them (``leakhound.graph/3``: the channel hands them over as
``binary``; /1 sent them as base64 chunks in the JSON; /3's ``roots`` is one flat list, four
items a root, /2's a list per root), node 0 the super-root, whose children
are every named root (modules, classes, tasks, thread frames) and the objects held from C.
"""

from __future__ import annotations

import array
import base64
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

GRAPH_FORMAT = "leakhound.graph/3"
_FORMATS = ("leakhound.graph/1", "leakhound.graph/2", GRAPH_FORMAT)
_ARRAY_KEYS = ("sizes", "types", "ids", "lengths", "edge_src", "edge_dst", "edge_label")
_ITEM_BYTES = {"q": 8, "i": 4}


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


def _split(doc: dict[str, Any], order: str) -> dict[str, array.array[int]]:
    """The arrays from the raw bytes the channel read after the JSON (``binary``), laid out as
    ``arrays`` says: [key, typecode, items] each, one after the other."""
    raw = doc.get("binary")
    if not isinstance(raw, bytes | bytearray):
        raise GraphError("the graph's arrays did not arrive (no binary part)")
    view = memoryview(raw)
    out: dict[str, array.array[int]] = {}
    offset = 0
    for key, code, items in doc["arrays"]:
        if key not in _ARRAY_KEYS or code not in _ITEM_BYTES:
            raise GraphError(f"unknown graph array {key!r} of {code!r}")
        end = offset + int(items) * _ITEM_BYTES[code]
        if end > len(raw):
            raise GraphError("the graph's arrays are shorter than announced")
        arr: array.array[int] = array.array(code)
        arr.frombytes(view[offset:end])
        if order != sys.byteorder:
            arr.byteswap()
        out[key] = arr
        offset = end
    if set(out) != set(_ARRAY_KEYS):
        raise GraphError("graph arrays missing")
    return out


def _roots(doc: dict[str, Any]) -> list[tuple[int, str, str, int]]:
    """(node, label, kind, tier) per root: /3 sends them flat, /1 and /2 a list each."""
    rows = doc["roots"]
    if doc["format"] == GRAPH_FORMAT:
        if len(rows) % 4:
            raise ValueError("roots: not four items a root")
        rows = [rows[k:k + 4] for k in range(0, len(rows), 4)]
    return [(int(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]


def decode_graph(doc: dict[str, Any]) -> ObjectGraph:
    """The graph from the payload's ``graph`` result: /2 its raw arrays (``binary``), /1
    base64 chunks of them in the JSON."""
    if doc.get("format") not in _FORMATS:
        raise GraphError(f"unknown graph format {doc.get('format')!r}")
    try:
        order = str(doc["byteorder"])
        if doc["format"] != "leakhound.graph/1":
            arrays = _split(doc, order)
        else:
            arrays = {key: _decode(doc[key], "q" if key in ("sizes", "ids") else "i", order) for key in _ARRAY_KEYS}
        graph = ObjectGraph(
            nodes=int(doc["nodes"]),
            sizes=arrays["sizes"],
            types=arrays["types"],
            ids=arrays["ids"],
            lengths=arrays["lengths"],
            src=arrays["edge_src"],
            dst=arrays["edge_dst"],
            lab=arrays["edge_label"],
            type_names=[str(t) for t in doc["type_names"]],
            labels=[str(t) for t in doc["labels"]],
            roots=_roots(doc),
            info={k: doc.get(k) for k in ("graph_seconds", "max_step_ms", "max_held_ms", "payload_peak_bytes",
                                          "unreached", "walker", "gc_collections")},
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise GraphError(f"malformed graph: {exc}") from None
    n, m = graph.nodes, len(graph.src)
    per_node = (graph.sizes, graph.types, graph.ids, graph.lengths)
    if any(len(a) != n for a in per_node) or not len(graph.dst) == len(graph.lab) == m:
        raise GraphError("graph arrays of different lengths")
    return graph
