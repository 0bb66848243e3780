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
busy real worker (py-spy: ``gc_collect_main`` under the graph's walk).

Waiting at a yield for a thread of the target to allocate its way past the threshold (what
this module did first, for up to 250 ms) is not enough: a worker in a steady state frees
about as much as it allocates, and its count can stay just under the threshold for seconds;
the busy real worker's fourth inspection, every time, then ran the collection in the graph's
walk (a 344-375 ms stretch; its heartbeat thread waited 229-260 ms). So when the count is
within ``MARGIN`` of the threshold and the collection due is a costly one, the payload runs
its next stretch with the collector switched off (``hold_collection``, after the yield) and
switches it back on before it lets go of the GIL again (``release_collection``: at the next
yield, before any other sleep or wait of the payload, and when the request ends). No thread
of the target runs while the payload holds the GIL, so none sees the collector off, and the
collection runs, as it would have without us, in the first thread of the target that
allocates once the GIL is theirs. (Where the payload lets go of the GIL inside a stretch, to
write a file, the target's threads run for that moment with the collector off: their
allocations then set the collection off a moment later.)

It never collects and never changes the thresholds; it leaves the collector as it found it
(off stays off: it is switched off only if it was on, and back on only if the payload
switched it off).
"""

import gc
import time

# A yield: a sleep releases the GIL at once for every thread waiting on it.
YIELD_SECONDS = 0.001
# How close to its threshold the young generation's count must be for a stretch to be held:
# any count (a stretch of the census's roots keeps tens of thousands of tuples, one per
# class: past a margin of 8,192 the busy real worker's collection ran in one, 96 ms). Holding
# costs the target nothing; the threshold is a parameter for the tests.
MARGIN = 1 << 62
# A collection examining fewer objects than this (the default thresholds' young and middle
# generations: 700 and ~7,700) costs a few ms: not worth holding.
CHEAP_OBJECTS = 50000

# held: the collector is off because hold_collection switched it off; holds: stretches run
# so; ran_elsewhere: of those, how many saw a collection run meanwhile in the target's threads
_state = {"held": False, "holds": 0, "ran_elsewhere": 0, "counts": None}  # type: dict


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


def hold_collection(margin=MARGIN):
    """Before a stretch of the payload (the GIL held): the collector off for it when the
    target's next costly collection is within ``margin`` allocations. Returns whether it is."""
    if _state["held"]:
        return True
    if not gc.isenabled():
        return False  # the target's choice (or nothing to hold)
    threshold = gc.get_threshold()[0]
    counts = gc.get_count()
    if threshold <= 0 or counts[0] + margin < threshold or not collection_due_is_costly(counts):
        return False
    gc.disable()
    _state["held"] = True
    _state["holds"] += 1
    _state["counts"] = counts
    return True


def release_collection():
    """Before the payload lets go of the GIL: the collector back on if ``hold_collection``
    switched it off. Returns whether it did."""
    if not _state["held"]:
        return False
    _state["held"] = False
    gc.enable()
    return True


def give_back():
    """When a request ends: the collector back on, and, if it was held, the GIL let go for a
    moment before the payload writes its answer (whose allocations would otherwise set off a
    collection that came due meanwhile): a busy target runs it in its own threads then."""
    if release_collection():
        time.sleep(YIELD_SECONDS)


def sleep(seconds):
    """A sleep of the payload's own (a wait, a second look): the collector given back first."""
    release_collection()
    time.sleep(seconds)


def yield_gil():
    """The duty cycle's yield: the collector given back, a sleep of ``YIELD_SECONDS`` (every
    thread waiting for the GIL gets it), then the next stretch held off a costly collection
    that is due (``hold_collection``)."""
    before = _state["counts"] if _state["held"] else None
    release_collection()
    time.sleep(YIELD_SECONDS)
    # A collection moved the older generations' counts (the young count alone also goes
    # down as objects are freed): it ran in a thread of the target while we slept.
    if before is not None and gc.get_count()[1:] != before[1:]:
        _state["ran_elsewhere"] += 1
    hold_collection()


def stats():
    """What the holds were so far in this target: {holds, ran_elsewhere}."""
    return {"holds": _state["holds"], "ran_elsewhere": _state["ran_elsewhere"]}
