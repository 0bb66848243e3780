"""Reading an object without running its code: its referents, type name, instance dict and
``__slots__`` values, only through built-in descriptors and C calls. Standard library only.

Used by the census (``census*.py``) and by any payload operation that walks the heap.
"""

import _weakref
import gc
import sys
import types
from _operator import is_ as _is

# Builtin containers whose length is read with the C slot, never a user ``__len__``.
SIZED = (dict, list, set, frozenset, tuple, bytes, bytearray, str)
ModuleType = type(sys)
# Leaves: objects with no referents. A walk never pushes one on its stack, and one whose only
# reference is the container it was found in cannot be met again, so it is not marked.
LEAF_TYPES = (str, bytes, int, float, bool, complex, type(None))
LEAF_TYPE_IDS = frozenset(id(tp) for tp in LEAF_TYPES)
# A leaf referenced from more places than this (small ints, interned names) is shared by
# everyone: no owner retains it, and edges to it would be most of the object graph
# (_graph_walk.c's GRAPH_SHARED_LEAF).
SHARED_LEAF = 64
# The payload's own package: ``_leakhound_payload`` in a target (boot.py loads it under that
# name), ``leakhound.payload`` when imported. What its modules hold is leakhound's.
PAYLOAD_PACKAGE = __name__.rsplit(".", 1)[0]


# 3.11-3.13 keep an instance's __dict__, once made, in the word three before it when its type
# has Py_TPFLAGS_MANAGED_DICT (_walk_objects.c reads it too); 3.12 tags its inline values there.
MANAGED_DICTS = (3, 11) <= sys.version_info[:2] <= (3, 13)
# 3.13 keeps the attribute values inline after the object, and its traverse visits them, not
# a __dict__ made from them (vars(), obj.__dict__), while they are valid: gc.get_referents
# leaves that dict out. It is the instance's all the same (add_made_dict adds it).
INLINE_VALUES_DICTS = sys.version_info[:2] == (3, 13)
_MANAGED_DICT_FLAG = 1 << 4
_TYPE_FLAGS = type.__dict__["__flags__"]
_WORD = 8 if sys.maxsize > 2**32 else 4
try:  # the compiled extension reads a word (_libc.c); ctypes only where it does not load
    from . import _walk as _native

    _word_at = _native.word_at
except Exception:
    try:
        import ctypes as _ctypes

        def _word_at(address, _at=_ctypes.c_size_t.from_address):
            return _at(address).value
    except Exception:  # (a payload without either: no "d" labels, the graph's result says so)
        _word_at = None  # type: ignore[assignment]
CAN_READ_MANAGED_DICTS = MANAGED_DICTS and _word_at is not None


def has_managed_dict(tp):
    """Does ``tp`` keep its instances' __dict__ in the managed pointer (3.11+)?"""
    return bool(_TYPE_FLAGS.__get__(tp, type) & _MANAGED_DICT_FLAG)


def struct_word(obj, offset):
    """The machine word at ``offset`` bytes into ``obj``'s struct (the caller knows its
    layout), or None where no word can be read."""
    return None if _word_at is None else _word_at(id(obj) + offset)


def managed_dict_address(obj, tp):
    """The address of ``obj``'s made __dict__ (3.11-3.13, type ``tp``), or 0."""
    if _word_at is None or not has_managed_dict(tp):
        return 0
    word = _word_at(id(obj) - 3 * _WORD)
    return 0 if word & 1 else word


def add_made_dict(obj, tp, refs, drop_values=False):
    """3.13: ``refs`` (``obj``'s gc.get_referents) with the __dict__ made from its inline
    values added, when there is one and its traverse did not visit it (the dict is read
    through the built-in descriptor only once it exists: asking makes one otherwise).

    A dict's traverse does not visit values embedded in their object, so for a walk that
    reads referents through gc (the census) the values stay the object's. ``drop_values``:
    for a walk that reads the dict's entries itself (the graph), they are taken out of
    ``refs``, each once, found by identity (never ==, which could run its code): met from
    both the object and its dict, a value held once would be counted twice."""
    address = managed_dict_address(obj, tp)
    if not address:
        return refs
    for ref in refs:
        if id(ref) == address:
            return refs
    d = instance_dict(obj)
    if d is None or id(d) != address:
        return refs
    if drop_values:
        for value in list(dict.values(d)):  # a list first: a finalizer may change d
            for j in range(len(refs)):
                if refs[j] is value:
                    del refs[j]
                    break
    refs.append(d)
    return refs


