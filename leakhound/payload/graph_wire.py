"""The object graph's wire: the labels its edges carry, the ``names`` request that labels the
paths the CLI chose, and the result written as JSON in pieces.

Runs inside the target with the standard library only, as ``graph.py`` (which imports it, so
that it is loaded with the payload).
"""

# mypy: disable-error-code="assignment, var-annotated, arg-type, unused-ignore"
# (payload code, Python 3.8+ without annotations: locals are rebound to None to drop references)

import _thread
import _weakref
import functools
import json
import os
import struct
import sys
import types

from . import roots
from .objects import (
    INLINE_VALUES_DICTS,
    add_made_dict,
    class_dict,
    dict_columns,
    dict_pairs,
    instance_dict,
    safe_referents,
    short_type_name,
    slot_values,
    type_name,
)
from .roots import frame_locals
from .sizes import HiddenNamed, hidden_referents
from .tasks import c_future_class, context_variables, task_context

try:  # running frames' variables are read through the compiled walk's module (3.11+)
    from . import _walk as _walk_module  # type: ignore[attr-defined]
except Exception:
    _walk_module = None

_ModuleType = type(sys)
FRAME_LIKE_IDS = frozenset(id(tp) for tp in (types.FrameType, types.CoroutineType, types.GeneratorType,
                                                types.AsyncGeneratorType))
MAX_LABEL_CHARS = 80


# -- naming the owners' paths -------------------------------------------------------------------

_MAX_PATHS = 64
_MAX_PATH_STEPS = 256


def _root_objects():
    """id -> object for every root the graph starts from (roots.every_root)."""
    found = {}
    for obj, _name, _kind, _tier in roots.every_root(_no_stdlib, named=False):
        found[id(obj)] = obj
    obj = None
    return found


def _no_stdlib(name):
    return False


_FRAME_GETTERS = {}  # id(type) -> (the type, the name of its frame's getset: cr_frame...)
for _tp, _getter in ((types.CoroutineType, "cr_frame"), (types.GeneratorType, "gi_frame"),
                     (types.AsyncGeneratorType, "ag_frame")):
    _FRAME_GETTERS[id(_tp)] = (_tp, _getter)
del _tp, _getter


def _frame_variable(obj, address):
    """(``a<name>``, value) for the variable of a frame, or of a coroutine's or generator's
    frame, whose value's id is ``address``; None when no variable holds it."""
    frame = obj
    getter = _FRAME_GETTERS.get(id(type(obj)))
    if getter is not None:
        try:
            frame = class_dict(getter[0])[getter[1]].__get__(obj, getter[0])
        except Exception:
            frame = None
    variables = frame_locals(frame, _walk_module) if type(frame) is types.FrameType else None
    frame = None
    for name, value in variables or ():
        if id(value) == address:
            return "a" + name[:MAX_LABEL_CHARS], value
    return None


def _context_variable(task, address, c_future):
    """(``c<name>``, value) for the variable of a (C) task's context whose value's id is
    ``address``; None when none holds it."""
    ctx = task_context(task, c_future)
    for name, value in context_variables(ctx) if ctx is not None else ():
        if id(value) == address:
            return "c" + name[:MAX_LABEL_CHARS], value
    return None


