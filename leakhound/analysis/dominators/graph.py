"""The target's object graph as leakhound reads it: the ``graph`` result decoded into int arrays.

The target streams a compact graph (``leakhound/payload/graph.py``): native int records, raw
after the JSON that describes them (the channel hands them over as ``binary``, or /4's as a
``Records`` it fed while the target wrote them: ``records``), node 0 the
super-root, whose children are every named root (modules, classes, tasks, thread frames) and
the objects held from C. Formats read:

* /4: frames (two native uint32: column code, items; then the items), a column's frames end
  to end (``FRAME_COLUMNS``). With ``node_keys`` "address" (the compiled walk) roots and edges
  name nodes by address and a node may have several records: its first gives it its id here
  (``Records``), the last its size, type and entries.
* /3: the arrays one after the other (``arrays``: key, typecode, items), ``roots`` flat, four
  items a root; /2 a list per root; /1 base64 chunks in the JSON.
"""

from __future__ import annotations

import array
import base64
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from leakhound.payload import wire

GRAPH_FORMAT = wire.GRAPH_FORMAT
_FORMATS = ("leakhound.graph/1", "leakhound.graph/2", "leakhound.graph/3", "leakhound.graph/4", GRAPH_FORMAT)
# /5 is /4 with the fold columns (9, 10): read alike
_FRAMED = ("leakhound.graph/4", GRAPH_FORMAT)
_ARRAY_KEYS = ("sizes", "types", "ids", "lengths", "edge_src", "edge_dst", "edge_label")
_ITEM_BYTES = {"q": 8, "i": 4}
# the collections by type name (a subclass of one of the target's own: ObjectGraph.container_types)
CONTAINER_TYPE_NAMES = frozenset({"list", "tuple", "set", "frozenset", "dict", "collections.deque",
                                  "collections.OrderedDict", "collections.defaultdict", "collections.Counter"})
# /4's frame codes (payload/graph_wire.py's FRAME_COLUMNS): key and typecode.
FRAME_COLUMNS = (("ids", "q"), ("sizes", "q"), ("types", "i"), ("lengths", "i"), ("edge_src", "i"),
                 ("edge_dst", "i"), ("edge_label", "i"), ("edge_src_address", "q"), ("edge_dst_address", "q"),
                 ("fold_address", "q"), ("fold_bytes", "q"))


try:  # the C twin of ``resolve`` (leakhound's own build, as the dominator pass)
    from leakhound.analysis import _dominators as _compiled  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a build without a compiler
    _compiled = None


class GraphError(ValueError):
    """A graph document leakhound cannot read."""


# A column of ints: an ``array.array``, or what the compiled passes return, a memoryview of
# their bytes cast to "i" or "q" (``ints``): read in place, never copied (each copy of a
# 4.8M-object heap's columns was tens of MB of fresh memory, most of the analysis's time).
Ints = Sequence[int]


def ints(raw: bytes, code: Literal["i", "q"]) -> Ints:
    """The int32 ("i") or int64 ("q") items of ``raw`` (native order), without a copy."""
    return memoryview(raw).cast(code)


def raw_of(column: Ints) -> bytes:
    """The bytes of a column, for a compiled pass: a view's own (no copy), an array's copied."""
    if isinstance(column, memoryview) and isinstance(column.obj, bytes) and column.nbytes == len(column.obj):
        return column.obj
    if isinstance(column, array.array | memoryview):
        return column.tobytes()
    raise TypeError(f"not a column of ints: {type(column).__name__}")


@dataclass
class ObjectGraph:
    """The decoded graph: node 0 is the super-root."""

    nodes: int
    sizes: Ints
    types: Ints
    ids: Ints  # id() in the target: how a path is named afterwards
    lengths: Ints  # entries of a list, tuple, set or dict; 0 for other objects
    src: Ints
    dst: Ints
    lab: Ints
    type_names: list[str]
    labels: list[str]
    # (node, label, kind, tier) per root
    roots: list[tuple[int, str, str, int]]
    info: dict[str, Any] = field(default_factory=dict)
    # type ids of subclasses of dict, list, tuple, set, frozenset, deque (the target's own
    # classes: ``class Registry(dict)``): collections, as the built-ins are
    container_types: frozenset[int] = frozenset()

    @property
    def edges(self) -> int:
        return len(self.src)

    def type_of(self, node: int) -> str:
        return self.type_names[self.types[node]]

    def is_container(self, node: int) -> bool:
        """Whether ``node`` is a collection: a list, tuple, set, frozenset, dict, deque or an
        instance of a subclass of one (entries, not named parts)."""
        return self.type_of(node) in CONTAINER_TYPE_NAMES or self.types[node] in self.container_types

    def is_held_group(self, r: int) -> bool:
        """Whether root ``r`` (an index in ``roots``) groups the objects of one type held from C
        (or made during the walk): a list of the payload's (payload/graph_roots.py
        held_from_c), no bytes of its own and no object of the target (its id is gone once the
        walk is done)."""
        node, _label, kind, _tier = self.roots[r]
        return kind == "held" and self.sizes[node] == 0

    def held_groups(self) -> frozenset[int]:
        """The nodes of the roots that are groups (``is_held_group``)."""
        return frozenset(self.roots[r][0] for r in range(len(self.roots)) if self.is_held_group(r))

    def stand_ins(self) -> frozenset[int]:
        """The nodes of the roots that are lists of the payload's, no object of the target: the
        groups (``held_groups``) and what stands for a collection C holds, named by it
        (``weakref.finalize._registry``: its infos, at the registry's size and type). Matched
        by name from sample to sample, never by an id."""
        return frozenset(node for node, label, kind, _tier in self.roots
                         if kind == "held" and (self.sizes[node] == 0 or not label.startswith("<")))


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


