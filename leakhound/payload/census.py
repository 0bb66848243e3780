"""Owner-attributed heap census, run inside the target process.

Standard library only; compatible with Python 3.8+ (its inner loop has a compiled twin,
``_walk.c``, used where it loads). It never calls ``gc.collect()``, never calls
``repr``/``len``/``__getattr__``/``__sizeof__`` written in Python by the target (only built-in
descriptors, ``gc.get_referents`` and C ``__sizeof__`` methods; a class whose ``__sizeof__`` is
Python code counts ``object.__sizeof__``), and runs in its own short-lived thread so the
target's event loop keeps ticking: every step is one C call, and the interpreter's switch
interval hands the GIL back to the main thread between them.

How memory is attributed: every object reachable from a named root is claimed by exactly one
owner, the first to reach it, walking roots in a fixed priority order (``__main__``, other
non-stdlib modules, stdlib modules, class attributes, asyncio tasks, thread stacks). Shared objects are
therefore counted once. Tracked objects no named root reaches are split, with the same
arithmetic the cyclic GC uses (refcount minus references from inside the set), into objects
held from C / untracked places (owners named ``<held from C: Type>``) and cyclic garbage.
"""

import array
import gc
import sys
import time

from .tasks import await_chain, live_tasks

try:  # the compiled inner walk (_walk.c): one stable-ABI build, _walk.abi3.so, for CPython 3.10+
    from . import _walk  # type: ignore[attr-defined]
except ImportError:  # CPython < 3.10, another implementation, or no compiler at install: the Python loop
    _walk = None

if False:  # typing only; the payload imports nothing it does not need at run time
    from typing import Any  # noqa: F401

# Builtin containers whose length is read with the C slot, never a user ``__len__``.
_SIZED = (dict, list, set, frozenset, tuple, bytes, bytearray, str)
_SCALARS = (str, bytes, int, float, bool, complex, type(None))
_MAX_CHAIN = 8  # attribute-chain depth after which a path stops being extended

_FUNCTION_TYPES = (type(lambda: None), type(len), classmethod, staticmethod, property)


class CensusTimeout(Exception):
    pass


class CensusCancelled(Exception):
    """The caller asked the census to stop (``Census(cancelled=...)`` returned True)."""


# Leaves: objects with no referents. They are never pushed on the walk stack, and one whose
# only reference is the container we found it in cannot be met again, so it is not marked.
_LEAF_TYPES = frozenset((str, bytes, int, float, bool, complex, type(None)))
# Types are looked up by id(), never hashed: hashing a class runs its metaclass's __hash__,
# which may be Python code (or raise). The type tally keeps every type it saw alive, so an
# id cannot be reused by another type during a census.
_LEAF_TYPE_IDS = frozenset(id(tp) for tp in _LEAF_TYPES)
_ModuleType = type(sys)
# getrefcount of a referent inside the walk loop: its container, the referents list, the
# loop variable and getrefcount's own argument.
_ONLY_ONE_REFERENCE = 4
_TIMED_IDS = frozenset(id(tp) for tp in (dict, list, tuple, set, frozenset))
# Units of work (containers popped + referents seen) per call into the compiled walk: a
# few milliseconds of holding the GIL.
_WORK_PER_CALL = 20000
# What gc.get_objects() costs per gc-tracked object (a linked-list walk, one cache miss each),
# rounded up from docs/performance.md; used to keep it within a pause budget.
_GET_OBJECTS_NS = 60
# What it cost in this process the last time a census made that call: the payload stays
# loaded between inspections, so later budgets use this machine's own rate (kept within
# sane bounds: one slow, descheduled call must not rule the call out for good).
_measured = {"ns_per_object": None}  # type: dict
# Only a list bigger than the caches gives a rate that holds for big heaps (a small, cache-hot
# one reads several times faster).
_RATE_MIN_OBJECTS = 200000
_REGION_SHIFT = 20  # 1 MiB of address space per bitmap region
_REGION_BYTES = 1 << (_REGION_SHIFT - 4 - 3)  # one bit per 16-byte granule: 8 KiB
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


def _getsizeof(obj, default=0):
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


