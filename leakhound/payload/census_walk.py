"""The census's walk: claiming an object and everything it reaches for one owner.

``ClaimWalk`` holds what a census counts (the marks, the owner and type tallies, the totals)
and the walk that fills it: ``claim_tree`` is the hot loop (its compiled twin is
``_census_walk.c``, called in short steps by ``_claim_compiled``; the two must stay exactly
equal); ``claim_named`` extends an owner's path through instance attributes. The per-object
size is :func:`sizes.object_size`. A :class:`census.Census` holds one; its phases
(``census_roots``, ``census_unreached``) claim through it.
"""

import array
import gc
import sys
import time

from .census_tallies import Marks, Tally, TypeTally
from .objects import (
    INLINE_VALUES_DICTS,
    LEAF_TYPE_IDS,
    SIZED,
    ModuleType,
    add_made_dict,
    dict_descriptor,
    dict_pairs,
    dict_via,
    item_count,
    safe_referents,
    slot_members,
    slots_via,
)
from .sizes import (
    MAX_OBJECT_BYTES,
    NATIVE_BUFFERS,
    SizeCache,
    for_compiled_walk,
    instance_values_bytes,
    native_codes,
    native_extra,
    native_types,
    object_block,
    object_sizeof,
    scanned_object_sizes,
    sizeof_is_builtin,
)

if False:  # typing only; the payload imports nothing it does not need at run time
    from typing import Any, Callable  # noqa: F401

_SCALARS = (str, bytes, int, float, bool, complex, type(None))
_MAX_CHAIN = 8  # attribute-chain depth after which a path stops being extended

_FUNCTION_TYPES = (type(lambda: None), type(len), classmethod, staticmethod, property)
# What claim_named never extends a path through.
_NOT_EXTENDED = _SCALARS + SIZED + _FUNCTION_TYPES

# Types are looked up by id(), never hashed: hashing a class runs its metaclass's __hash__,
# which may be Python code (or raise). The type tally keeps every type it saw alive, so an
# id cannot be reused by another type during a census.
# getrefcount of a referent inside the walk loop: its container, the referents list, the
# loop variable and getrefcount's own argument.
_ONLY_ONE_REFERENCE = 4
_TIMED_IDS = frozenset(id(tp) for tp in (dict, list, tuple, set, frozenset))