def step_label(obj, address, hidden=True):
    """(label, next object) for the referent or variable of ``obj`` whose id is ``address``;
    the label as the graph's (``a`` attribute, slot or frame variable, ``k`` dict key, ``d``
    instance dict, ``t`` an unnamed local's type, ``c`` a task's context variable, ``''``
    none); (None, None) when ``obj`` no longer references it. ``hidden``: what the walks read
    besides its referents is looked at too (~10 us more where nothing is found: not for each
    of a collection's entries, folded_step_label)."""
    tp = type(obj)
    named = _frame_variable(obj, address) if id(tp) in FRAME_LIKE_IDS else None
    if named is not None:
        return named
    if issubclass(tp, dict) and _walk_module is not None:
        # One pass over its table in C, no list made (two of a registry's size were, and
        # then its referents a third), then what a subclass holds besides its entries.
        entry = _walk_module.dict_entry_of(obj, address)
        if entry is not None:
            key, value = entry
            entry = None
            return ("k" + key[:MAX_LABEL_CHARS] if type(key) is str else ""), value
        refs = _walk_module.dict_own_referents(obj)
    else:
        if issubclass(tp, dict):
            # Two lists, one moment's, not dict.items() (dict_columns); a dict that never
            # holds still is looked at below, unlabelled.
            keys, values = dict_columns(obj) or ((), ())
            for k in range(len(values)):
                if id(values[k]) == address:
                    key, value = keys[k], values[k]
                    keys = values = None
                    return ("k" + key[:MAX_LABEL_CHARS] if type(key) is str else ""), value
            keys = values = None
        if _walk_module is not None and not issubclass(tp, _ModuleType):  # (a dict: above)
            # one pass of its traverse in C, no list of its referents made (an lru_cache's:
            # three an entry), then on 3.13 the __dict__ made from its inline values
            nxt = _walk_module.referent_with_id(obj, address)
            refs = [nxt] if nxt is not None else add_made_dict(obj, tp, []) if INLINE_VALUES_DICTS else []
        else:
            refs = safe_referents(obj)
    nxt = None
    for ref in refs:
        if id(ref) == address:
            nxt = ref
            break
    refs = None
    if nxt is None:
        # A task's context variable: an edge of the task's root (graph_roots.add_roots).
        c_future = c_future_class()
        if c_future is not None and issubclass(tp, c_future):
            return _context_variable(obj, address, c_future) or (None, None)
        # 3.11+ keep attributes inline until someone asks for __dict__: a path named before
        # this one may have made the dict, and then the values are in it, not referents.
        d = None
        if not issubclass(tp, (list, tuple, set, frozenset, type, _ModuleType)):
            d = instance_dict(obj)
        if d is not None:
            for key, value in dict_pairs(d):
                if id(value) == address:
                    return ("a" + key[:MAX_LABEL_CHARS] if type(key) is str else ""), value
        # What the walks read besides its referents (a code object's constants, an ndarray
        # view's base): the graph's edge, labelled where the walk names it (a leaf's ``grad``).
        extra = hidden_referents(obj) if hidden else ()
        for k in range(len(extra)):
            if id(extra[k]) == address:
                label = extra.labels[k] if type(extra) is HiddenNamed and k < len(extra.labels) else ""
                return label, extra[k]
        return None, None
    if id(tp) in FRAME_LIKE_IDS:
        return "t" + short_type_name(type(nxt)), nxt
    if issubclass(tp, (list, tuple, set, frozenset)):
        return "", nxt
    if issubclass(tp, type):
        return ("d" if type(nxt) is dict else ""), nxt
    if issubclass(tp, _ModuleType):
        return "d", nxt
    field = _c_field(obj, tp, nxt)
    if field:
        return field, nxt
    for klass in type.__dict__["__mro__"].__get__(tp, type):
        if klass is object:
            continue
        for name, descr in dict_pairs(class_dict(klass)):
            if type(descr).__name__ == "member_descriptor" and type(name) is str and name not in (
                    "__dict__", "__weakref__"):
                try:
                    if descr.__get__(obj, tp) is nxt:
                        return "a" + name, nxt
                except Exception:
                    continue
    # One instance dict per step of a named path: what the census does along its chains.
    d = instance_dict(obj)
    if d is not None:
        if d is nxt:
            return "d", nxt
        for key, value in dict_pairs(d):
            if value is nxt and type(key) is str:
                return "a" + key[:MAX_LABEL_CHARS], nxt
    return "", nxt


_FunctionType = types.FunctionType
# A function's defaults are C fields behind getset descriptors (read here through them: they
# return the field, run no code); ``__annotations__``'s would make a dict, and is not read.
_FUNCTION_FIELDS = [(name, _FunctionType.__dict__[name]) for name in ("__defaults__", "__kwdefaults__")]
_LRU_WRAPPER = getattr(functools, "_lru_cache_wrapper", None)  # None: the pure-Python fallback
_THREAD_LOCAL = getattr(_thread, "_local", None)