_MAPPING_PROXY = type(type.__dict__)


def dict_columns(d):
    """(keys, values) of a live dict (or a class's mappingproxy) as it was at one moment, two
    lists in entry order; None if it never holds still (or ``d`` is neither).

    Never ``list(d.items())``: a tuple made per entry while the dict is read can start a
    collection (3.10, 3.11: inside that allocation) whose finalizers change the dict, or let
    another thread run that does: RuntimeError, dictionary changed size during iteration;
    and a big registry's pairs would be as many tracked tuples at once. Its keys, then its
    values, each list made by one C call that makes no tracked object while it reads, then
    its keys read again and compared by identity (``is``: no object made, no ``__eq__`` of
    the target's run): the same keys before and after make the two lists one moment's."""
    if issubclass(type(d), dict):  # (a subclass's own keys() never runs)
        keys_of, values_of, size = dict.keys, dict.values, dict.__len__
    elif type(d) is _MAPPING_PROXY:  # a class's: over its dict
        keys_of, values_of, size = _MAPPING_PROXY.keys, _MAPPING_PROXY.values, _MAPPING_PROXY.__len__
    else:
        return None
    for _ in range(8):
        try:
            keys = list(keys_of(d))
            values = list(values_of(d))
            if len(keys) == len(values) == size(d) and all(map(_is, keys, keys_of(d))):
                return keys, values
        except RuntimeError:
            continue
    return None


def dict_pairs(d):
    """[(key, value)] of a live dict or a class's mappingproxy, one moment's (dict_columns);
    [] if it never holds still."""
    columns = dict_columns(d)
    return list(zip(*columns)) if columns is not None else []  # noqa: B905 - 3.8+


def is_payload_name(name):
    """Whether ``name`` (a module's, or a class's qualified name) is in the payload's package."""
    return name == PAYLOAD_PACKAGE or name.startswith(PAYLOAD_PACKAGE + ".")


def safe_referents(obj):
    """gc.get_referents(obj), except for modules: their dict only.

    A module's tp_traverse also runs its extension's ``m_traverse``, and some visit memory
    that holds no live object: CPython 3.12 and 3.13.0's ``_asyncio`` visits its free list of
    ``FutureIter`` objects (refcount 0). gc.get_referents then hands back freed objects; the
    reference the census holds brings them back to life, and dropping it frees them a second
    time, corrupting the free list: the target's next ``await`` fails or it segfaults
    (CPython gh-122695). What an extension module keeps in its state is found otherwise
    (classes from the subclass tree, the rest as held from C).
    """
    if issubclass(type(obj), ModuleType):
        d = instance_dict(obj)
        return [d] if d is not None else []
    if INLINE_VALUES_DICTS:
        return add_made_dict(obj, type(obj), gc.get_referents(obj))
    return gc.get_referents(obj)


def subclass_tree(base=object, tick=None):
    """``base`` and every class reachable from its subclass tree, each once (looked up with
    the built-in ``type.__subclasses__``, never a metaclass's). ``tick``: called now and then
    (the census's duty cycle: a big program has tens of thousands of classes)."""
    out = []  # type: list
    seen = set()
    pending = [base]
    while pending:
        if tick is not None and len(out) & 255 == 255:
            tick()
        cls = pending.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        out.append(cls)
        try:
            pending.extend(type.__subclasses__(cls))
        except TypeError:
            continue
    return out


_TYPE_MODULE = type.__dict__["__module__"]


def class_module(tp):
    """Class ``tp``'s module name, as type's own getter reads it (a heap type's: what its dict
    holds), when it is a str; else None. Never raises: a heap type whose dict has no
    ``__module__`` (pybox2d's SWIG classes) has the getter raise AttributeError, and an
    inspection failed on it; a dict's value that is no str is the target's object, never
    compared or formatted (its __eq__ or __str__ would run)."""
    try:
        name = _TYPE_MODULE.__get__(tp, type)
    except AttributeError:
        return None
    return name if type(name) is str else None


def type_name(tp):
    try:
        qual = type.__dict__["__qualname__"].__get__(tp, type)
    except Exception:
        return "?"
    mod = class_module(tp)
    if mod is None or mod == "builtins":
        return qual  # (as the type's repr: a module it does not say is left out)
    return "%s.%s" % (mod, qual)


_FunctionType = types.FunctionType
_FUNCTION_QUALNAME = _FunctionType.__dict__["__qualname__"]
_FUNCTION_MODULE = _FunctionType.__dict__["__module__"]
_HELD_WHAT_MAX = 160  # characters of a function's name in a root's name