class _Marks(object):
    """The set of objects already claimed, as one bit per 16-byte address granule.

    Every CPython object is 16-byte aligned and at least 16 bytes long, so an address
    names one granule. A bitmap of ``bytearray`` regions is not a GC-tracked container
    and costs 1 bit per 16 bytes of heap instead of ~60 bytes per object for a set of
    ids; the hot loop in ``Census._claim_tree`` inlines the same arithmetic.
    """

    __slots__ = ("regions",)

    def __init__(self):
        self.regions = {}

    def add(self, address):
        region = self.regions.get(address >> _REGION_SHIFT)
        if region is None:
            region = self.regions[address >> _REGION_SHIFT] = bytearray(_REGION_BYTES)
        region[(address & 0xFFFFF) >> 7] |= 1 << ((address >> 4) & 7)

    def __contains__(self, address):
        region = self.regions.get(address >> _REGION_SHIFT)
        return region is not None and bool(region[(address & 0xFFFFF) >> 7] & (1 << ((address >> 4) & 7)))

    def discard(self, address):
        region = self.regions.get(address >> _REGION_SHIFT)
        if region is not None:
            region[(address & 0xFFFFF) >> 7] &= ~(1 << ((address >> 4) & 7)) & 0xFF

    def nbytes(self):
        return len(self.regions) * _REGION_BYTES


class _Clock:
    """Tracks the longest single uninterruptible step (one C call holding the GIL), the
    census's deadline and the caller's request to stop."""

    def __init__(self, deadline, cancelled=None):
        self.deadline = deadline
        self.cancelled = cancelled
        self.max_step = 0.0

    def step(self, started):
        now = time.perf_counter()
        took = now - started
        if took > self.max_step:
            self.max_step = took
        return now

    def check(self):
        if time.monotonic() > self.deadline:
            raise CensusTimeout("census did not finish within its time budget")
        if self.cancelled is not None and self.cancelled():
            raise CensusCancelled("the census was cancelled")


def _referents(obj):
    """gc.get_referents(obj), except for modules: their dict only.

    A module's tp_traverse also runs its extension's ``m_traverse``, and some visit memory
    that holds no live object: CPython 3.12 and 3.13.0's ``_asyncio`` visits its free list of
    ``FutureIter`` objects (refcount 0). gc.get_referents then hands back freed objects; the
    reference the census holds brings them back to life, and dropping it frees them a second
    time, corrupting the free list: the target's next ``await`` fails or it segfaults
    (CPython gh-122695). What an extension module keeps in its state is found otherwise
    (classes from the subclass tree, the rest as held from C).
    """
    if issubclass(type(obj), _ModuleType):
        d = _instance_dict(obj)
        return [d] if d is not None else []
    return gc.get_referents(obj)


def _type_name(tp):
    try:
        qual = type.__dict__["__qualname__"].__get__(tp, type)
        mod = type.__dict__["__module__"].__get__(tp, type)
    except Exception:
        return "?"
    if mod in ("builtins", None):
        return qual
    return "%s.%s" % (mod, qual)


def _class_dict(klass):
    return type.__dict__["__dict__"].__get__(klass, type)


def _short_type_name(tp):
    try:
        return type.__dict__["__qualname__"].__get__(tp, type)
    except Exception:
        return "?"


def _instance_dict(obj):
    """The instance ``__dict__`` through the built-in descriptor only (no user code)."""
    tp = type(obj)
    for klass in type.__dict__["__mro__"].__get__(tp, type):
        descr = _class_dict(klass).get("__dict__")
        if descr is None:
            continue
        if type(descr).__name__ not in ("getset_descriptor", "member_descriptor"):
            return None
        try:
            d = descr.__get__(obj, tp)
        except Exception:
            return None
        return d if type(d) is dict else None
    return None


def _slot_values(obj):
    """(name, value) for ``__slots__`` members, read through member descriptors only."""
    out = []
    tp = type(obj)
    for klass in type.__dict__["__mro__"].__get__(tp, type):
        if klass is object:
            continue
        for name, descr in list(_class_dict(klass).items()):
            if type(descr).__name__ != "member_descriptor":
                continue
            try:
                out.append((name, descr.__get__(obj, tp)))
            except Exception:
                continue
    return out


def _items(obj):
    for tp in _SIZED:
        if issubclass(type(obj), tp):
            try:
                return tp.__len__(obj)
            except Exception:
                return 0
    return 1


def _natural(text):
    head = text.rstrip("0123456789")
    tail = text[len(head):]
    return (head, int(tail) if tail else -1, text)