def _frames(raw: bytes, order: str) -> dict[str, array.array[int]]:
    """/4's columns from its frames, each column's frames end to end (the Python twin of the
    compiled ``records_feed``)."""
    header = struct.Struct(("<" if order == "little" else ">") + "II")
    parts: dict[int, list[memoryview]] = {}
    view = memoryview(raw)
    offset = 0
    while offset < len(raw):
        if offset + header.size > len(raw):
            raise GraphError("the graph's records are cut short")
        code, items = header.unpack_from(raw, offset)
        if code >= len(FRAME_COLUMNS):
            raise GraphError(f"unknown graph column {code}")
        end = offset + header.size + items * _ITEM_BYTES[FRAME_COLUMNS[code][1]]
        if end > len(raw):
            raise GraphError("the graph's records are cut short")
        parts.setdefault(code, []).append(view[offset + header.size:end])
        offset = end
    out: dict[str, array.array[int]] = {}
    for code, (key, typecode) in enumerate(FRAME_COLUMNS):
        arr: array.array[int] = array.array(typecode)
        for part in parts.get(code, ()):
            arr.frombytes(part)
        if order != sys.byteorder:
            arr.byteswap()
        out[key] = arr
    return out


def _resolve(arrays: dict[str, array.array[int]], roots: list[int]) -> tuple[int, list[int], int]:
    """Node ids for records and edges named by address, in place in ``arrays`` (the Python
    twin of the compiled ``records_finish``): a node's first record gives it its id, its last
    its size, type and entries; an edge with an end that never had a record is left out.
    Returns (nodes, the roots' ids (-1: none), edges left out)."""
    ids, sizes, types, lengths = arrays["ids"], arrays["sizes"], arrays["types"], arrays["lengths"]
    src, dst, lab = arrays["edge_src_address"], arrays["edge_dst_address"], arrays["edge_label"]
    index: dict[int, int] = {}
    out = {key: array.array(code) for key, code in (("ids", "q"), ("sizes", "q"), ("types", "i"), ("lengths", "i"),
                                                     ("edge_src", "i"), ("edge_dst", "i"), ("edge_label", "i"))}
    for k, address in enumerate(ids):
        node = index.get(address)
        if node is None:
            node = index[address] = len(out["ids"])
            out["ids"].append(address)
            out["sizes"].append(sizes[k])
            out["types"].append(types[k])
            out["lengths"].append(lengths[k])
        else:
            out["sizes"][node], out["types"][node], out["lengths"][node] = sizes[k], types[k], lengths[k]
    for k in range(len(src)):
        a, b = index.get(src[k]), index.get(dst[k])
        if a is not None and b is not None:
            out["edge_src"].append(a)
            out["edge_dst"].append(b)
            out["edge_label"].append(lab[k])
    # what the walk folded into a node (an entry held by its collection alone), after every
    # record: a node's last record sets its own size
    for address, more in zip(arrays.get("fold_address", ()), arrays.get("fold_bytes", ()), strict=False):
        node = index.get(address)
        if node is not None and more >= 0:
            out["sizes"][node] += more
    arrays.update(out)
    return len(out["ids"]), [index.get(address, -1) for address in roots], len(src) - len(out["edge_src"])