def held_what(obj):
    """What an object held from C (or made during the walk) is called in its root's name: its
    type's name, and a function's own (``function pkg.mod.make.<locals>.hook``: which of the
    program's functions C keeps, a profiler ``sys.setprofile`` installed, a database's user
    function), read through the function type's descriptors (its ``__module__`` only when it
    is a str)."""
    tp = type(obj)
    name = type_name(tp)
    if tp is not _FunctionType:
        return name
    try:
        qual = _FUNCTION_QUALNAME.__get__(obj, tp)
        mod = _FUNCTION_MODULE.__get__(obj, tp)
    except Exception:
        return name
    if type(qual) is not str:
        return name
    if type(mod) is str:
        qual = mod + "." + qual
    return name + " " + qual[:_HELD_WHAT_MAX]


def class_dict(klass):
    return type.__dict__["__dict__"].__get__(klass, type)


HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE
BASETYPE = 1 << 10  # Py_TPFLAGS_BASETYPE


def type_flags(cls):
    """A class's ``tp_flags``, read through type's own getset (never the class's)."""
    return type.__dict__["__flags__"].__get__(cls, type)


_WEAK_REF = type(_weakref.ref(type))  # (weakref.ReferenceType, the exact type)
_TYPE_SUBCLASS = 1 << 31  # Py_TPFLAGS_TYPE_SUBCLASS: a class (type or a metaclass's instance)


def subclasses_owner(d):
    """The class whose registry of subclasses ``d`` is, or None. A class keeps one, a dict
    ``{id(subclass): weakref to it}`` (``tp_subclasses``, what ``type.__subclasses__()``
    reads), that no traversal shows (type_traverse leaves it out; 3.12+ keep a static type's
    in the interpreter's state): ~200 of them, ``object``'s 365 weakrefs among them, were a
    ``<held from C: dict>`` owner of 0.2-0.5 MiB in every target. Known by its first live
    subclass: the base whose live subclasses are the dict's keys, exactly. Only C runs (a
    weakref's call, type's getsets, int keys compared)."""
    if type(d) is not dict:
        return None
    columns = dict_columns(d)
    if not columns or not columns[0]:
        return None
    keys, values = columns
    sub = None
    for value in values[:8]:
        sub = value() if type(value) is _WEAK_REF else None
        if sub is not None:
            break
    if sub is None or not type_flags(type(sub)) & _TYPE_SUBCLASS:
        return None
    if not all(type(k) is int for k in keys):
        return None
    wanted = set(keys)
    if id(sub) not in wanted:
        return None
    for base in type.__dict__["__bases__"].__get__(sub, type):
        if set(map(id, type.__subclasses__(base))) == wanted:
            return base
    return None


def module_dict_name(d):
    """The ``__name__`` (a str) a dict holds, as a module's dict does, or None; read without a
    lookup (a key's own ``__eq__`` never runs)."""
    columns = dict_columns(d) if type(d) is dict else None
    if columns is None:
        return None
    for key, value in zip(*columns):  # noqa: B905 - 3.8+
        if type(key) is str and key == "__name__":
            return value if type(value) is str else None
    return None


# A class's registry of its subclasses is named under the class by this step (the CLI reads it
# as model/names.py SUBCLASSES_STEP, with its dot).
SUBCLASSES_LABEL = "<subclasses>"
OURS = "ours"  # c_holder's answer for the payload's own


def c_holder(obj):
    """Whose an object only C holds is, where the payload can tell: OURS for the import
    system's copy of the payload's extension module's dict (a single-phase module's
    ``m_copy``), the class for a class's registry of its subclasses (subclasses_owner), else
    None (held from C)."""
    if type(obj) is not dict:
        return None
    name = module_dict_name(obj)
    if name is not None and is_payload_name(name):
        return OURS
    return subclasses_owner(obj)


def own_class_dict(klass, referents=None):
    """The dict a class keeps its attributes in (not a mappingproxy of it), or None. A class
    made in Python (a heap type) lists it among its referents; a static type (int, a C
    extension's classes) lists none, and its dict was an owner of its own: 400 of them,
    ``<held from C: dict>`` ~0.5 MiB, third on a small worker's first screen. Read then
    through the mappingproxy ``__dict__`` makes (it references the dict, and dies here).
    ``referents``: the class's gc.get_referents, where the caller has them already."""
    if type_flags(klass) & HEAPTYPE:
        refs = gc.get_referents(klass) if referents is None else referents
    else:
        refs = gc.get_referents(class_dict(klass))
    for ref in refs:
        if type(ref) is dict:
            return ref
    return None