def _c_field(obj, tp, nxt):
    """The label of a C field that no member descriptor names, for the few built-in types whose
    fields hold what leaks: a function's mutable default (``.__defaults__``), an
    ``lru_cache``'s cache (``.<lru cache>``), a ``threading.local``'s per-thread dicts
    (``.<per-thread dicts>``); "" for any other."""
    if tp is _FunctionType:
        for name, descr in _FUNCTION_FIELDS:
            try:
                if descr.__get__(obj, tp) is nxt:
                    return "a" + name
            except Exception:
                continue
        return ""
    if type(nxt) is not dict:
        return ""
    if _LRU_WRAPPER is not None and issubclass(tp, _LRU_WRAPPER) and nxt is not instance_dict(obj):
        return "tlru cache"
    if _THREAD_LOCAL is not None and issubclass(tp, _THREAD_LOCAL) and nxt is not instance_dict(obj):
        # its dicts by thread (keyed by the threads' dummies: weak references to them up to
        # 3.12, the dummies on 3.13), not the keyword arguments it was made with
        for key in list(dict.keys(nxt))[:1]:
            # (issubclass of its type: isinstance would read a __class__ the key's class defines)
            if not issubclass(type(key), _weakref.ref) and short_type_name(type(key)) != "_localdummy":
                return ""
        return "tper-thread dicts"
    return ""


# Entries of a collection looked through for a step that went through one of them (folded into
# the collection by the walk: payload/_graph_walk.c): at most this many, a few ms.
_MAX_FOLDED_LOOKS = 4096


def folded_step_label(obj, address):
    """(label, next object) for a step from a collection through one of its entries (folded
    into it by the walk, no node of its own) to the object whose id is ``address``: "f" and
    the entry's own label for it (rendered ``[].__self__``); (None, None) when none of the
    first entries references it."""
    if type(obj) is dict:
        entries = list(dict.values(obj))[:_MAX_FOLDED_LOOKS]
    elif type(obj) in (list, tuple, set, frozenset):
        entries = list(obj)[:_MAX_FOLDED_LOOKS]
    else:
        return None, None
    for entry in entries:
        if type(entry) in (str, bytes, int, float, bool, type(None)) or issubclass(type(entry), (type, _ModuleType)):
            continue
        label, nxt = step_label(entry, address, hidden=False)
        if label is not None:
            entries = entry = None
            return "f" + label, nxt
    entries = entry = None
    return None, None


_REBOUND_KEYS = 64  # a dict's str keys looked at for a rebound step, at most
# a module's globals looked at for a rebound step, at most (a training loop's ``TOTAL = TOTAL +
# loss`` among a big script's globals: named ``__main__[].grad_fn``)
_REBOUND_GLOBALS = 4096


def rebound_attribute(obj, wanted_type, keys=_REBOUND_KEYS):
    """(label, value) of the one attribute of the instance ``obj`` (its ``__dict__`` or
    ``__slots__``, read through built-in descriptors; "a" and the name), or the one str key of
    the dict ``obj`` of at most ``keys`` entries (an instance's ``__dict__``, a dict of named
    parts, a module's globals; "k" and the key), whose value is of type ``wanted_type`` (a type's name, as
    objects.type_name); (None, None) when none or more than one is: where an object of that
    type was rebound (``self.rows = self.rows + [row]``) while the walk's paths waited to be
    named."""
    tp = type(obj)
    if type(wanted_type) is not str or issubclass(tp, (list, tuple, set, frozenset, type, _ModuleType)):
        return None, None
    if issubclass(tp, dict):
        prefix, d = "k", obj
        if dict.__len__(obj) > keys:
            return None, None
    else:
        prefix, d = "a", instance_dict(obj)
    pairs = dict_pairs(d) if d is not None else slot_values(obj)
    found = [(key, value) for key, value in pairs
             if type(key) is str and type_name(type(value)) == wanted_type]
    pairs = d = None
    if len(found) != 1:
        return None, None
    return prefix + found[0][0][:MAX_LABEL_CHARS], found[0][1]


