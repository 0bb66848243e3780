"""``gc.get_objects()``'s list without what may still be being built by another thread.

CPython lets a builder grow or fill a new tuple (``tuple(generator)``, ``_PyTuple_Resize``)
or frozenset (``PySet_Add``) only while the builder holds its one reference; the collector
already tracks it. A list of every tracked object holding one such object across a GIL yield
makes the builder's next step raise ``SystemError: bad argument to internal function`` in the
target's own code (measured: a thread running ``tuple(x for x in range(2000))`` in a loop
failed on every inspection). So the tuples and frozensets something else holds exactly once
are left out of the list, in the same C call that lists them (``_walk.tracked_objects``):
nothing runs in between. What is left out is at most counted as not reached (the bytes of
tuples held once from C and from nothing tracked).

The other way round holds too: a list of every tracked object made by the target's own code
(a monitoring thread's ``for obj in gc.get_objects()``) holds the payload's tuples as they are
built. The payload builds none from a generator: a list first, then ``tuple(list)``, one C
call (measured: ``tuple(genexpr)`` raised SystemError 10,509 times in 5 s against such a
thread; the real verifiers worker's truth thread failed a ``patch --verify`` in CI once).
"""

import array
import functools
import gc
import sys

from .pacing import UNSPLIT_STEP_MARGIN

try:
    from . import _walk as _walk_module
except ImportError:  # pragma: no cover - the payload runs without its C helpers too
    _walk_module = None  # type: ignore[assignment]


def _without_held_once(objects, limit, counts=None, kinds=None):
    getrefcount = sys.getrefcount
    kept = []  # type: list[object]
    keep = kept.append
    for o in objects:
        if issubclass(type(o), (tuple, frozenset)) and getrefcount(o) <= limit:
            if counts is not None:
                tp = type(o)
                counts[id(tp)] = counts.get(id(tp), 0) + 1
                kinds[id(tp)] = tp
            continue
        keep(o)
    return kept


def _held_once_limit():
    """The count ``_without_held_once`` sees for an object that its list and one other
    hold: measured here in that same code (it differs between versions)."""
    built = (object(),)  # held by this variable, as a builder holds it
    for limit in range(1, 16):
        if not _without_held_once([built], limit):
            return limit
    return 0


def tracked_objects(counts=None, kinds=None):
    """gc.get_objects() without the tuples and frozensets something else holds once; with
    ``counts`` and ``kinds`` (dicts), what is left out is counted in them by id(type) (its
    type in ``kinds``): a census of types still counts it."""
    walk = _walk_module
    if walk is not None and hasattr(walk, "tracked_objects"):
        if counts is None:
            return walk.tracked_objects(gc.get_objects)
        return walk.tracked_objects(gc.get_objects, counts, kinds)
    # Without the C helper the list is filtered in Python right after it is made: a window
    # of a few bytecodes remains in which another thread can run.
    limit = _held_once_limit()
    objects = gc.get_objects()
    objects[:] = _without_held_once(objects, limit, counts, kinds)
    return objects


def _generation(generation):
    """``gc.get_objects(generation)`` without the tuples and frozensets something else holds
    once, as tracked_objects: the map and the list its ids go into are new tracked objects,
    whose allocation can start a collection on 3.10-3.11, and that can run finalizers, other
    threads with them (seen once in CI: a tuple(generator) of the target failed under it)."""
    walk = _walk_module
    if walk is not None and hasattr(walk, "tracked_objects"):
        return walk.tracked_objects(functools.partial(gc.get_objects, generation))
    objects = gc.get_objects(generation)
    objects[:] = _without_held_once(objects, _held_once_limit())
    return objects


def made_after(marker):
    """(ids, older): the ids of the tracked objects in the young generations made after
    ``marker`` (a tracked object made for this, e.g. a new list), and whether the marker is in
    the oldest generation; an object that was in a young generation when the marker was made
    (``young_ids``) can be among them and is not new. A collection of generation 0 or 1
    appends it to the next one's tail, so within a generation the objects stay in the order
    they were made (but for what it moved to the tail: found reachable late), and everything
    in a generation younger than the marker's was made after it; ``older``: what follows the
    marker in gc.get_objects()'s list (generation 0, 1, then the oldest, its tail) was made
    after it too, unless a full collection ran since the marker was made (it appends
    generation 0, then 1, to the oldest: the caller checks). Two short calls (the young
    generations only); ids, no references kept."""
    made = set()
    mark = id(marker)
    for generation in (0, 1):
        ids = list(map(id, _generation(generation)))  # (ints compared: no object's __eq__ runs)
        if mark in ids:
            made.update(ids[ids.index(mark) + 1:])
            return made, False
        made.update(ids)
    return made, True


# At most this many objects in the young generations as a walk begins for ``young_ids`` (a
# sorted array of their ids, 8 bytes each in the target): more (collections disabled, or
# raised thresholds) and none is kept.
YOUNG_IDS_MAX = 100000
# What listing them costs an object (the listing, the ids, their sort and their array, one
# stretch that no yield splits): ~105 ns on a quiet machine (95k objects in 10 ms), ~450 ns in
# the busy real worker (100k in 45 ms of its CPU, the inspection's longest hold).
YOUNG_NS_PER_OBJECT = 450


def young_limit(max_pause_ms):
    """How many young objects young_ids() may list under the pause budget ``max_pause_ms``
    (None: no budget, YOUNG_IDS_MAX): at most as many as the budget's margin lets one step
    that cannot be split take (pacing.unsplit_step_fits), at the busy worker's rate."""
    if not max_pause_ms:
        return YOUNG_IDS_MAX
    fits = int(max_pause_ms * 1e6 / (YOUNG_NS_PER_OBJECT * UNSPLIT_STEP_MARGIN))
    return min(YOUNG_IDS_MAX, fits)


def young_estimate():
    """About how many objects generations 0 and 1 hold now, read without listing them:
    generation 0's count, and for generation 1 what each collection of generation 0 since its
    last collection moved there (at most generation 0's threshold each, or its count)."""
    counts = gc.get_count()
    threshold = gc.get_threshold()[0]
    return counts[0] + counts[1] * max(threshold, counts[0], 1)


def young_ids(limit=YOUNG_IDS_MAX):
    """The ids of the objects in generations 0 and 1 now, or None when there are more than
    ``limit``. What a collection reorders (it moves an object it finds reachable only later to
    its list's tail) is in the generation it collects: with these, an object older than a
    marker made now is told from a new one (``made_after``) after any collection but a full one.

    Their estimate (``young_estimate``) is looked at first: listing is one C call that no
    yield splits, and the real verifiers worker raises generation 0's threshold to 150,000
    (``gc.set_threshold(150_000, 10, 10)``), so generation 1 holds up to 1.5M objects: listing
    them to find there were too many held its GIL 61-111 ms (3.12, 1.2-2.2 GB)."""
    if young_estimate() > limit:
        return None
    ids = list(map(id, _generation(0)))
    ids.extend(map(id, _generation(1)))
    if len(ids) > limit:
        return None
    ids.sort()
    # 8 bytes an id, sorted (``among``): a set of int objects was ~140 bytes an id in the
    # target for the whole walk (0.66 MiB on a 1M-object heap), read only by held_from_c.
    return array.array("Q", ids)


def among(ids, address):
    """Whether ``address`` is in ``ids``, a sorted array of young_ids (a binary search; the
    standard library's bisect would be one more module the payload leaves imported in the
    target)."""
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if ids[mid] < address:
            lo = mid + 1
        else:
            hi = mid
    return lo < len(ids) and ids[lo] == address