def short_type_name(tp):
    try:
        return type.__dict__["__qualname__"].__get__(tp, type)
    except Exception:
        return "?"


def in_mro(tp, classes):
    """Whether one of ``classes`` is in ``tp``'s MRO, each compared by identity (``in`` would
    compare with ``==``: a metaclass's ``__eq__``, Python code of the target's, would run);
    False while the class is being made (its ``__mro__`` still None)."""
    mro = type.__dict__["__mro__"].__get__(tp, type)
    if type(mro) is not tuple:
        return False
    for klass in mro:
        for cls in classes:
            if klass is cls:
                return True
    return False


def dict_descriptor(tp):
    """The descriptor of the ``__dict__`` of ``tp``'s instances (the first in its MRO) when it
    is a built-in one; None when there is none, or it is written in Python (never run).
    A walk looks it up once per type and reads each instance through it (``dict_via``)."""
    for klass in type.__dict__["__mro__"].__get__(tp, type):
        descr = class_dict(klass).get("__dict__")
        if descr is not None:
            return descr if type(descr).__name__ in ("getset_descriptor", "member_descriptor") else None
    return None


def slot_members(tp):
    """(name, member descriptor) for every ``__slots__`` member along ``tp``'s MRO."""
    out = []
    for klass in type.__dict__["__mro__"].__get__(tp, type):
        if klass is object:
            continue
        for name, descr in dict_pairs(class_dict(klass)):
            if type(descr).__name__ == "member_descriptor" and type(name) is str:
                out.append((name, descr))
    return out


def dict_via(descr, obj, tp):
    """``obj``'s ``__dict__`` read through ``descr`` (``dict_descriptor(tp)``), or None."""
    if descr is None:
        return None
    try:
        d = descr.__get__(obj, tp)
    except Exception:
        return None
    return d if type(d) is dict else None


def slots_via(members, obj, tp):
    """(name, value) of ``obj``'s ``__slots__`` read through ``members`` (``slot_members(tp)``);
    a member not set is left out."""
    out = []
    for name, member in members:
        try:
            out.append((name, member.__get__(obj, tp)))
        except Exception:
            continue
    return out


def plain_text(value):
    """``value`` as text by built-in conversions only: a str itself, an int's digits, anything
    else ``<Type at 0x...>`` (its ``__str__`` is never called; the address keeps two apart)."""
    tp = type(value)
    if tp is str:
        return value
    if tp is int:
        return int.__repr__(value)
    return "<%s at 0x%x>" % (short_type_name(tp), id(value))


_ITERABLE_BASES = (list, tuple, set, frozenset)


def builtin_iter(obj):
    """An iterator over the entries of a list, tuple, set or frozenset (a subclass's too) by
    the built-in type's own ``__iter__`` (never one its subclass defines); None for any other
    object. ``list.extend(obj)`` and ``for x in obj`` would call a subclass's."""
    tp = type(obj)
    for base in _ITERABLE_BASES:
        if tp is base or issubclass(tp, base):
            return base.__iter__(obj)
    return None


def instance_dict(obj):
    """The instance ``__dict__`` through the built-in descriptor only (no user code)."""
    tp = type(obj)
    return dict_via(dict_descriptor(tp), obj, tp)


def module_file(module):
    """A module's ``__file__`` read from its dict (a str), or None (none, or no module)."""
    if type(module) is not type(sys):
        return None
    path = instance_dict(module).get("__file__")
    return path if type(path) is str else None


def slot_values(obj):
    """(name, value) for ``__slots__`` members, read through member descriptors only."""
    tp = type(obj)
    return slots_via(slot_members(tp), obj, tp)


def builtin_length(obj, kinds=SIZED):
    """The length of ``obj`` read with the C slot of the built-in container among ``kinds``
    it is; None for any other object, or when it cannot be read (never a user ``__len__``)."""
    for tp in kinds:
        if issubclass(type(obj), tp):
            try:
                return tp.__len__(obj)
            except Exception:
                return None
    return None


def item_count(obj):
    """An owner's items: the length of a built-in container (0 when unreadable), else 1."""
    if not issubclass(type(obj), SIZED):
        return 1
    length = builtin_length(obj)
    return 0 if length is None else length

