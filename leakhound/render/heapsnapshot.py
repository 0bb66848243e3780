"""The object graph as a Chrome DevTools ``.heapsnapshot`` (V8's heap snapshot JSON).

What ``inspect --heapsnapshot FILE`` writes, so the whole heap can be browsed in tools people
already use: Chrome DevTools' Memory tab (Load profile), VS Code, memlab. Node 0 is the
synthetic root; its edges (``property``, named by the root: ``__main__``, ``task:Task-1/run``)
lead to leakhound's named roots. A node's name is its Python type; its self size the bytes
the census counts for it (leaves folded into their only referrer included); attributes and
str keys are ``property`` edges, other references ``element`` edges. Those tools compute
retained sizes with the same dominator tree from the same root, so theirs agree with
leakhound's (tests/integration/test_dominator_owners.py reads it back with memlab).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from leakhound.analysis.dominators import ObjectGraph

NODE_TYPES = ["hidden", "array", "string", "object", "code", "closure", "regexp", "number", "native",
              "synthetic", "concatenated string", "sliced string", "symbol", "bigint", "object shape"]
EDGE_TYPES = ["context", "element", "property", "internal", "hidden", "shortcut", "weak"]
# A Python code object is an "object" node: it holds its constants and names (payload/sizes.py),
# and memlab's retained sizes leave out what V8 "code" nodes reference.
_NODE_TYPE = {"str": 2, "bytes": 2, "list": 1, "tuple": 1, "set": 1, "frozenset": 1, "function": 5,
              "code": 3, "int": 7, "float": 7, "bool": 7, "NoneType": 7}
_PROPERTY = EDGE_TYPES.index("property")
_ELEMENT = EDGE_TYPES.index("element")
_ROW = 100_000  # values per write


def _write_values(out: TextIO, values: Iterator[str]) -> None:
    """``values`` joined by commas, written _ROW at a time (the file is too big for one string)."""
    row: list[str] = []
    written = False
    for value in values:
        row.append(value)
        if len(row) >= _ROW:
            out.write(("," if written else "") + ",".join(row))
            written = True
            row = []
    if row:
        out.write(("," if written else "") + ",".join(row))


def _meta() -> dict[str, object]:
    return {
        "node_fields": ["type", "name", "id", "self_size", "edge_count", "trace_node_id", "detachedness"],
        "node_types": [NODE_TYPES, "string", "number", "number", "number", "number", "number"],
        "edge_fields": ["type", "name_or_index", "to_node"],
        "edge_types": [EDGE_TYPES, "string_or_number", "node"],
        "trace_function_info_fields": ["function_id", "name", "script_name", "script_id", "line", "column"],
        "trace_node_fields": ["id", "function_info_index", "count", "size", "children"],
        "sample_fields": ["timestamp_us", "last_assigned_id"],
        "location_fields": ["object_index", "script_id", "line", "column"],
    }


def _edge_name(label: str) -> str:
    if label.startswith(("a", "k", "t")):
        return label[1:]
    if label.startswith("c"):
        return f"<contextvar {label[1:]}>"
    return "__dict__" if label == "d" else label


def write(path: Path, graph: ObjectGraph) -> None:
    with path.open("w") as fh:
        write_to(fh, graph)


def write_to(out: TextIO, graph: ObjectGraph) -> None:
    n, m = graph.nodes, graph.edges
    strings: list[str] = []
    index: dict[str, int] = {}

    def string(text: str) -> int:
        i = index.get(text)
        if i is None:
            i = index[text] = len(strings)
            strings.append(text)
        return i

    # Edges grouped by source node, as the format requires (a counting sort).
    counts = [0] * (n + 1)
    for s in graph.src:
        counts[s + 1] += 1
    for i in range(n):
        counts[i + 1] += counts[i]
    pos = counts[:-1]
    order = [0] * m
    for e, s in enumerate(graph.src):
        order[pos[s]] = e
        pos[s] += 1
    root_names: dict[int, str] = {}
    for node, label, _kind, _tier in graph.roots:
        root_names.setdefault(node, label)
    type_names = graph.type_names
    type_string = [string(name) for name in type_names]
    type_kind = [_NODE_TYPE.get(name, 3) for name in type_names]
    label_string = [string(_edge_name(t)) for t in graph.labels]
    out.write('{"snapshot":{"meta":')
    out.write(json.dumps(_meta()))
    out.write(f',"node_count":{n},"edge_count":{m},"trace_function_count":0}},\n"nodes":[')
    def nodes() -> Iterator[str]:
        for v in range(n):
            t = graph.types[v]
            kind = 9 if v == 0 else type_kind[t]
            name = string("(leakhound roots)") if v == 0 else type_string[t]
            yield f"{kind},{name},{2 * v + 1},{graph.sizes[v]},{counts[v + 1] - counts[v]},0,0"

    def edges() -> Iterator[str]:
        for k, e in enumerate(order):
            s, d, lab = graph.src[e], graph.dst[e], graph.lab[e]
            if s == 0:
                yield f"{_PROPERTY},{string(root_names.get(d, '?'))},{d * 7}"
            elif lab >= 0:
                yield f"{_PROPERTY},{label_string[lab]},{d * 7}"
            else:
                yield f"{_ELEMENT},{k - counts[s]},{d * 7}"

    _write_values(out, nodes())
    out.write('],\n"edges":[')
    _write_values(out, edges())
    out.write('],\n"trace_function_infos":[],"trace_tree":[],"samples":[],"locations":[],\n"strings":')
    out.write(json.dumps(strings))
    out.write("}\n")