def _task_coroutines():
    """(label, task or None, coroutine) along every live asyncio task's await chain; the
    task itself goes with the outermost coroutine. Task-1 (usually the main coroutine)
    first, so ties between owners go to it, deterministically."""
    named = []
    for task in live_tasks():
        try:
            name = task.get_name()
        except Exception:
            continue
        if type(name) is str:
            named.append((_natural(name), name, task))
    named.sort(key=lambda t: t[0])
    out = []
    for _key, name, task in named:
        owner_task = task
        for coro in await_chain(task, limit=32):
            code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            line = frame.f_lineno if frame is not None else 0
            if code is None:
                continue
            label = "task:%s/%s (%s:%d)" % (name, code.co_name, code.co_filename.rsplit("/", 1)[-1], line or 0)
            out.append((label, owner_task, coro))
            owner_task = None
    return out


def _running_task_registries():
    """asyncio's ``{loop: task being stepped}`` dicts (the C one and the pure-Python one)."""
    out = []
    for name in ("_asyncio", "asyncio.tasks"):
        module = sys.modules.get(name)
        d = _instance_dict(module) if module is not None else None
        registry = d.get("_current_tasks") if d is not None else None
        if type(registry) is dict:
            out.append(registry)
    return out


def _referenced_from_outside(members, held):
    """Members with more references than the other members and our own ``held`` lists
    (``members`` itself among them) account for: referenced from C, a thread's stack, or
    anything else outside ``members``.

    The cyclic GC's own arithmetic (refcount minus internal references), without running
    a collection.
    """
    index = {id(o): i for i, o in enumerate(members)}
    internal = [0] * len(members)
    for obj in members:
        for ref in _referents(obj):
            i = index.get(id(ref))
            if i is not None:
                internal[i] += 1
    obj = None
    # Besides the ``held`` lists: the loop variable and getrefcount's argument.
    bias = held + 2
    outside = []
    for i in range(len(members)):
        obj = members[i]
        if sys.getrefcount(obj) - bias > internal[i]:
            outside.append(obj)
    return outside


def _cyclic_only(candidates):
    """The candidates that reference counting cannot free: cycles and what hangs off them.

    A candidate no other candidate references is alive only through our own lists: it died
    while the census ran (a thread replaced it in a dict we had walked), and refcounting frees
    it, and then what only it held, the moment we let go. That is not cyclic garbage. Peel
    such objects off, as refcounting would; what is left is in or under a cycle.
    """
    if not candidates:
        return candidates
    index = {id(o): i for i, o in enumerate(candidates)}
    internal = [0] * len(candidates)
    for obj in candidates:
        for ref in _referents(obj):
            i = index.get(id(ref))
            if i is not None:
                internal[i] += 1
    obj = None
    freed = [False] * len(candidates)
    queue = [i for i in range(len(candidates)) if internal[i] == 0]
    while queue:
        i = queue.pop()
        if freed[i]:
            continue
        freed[i] = True
        for ref in _referents(candidates[i]):
            j = index.get(id(ref))
            if j is not None and not freed[j]:
                internal[j] -= 1
                if internal[j] == 0:
                    queue.append(j)
    return [candidates[i] for i in range(len(candidates)) if not freed[i]]


class _Tally(object):
    """Counts and bytes per key, in ``array`` storage: no GC-tracked object per entry.

    A census that created one tracked object per owner or type would itself trigger
    young-generation collections in the target, each walking the census's own big lists.
    """

    __slots__ = ("index", "keys", "counts", "bytes")

    def __init__(self):
        self.index = {}
        self.keys = []
        self.counts = array.array("q")
        self.bytes = array.array("q")

    def slot(self, key):
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.keys)
            self.keys.append(key)
            self.counts.append(0)
            self.bytes.append(0)
        return i

    def add(self, key, size):
        i = self.slot(key)
        self.counts[i] += 1
        self.bytes[i] += size

    def nbytes(self):
        return (sys.getsizeof(self.index) + sys.getsizeof(self.keys)
                + self.counts.buffer_info()[1] * 8 + self.bytes.buffer_info()[1] * 8)


class _TypeTally(_Tally):
    """A tally keyed by type, indexed by ``id(type)``: a class is never hashed (its
    metaclass's ``__hash__`` would run). ``keys`` holds the types, keeping their ids unique."""

    __slots__ = ()

    def slot(self, tp):
        i = self.index.get(id(tp))
        if i is None:
            i = self.index[id(tp)] = len(self.keys)
            self.keys.append(tp)
            self.counts.append(0)
            self.bytes.append(0)
        return i