def name_paths(request):
    """The labels along a few paths the CLI chose (``paths``: lists of ids, a root's first),
    walked again from the live roots by identity: an id is only compared with the ids of
    objects found as referents, never turned into an object. A step from an instance (or a
    small dict, or a module's globals) whose id it no longer holds is named by the one attribute
    (str key) holding an object of that step's type in ``types`` (the graph's, one list a
    path), if one does (``rebound_attribute``)."""
    paths = request.get("paths")
    if type(paths) is not list:
        return {"labels": []}
    types = request.get("types")
    types = types if type(types) is list and len(types) == len(paths) else [None] * len(paths)
    roots = _root_objects()
    out = []
    for path, wanted in zip(paths[:_MAX_PATHS], types):  # noqa: B905 - 3.8+
        if type(path) is not list or not path or any(type(a) is not int for a in path):
            out.append(None)
            continue
        obj = roots.get(path[0])
        labels = []
        globals_ = False  # (obj is a module's dict)
        for k, address in enumerate(path[1:_MAX_PATH_STEPS]):
            if obj is None:
                break
            label, nxt = step_label(obj, address)
            if label is None:
                label, nxt = folded_step_label(obj, address)
            if label is None and type(wanted) is list and k < len(wanted):
                label, nxt = rebound_attribute(obj, wanted[k], _REBOUND_GLOBALS if globals_ else _REBOUND_KEYS)
            globals_ = label == "d" and issubclass(type(obj), _ModuleType)
            obj = nxt
            if label is None:
                break
            labels.append(label)
        obj = nxt = None
        out.append(labels)
    roots = None
    return {"labels": out}


# -- writing the result --------------------------------------------------------------------------

BINARY_FILE = "graph.bin"  # beside result.json on the debugger path
_LIST_PIECE = 5000  # list items per JSON piece

# The graph's records travel raw after the JSON that describes them, in frames: two native
# uint32 (the column's code below, its items), then the items in native byte order. A node's
# columns are its address (``ids``), size, type id and entries (``lengths``); an edge's its
# source and destination, as node ids (the Python loop, one record a node, in id order) or as
# addresses (the compiled walk: no table from address to node in the target; a node may have
# a second, later record, which counts), and its label. leakhound puts a column's frames end
# to end and gives the addresses their ids (analysis/dominators/graph.py).
FRAME_COLUMNS = (("ids", "q"), ("sizes", "q"), ("types", "i"), ("lengths", "i"), ("edge_src", "i"),
                 ("edge_dst", "i"), ("edge_label", "i"), ("edge_src_address", "q"), ("edge_dst_address", "q"),
                 ("fold_address", "q"), ("fold_bytes", "q"))
FRAME_ITEMS = 1 << 16  # items per frame at most (256-512 KiB): each copy is one short step
_FRAME_HEADER = struct.Struct("=II")


def frames(code, arr):
    """The frames of one column (an ``array.array``)."""
    for start in range(0, len(arr), FRAME_ITEMS):
        piece = arr[start:start + FRAME_ITEMS]
        yield _FRAME_HEADER.pack(code, len(piece)) + piece.tobytes()


