# mypy: disable-error-code="assignment, var-annotated, arg-type, unused-ignore"
# (payload code, Python 3.8+ without annotations)
"""The duty cycle's yield, shared by every walk of a request (the census's clock, the object
graph's, the probes'): release the GIL, and leave the target's next costly collection to the
target's own threads.

Standard library only; runs inside the target.

Why the second part: CPython runs a collection in whichever thread allocates the object that
takes the young generation's count over its threshold. A worker that calls ``gc.freeze()``
and ``gc.set_threshold(150_000, 10, 10)`` (the real verifiers EnvWorker) runs a collection
of up to ~1.5M objects every tenth time, ~300 ms with the GIL held. When the count is that
close to its threshold, the payload's next few allocations would run it in the payload's
thread: the target's collection, run at a moment it did not choose, with its loop waiting,
as a step of an inspection that promised ``--max-pause``. Seen on first inspections of the
busy real worker (py-spy: ``gc_collect_main`` under the graph's walk). So after each yield,
when the count is within ``MARGIN`` of the threshold and the collection due is a costly one,
the payload keeps sleeping (1 ms at a time) until a thread of the target has allocated its
way past the threshold, and the collection ran there, as it would have without us; at most
``MAX_WAIT`` seconds, and not again for ``GIVE_UP_FOR`` seconds when nobody allocated (an
idle target: it waits for nothing, so nobody waits on the collection either).

It never collects, never changes the thresholds, never disables the collector.
"""

import gc
import time

# A yield: a sleep releases the GIL at once for every thread waiting on it.
YIELD_SECONDS = 0.001
# Tracked objects a walk may keep between two yields (its lists of referents, a result's
# rows): within this many of the threshold, the next stretch could set the collection off.
MARGIN = 8192
# A collection examining fewer objects than this (the default thresholds' young and middle
# generations: 700 and ~7,700) costs a few ms: not worth waiting for.
CHEAP_OBJECTS = 50000
MAX_WAIT = 0.25
GIVE_UP_FOR = 10.0

_state = {"gave_up_at": -1e9, "waits": 0, "waited": 0.0, "ran_elsewhere": 0}


def collection_due_is_costly(counts=None, thresholds=None):
    """True when the target's next collection would examine more than ``CHEAP_OBJECTS``: its
    young generation is big (a raised threshold), or it is due to take the middle (every
    ``threshold[1] + 1``-th) or the old generation along."""
    t0, t1, t2 = thresholds if thresholds is not None else gc.get_threshold()[:3]
    c0, c1, c2 = counts if counts is not None else gc.get_count()[:3]
    if t0 <= 0:
        return False
    if t0 > CHEAP_OBJECTS:
        return True
    if c1 >= t1:  # this one takes the middle generation too: up to t0 * (t1 + 1) objects
        if c2 >= t2:
            return True  # and the old one (if CPython's long-lived ratio allows): the heap
        return t0 * (t1 + 1) > CHEAP_OBJECTS
    return False


def leave_collection_to_target(margin=MARGIN, max_wait=MAX_WAIT, sleep=time.sleep):
    """Sleep while the target's next costly collection is within ``margin`` allocations, until
    one of its threads ran it or ``max_wait`` passed. Returns the
    seconds waited."""
    if not gc.isenabled():
        return 0.0
    threshold = gc.get_threshold()[0]
    counts = gc.get_count()
    if threshold <= 0 or counts[0] + margin < threshold or not collection_due_is_costly(counts):
        return 0.0
    now = time.monotonic()
    if now - _state["gave_up_at"] < GIVE_UP_FOR:
        return 0.0
    start = now
    _state["waits"] += 1
    while True:
        sleep(YIELD_SECONDS)
        # A collection moved the older generations' counts (the young count alone also goes
        # down as objects are freed).
        if gc.get_count()[1:] != counts[1:]:
            _state["ran_elsewhere"] += 1
            break
        if time.monotonic() - start >= max_wait:
            _state["gave_up_at"] = time.monotonic()
            break
    waited = time.monotonic() - start
    _state["waited"] += waited
    return waited


def yield_gil():
    """The duty cycle's yield: sleep ``YIELD_SECONDS``, then leave a costly collection that
    is due to the target (``leave_collection_to_target``)."""
    time.sleep(YIELD_SECONDS)
    leave_collection_to_target()


def stats():
    """What the waits cost so far in this target: {waits, waited seconds, ran_elsewhere}."""
    return {"waits": _state["waits"], "waited_seconds": round(_state["waited"], 4),
            "ran_elsewhere": _state["ran_elsewhere"]}
