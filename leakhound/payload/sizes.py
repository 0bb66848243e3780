"""Sizes in the target: the size of one object (:func:`object_size`, the census's and any heap
walk's per-object size) and deep sizes of plain data (:func:`deep_size`). Standard library only.

``object_size`` never runs a ``__sizeof__`` written in Python (see its docstring).
"""

import sys

from .objects import _class_dict

# A __sizeof__ above this (256 TiB, more than any address space) is not a size; it counts as
# 0, like one that raises (_walk.c: MAX_OBJECT_BYTES). Sums then stay far from int64 limits.
_MAX_OBJECT_BYTES = 1 << 48

_METHOD_DESCRIPTOR = type(object.__sizeof__)
_object_sizeof = object.__sizeof__
_MISSING = object()


def _sizeof_is_builtin(tp):
    """Is ``tp``'s ``__sizeof__`` C code (a method_descriptor: built-in and extension types,
    and ``object.__sizeof__`` for classes that do not define one)? Reads the MRO's dicts only."""
    for klass in type.__dict__["__mro__"].__get__(tp, type):
        descr = _class_dict(klass).get("__sizeof__", _MISSING)
        if descr is not _MISSING:
            return type(descr) is _METHOD_DESCRIPTOR
    return False


def object_size(obj, default=0):
    """sys.getsizeof(obj, 0) when its type's ``__sizeof__`` is C code, else
    ``object.__sizeof__(obj)``: a ``__sizeof__`` written in Python is never run (a mock's
    creates new mocks for the walk to meet, without end: gigabytes in seconds). Anything it
    raises (not only TypeError) and any size no object can have count as 0: one odd object
    must not end the census. ``Census._claim_tree``'s hot loop and _walk.c do the same."""
    try:
        size = sys.getsizeof(obj, default) if _sizeof_is_builtin(type(obj)) else _object_sizeof(obj)
    except Exception:
        return 0
    return size if 0 <= size <= _MAX_OBJECT_BYTES else 0


_getsizeof = object_size  # the census's name for it


def deep_size(root, seen=None, limit=5000000):
    """sys.getsizeof over everything ``root`` reaches through containers, each object once.

    ``seen`` (ids) may be shared by the caller so that objects shared between measured parts
    count once. Dict keys are followed too (gc.get_referents skips str keys). Only built-in
    container methods run; ``limit`` bounds the walk.
    """
    seen = set() if seen is None else seen
    total = 0
    stack = [root]
    getsizeof = sys.getsizeof
    steps = 0
    while stack and steps < limit:
        obj = stack.pop()
        oid = id(obj)
        if oid in seen:
            continue
        seen.add(oid)
        total += getsizeof(obj, 0)
        steps += 1
        if isinstance(obj, dict):
            stack.extend(dict.keys(obj))
            stack.extend(dict.values(obj))
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
    return total
