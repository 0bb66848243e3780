# mypy: disable-error-code="assignment, var-annotated, arg-type, unused-ignore"
# (payload code, Python 3.8+ without annotations: locals are rebound to None to drop references)
"""The object graph's wire: the labels its edges carry, the ``names`` request that labels the
paths the CLI chose, and the result written as JSON in pieces.

Runs inside the target with the standard library only, as ``graph.py`` (which imports it, so
that it is loaded with the payload).
"""

import json
import sys
import types

from .objects import _class_dict, _instance_dict, _referents, _short_type_name
from .tasks import live_tasks

_ModuleType = type(sys)
_FRAME_LIKE_IDS = frozenset(id(tp) for tp in (types.FrameType, types.CoroutineType, types.GeneratorType,
                                                types.AsyncGeneratorType))
_MAX_LABEL_CHARS = 80


# -- naming the owners' paths -------------------------------------------------------------------

_MAX_PATHS = 64
_MAX_PATH_STEPS = 256


def _root_objects():
    """id -> object for every root the graph starts from (modules, classes, tasks, frames)."""
    import threading  # noqa: PLC0415

    found = {}
    for module in list(sys.modules.values()):
        if type(module) is _ModuleType:
            found[id(module)] = module
    pending = [object]
    while pending:
        cls = pending.pop()
        if id(cls) in found:
            continue
        found[id(cls)] = cls
        try:
            pending.extend(type.__subclasses__(cls))
        except TypeError:
            continue
    for task in live_tasks():
        found[id(task)] = task
    current = sys._current_frames()
    current.pop(threading.get_ident(), None)
    for top in list(current.values()):
        frame = top
        while frame is not None:
            found[id(frame)] = frame
            frame = frame.f_back
    del current
    top = frame = None
    return found


def _step_label(obj, address):
    """(label, next object) for the referent of ``obj`` whose id is ``address``; the label as
    the graph's (``a`` attribute, ``k`` dict key, ``d`` instance dict, ``t`` local's type,
    ``''`` none); (None, None) when ``obj`` no longer references it."""
    tp = type(obj)
    if issubclass(tp, dict):
        for key, value in list(dict.items(obj)):
            if id(value) == address:
                return ("k" + key[:_MAX_LABEL_CHARS] if type(key) is str else ""), value
    refs = _referents(obj)
    nxt = None
    for ref in refs:
        if id(ref) == address:
            nxt = ref
            break
    refs = None
    if nxt is None:
        # 3.11+ keep attributes inline until someone asks for __dict__: a path named before
        # this one may have made the dict, and then the values are in it, not referents.
        d = None
        if not issubclass(tp, (list, tuple, set, frozenset, type, _ModuleType)):
            d = _instance_dict(obj)
        if d is not None:
            for key, value in list(dict.items(d)):
                if id(value) == address:
                    return ("a" + key[:_MAX_LABEL_CHARS] if type(key) is str else ""), value
        return None, None
    if id(tp) in _FRAME_LIKE_IDS:
        return "t" + _short_type_name(type(nxt)), nxt
    if issubclass(tp, (list, tuple, set, frozenset)):
        return "", nxt
    if issubclass(tp, type):
        return ("d" if type(nxt) is dict else ""), nxt
    if issubclass(tp, _ModuleType):
        return "d", nxt
    for klass in type.__dict__["__mro__"].__get__(tp, type):
        if klass is object:
            continue
        for name, descr in list(_class_dict(klass).items()):
            if type(descr).__name__ == "member_descriptor" and type(name) is str and name not in (
                    "__dict__", "__weakref__"):
                try:
                    if descr.__get__(obj, tp) is nxt:
                        return "a" + name, nxt
                except Exception:
                    continue
    # One instance dict per step of a named path: what the census does along its chains.
    d = _instance_dict(obj)
    if d is not None:
        if d is nxt:
            return "d", nxt
        for key, value in list(dict.items(d)):
            if value is nxt and type(key) is str:
                return "a" + key[:_MAX_LABEL_CHARS], nxt
    return "", nxt


def name_paths(request):
    """The labels along a few paths the CLI chose (``paths``: lists of ids, a root's first),
    walked again from the live roots by identity: an id is only compared with the ids of
    objects found as referents, never turned into an object."""
    paths = request.get("paths")
    if type(paths) is not list:
        return {"labels": []}
    roots = _root_objects()
    out = []
    for path in paths[:_MAX_PATHS]:
        if type(path) is not list or not path or any(type(a) is not int for a in path):
            out.append(None)
            continue
        obj = roots.get(path[0])
        labels = []
        for address in path[1:_MAX_PATH_STEPS]:
            if obj is None:
                break
            label, obj = _step_label(obj, address)
            if label is None:
                break
            labels.append(label)
        obj = None
        out.append(labels)
    roots = None
    return {"labels": out}


# -- writing the result --------------------------------------------------------------------------

_ARRAY_KEYS = ("sizes", "types", "ids", "lengths", "edge_src", "edge_dst", "edge_label")


def json_pieces(doc):
    """``json.dumps(doc)`` in pieces, for a document that may hold a graph (at ``graph`` or
    ``result.graph``): its base64 chunks (JSON-safe as they are) are written one by one. One
    json.dumps of tens of MB holds the GIL for hundreds of ms (measured: 200 ms for 33 MB)."""
    if type(doc) is not dict:
        yield json.dumps(doc)
        return
    graph = doc.get("graph")
    if type(graph) is dict and all(type(graph.get(k)) is list for k in _ARRAY_KEYS):
        rest = dict(doc)
        del rest["graph"]
        meta = dict(graph)
        for key in _ARRAY_KEYS:
            del meta[key]
        head = json.dumps(rest)[:-1]
        yield head + (", " if head != "{" else "") + '"graph": ' + json.dumps(meta)[:-1]
        for key in _ARRAY_KEYS:
            yield ', "%s": [' % key
            for i, chunk in enumerate(graph[key]):
                yield ('"' if i == 0 else ', "') + chunk + '"'
            yield "]"
        yield "}}"
        return
    result = doc.get("result")
    if type(result) is dict and type(result.get("graph")) is dict:
        rest = dict(doc)
        del rest["result"]
        head = json.dumps(rest)[:-1]
        yield head + (", " if head != "{" else "") + '"result": '
        for piece in json_pieces(result):
            yield piece
        yield "}"
        return
    yield json.dumps(doc)
