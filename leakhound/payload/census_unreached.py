"""What no named root reached: held from C (or a thread's stack), or cyclic garbage.

Tracked objects no named root reaches are split with the same arithmetic the cyclic GC uses
(refcount minus references from inside the set) into objects held from C / untracked places
(owners named ``<held from C: Type>``) and cyclic garbage. Phases of :class:`census.Census`,
each claiming through its ``walk`` (census_walk.ClaimWalk).
"""

import functools
import gc
import operator
import sys
import time

try:
    from . import _walk as _walk_module
except ImportError:  # pragma: no cover - the payload runs without its C helpers too
    _walk_module = None  # type: ignore[assignment]
from .census_roots import PAYLOAD_OWNER
from .objects import (
    INLINE_VALUES_DICTS,
    OURS,
    SUBCLASSES_LABEL,
    ModuleType,
    c_holder,
    has_managed_dict,
    held_what,
    safe_referents,
    subclass_tree,
    type_name,
)

if False:  # typing only; the payload imports nothing it does not need at run time
    from typing import Any  # noqa: F401

# Units of work (referents looked at, and a few per object) between two ticks of the clock in
# the loops below: a few hundred microseconds.
_TICK_WORK = 4096
# Members whose referents are listed in one gc.get_referents call.
_CHUNK = 256
# Objects whose referents one count_references call looks at (still_outside).
_COUNT_SLICE = 4096


def _module_type_ids():
    """ids of ModuleType and its subclasses: a module's referents are its dict only
    (objects.safe_referents), never its tp_traverse."""
    return {id(cls) for cls in subclass_tree(ModuleType)}


_NOT_NONE = functools.partial(operator.is_not, None)


def _internal_counts(members, index, tick=None, size=None):
    """[how many references members make to members[i]] (``index``: id -> position; with
    ``size``, the positions of another list that long, referenced by ``members``). The
    referents of 256 members at a time in one gc.get_referents call, looked up in ``index``
    8192 at a time with map/filter (C loops: the Python loop runs for the hits only), the
    clock ticked after each slice; a module's referents are its dict (objects.safe_referents);
    what a tuple or frozenset a member alone holds references counts as the member's (C's
    held_once_referents, as count_references)."""
    internal = [0] * (len(members) if size is None else size)
    get = index.get
    through = getattr(_walk_module, "held_once_referents", None)
    modules = _module_type_ids()
    for start in range(0, len(members), _CHUNK):
        chunk = members[start:start + _CHUNK]  # type: Any
        types = list(map(type, chunk))  # type: Any
        # 3.13: an instance's made __dict__ is not among its traverse's referents
        # (objects.INLINE_VALUES_DICTS): such a chunk is read one member at a time
        if modules.isdisjoint(map(id, types)) and not (INLINE_VALUES_DICTS and any(map(has_managed_dict, types))):
            refs = gc.get_referents(*chunk)  # type: Any
        else:
            refs = []
            for obj in chunk:
                refs.extend(safe_referents(obj))
            obj = None
        chunk = types = None
        for at in range(0, len(refs), _TICK_WORK * 2):
            for i in filter(_NOT_NONE, map(get, map(id, refs[at:at + _TICK_WORK * 2]))):
                internal[i] += 1
            if through is not None:
                # (a closure's tuple, held once, is in no list of tracked_objects': its cells
                # referenced from outside the members, held from C, unless counted through it)
                for i in filter(_NOT_NONE, map(get, map(id, through(refs, at, at + _TICK_WORK * 2)))):
                    internal[i] += 1
            if tick is not None:
                tick()
        refs = None
    return internal


