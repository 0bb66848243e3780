# mypy: disable-error-code="assignment, var-annotated, arg-type, unused-ignore"
# (payload code, Python 3.8+ without annotations: locals are rebound to None to drop references)
"""The object graph behind retained sizes (the dominator tree), walked inside the target.

Standard library only. The walk starts from the census's named roots (modules and their
globals, classes and their attributes, asyncio tasks, thread frames) plus, when the pause
budget allows listing every gc-tracked object, the objects held from C; it streams back a
compact graph: dense int node ids, sizes, type ids and edges as int arrays. The dominator
pass runs in leakhound's own process (``leakhound.analysis.dominators``), never here.

What it never does: call ``gc.collect()``, run Python code of the target (only C calls:
``gc.get_referents``, built-in descriptors, C ``__sizeof__``; see ``sizes.object_size``), or
hold the GIL for long: it is a Python loop on the payload's own thread, each step one short
C call, with its deadline and the cancel hook checked every few thousand objects.

Shape of the graph:

* node 0 is the super-root; every root is one of its edges, and ``roots`` names them
  (``module``, ``class``, ``task``, ``thread``, ``held``);
* modules, module dicts, classes and class dicts are walls: children of the super-root only
  (an edge from a function to its globals or from an instance to its class is not streamed:
  it cannot change anyone's dominator, since the super-root reaches the wall directly);
* a leaf (str, int, bytes, float...) whose only reference is the container it is found in
  is folded into that container's size: it has one referrer, so it is dominated by it;
* an edge carries a label (an index in ``labels``) when it has a name: ``a<name>`` an
  attribute or slot, ``k<key>`` a dict's str key, ``d`` an instance's ``__dict__`` (the
  path goes through it silently), ``t<Type>`` a coroutine's or frame's local of that type.
"""

import array
import base64
import gc
import sys
import time
import types

try:
    from .sizes import object_size
except ImportError:  # before the census split: the census's own
    from .census import _getsizeof as object_size  # type: ignore[no-redef]
try:
    from .objects import _class_dict, _referents, _short_type_name, _type_name
except ImportError:
    from .census import (  # type: ignore[no-redef]
        _class_dict,
        _referents,
        _short_type_name,
        _type_name,
    )
# Loaded with this module, so with the payload (runner.py imports graph at load): the roots of
# the walk, and the wire (the names request, the result in JSON pieces) callers reach here.
from .graph_roots import _LEAF_TYPE_IDS, add_roots, held_from_c
from .graph_wire import _ARRAY_KEYS, _FRAME_LIKE_IDS, _MAX_LABEL_CHARS, json_pieces, name_paths
from .sizes import NATIVE_BUFFERS, instance_values_bytes, native_codes, native_extra, native_types

__all__ = ["GRAPH_FORMAT", "_ARRAY_KEYS", "Graph", "GraphCancelled", "GraphTimeout", "GraphTooBig", "build",
           "json_pieces", "name_paths"]

GRAPH_FORMAT = "leakhound.graph/1"

# getrefcount of a referent in the walk loop: its container, our list of referents (or the
# items pair), the loop variable and getrefcount's argument.
_ONLY_ONE_REFERENCE = 4
_ModuleType = type(sys)
# Containers with neither an instance dict nor slots: no attribute names to look up.
_PLAIN_IDS = frozenset(id(tp) for tp in (list, tuple, set, frozenset, bytearray, types.FunctionType,
                                         types.MethodType, types.CodeType, types.CellType))
_SIZED_IDS = frozenset(id(tp) for tp in (list, tuple, set, frozenset, dict))
_SINGLETON_IDS = frozenset(id(tp) for tp in (bool, type(None)))
# A leaf referenced from more places than this (small ints, interned names) is shared by
# everyone: no owner retains it, and edges to it would be most of the graph.
_SHARED_LEAF = 64
_MAX_LABELS = 200000
_CHUNK_ITEMS = 1 << 16  # array items per base64 chunk (256-512 KiB): each encode is one short step (~3 ms)
_CHECK_EVERY = 0x7FF
_MISSING = object()


class GraphTimeout(Exception):
    pass


class GraphCancelled(Exception):
    pass


class GraphTooBig(Exception):
    """More nodes than the request's ``max_nodes``: the caller falls back to the census."""


def _list_keys(d):
    return list(dict.keys(d))


def _list_values(d):
    return list(dict.values(d))