class Records:
    """/4's records read as they come: ``feed`` any pieces of the frames (the channel hands
    over graph.bin while the target's walk still writes it, so that most of the reading is
    done by the time the walk ends), ``finish`` once.

    The compiled reader (``_dominators.records_*``) takes each node record into its table as
    it comes and looks up the edges' ends it can; the Python twin keeps the pieces and reads
    them at the end. Both give the same ids and edges as one reading of the whole file."""

    def __init__(self, order: str = sys.byteorder) -> None:
        self.order = order
        self.received = 0
        self._pieces: list[bytes] = []
        self._reader = _compiled.records_new() if _compiled is not None and order == sys.byteorder else None
        self._finished = False

    def feed(self, piece: bytes) -> None:
        if self._finished:
            raise GraphError("the graph's records were already read")
        if not piece:
            return
        self.received += len(piece)
        if self._reader is None:
            self._pieces.append(bytes(piece))
            return
        try:
            _compiled.records_feed(self._reader, piece)
        except ValueError as exc:
            raise GraphError(f"malformed graph records: {exc}") from None

    def finish(self, roots: list[int], *, by_address: bool) -> tuple[dict[str, Any], int, list[int], int]:
        """(columns "ids" ... "edge_label", nodes, the roots' ids (-1: none), edges left out);
        ``by_address``: the graph's nodes are named by address (``node_keys``)."""
        if self._finished:
            raise GraphError("the graph's records were already read")
        self._finished = True
        if self._reader is None:
            whole = _frames(b"".join(self._pieces), self.order)
            self._pieces = []
            return self._named(whole, roots, by_address)
        cut, resolved, n, i_b, s_b, t_b, l_b, e, src_b, dst_b, lab_b, roots_b, m = _compiled.records_finish(
            self._reader, len(roots), array.array("q", roots).tobytes())
        self._reader = None
        if cut:
            raise GraphError("the graph's records are cut short")
        columns: tuple[tuple[str, Literal["i", "q"], bytes], ...] = (
            ("ids", "q", i_b), ("sizes", "q", s_b), ("types", "i", t_b), ("lengths", "i", l_b),
            ("edge_src", "i", src_b), ("edge_dst", "i", dst_b), ("edge_label", "i", lab_b))
        if not resolved:  # no edge by address came: the columns as they came
            arrays: dict[str, array.array[int]] = {}
            for key, code, raw in columns:
                arr: array.array[int] = array.array(code)
                arr.frombytes(raw)
                arrays[key] = arr
            arrays["edge_src_address"], arrays["edge_dst_address"] = array.array("q"), array.array("q")
            return self._named(arrays, roots, by_address)
        if not by_address:
            raise GraphError("edges by address in a graph whose nodes are not")
        root_ids: array.array[int] = array.array("i")
        root_ids.frombytes(roots_b)
        return {key: ints(raw, code) for key, code, raw in columns}, n, list(root_ids), m - e

    @staticmethod
    def _named(arrays: dict[str, array.array[int]], roots: list[int],
               by_address: bool) -> tuple[dict[str, Any], int, list[int], int]:
        if by_address:
            n, root_ids, dropped = _resolve(arrays, roots)
            arrays.pop("fold_address", None)
            arrays.pop("fold_bytes", None)
            return arrays, n, root_ids, dropped
        if arrays["edge_src_address"] or arrays.get("fold_address"):
            raise GraphError("edges or folds by address in a graph whose nodes are not")
        arrays.pop("fold_address", None)
        arrays.pop("fold_bytes", None)
        return arrays, len(arrays["ids"]), roots, 0


def _roots(doc: dict[str, Any]) -> list[tuple[int, str, str, int]]:
    """(node, label, kind, tier) per root: /3 and /4 send them flat, /1 and /2 a list each."""
    rows = doc["roots"]
    if doc["format"] in ("leakhound.graph/3", *_FRAMED):
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
        roots = _roots(doc)
        nodes = int(doc["nodes"])
        dropped = 0
        if doc["format"] in _FRAMED:
            records = doc.get("records")
            if isinstance(records, GraphError):  # streamed, and found broken on the way
                raise records
            if not isinstance(records, Records):
                raw = doc.get("binary")
                if not isinstance(raw, bytes | bytearray):
                    raise GraphError("the graph's records did not arrive (no binary part)")
                records = Records(order)
                records.feed(bytes(raw))
            by_address = doc.get("node_keys") == "address"
            arrays, nodes, root_ids, dropped = records.finish([r[0] for r in roots], by_address=by_address)
            if by_address:
                roots = [(root_ids[k], *roots[k][1:]) for k in range(len(roots)) if root_ids[k] >= 0]
        elif doc["format"] != "leakhound.graph/1":
            arrays = _split(doc, order)
        else:
            arrays = {key: _decode(doc[key], "q" if key in ("sizes", "ids") else "i", order) for key in _ARRAY_KEYS}
        graph = ObjectGraph(
            nodes=nodes,
            sizes=arrays["sizes"],
            types=arrays["types"],
            ids=arrays["ids"],
            lengths=arrays["lengths"],
            src=arrays["edge_src"],
            dst=arrays["edge_dst"],
            lab=arrays["edge_label"],
            type_names=[str(t) for t in doc["type_names"]],
            container_types=frozenset(int(t) for t in doc.get("container_types", ())),
            labels=[str(t) for t in doc["labels"]],
            roots=roots,
            info={k: doc.get(k) for k in ("graph_seconds", "max_step_ms", "max_held_ms", "payload_peak_bytes",
                                          "unreached", "walker", "gc_collections", "dict_labels")},
        )
        graph.info["edges_without_node"] = dropped
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise GraphError(f"malformed graph: {exc}") from None
    n, m = graph.nodes, len(graph.src)
    per_node = (graph.sizes, graph.types, graph.ids, graph.lengths)
    if any(len(a) != n for a in per_node) or not len(graph.dst) == len(graph.lab) == m:
        raise GraphError("graph arrays of different lengths")
    return graph