def referenced_from_outside(members, held, tick=None, counts=None):
    """Members with more references than the other members and our own ``held`` lists
    (``members`` itself among them) account for: referenced from C, a thread's stack, or
    anything else outside ``members``.

    The cyclic GC's own arithmetic (refcount minus internal references), without running
    a collection. ``tick``: called now and then (the census's duty cycle and deadline).
    ``counts``: a dict that receives ``index`` (id -> position) and ``internal`` (the
    references from inside), for a caller that needs them again (cyclic_only).
    """
    index = {}  # type: dict
    for k, o in enumerate(members):
        index[id(o)] = k
        if tick is not None and k & 4095 == 4095:
            tick()
    o = None
    internal = _internal_counts(members, index, tick)
    # Besides the ``held`` lists: the loop variable and getrefcount's argument.
    bias = held + 2
    outside = []
    for i in range(len(members)):
        if tick is not None and i & 1023 == 1023:
            tick()
        obj = members[i]
        if sys.getrefcount(obj) - bias > internal[i]:
            outside.append(obj)
    obj = None
    if counts is not None:
        counts["index"] = index
        counts["internal"] = internal
    return outside


def still_outside(candidates, referrers, held, tick=None, ours=()):
    """The candidates (referenced_from_outside's) that ``referrers`` (every tracked object,
    the candidates among them) do not account for: referenced from C, a thread's stack, or
    anything else outside the heap. A candidate something tracked outside the candidates
    references (a reference made after its holder was walked) is not. ``held``: our own
    lists that hold each candidate, ``referrers`` among them; ``ours``: those of them that
    are among the referrers (made before their listing), whose references are not counted.
    One pass over the referrers' referents, in pieces (the clock ticked between)."""
    ours = set(map(id, ours))
    count = getattr(_walk_module, "count_references", None)
    if count is not None:
        # In C: no list of referents made (a tracked dict of 400k entries was a list of 800k
        # in the target at once), an object's referents looked up where they are.
        keys = sorted(set(map(id, candidates)))
        found = [0] * len(keys)
        for start in range(0, len(referrers), _COUNT_SLICE):
            piece = referrers[start:start + _COUNT_SLICE]
            if ours:
                piece = [o for o in piece if id(o) not in ours]
            found = list(map(operator.add, found, count(piece, 0, len(piece), keys)))
            piece = None
            if tick is not None:
                tick()
        at = dict(zip(keys, found, strict=True))
        counted = [at[id(o)] for o in candidates]
        del keys, found, at
    else:
        index = {id(o): k for k, o in enumerate(candidates)}
        mine = [o for o in referrers if id(o) not in ours] if ours else referrers
        counted = _internal_counts(mine, index, tick, size=len(candidates))
        del index, mine
    bias = held + 2  # (as referenced_from_outside's)
    outside = []
    for i in range(len(candidates)):
        obj = candidates[i]
        if sys.getrefcount(obj) - bias > counted[i]:
            outside.append(obj)
    obj = None
    return outside


def cyclic_only(candidates, tick=None, counts=None):
    """The candidates that reference counting cannot free: cycles and what hangs off them.

    A candidate no other candidate references is alive only through our own lists: it died
    while the census ran (a thread replaced it in a dict we had walked), and refcounting frees
    it, and then what only it held, the moment we let go. That is not cyclic garbage. Peel
    such objects off, as refcounting would; what is left is in or under a cycle.
    ``counts``: ``index`` and ``internal`` for these candidates, when already counted.
    """
    if not candidates:
        return candidates
    if counts is not None:
        index, internal = counts["index"], counts["internal"]
    else:
        index = {id(o): i for i, o in enumerate(candidates)}
        internal = _internal_counts(candidates, index, tick)
    work = 0
    freed = [False] * len(candidates)
    queue = [i for i in range(len(candidates)) if internal[i] == 0]
    while queue:
        i = queue.pop()
        if freed[i]:
            continue
        freed[i] = True
        # A big container among the candidates (one that died while the census ran) is a
        # long loop alone, and so are many of them: the busy real worker's census ran 87-103 ms
        # here between two looks at the clock.
        refs = safe_referents(candidates[i])
        for m, ref in enumerate(refs):
            j = index.get(id(ref))
            if j is not None and not freed[j]:
                internal[j] -= 1
                if internal[j] == 0:
                    queue.append(j)
            if tick is not None and m & 4095 == 4095:
                tick()
        work += len(refs) + 8
        if tick is not None and work > _TICK_WORK:
            work = 0
            tick()
    refs = None
    return [candidates[i] for i in range(len(candidates)) if not freed[i]]