class Census(object):
    """One walk of the heap. Call :meth:`run`; read :meth:`result`."""

    def __init__(self, *, exclude=(), timeout=60.0, progress=None, is_stdlib=None, compiled=True,
                 max_pause_ms=None, cancelled=None):
        self.clock = _Clock(time.monotonic() + timeout, cancelled)
        self.progress = progress or (lambda phase, done: None)
        self.is_stdlib = is_stdlib or (lambda name: False)
        self._exclude = exclude
        self._getsizeof = _getsizeof
        self._get_referents = gc.get_referents
        self.seconds = 0.0
        # The same walk in C when it is importable here (and not turned off): see _walk.c.
        self._compiled = _walk.claim if compiled and _walk is not None else None  # type: Any
        self.walker = "compiled" if self._compiled is not None else "python"
        # With a pause budget, the one step that cannot be split (gc.get_objects(), which the
        # split of unreached objects needs) is skipped when it would exceed the budget.
        self.max_pause_ms = max_pause_ms
        self.unreached = {"examined": True, "estimated_pause_ms": None, "reason": ""}
        self._reset()

    def _reset(self):
        self.claimed = _Marks()
        # Owners: path -> slot; per slot its type name and item count (lists of atomics and
        # arrays), objects and bytes in the tally.
        self.owners = _Tally()
        self.owner_types = []
        self.owner_items = array.array("q")
        self.types = _TypeTally()
        self.total_bytes = 0
        self.total_objects = 0
        self.tracked = 0
        self.garbage_objects = 0
        self.garbage_bytes = 0
        self.garbage_types = _TypeTally()
        self.bookkeeping_bytes = 0

    # -- accounting -------------------------------------------------------------------------

    def _count(self, obj, owner):
        size = self._getsizeof(obj, 0)
        self.types.add(type(obj), size)
        self.owners.counts[owner] += 1
        self.owners.bytes[owner] += size
        self.total_bytes += size
        self.total_objects += 1

    def _owner(self, path, obj):
        """The owner slot for ``path`` (created with ``obj``'s type and length)."""
        owners = self.owners
        slot = owners.index.get(path)
        if slot is None:
            slot = owners.slot(path)
            self.owner_types.append(_type_name(type(obj)))
            self.owner_items.append(_items(obj))
        return slot

    def _claim_tree(self, owner, root, root_claimed=False):
        """Claim ``root`` and everything reachable from it that nobody claimed yet."""
        claimed = self.claimed
        if not root_claimed:
            if id(root) in claimed:
                return
            claimed.add(id(root))
            self._count(root, owner)
        stack = [root]
        if self._compiled is not None:
            self._claim_compiled(owner, stack)
            return
        get_referents = self._get_referents
        getsizeof = sys.getsizeof
        object_sizeof = _object_sizeof
        # Per type id (the type tally keeps the types alive): is its __sizeof__ C code; is it
        # a module type (walked through its dict only).
        builtin_sizeof = {}  # type: dict
        module_ids = set()  # type: set
        max_size = _MAX_OBJECT_BYTES
        getrefcount = sys.getrefcount
        dict_keys = dict.keys
        type_slot = self.types.index.get  # keyed by id(type)
        new_type_slot = self.types.slot
        type_counts = self.types.counts
        type_bytes = self.types.bytes
        regions = claimed.regions
        leaf_ids = _LEAF_TYPE_IDS
        timed_ids = _TIMED_IDS
        module_type = _ModuleType
        only_one = _ONLY_ONE_REFERENCE
        pop = stack.pop
        push = stack.append
        clock = self.clock
        perf_counter = time.perf_counter
        steps = 0
        added_bytes = 0
        added_objects = 0
        while stack:
            obj = pop()
            obj_type = type(obj)
            # Only a big built-in container makes get_referents a long step: time just those
            # (for max_pause) rather than every object, and never walk one twice.
            big = id(obj_type) in timed_ids and len(obj) > 4096
            if big:
                t0 = perf_counter()
            if obj_type is module_type or id(obj_type) in module_ids:
                referents = _referents(obj)  # never a module's own traverse (see _referents)
            else:
                referents = get_referents(obj)
            # Not isinstance(): it reads obj.__class__, which a class (a mock, a proxy) can
            # make a property that runs code, raises, or claims to be dict.
            if issubclass(obj_type, dict):
                # dict_traverse skips str keys (they cannot form cycles); we want their bytes.
                referents.extend(dict_keys(obj))
            if big:
                clock.step(t0)
            for ref in referents:
                tp = type(ref)
                tid = id(tp)
                leaf = tid in leaf_ids
                if not (leaf and getrefcount(ref) <= only_one):
                    address = id(ref)
                    region = regions.get(address >> 20)
                    if region is None:
                        region = regions[address >> 20] = bytearray(8192)
                    index = (address & 0xFFFFF) >> 7
                    bit = 1 << ((address >> 4) & 7)
                    if region[index] & bit:
                        continue
                    region[index] |= bit
                # _getsizeof(ref), inlined; leaves are built-in types
                try:
                    if leaf:
                        size = getsizeof(ref, 0)
                    else:
                        c_code = builtin_sizeof.get(tid)
                        if c_code is None:
                            c_code = builtin_sizeof[tid] = _sizeof_is_builtin(tp)
                            if issubclass(tp, module_type):
                                module_ids.add(tid)
                        size = getsizeof(ref, 0) if c_code else object_sizeof(ref)
                except Exception:
                    size = 0
                if not 0 <= size <= max_size:
                    size = 0
                added_bytes += size
                added_objects += 1
                slot = type_slot(tid)
                if slot is None:
                    slot = new_type_slot(tp)
                type_counts[slot] += 1
                type_bytes[slot] += size
                if not leaf:
                    push(ref)
            steps += 1
            if steps & 0x3FFF == 0:
                clock.check()
                self.progress("walk", self.total_objects + added_objects)
        self._credit(owner, added_objects, added_bytes)

    def _claim_compiled(self, owner, stack):
        """``_claim_tree``'s loop in C, in short calls: between two, the interpreter can hand
        the GIL to the target's threads. Each call is one uninterruptible step."""
        claim = self._compiled
        regions = self.claimed.regions
        types = self.types
        clock = self.clock
        perf_counter = time.perf_counter
        added_objects = added_bytes = 0
        pending = []  # type: list
        while stack or pending:
            t0 = perf_counter()
            objects, nbytes = claim(stack, pending, regions, types.index, types.slot, types.counts,
                                    types.bytes, _WORK_PER_CALL)
            clock.step(t0)
            added_objects += objects
            added_bytes += nbytes
            clock.check()
            self.progress("walk", self.total_objects + added_objects)
        self._credit(owner, added_objects, added_bytes)

    def _credit(self, owner, objects, nbytes):
        self.owners.bytes[owner] += nbytes
        self.owners.counts[owner] += objects
        self.total_bytes += nbytes
        self.total_objects += objects

    def _claim_named(self, path, obj, depth):
        """Give ``obj`` its own owner ``path``; extend the path through instance attributes."""
        if id(obj) in self.claimed:
            return
        attrs = []  # type: list
        d = None
        # issubclass(type(...)), never isinstance(): no user __class__ property runs.
        if depth < _MAX_CHAIN and not issubclass(type(obj), _SCALARS + _SIZED + _FUNCTION_TYPES):
            d = _instance_dict(obj)
            if d is not None:
                attrs.extend((k, v) for k, v in list(d.items()) if type(k) is str)
            attrs.extend(_slot_values(obj))
        if d is None and not attrs:
            self._claim_tree(self._owner(path, obj), obj)
            return
        owner = self._owner(path, obj)
        self.claimed.add(id(obj))
        self._count(obj, owner)
        if d is not None and id(d) not in self.claimed:
            self.claimed.add(id(d))
            self._count(d, owner)
        parent_type = type(obj)
        for name, value in attrs:
            if id(value) in self.claimed:
                continue
            if type(value) is parent_type or issubclass(type(value), _SCALARS) and self._getsizeof(value, 0) < 4096:
                # Linked structures and small scalars stay with their parent.
                self._claim_tree(owner, value)
            else:
                self._claim_named(path + "." + name, value, depth + 1)
        # Anything the instance references besides its attributes (e.g. its dict's keys).
        self._claim_tree(owner, obj)

    # -- the walk ---------------------------------------------------------------------------

    def run(self):
        started = time.perf_counter()
        if self.max_pause_ms is not None:
            # Walk the named roots first, without the list of every tracked object, to learn
            # the heap's size; the full census runs only if that list fits the budget.
            self._walk_roots(None)
            estimate = self._universe_pause_ms()
            self.unreached["estimated_pause_ms"] = round(estimate, 1)
            self.unreached["ns_per_object"] = round(self._ns_per_object(), 1)
            self.unreached["rate"] = "measured" if _measured["ns_per_object"] else "default"
            if estimate > self.max_pause_ms:
                self.unreached["examined"] = False
                self.unreached["reason"] = (
                    "listing the ~%s gc-tracked objects (gc.get_objects(), one call that cannot "
                    "be split) would hold the target for ~%.0f ms (%.0f ns each, %s), over the "
                    "%.0f ms pause budget (--max-pause 0 lifts it)"
                    % (format(self._tracked_estimate(), ","), estimate, self._ns_per_object(),
                       "as measured in this process" if _measured["ns_per_object"] else "a default rate",
                       self.max_pause_ms)
                )
                # No list to count: the walk's own count of containers stands in for it.
                self.tracked = self._tracked_estimate()
                self.seconds = time.perf_counter() - started
                return
            self._reset()
        t0 = time.perf_counter()
        objects = gc.get_objects()
        self.clock.step(t0)
        self.tracked = len(objects)
        if len(objects) >= _RATE_MIN_OBJECTS:
            took_ns = (time.perf_counter() - t0) * 1e9
            _measured["ns_per_object"] = min(500.0, max(30.0, took_ns / len(objects)))
        self._walk_roots(objects)
        # 7: what no named root reached: held from C, or cyclic garbage.
        self._split_unreached(objects)
        self.seconds = time.perf_counter() - started
        del objects

    def _tracked_estimate(self):
        """Objects of container types the walk claimed: about what gc.get_objects() lists."""
        types = self.types
        return sum(types.counts[i] for i, tp in enumerate(types.keys) if id(tp) not in _LEAF_TYPE_IDS)

    def _ns_per_object(self):
        return _measured["ns_per_object"] or _GET_OBJECTS_NS

    def _universe_pause_ms(self):
        # gc.get_objects() follows the collector's linked lists: one cache miss per object,
        # ~55-60 ns on the machines measured (docs/performance.md), or what it cost here last
        # time; objects the named roots did not reach add to it, so this is a floor.
        return self._tracked_estimate() * self._ns_per_object() / 1e6

    def _walk_roots(self, objects):
        """Claim everything the named roots reach; ``objects`` is gc.get_objects()'s list, or
        None when the census runs without it."""
        claimed = self.claimed
        if objects is not None:
            claimed.add(id(objects))
        # Our own bookkeeping is not part of the target's heap.
        for own in (self, self.__dict__, self.claimed, self.claimed.regions, self.owners,
                    self.owners.index, self.owners.keys, self.owner_types, self.types,
                    self.types.index, self.types.keys, self.garbage_types,
                    self.garbage_types.index, self.garbage_types.keys):
            claimed.add(id(own))
        for obj in self._exclude:
            claimed.add(id(obj))
        # Code containers are walls between owners: modules, their dicts and classes are
        # claimed up front so no data owner walks through them into someone else's globals.
        # What hangs off the walls and no named root took (dunders, dict keys, method
        # objects) is swept into the wall owner once the named roots are done.
        modules = [m for m in list(sys.modules.values()) if type(m).__name__ == "module"]
        wall = self._owner("<modules and classes>", sys)
        walls = []

        def add_wall(obj):
            if id(obj) not in claimed:
                claimed.add(id(obj))
                self._count(obj, wall)
                walls.append(obj)

        module_dicts = []
        for module in modules:
            add_wall(module)
            md = _instance_dict(module)
            if md is not None:
                add_wall(md)
                module_dicts.append((module, md))
        # asyncio's registry of the task each loop is stepping right now is not an owner: a
        # task caught mid-step belongs to its own task root (5 below), like every other task.
        # The dict is counted with the walls but not swept.
        for registry in _running_task_registries():
            if id(registry) not in claimed:
                claimed.add(id(registry))
                self._count(registry, wall)
        # Classes come from the subclass tree, not gc.get_objects(): a worker that called
        # gc.freeze() has its classes in the permanent generation, which get_objects skips.
        classes = []
        pending = [object]
        while pending:
            cls = pending.pop()
            if id(cls) in claimed:
                continue
            add_wall(cls)
            classes.append(cls)
            try:
                pending.extend(type.__subclasses__(cls))
            except TypeError:
                continue
        class_dicts = []
        for cls in classes:
            for ref in gc.get_referents(cls):
                # the class dict, __mro__ and __bases__ tuples
                if type(ref) is dict:
                    class_dicts.append((cls, ref))
                if type(ref) in (dict, tuple):
                    add_wall(ref)
        self.progress("roots", 0)

        # Tasks and their coroutines are claimed up front, like the walls: a path from a module
        # global to a task (an event loop's ready queue and timers, a handle kept in a global,
        # asyncio's _current_tasks) stops there, and each task's state goes to its own root (5).
        task_coros = _task_coroutines()
        for _label, task, coro in task_coros:
            claimed.add(id(task))
            claimed.add(id(coro))
        # 1-3: module globals, __main__ first, then non-stdlib, then stdlib.
        main = sys.modules.get("__main__")
        names_of = {}  # type: dict
        for name, module in list(sys.modules.items()):
            names_of.setdefault(id(module), name)
        module_dicts.sort(
            key=lambda mmd: (
                mmd[0] is not main,
                self.is_stdlib(names_of.get(id(mmd[0]), "")),
                names_of.get(id(mmd[0]), ""),
            )
        )
        for module, md in module_dicts:
            name = names_of.get(id(module), "?")
            for key, value in list(md.items()):
                if type(key) is not str or (key.startswith("__") and key.endswith("__")):
                    continue
                self._claim_named(name + "." + key, value, 1)
        # 4: class attributes.
        for cls, cdict in class_dicts:
            base = _type_name(cls)
            for key, value in list(cdict.items()):
                if type(key) is not str or (key.startswith("__") and key.endswith("__")):
                    continue
                self._claim_named(base + "." + key, value, 1)
        for obj in walls:
            self._claim_tree(wall, obj, root_claimed=True)
        # 5: asyncio tasks: what a suspended coroutine's frames hold (no thread stack shows it).
        # A suspended coroutine's locals are visible through the coroutine object, not its
        # frame (the frame object does not own its data).
        for label, task, coro in task_coros:
            owner = self._owner(label, coro)
            if task is not None:
                self._count(task, owner)
            self._count(coro, owner)
            for ref in gc.get_referents(coro):
                if type(ref).__name__ in ("frame", "coroutine", "generator", "async_generator"):
                    continue
                self._claim_named(label + ".<" + _short_type_name(type(ref)) + ">", ref, 2)
            if task is not None:
                self._claim_tree(owner, task, root_claimed=True)
        # 6: thread stacks, each frame its own root.
        import threading  # noqa: PLC0415 - imported lazily: the target may not use threads

        names = {}
        for thread in list(threading._active.values()):  # type: ignore[attr-defined]
            names[thread.ident] = thread.name
        # Our own frame is dropped before anything binds it: a local naming this frame
        # would be a cycle (frame -> locals -> frame) holding everything the census holds,
        # gc.get_objects()'s list included, until the target's next full collection.
        current = sys._current_frames()
        current.pop(threading.get_ident(), None)
        frames = []
        top = frame = None  # type: Any
        for ident, top in list(current.items()):
            frame = top
            while frame is not None:
                frames.append((names.get(ident, str(ident)), frame))
                claimed.add(id(frame))
                frame = frame.f_back
        for tname, frame in frames:
            code = frame.f_code
            path = "thread:%s/%s (%s:%d)" % (
                tname,
                code.co_name,
                code.co_filename.rsplit("/", 1)[-1],
                frame.f_lineno or 0,
            )
            owner = self._owner(path, frame)
            self._count(frame, owner)
            for ref in gc.get_referents(frame):
                if type(ref).__name__ == "frame":
                    continue
                self._claim_named(path + ".<" + _short_type_name(type(ref)) + ">", ref, 2)
        del current, frames
        top = frame = None
        self.progress("unreached", self.total_objects)
        # What the walk itself holds at its largest, the extra memory it costs the target:
        # the marks, the list from gc.get_objects(), the owner and type tables.
        self.bookkeeping_bytes = (
            claimed.nbytes()
            + (sys.getsizeof(objects) if objects is not None else 0)
            + self.owners.nbytes()
            + sys.getsizeof(self.owner_types)
            + self.owner_items.buffer_info()[1] * 8
            + self.types.nbytes()
        )

    def _split_unreached(self, objects):
        claimed = self.claimed
        regions = claimed.regions
        unreached = []
        for obj in objects:
            address = id(obj)
            region = regions.get(address >> 20)
            if region is None or not region[(address & 0xFFFFF) >> 7] & (1 << ((address >> 4) & 7)):
                unreached.append(obj)
        obj = None
        # Our own lists holding each: gc.get_objects()'s and ``unreached``.
        roots = _referenced_from_outside(unreached, held=2)
        for obj in roots:
            if id(obj) in claimed:
                continue
            owner = self._owner("<held from C: %s>" % _type_name(type(obj)), obj)
            self.owner_items[owner] = 0
            self._claim_tree(owner, obj)
        garbage = [o for o in unreached if id(o) not in claimed]
        garbage = self._confirm_garbage(garbage)
        garbage = _cyclic_only(garbage)
        for obj in garbage:
            size = self._getsizeof(obj, 0)
            self.garbage_objects += 1
            self.garbage_bytes += size
            self.garbage_types.add(type(obj), size)
            # Garbage still occupies memory: it is part of the census totals, under no owner.
            self.types.add(type(obj), size)
            self.total_bytes += size
            self.total_objects += 1
            claimed.add(id(obj))
        # Untracked objects hanging off garbage (e.g. strings in a dead cycle's dicts).
        stack = list(garbage)
        while stack:
            obj = stack.pop()
            refs = _referents(obj)
            if issubclass(type(obj), dict):
                refs.extend(dict.keys(obj))
            for ref in refs:
                if id(ref) not in claimed and not gc.is_tracked(ref):
                    claimed.add(id(ref))
                    size = self._getsizeof(ref, 0)
                    self.garbage_objects += 1
                    self.garbage_bytes += size
                    self.total_bytes += size
                    self.total_objects += 1
                    stack.append(ref)
                    self.garbage_types.add(type(ref), size)
        del unreached, garbage, roots

    def _confirm_garbage(self, candidates, pause=0.01):
        """Look again, a moment later, at what seemed to be garbage.

        The main thread ran meanwhile; garbage cannot change (nothing references it), but
        an object it just handed from its C stack to a container we had already walked
        would look unreferenced. Candidates that now show a reference from outside the set,
        and what they reach inside it, are alive: they go to ``<held from C: Type>``.
        """
        if not candidates:
            return candidates
        time.sleep(pause)
        # Held by gc.get_objects()'s list, ``unreached`` and ``candidates``.
        alive = _referenced_from_outside(candidates, held=3)
        if not alive:
            return candidates
        index = {id(o) for o in candidates}
        marked = {id(o) for o in alive}
        stack = list(alive)
        while stack:
            for ref in _referents(stack.pop()):
                if id(ref) in index and id(ref) not in marked:
                    marked.add(id(ref))
                    stack.append(ref)
        for obj in alive:
            if id(obj) not in self.claimed:
                owner = self._owner("<held from C: %s>" % _type_name(type(obj)), obj)
                self.owner_items[owner] = 0
                self._claim_tree(owner, obj)
        return [o for o in candidates if id(o) not in marked]

    def result(self, *, top_types=50, top_owners=50):
        types = self.types
        type_order = sorted(range(len(types.keys)), key=lambda i: -types.bytes[i])[:top_types]
        owners = self.owners
        owner_order = sorted(range(len(owners.keys)), key=lambda i: -owners.bytes[i])[:top_owners]
        garbage = self.garbage_types
        garbage_order = sorted(range(len(garbage.keys)), key=lambda i: -garbage.bytes[i])[:20]
        return {
            "objects": self.total_objects,
            "bytes": self.total_bytes,
            "gc_tracked": self.tracked,
            "untracked": max(0, self.total_objects - self.tracked),
            "census_seconds": self.seconds,
            "walker": self.walker,
            "unreached": dict(self.unreached),
            "max_step_ms": self.clock.max_step * 1000.0,
            "payload_peak_bytes": self.bookkeeping_bytes,
            "types": [
                {"type": _type_name(types.keys[i]), "count": types.counts[i], "bytes": types.bytes[i]}
                for i in type_order
            ],
            "owners": [
                {
                    "path": owners.keys[i],
                    "type": self.owner_types[i],
                    "items": self.owner_items[i],
                    "retained_bytes": owners.bytes[i],
                    "retained_objects": owners.counts[i],
                }
                for i in owner_order
                if owners.bytes[i] > 0
            ],
            "cyclic_garbage": {
                "objects": self.garbage_objects,
                "bytes": self.garbage_bytes,
                "types": [
                    {"type": _type_name(garbage.keys[i]), "count": garbage.counts[i], "bytes": garbage.bytes[i]}
                    for i in garbage_order
                ],
            },
        }