class Graph(object):
    """One walk of the object graph. Call :meth:`run`, then :meth:`result`."""

    def __init__(self, *, timeout=60.0, progress=None, is_stdlib=None, exclude=(),
                 max_nodes=5000000, max_pause_ms=None, cancelled=None):
        self.deadline = time.monotonic() + timeout
        self.progress = progress or (lambda phase, done: None)
        self.is_stdlib = is_stdlib or (lambda name: False)
        self.cancelled = cancelled
        self.max_nodes = max_nodes
        self.max_pause_ms = max_pause_ms
        self.max_step = 0.0
        self.seconds = 0.0
        self.index = {}  # id(obj) -> node, or -1 for leakhound's own objects
        self.nodes = [None]  # the objects (keeps ids unique while we run); 0: the super-root
        self.sizes = array.array("q", [0])
        self.types = array.array("i", [0])
        self.ids = array.array("q", [0])  # id() of each node: names a path later (name_paths)
        self.lengths = array.array("i", [0])  # entries of a container (folded leaves included)
        self.type_index = {}  # id(type) -> type id
        self.type_keys = [None]  # the types (keeps their ids unique)
        self.type_names = ["<root>"]
        # The census's native sizing, node by node (sizes.py): a numpy/torch/Pillow/mmap
        # object's buffers and the references gc does not show (a view's base), a 3.11+
        # instance's attribute values. Without them a dominator owner would miss those bytes.
        self.native_kinds, self.native_bases = native_types()
        self.native = native_codes(self.native_kinds)
        self.native_seen = set()  # buffer addresses counted: a storage shared by views, once
        self.src = array.array("i")
        self.dst = array.array("i")
        self.lab = array.array("i")
        self.label_index = {}
        self.labels = []
        self.roots = []  # [node, label, kind]
        self.walls = set()  # nodes no edge but the super-root's leads to
        self.slot_names = {}  # id(type) -> ((name, descriptor), ...) of its member descriptors
        self.dict_descrs = {}  # id(type) -> its __dict__ descriptor or None
        self.unreached = {"examined": False, "estimated_pause_ms": None, "reason": "", "held": 0,
                          "garbage_objects": 0}
        for own in (self, self.__dict__, self.index, self.nodes, self.sizes, self.types, self.ids, self.lengths,
                    self.type_index, self.type_keys, self.type_names, self.src, self.dst, self.lab,
                    self.label_index, self.labels, self.roots, self.walls, self.slot_names, self.dict_descrs,
                    self.unreached, self.native, self.native_kinds, self.native_bases, self.native_seen):
            self.index[id(own)] = -1
        for obj in exclude:
            self.index[id(obj)] = -1

    # -- building blocks -------------------------------------------------------------------

    def _check(self):
        if time.monotonic() > self.deadline:
            raise GraphTimeout("the object graph did not finish within its time budget")
        if self.cancelled is not None and self.cancelled():
            raise GraphCancelled("the object graph was cancelled")

    def _label(self, text):
        i = self.label_index.get(text)
        if i is None:
            if len(self.labels) >= _MAX_LABELS:
                return -1
            i = self.label_index[text] = len(self.labels)
            self.labels.append(text)
        return i

    def _type_id(self, tp):
        t = self.type_index.get(id(tp))
        if t is None:
            t = self.type_index[id(tp)] = len(self.type_keys)
            self.type_keys.append(tp)
            self.type_names.append(_type_name(tp))
        return t

    def _node(self, obj):
        """The node of ``obj``, added (not yet walked) if new; -1 for our own objects."""
        i = self.index.get(id(obj))
        if i is not None:
            return i
        i = self.index[id(obj)] = len(self.nodes)
        if i > self.max_nodes:
            raise GraphTooBig("more than %d nodes" % self.max_nodes)
        self.nodes.append(obj)
        self.sizes.append(object_size(obj))
        self.types.append(self._type_id(type(obj)))
        self.ids.append(id(obj))
        self.lengths.append(0)
        return i

    def _root(self, obj, label, kind, tier, wall=False):
        i = self._node(obj)
        if i <= 0:
            return i
        self.roots.append([i, label, kind, tier])
        self.src.append(0)
        self.dst.append(i)
        self.lab.append(-1)
        if wall:
            self.walls.add(i)
        return i

    def _dict_of(self, obj, tp):
        """The instance ``__dict__`` through the built-in descriptor (cached per type)."""
        descr = self.dict_descrs.get(id(tp), _MISSING)
        if descr is _MISSING:
            descr = None
            try:
                for klass in type.__dict__["__mro__"].__get__(tp, type):
                    found = _class_dict(klass).get("__dict__")
                    if found is not None:
                        if type(found).__name__ in ("getset_descriptor", "member_descriptor"):
                            descr = found
                        break
            except Exception:
                descr = None
            self.dict_descrs[id(tp)] = descr
        if descr is None:
            return None
        try:
            d = descr.__get__(obj, tp)
        except Exception:
            return None
        return d if type(d) is dict else None

    def _slots_of(self, tp):
        names = self.slot_names.get(id(tp))
        if names is None:
            found = []
            try:
                for klass in type.__dict__["__mro__"].__get__(tp, type):
                    if klass is object:
                        continue
                    for name, descr in list(_class_dict(klass).items()):
                        if type(descr).__name__ == "member_descriptor" and type(name) is str:
                            found.append((name, descr))
            except Exception:
                found = []
            names = self.slot_names[id(tp)] = tuple(found)
        return names

    # -- the walk --------------------------------------------------------------------------

    def run(self):
        started = time.perf_counter()
        stack = []
        add_roots(self, stack)
        self._walk(stack)
        held_from_c(self, stack)
        self.seconds = time.perf_counter() - started

    def _edge(self, i, j, label):
        self.src.append(i)
        self.dst.append(j)
        self.lab.append(label)

    def _walk(self, stack):
        nodes = self.nodes
        index = self.index
        sizes = self.sizes
        types = self.types
        ids_append = self.ids.append
        lengths = self.lengths
        lengths_append = lengths.append
        sized = _SIZED_IDS
        walls = self.walls
        src_append = self.src.append
        dst_append = self.dst.append
        lab_append = self.lab.append
        leaf_ids = _LEAF_TYPE_IDS
        only_one = _ONLY_ONE_REFERENCE
        getrefcount = sys.getrefcount
        get_referents = gc.get_referents
        module_type = _ModuleType
        dict_items = dict.items
        dict_keys = _list_keys
        dict_values = _list_values
        type_id = self._type_id
        label_of = self._label
        size_of = object_size
        max_nodes = self.max_nodes
        perf_counter = time.perf_counter
        d_label = self._label("d")
        type_labels = {}  # id(type) -> label of "t<Type>"
        frame_like = _FRAME_LIKE_IDS
        plain = _PLAIN_IDS
        singleton_ids = _SINGLETON_IDS
        native = self.native
        steps = 0
        while stack:
            i = stack.pop()
            obj = nodes[i]
            tp = type(obj)
            t0 = perf_counter()
            names = None
            code = native.get(id(tp), 0) if native else 0
            if issubclass(tp, dict):
                # Two lists, not dict.items(): a pair per entry would be thousands of tracked
                # objects at once, which outlive young collections and count towards the
                # target's next full collection (measured: a 300-500 ms gen-2 pause).
                keys = dict_keys(obj)
                refs = dict_values(obj)
                if len(keys) != len(refs):  # changed in between (another thread): again, as pairs
                    pairs = list(dict_items(obj))
                    keys = [pair[0] for pair in pairs]
                    refs = [pair[1] for pair in pairs]
                    pairs = None
                names = {}
                for k in range(len(keys)):
                    key = keys[k]
                    if type(key) is str:
                        names.setdefault(id(refs[k]), label_of("k" + key[:_MAX_LABEL_CHARS]))
                refs.extend(keys)
                key = keys = None
                if tp is not dict:
                    refs.extend(get_referents(obj))
            elif issubclass(tp, module_type):
                refs = _referents(obj)
            else:
                refs = get_referents(obj)
            if code == NATIVE_BUFFERS:
                extra, hidden = native_extra(obj, self.native_kinds, self.native_bases, self.native_seen)
                sizes[i] += extra
                refs.extend(hidden)
                hidden = None
            elif code > NATIVE_BUFFERS:
                sizes[i] += instance_values_bytes(obj)
            if len(refs) > 4096:
                # Only a big container makes one long step (timing every object would count
                # the times this thread was descheduled between two clock reads).
                took = perf_counter() - t0
                if took > self.max_step:
                    self.max_step = took
            if id(tp) in sized:
                lengths[i] = min(len(refs) // 2 if names is not None else len(refs), 0x7FFFFFFF)
            tag = id(tp) in frame_like
            if names is None and not tag and id(tp) not in plain:
                slots = self._slots_of(tp)
                # Attribute names only from slots here: asking an instance for its __dict__
                # makes one where 3.11+ keep attributes inline (a dict more in the target for
                # every instance). The owners' paths are named afterwards (``name_paths``).
                d = None
                if d is not None or slots:
                    names = {}
                    if d is not None:
                        names[id(d)] = d_label
                    for name, descr in slots:
                        try:
                            value = descr.__get__(obj, tp)
                        except Exception:
                            continue
                        names.setdefault(id(value), label_of("a" + name))
                    value = None
                d = None
            folded = 0
            for ref in refs:
                rtp = type(ref)
                rid = id(rtp)
                if rid in leaf_ids:
                    count = getrefcount(ref)
                    if count <= only_one:
                        folded += size_of(ref)
                        continue
                    if count > _SHARED_LEAF or rid in singleton_ids:
                        continue  # None, True, small ints, interned names: shared by everyone
                j = index.get(id(ref))
                if j is None:
                    if issubclass(rtp, type) or rtp is module_type:
                        continue  # classes and modules are roots of their own
                    j = index[id(ref)] = len(nodes)
                    if j > max_nodes:
                        raise GraphTooBig("more than %d nodes" % max_nodes)
                    nodes.append(ref)
                    sizes.append(size_of(ref))
                    types.append(type_id(rtp))
                    ids_append(id(ref))
                    lengths_append(0)
                    if rid not in leaf_ids:
                        stack.append(j)
                elif j < 0 or j in walls:
                    continue
                if names is not None:
                    label = names.get(id(ref), -1)
                elif tag:
                    label = type_labels.get(rid)
                    if label is None:
                        label = type_labels[rid] = label_of("t" + _short_type_name(rtp))
                else:
                    label = -1
                src_append(i)
                dst_append(j)
                lab_append(label)
            if folded:
                sizes[i] += folded
            ref = refs = names = obj = None
            steps += 1
            if steps & _CHECK_EVERY == 0:
                self._check()
                self.progress("graph", len(nodes))

    def result(self):
        def chunks(arr):
            return [base64.b64encode(arr[start:start + _CHUNK_ITEMS].tobytes()).decode("ascii")
                    for start in range(0, len(arr), _CHUNK_ITEMS)]

        n = len(self.nodes)
        payload_bytes = (
            sys.getsizeof(self.index) + sys.getsizeof(self.nodes)
            + (self.sizes.buffer_info()[1] * 16) + (self.types.buffer_info()[1] * 4)
            + 3 * (self.src.buffer_info()[1] * 4) + sys.getsizeof(self.label_index)
            + len(self.index) * 60  # the int keys and values of the index
        )
        # The objects are let go before encoding: nothing of the target stays referenced.
        self.nodes = None
        self.index = None
        self.type_keys = None
        out = {
            "format": GRAPH_FORMAT,
            "byteorder": sys.byteorder,
            "nodes": n,
            "edges": len(self.src),
            "type_names": self.type_names,
            "labels": self.labels,
            "roots": self.roots,
            "sizes": chunks(self.sizes),
            "types": chunks(self.types),
            "ids": chunks(self.ids),
            "lengths": chunks(self.lengths),
            "edge_src": chunks(self.src),
            "edge_dst": chunks(self.dst),
            "edge_label": chunks(self.lab),
            "graph_seconds": self.seconds,
            "max_step_ms": self.max_step * 1000.0,
            "payload_peak_bytes": payload_bytes,
            "unreached": dict(self.unreached),
        }
        self.sizes = self.types = self.ids = self.lengths = self.src = self.dst = self.lab = None
        return out


def build(*, timeout, progress, is_stdlib, exclude, max_nodes, max_pause_ms, cancelled):
    """Walk the graph and return its result dict, or ``{"skipped": reason}`` when it is
    bigger than ``max_nodes`` (the caller keeps the census's owners)."""
    graph = Graph(timeout=timeout, progress=progress, is_stdlib=is_stdlib, exclude=exclude,
                  max_nodes=max_nodes, max_pause_ms=max_pause_ms, cancelled=cancelled)
    try:
        graph.run()
    except GraphTooBig as exc:
        graph = None
        return {"format": GRAPH_FORMAT, "skipped": "the object graph has %s: over the graph budget" % exc}
    return graph.result()