_HELD = "<held from C: "


def _held_name(obj):
    """The owner of an object only C holds: ``<held from C: Type>``, but a class's registry of
    its subclasses (``Class.<subclasses>``) and the import system's copy of the payload's
    extension module's dict (``<leakhound payload>``): named roots' both."""
    holder = c_holder(obj)
    if holder is OURS:
        return PAYLOAD_OWNER
    if holder is not None:
        return type_name(holder) + "." + SUBCLASSES_LABEL
    return _HELD + "%s>" % held_what(obj)


def split_unreached(walk, objects, report, named_roots=None):
    """Claim what no named root reached in ``objects`` (gc.get_objects()'s list): held from
    outside the heap (owners ``<held from C: Type>``), or cyclic garbage; how many of each
    it found go into ``report`` (the census's ``unreached``). ``named_roots``: the one owner
    of every named root (the census without owners), which a class's registry of its
    subclasses is then claimed for."""
    claimed = walk.claimed
    regions = claimed.regions
    unreached = []
    tick = walk.clock.check
    for n, obj in enumerate(objects):
        if n & 4095 == 4095:
            tick()
        address = id(obj)
        region = regions.get(address >> 20)
        if region is None or not region[(address & 0xFFFFF) >> 7] & (1 << ((address >> 4) & 7)):
            unreached.append(obj)
    obj = None
    phase = walk.clock.phase
    phase("unreached: listed")
    # Our own lists holding each: gc.get_objects()'s and ``unreached``.
    roots = referenced_from_outside(unreached, held=2, tick=tick)
    phase("unreached: held from outside")
    for n, obj in enumerate(roots):
        if n & 1023 == 1023:
            tick()
        if id(obj) in claimed:
            continue
        name = _held_name(obj)
        if named_roots is not None and not name.startswith(_HELD):
            owner = walk.owner_slot(named_roots, sys)  # (a class's, or the payload's: named roots)
        elif name.startswith("<"):
            owner = walk.owner_slot(name, obj)
            walk.owner_items[owner] = 0  # (a group: items are not one object's)
        else:
            owner = walk.owner_slot(name, obj)
        walk.claim_tree(owner, obj)
    garbage = []
    for n, obj in enumerate(unreached):
        if n & 4095 == 4095:
            tick()
        if id(obj) not in claimed:
            garbage.append(obj)
    obj = None
    phase("unreached: held from C")
    candidates = len(garbage)
    counts = {}  # type: Any
    garbage = confirm_garbage(walk, garbage, counts=counts)
    phase("unreached: confirmed")
    garbage = cyclic_only(garbage, tick=tick, counts=counts or None)
    counts = None
    phase("unreached: cyclic")
    # how many objects no named root reached, how many of them were held from outside
    # (each the root of an owner <held from C: ...> unless an earlier one took it), and
    # how many looked like garbage before the second look
    report.update(objects=len(unreached), held_from_outside=len(roots), garbage_candidates=candidates)
    if walk.compiled is not None:
        count_garbage_compiled(walk, garbage)
        del unreached, garbage, roots
        return
    for n, obj in enumerate(garbage):
        if n & 1023 == 1023:
            tick()
        size = walk.size(obj)
        walk.garbage_objects += 1
        walk.garbage_bytes += size
        walk.garbage_types.add(type(obj), size)
        # Garbage still occupies memory: it is part of the census totals, under no owner.
        walk.types.add(type(obj), size)
        walk.total_bytes += size
        walk.total_objects += 1
        claimed.add(id(obj))
    # Untracked objects hanging off garbage (e.g. strings in a dead cycle's dicts).
    stack = list(garbage)
    while stack:
        tick()
        obj = stack.pop()
        refs = safe_referents(obj)
        if issubclass(type(obj), dict):
            refs.extend(dict.keys(obj))
        for m, ref in enumerate(refs):
            if m & 4095 == 4095:
                tick()
            if id(ref) not in claimed and not gc.is_tracked(ref):
                claimed.add(id(ref))
                size = walk.size(ref)
                walk.garbage_objects += 1
                walk.garbage_bytes += size
                walk.total_bytes += size
                walk.total_objects += 1
                stack.append(ref)
                walk.garbage_types.add(type(ref), size)
                walk.types.add(type(ref), size)  # in the census's type table too
    del unreached, garbage, roots