class ClaimWalk(object):
    """The marks and tallies of one census and the walk that claims into them.

    ``clock``: the census's pacing.Clock (the duty cycle, the deadline, the cancel);
    ``progress(phase, done)``: called now and then; ``walk_module``: the compiled module
    (``_walk``) or None, whose ``claim`` is the walk's inner loop unless ``compiled`` is
    False; ``work_per_call``: units of work per call into it."""

    def __init__(self, clock, progress, walk_module=None, compiled=True, work_per_call=20000):
        self.clock = clock
        self.progress = progress
        # object_size with each type's answer kept for this census (sizes.SizeCache): the
        # lookup allocates gc-tracked proxies, once per owner, tens of thousands of them
        self.getsizeof = SizeCache()
        self._get_referents = gc.get_referents
        self.walk_module = walk_module  # running frames' locals are read through it (census_roots)
        self.compiled = walk_module.claim if compiled and walk_module is not None else None  # type: Any
        self.walker = "compiled" if self.compiled is not None else "python"
        self.work_per_call = work_per_call
        self._native_kinds = None  # type: Any
        self.reset()

    def reset(self):
        self.claimed = Marks()
        # Owners: path -> slot; per slot its type name and item count (lists of atomics and
        # arrays), objects and bytes in the tally.
        self.owners = Tally()
        self.owner_types = []
        self.owner_items = array.array("q")
        self._sized_types = {}  # id(type) -> is it one of objects.SIZED (has items)
        self._class_attrs = {}  # id(type) -> (type, its __dict__ descriptor, its slots' members)
        # The compiled walk's way in for a root not claimed yet: a list holding it alone,
        # walked from (the walk marks, sizes and tallies the root as any referent).
        self._holder = [None]
        self._claim_args = None  # what _claim_compiled passes claim(), once per census
        self._owners_walked = 0
        self.types = TypeTally()
        self.total_bytes = 0
        self.total_objects = 0
        self.garbage_objects = 0
        self.garbage_bytes = 0
        self.garbage_types = TypeTally()
        self.bookkeeping_bytes = 0
        self.unread_frames = 0  # running frames whose locals could not be read safely
        # id(type) -> kind of natively sized types; kind -> the allowlisted C class
        # Looked up once per census (a second reset, after the sizing walk, keeps them): a
        # walk over every class, run under the duty cycle (hold: no deadline check in here).
        if self._native_kinds is None:
            # (with OpenSSL's contexts, sized once the census is over: size_after_walk)
            self._native_kinds, self._native_bases = native_types(self.clock.hold, after_walk=True)
        for listed in ("scanned_objects", "scanned_owners"):  # (an earlier walk's: not this one's)
            if listed in self._native_bases:
                self._native_bases[listed].clear()
        # id(type) -> NATIVE_BUFFERS (handed back in ``found``) or NATIVE_VALUES (3.11+
        # instances: their attribute values added to their size), as _census_walk.c reads it
        self.native = native_codes(self._native_kinds, self.clock.hold)
        self._native_seen = set()  # buffer addresses counted (a storage shared by views: once)
        self.native_bytes = 0  # of total_bytes: native buffers (sizes.native_extra)

    def mark_own(self):
        """Mark the walk's own bookkeeping as claimed: it is not part of the target's heap."""
        claimed = self.claimed
        for own in (self, self.__dict__, claimed, claimed.regions, self.owners, self.owners.index,
                    self.owners.keys, self.owner_types, self.types, self.types.index, self.types.keys,
                    self.garbage_types, self.garbage_types.index, self.garbage_types.keys,
                    # array.array is gc-tracked since 3.11 (heap type): without these its
                    # tallies were "<held from C: array.array>" in the census's own report
                    self.owners.counts, self.owners.bytes, self.owner_items, self.types.counts,
                    self.types.bytes, self.garbage_types.counts, self.garbage_types.bytes,
                    self.native, self._native_bases, self._native_seen, self._holder,
                    self._sized_types, self._class_attrs, self.getsizeof, self.getsizeof.known):
            claimed.add(id(own))
        # the native sizers' tallies (lists of one int) and the contexts they listed: ours too
        for own in self._native_bases.values():
            if type(own) in (list, dict):
                claimed.add(id(own))
        if self._claim_args is not None:  # made by the first compiled claim
            claimed.add(id(self._claim_args))

    def own_bytes(self, objects):
        """What the walk itself holds at its largest, the extra memory it costs the target:
        the marks, ``objects`` (gc.get_objects()'s list, or None), the owner and type tables."""
        return (
            self.claimed.nbytes()
            + (sys.getsizeof(objects) if objects is not None else 0)
            + self.owners.nbytes()
            + sys.getsizeof(self.owner_types)
            + self.owner_items.buffer_info()[1] * 8
            + self.types.nbytes()
        )

    # -- accounting -------------------------------------------------------------------------

    def size(self, obj):
        """``getsizeof(obj)`` (sizes.SizeCache), with a 3.11+ instance's attribute values (as the walk)."""
        size = self.getsizeof(obj, 0)
        if self.native.get(id(type(obj)), 0) > NATIVE_BUFFERS:
            size += instance_values_bytes(obj)
        return size

    def count(self, obj, owner):
        size = self.size(obj)
        self.types.add(type(obj), size)
        self.owners.counts[owner] += 1
        self.owners.bytes[owner] += size
        self.total_bytes += size
        self.total_objects += 1

    def owner_slot(self, path, obj):
        """The owner slot for ``path`` (created with ``obj``'s type and length)."""
        owners = self.owners
        slot = owners.index.get(path)
        if slot is None:
            slot = owners.slot(path)
            # The type itself: its name is looked up for the owners the result lists only
            # (Census.result; the type tally keeps it alive either way).
            tp = type(obj)
            self.owner_types.append(tp)
            sized = self._sized_types.get(id(tp))
            if sized is None:
                sized = self._sized_types[id(tp)] = any(issubclass(tp, base) for base in SIZED)
            self.owner_items.append(item_count(obj) if sized else 1)
        return slot

    def claim_tree(self, owner, root, root_claimed=False):
        """Claim ``root`` and everything reachable from it that nobody claimed yet."""
        claimed = self.claimed
        if self.compiled is not None and not root_claimed:
            # One call into the walk from a list holding the root: it counts the root as it
            # counts every object (the size, the 3.11+ values, a native type's buffers),
            # which count() did in Python: most owners of a big program are a function or a
            # small object, and that was most of their cost.
            address = id(root)  # ``id(root) in claimed``, inlined: this runs once per owner
            region = claimed.regions.get(address >> 20)
            if region is not None and region[(address & 0xFFFFF) >> 7] & (1 << ((address >> 4) & 7)):
                return
            holder = self._holder
            if holder[0] is not None:  # not re-entered today; a list of its own if it were
                holder = [None]
            holder[0] = root
            try:
                self._claim_compiled(owner, [holder], [])
            finally:
                holder[0] = None
            return
        if not root_claimed:
            if id(root) in claimed:
                return
            claimed.add(id(root))
            self.count(root, owner)
        stack = [root]
        native = self.native
        # Objects of natively sized types met on the way (sizes.native_types): their buffers
        # and the references gc does not show are added once the stack runs dry.
        found = [root] if native.get(id(type(root))) == NATIVE_BUFFERS else []
        native_get = native.get
        if self.compiled is not None:
            self._claim_compiled(owner, stack, found)
            return
        get_referents = self._get_referents
        inline_dicts = INLINE_VALUES_DICTS  # (add_made_dict finds none where ctypes cannot read)
        getsizeof = sys.getsizeof
        base_sizeof = object_sizeof
        # Per type id (the type tally keeps the types alive): is its __sizeof__ C code; is it
        # a module type (walked through its dict only).
        builtin_sizeof = {}  # type: dict
        module_ids = set()  # type: set
        max_size = MAX_OBJECT_BYTES
        block = object_block
        getrefcount = sys.getrefcount
        dict_keys = dict.keys
        type_slot = self.types.index.get  # keyed by id(type)
        new_type_slot = self.types.slot
        type_counts = self.types.counts
        type_bytes = self.types.bytes
        regions = claimed.regions
        leaf_ids = LEAF_TYPE_IDS
        timed_ids = _TIMED_IDS
        module_type = ModuleType
        only_one = _ONLY_ONE_REFERENCE
        pop = stack.pop
        push = stack.append
        clock = self.clock
        perf_counter = time.perf_counter
        steps = 0
        added_bytes = 0
        added_objects = 0
        while stack or found:
            if not stack:
                objects, nbytes = self._claim_native(found, stack, owner=owner)
                added_objects += objects
                added_bytes += nbytes
                continue
            obj = pop()
            obj_type = type(obj)
            # Only a big built-in container makes get_referents a long step: time just those
            # (for max_pause) rather than every object, and never walk one twice.
            big = id(obj_type) in timed_ids and len(obj) > 4096
            if big:
                t0 = perf_counter()
            if obj_type is module_type or id(obj_type) in module_ids:
                referents = safe_referents(obj)  # never a module's own traverse (see safe_referents)
            else:
                referents = get_referents(obj)
                if inline_dicts:
                    add_made_dict(obj, obj_type, referents)
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
                # getsizeof(ref), inlined; leaves are built-in types
                try:
                    if leaf:
                        size = getsizeof(ref, 0)
                    else:
                        c_code = builtin_sizeof.get(tid)
                        if c_code is None:
                            c_code = builtin_sizeof[tid] = sizeof_is_builtin(tp)
                            if issubclass(tp, module_type):
                                module_ids.add(tid)
                        size = getsizeof(ref, 0) if c_code else base_sizeof(ref)
                except Exception:
                    size = 0
                size = block(tp, size) if 0 <= size <= max_size else 0
                code = native_get(tid, 0) if native and not leaf else 0
                if code > NATIVE_BUFFERS:
                    size += instance_values_bytes(ref)
                added_bytes += size
                added_objects += 1
                slot = type_slot(tid)
                if slot is None:
                    slot = new_type_slot(tp)
                type_counts[slot] += 1
                type_bytes[slot] += size
                if not leaf:
                    push(ref)
                    if code == NATIVE_BUFFERS:
                        found.append(ref)
            steps += 1
            if steps & 0x3FFF == 0:
                clock.check()
                self.progress("walk", self.total_objects + added_objects)
        self._credit(owner, added_objects, added_bytes)

    def _claim_native(self, found, stack, compiled=False, owner=0):
        """Add the native buffers of the objects in ``found`` (sizes.native_extra) to their
        types, and claim what they hold that gc does not show (a numpy view's base, an object
        array's elements, a code object's constants and names) as the walk would: marked,
        sized, pushed on ``stack``. Returns the (objects, bytes) added.

        ``compiled``: what they hold goes on ``stack`` in one list instead, which the compiled
        walk pops next and claims as it claims any container's referents (marked, sized,
        tallied, pushed: each held at least by its object, the list and the walk, so marked
        as here). Every code object a walk meets is in ``found``: tens of thousands of them
        after the walls' walk, each a loop in Python here (150 ms between two looks at the
        clock on the busy real worker)."""
        claimed = self.claimed
        native = self.native
        types = self.types
        added_objects = added_bytes = 0
        held = []  # type: list
        walking = self._native_bases.get("scanned_owner")  # the owner a context listed is met for
        if walking is not None:
            walking[0] = owner
        done = 0
        while found:
            done += 1
            if done & 255 == 0:
                self.clock.check()
            obj = found.pop()
            # (an array of objects that owns its data: the compiled walk reads its elements)
            extra, refs = native_extra(obj, self._native_kinds, self._native_bases, self._native_seen,
                                       compiled and self.walk_module is not None
                                       and self.walk_module.reads_elements(obj))
            if extra:
                # (negative: of the object's own size, what is not in RAM; sizes._untouched_data)
                types.bytes[types.slot(type(obj))] += extra
                added_bytes += extra
                self.native_bytes += max(0, extra)
            if compiled:
                held.extend(refs)
                continue
            for i, ref in enumerate(refs):
                if id(ref) in claimed:
                    continue
                claimed.add(id(ref))
                size = self.size(ref)
                types.add(type(ref), size)
                added_objects += 1
                added_bytes += size
                if id(type(ref)) not in LEAF_TYPE_IDS:
                    stack.append(ref)
                    if native.get(id(type(ref))) == NATIVE_BUFFERS:
                        found.append(ref)
                if i & 0xFFFF == 0xFFFF:
                    self.clock.check()
            del refs
        obj = None
        if held:
            stack.append(held)
        return added_objects, added_bytes

    def size_after_walk(self, deadline, max_bytes):
        """What the objects sized after the walk hold (OpenSSL's contexts: every one met, at
        once, with the GIL released: sizes.scanned_object_sizes), added to their types, to the
        owners they were met for and to the totals."""
        if not self._native_bases.get("scanned_objects"):
            return
        sized = scanned_object_sizes(self._native_bases, deadline, max_bytes)
        self.clock.yielded()  # (the scan ran with the GIL released)
        # (its tables beside the walk's own, at once: the payload's peak)
        self.bookkeeping_bytes = max(self.bookkeeping_bytes,
                                     self.own_bytes(None) + self._native_bases.get("scan_bytes", 0))
        for obj, owner, size in sized:
            self.types.bytes[self.types.slot(type(obj))] += size
            self._credit(owner, 0, size)
            self.native_bytes += size
        del sized

    def _claim_compiled(self, owner, stack, found):
        """``claim_tree``'s loop in C, in short calls: between two, the interpreter can hand
        the GIL to the target's threads. Each call is one uninterruptible step. (Runs once per
        owner, tens of thousands of times in a big program: what it needs is looked up once
        per census.)"""
        args = self._claim_args
        if args is None:
            types = self.types
            # A session keeps the walk's caches (the types it met, the bitmap's regions)
            # from one call to the next: one call per owner, each meeting a few types, spent
            # most of its time looking them up anew (0.66 s of CPU on the real worker's heap).
            session = getattr(self.walk_module, "session", None)
            args = self._claim_args = (self.compiled, self.claimed.regions, types.index, types.slot,
                                       types.counts, types.bytes, self.work_per_call,
                                       for_compiled_walk(self.native, self.walk_module, self.clock.hold) or None,
                                       session() if session is not None else None)
        claim, regions, index, new_slot, counts, sizes, per_call, native, session = args
        clock = self.clock
        perf_counter = time.perf_counter
        added_objects = added_bytes = 0
        pending = []  # type: list
        calls = 0
        while stack or pending or found:
            if not stack and not pending:
                objects, nbytes = self._claim_native(found, stack, compiled=True, owner=owner)
                added_objects += objects
                added_bytes += nbytes
                continue
            t0 = perf_counter()
            objects, nbytes = claim(stack, pending, regions, index, new_slot, counts, sizes, per_call, native, found,
                                    session)
            took = perf_counter() - t0  # clock.step, inlined
            if took > clock.max_step:
                clock.max_step = took
            added_objects += objects
            added_bytes += nbytes
            clock.check()
            calls += 1
            if calls & 7 == 0:
                self.progress("walk", self.total_objects + added_objects)
        # _credit, inlined
        self.owners.bytes[owner] += added_bytes
        self.owners.counts[owner] += added_objects
        self.total_bytes += added_bytes
        self.total_objects += added_objects
        self._owners_walked += 1
        if self._owners_walked & 255 == 0:
            self.progress("walk", self.total_objects)

    def _credit(self, owner, objects, nbytes):
        self.owners.bytes[owner] += nbytes
        self.owners.counts[owner] += objects
        self.total_bytes += nbytes
        self.total_objects += objects

    def _attributes(self, obj):
        """(``objects.instance_dict(obj)``, ``objects.slot_values(obj)``), with what the two
        look up in the class's MRO (the ``__dict__`` descriptor, the slots' member
        descriptors) looked up once per class: an instance of a class with a long MRO of
        big class dicts cost a loop over all of them each."""
        tp = type(obj)
        known = self._class_attrs.get(id(tp))
        if known is None:
            # the class itself too: its id is the key (the type tally keeps it as well)
            known = self._class_attrs[id(tp)] = (tp, dict_descriptor(tp), slot_members(tp))
        _tp, descr, slots = known
        return dict_via(descr, obj, tp), slots_via(slots, obj, tp)

    def claim_named(self, path, obj, depth):
        """Give ``obj`` its own owner ``path``; extend the path through instance attributes."""
        if id(obj) in self.claimed:
            return
        attrs = []  # type: list
        d = None
        # issubclass(type(...)), never isinstance(): no user __class__ property runs.
        if depth < _MAX_CHAIN and not issubclass(type(obj), _NOT_EXTENDED):
            d, slots = self._attributes(obj)
            if d is not None:
                attrs.extend((k, v) for k, v in dict_pairs(d) if type(k) is str)
            if slots:
                attrs.extend(slots)
        if d is None and not attrs:
            self.claim_tree(self.owner_slot(path, obj), obj)
            return
        owner = self.owner_slot(path, obj)
        self.claimed.add(id(obj))
        self.count(obj, owner)
        if d is not None and id(d) not in self.claimed:
            self.claimed.add(id(d))
            self.count(d, owner)
        parent_type = type(obj)
        for name, value in attrs:
            if id(value) in self.claimed:
                continue
            if type(value) is parent_type or issubclass(type(value), _SCALARS) and self.getsizeof(value, 0) < 4096:
                # Linked structures and small scalars stay with their parent.
                self.claim_tree(owner, value)
            else:
                self.claim_named(path + "." + name, value, depth + 1)
        # Anything the instance references besides its attributes: its dict's keys, and what
        # it holds in C fields (an lru_cache's cache, a deque's items, a generator's frame).
        # ``obj`` is claimed already: walk from it, do not start at it (which would stop).
        self.claim_tree(owner, obj, root_claimed=True)