def frames_bytes(arr):
    """What ``frames`` makes of ``arr``, in bytes."""
    return len(arr) * arr.itemsize + _FRAME_HEADER.size * ((len(arr) + FRAME_ITEMS - 1) // FRAME_ITEMS)


class Binary(object):
    """A graph's records, as frames: ``nbytes`` in all, ``pieces()`` yields those not written
    out yet; ``write_fd(fd)``, if not None, writes them to a file at once (the compiled walk,
    the GIL released); ``spool``, if not None, is the open file (path, fd) the walk wrote its
    full blocks to as it went (the debugger path's graph.bin)."""

    def __init__(self, nbytes, pieces, write_fd=None, spool=None):
        self._nbytes = nbytes
        self.pieces = pieces
        self.write_fd = write_fd
        self.spool = spool

    def nbytes(self):
        return self._nbytes

    def close(self):
        """The spool's file descriptor closed (the records written or not): a request that
        stops between the walk and its answer leaves no descriptor open in the target."""
        spool, self.spool = self.spool, None
        if spool is not None:
            try:
                os.close(spool[1])
            except OSError:
                pass

    def __del__(self):
        self.close()


# Where a graph may be in a document sent: a result (``graph``), the agent's answer
# (``result.graph``), a graph handed over before the answer on the agent's socket
# (``partial.doc.graph``).
_GRAPH_PLACES = (("graph",), ("result", "graph"), ("partial", "doc", "graph"))


def _graph_of(doc):
    """(the graph dict, the keys leading to it) in ``doc``, or (None, None)."""
    for where in _GRAPH_PLACES:
        value = doc
        for key in where:
            value = value.get(key) if type(value) is dict else None
        if type(value) is dict:
            return value, where
    return None, None


def _replaced(doc, where, value):
    """A copy of ``doc`` with ``value`` at the keys ``where`` (the dicts on the way copied)."""
    doc = dict(doc)
    if len(where) == 1:
        doc[where[0]] = value
    else:
        doc[where[0]] = _replaced(doc[where[0]], where[1:], value)
    return doc


def binary_pieces(doc):
    """The frames of the graph in ``doc`` (sent right after its JSON line), if any."""
    graph, _where = _graph_of(doc)
    binary = graph.get("_binary") if graph is not None else None
    if binary is None:
        return iter(())
    return binary.pieces()


_LABEL_PIECE = 500  # labels per slice read from the walk's table


class LabelTexts(object):
    """The compiled walk's labels (its table of UTF-8 texts, _graph_walk.c), read a slice at a
    time by ``read(start, stop)`` (``_walk.graph_labels``): the result is written without every
    label as a str in the target at once. A plain process has ~7,500-10,000 labels (its
    modules' globals): as one list of str, and that list's JSON, they were ~0.9 MiB of a
    1M-object target's peak (a third of what the inspection cost it, tracemalloc). Read like a
    list (the tests compare them so)."""

    __slots__ = ("_read", "_count")

    def __init__(self, read, count):
        self._read = read
        self._count = count

    def __len__(self):
        return self._count

    def __iter__(self):
        for start in range(0, self._count, _LABEL_PIECE):
            for text in self._read(start, min(start + _LABEL_PIECE, self._count)):
                yield text

    def __getitem__(self, k):
        if type(k) is slice:
            start, stop, step = k.indices(self._count)
            return self._read(start, stop)[::step] if start < stop else []
        k = range(self._count)[k]  # (IndexError past either end)
        return self._read(k, k + 1)[0]

    def __eq__(self, other):
        return list(self) == list(other)

    __hash__ = None

    def json_pieces(self):
        yield "["
        for start in range(0, self._count, _LABEL_PIECE):
            texts = self._read(start, min(start + _LABEL_PIECE, self._count))
            yield ("" if start == 0 else ", ") + json.dumps(texts)[1:-1]
        yield "]"


def _value_pieces(value):
    if type(value) is LabelTexts:
        for piece in value.json_pieces():
            yield piece
    # A long list is written a slice at a time: one json.dumps of MBs holds the GIL.
    elif type(value) is list and len(value) > _LIST_PIECE:
        yield "["
        for start in range(0, len(value), _LIST_PIECE):
            yield ("" if start == 0 else ", ") + json.dumps(value[start:start + _LIST_PIECE])[1:-1]
        yield "]"
    elif type(value) is dict:
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield ("" if i == 0 else ", ") + json.dumps(str(key)) + ": "
            for piece in _value_pieces(item):
                yield piece
        yield "}"
    else:
        yield json.dumps(value)


def json_pieces(doc, binary_dir=None):
    """``json.dumps(doc)`` in pieces, for a document that may hold a graph (``_GRAPH_PLACES``).
    The graph's arrays are not in it: with ``binary_dir`` they are written
    first to ``BINARY_FILE`` there (the debugger path: the CLI reads it beside result.json),
    else the caller sends ``binary_pieces(doc)`` after the JSON (the agent's socket); the JSON
    says which (``binary_file``) and how many bytes follow (``binary_bytes``)."""
    graph, where = _graph_of(doc)
    binary = graph.get("_binary") if graph is not None else None
    if binary is None:
        for piece in _value_pieces(doc):
            yield piece
        return
    meta = dict(graph)
    del meta["_binary"]
    meta.pop("_census", None)  # the walk's census: the runner's (runner.census_of_graph)
    meta["binary_bytes"] = binary.nbytes()
    spool = binary.spool
    if spool is not None and (binary_dir is None or spool[0] != os.path.join(binary_dir, BINARY_FILE)):
        raise ValueError("the graph was spooled to %s, not sent there" % spool[0])
    if spool is not None:
        # the walk wrote its full blocks there already: the rest after them
        try:
            binary.write_fd(spool[1])
        finally:
            binary.close()
        meta["binary_file"] = BINARY_FILE
    elif binary_dir is not None:
        path = os.path.join(binary_dir, BINARY_FILE)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if binary.write_fd is not None:
            try:
                binary.write_fd(fd)
            finally:
                os.close(fd)
        else:
            with os.fdopen(fd, "wb") as fh:
                for piece in binary.pieces():
                    fh.write(piece)
        meta["binary_file"] = BINARY_FILE
    for piece in _value_pieces(_replaced(doc, where, meta)):
        yield piece