def count_garbage_compiled(walk, garbage):
    """The loops above in the compiled walk: the garbage and the untracked objects hanging
    off it, claimed from the list of the garbage (every tracked object it references is
    claimed already: reached, held from C, or garbage), tallied by type in
    ``garbage_types`` and then added to the census's type table. Sized as the loops size
    (a 3.11+ instance's values; no native buffers). Over half a million dead objects
    were 1.5 s of Python here."""
    claim = walk.compiled
    kinds = walk.garbage_types
    clock = walk.clock
    perf_counter = time.perf_counter
    stack = [garbage]
    pending = []  # type: list
    found = []  # type: list
    per_call = walk.work_per_call
    native = walk.native or None
    objects = nbytes = 0
    while stack or pending:
        t0 = perf_counter()
        got, size = claim(stack, pending, walk.claimed.regions, kinds.index, kinds.slot, kinds.counts,
                          kinds.bytes, per_call, native, found)
        clock.step(t0)
        del found[:]  # natively sized garbage: its buffers are not looked at (as above)
        objects += got
        nbytes += size
        clock.check()
    walk.garbage_objects += objects
    walk.garbage_bytes += nbytes
    walk.total_objects += objects
    walk.total_bytes += nbytes
    types = walk.types
    for i, tp in enumerate(kinds.keys):
        slot = types.slot(tp)
        types.counts[slot] += kinds.counts[i]
        types.bytes[slot] += kinds.bytes[i]


def confirm_garbage(walk, candidates, pause=0.01, counts=None):
    """Look again, a moment later, at what seemed to be garbage.

    The main thread ran meanwhile; garbage cannot change (nothing references it), but
    an object it just handed from its C stack to a container we had already walked
    would look unreferenced. Candidates that now show a reference from outside the set,
    and what they reach inside it, are alive: they go to ``<held from C: Type>``.
    """
    if not candidates:
        return candidates
    time.sleep(pause)
    walk.clock.yielded()
    # Held by gc.get_objects()'s list, ``unreached`` and ``candidates``.
    seen = {}  # type: dict
    alive = referenced_from_outside(candidates, held=3, tick=walk.clock.check, counts=seen)
    if not alive:
        if counts is not None:
            counts.update(seen)  # the same candidates: cyclic_only counts no more
        return candidates
    index = {id(o) for o in candidates}
    marked = {id(o) for o in alive}
    stack = list(alive)
    while stack:
        walk.clock.check()
        for m, ref in enumerate(safe_referents(stack.pop())):
            if m & 4095 == 4095:
                walk.clock.check()
            if id(ref) in index and id(ref) not in marked:
                marked.add(id(ref))
                stack.append(ref)
    for obj in alive:
        if id(obj) not in walk.claimed:
            owner = walk.owner_slot("<held from C: %s>" % held_what(obj), obj)
            walk.owner_items[owner] = 0
            walk.claim_tree(owner, obj)
    obj = None
    left = [o for o in candidates if id(o) not in marked]
    if counts is not None:
        # The references among what is left: those among the candidates less those
        # from the alive part (usually a few objects), not a new pass over them all.
        get, internal = seen["index"].get, seen["internal"]
        for n, o in enumerate(candidates):
            if id(o) in marked:
                for i in filter(_NOT_NONE, map(get, map(id, safe_referents(o)))):
                    internal[i] -= 1
            if n & 4095 == 4095:
                walk.clock.check()
        o = None
        counts["internal"] = [internal[i] for i, c in enumerate(candidates) if id(c) not in marked]
        counts["index"] = {id(c): k for k, c in enumerate(left)}
    return left
