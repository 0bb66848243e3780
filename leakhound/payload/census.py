"""Owner-attributed heap census, run inside the target process.

Standard library only; compatible with Python 3.8+ (its inner loop has a compiled twin,
``_census_walk.c``, used where it loads). It never calls ``gc.collect()``, never calls
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

The census lives in rooms: ``census_tallies`` (marks, tallies), ``census_walk`` (``ClaimWalk``:
the tallies and the walk that fills them, ``claim_tree``, ``claim_named``), ``census_roots``
(the walk from the named roots, which ``roots`` enumerates), ``census_unreached`` (held from
C, cyclic garbage); ``pacing.Clock`` paces it, ``objects`` reads an object without running its
code and ``sizes.object_size`` is the size of one object. This module holds ``Census``: the
order of its phases over one ``ClaimWalk``, and its result.
"""

import gc
import time

from . import census_roots, census_unreached, wire  # noqa: F401 - wire: its types, in type comments
from .census_tallies import CensusCancelled, CensusTimeout
from .census_walk import ClaimWalk
from .objects import LEAF_TYPE_IDS, type_name
from .pacing import UNSPLIT_STEP_MARGIN, Clock, unsplit_step_fits
from .roots import frame_locals_unreadable
from .sizes import SIZE_MODEL, after_walk_budget, mapped_native_bytes, sqlite_native_bytes, ssl_native_bytes
from .tracked import tracked_objects

try:  # the compiled inner walk (_census_walk.c): one stable-ABI build, _walk.abi3.so, for CPython 3.10+
    from . import _walk
except ImportError:  # CPython < 3.10, another implementation, or no compiler at install: the Python loop
    _walk = None  # type: ignore[assignment]

if False:  # typing only; the payload imports nothing it does not need at run time
    from typing import Any  # noqa: F401

__all__ = ["Census", "CensusCancelled", "CensusTimeout"]

# Units of work (containers popped + referents seen) per call into the compiled walk: a
# few milliseconds of holding the GIL.
_WORK_PER_CALL = 20000
# What gc.get_objects() costs per gc-tracked object (a linked-list walk, one cache miss each),
# rounded up from docs/performance.md; used to keep it within a pause budget.
_GET_OBJECTS_NS = 60
# What it cost in this process the last time a census made that call: the payload stays
# loaded between inspections, so later budgets use this machine's own rate (kept within
# sane bounds: one slow, descheduled call must not rule the call out for good).
# "tracked": how many objects the last census listed (or estimated), which lets the next one
# skip its sizing walk.
_measured = {"ns_per_object": None, "tracked": None}  # type: dict
# How much the tracked objects may have grown since the last census for its count to stand
# in for a sizing walk: the budget must fit this many times the count.
_TRACKED_HEADROOM = 2.0
# Objects let go of per step when the census drops its list of every tracked object.
_RELEASE_PER_STEP = 4096
# Only a list bigger than the caches gives a rate that holds for big heaps (a small, cache-hot
# one reads several times faster).
_RATE_MIN_OBJECTS = 200000


def ns_per_object():
    """What gc.get_objects() costs per tracked object here: the last census's measurement in
    this process, or the default rate."""
    return _measured["ns_per_object"] or _GET_OBJECTS_NS


def unreached_over_budget(tracked, estimate_ms, max_pause_ms):
    """What a census says of what no root reaches when listing the ~``tracked`` gc-tracked
    objects (~``estimate_ms``) is over the pause budget: its ``unreached`` fields, the reason
    in words. Also for the census the object graph's walk made (runner._counted_in_graph)."""
    ns = ns_per_object()
    rate = "measured" if _measured["ns_per_object"] else "default"
    return {
        "examined": False,
        "estimated_pause_ms": round(estimate_ms, 1),
        "ns_per_object": round(ns, 1),
        "rate": rate,
        "reason": (
            "listing the ~%s gc-tracked objects (gc.get_objects(), one call that cannot "
            "be split) would hold the target for ~%.0f ms (%.0f ns each, %s), up to ~%.0f ms "
            "on a loaded machine: over the %.0f ms pause budget (--max-pause 0 lifts it)"
            % (format(tracked, ","), estimate_ms, ns,
               "as measured in this process" if rate == "measured" else "a default rate",
               estimate_ms * UNSPLIT_STEP_MARGIN, max_pause_ms)
        ),
    }


def listing_estimate_ms():
    """What listing every tracked object (gc.get_objects()) would hold the target for, from the
    last census's or graph walk's count in this process; None when none has counted yet."""
    tracked = _measured["tracked"]
    return None if tracked is None else tracked * ns_per_object() / 1e6


def listing_fits(max_pause_ms):
    """(whether listing every tracked object fits ``max_pause_ms``, the estimate in ms): the
    last count must fit with the headroom a census gives it (the heap may have grown since
    it was counted: _TRACKED_HEADROOM times as many). Fits when nothing has counted yet, or
    with no budget."""
    estimate = listing_estimate_ms()
    if estimate is None or max_pause_ms is None:
        return True, estimate
    return unsplit_step_fits(estimate * _TRACKED_HEADROOM, max_pause_ms), estimate


def remember_tracked(tracked):
    """How many tracked objects the named roots reached, counted by another walk (the object
    graph's, runner._counted_in_graph): sizes the next census's budget as its own count would."""
    _measured["tracked"] = tracked


class Census(object):
    """One census of the heap. Call :meth:`run`; read :meth:`result`. ``walk`` (a
    census_walk.ClaimWalk) holds the marks and tallies; the phases are plain functions of it:
    census_roots (the walk from the named roots) and census_unreached (what no root
    reached)."""

    def __init__(self, *, exclude=(), timeout=60.0, progress=None, is_stdlib=None, compiled=True,
                 max_pause_ms=None, cancelled=None, owners=True, reached=None, memory_left=None):
        # The pause budget's duty cycle: at most half the budget of running between two
        # yields of the GIL (pacing.Clock), the rest left for one step and the switch to the
        # waiting thread.
        self.clock = Clock(time.monotonic() + timeout, cancelled,
                           max_hold=max_pause_ms / 2000.0 if max_pause_ms else None,
                           timeout_error=CensusTimeout, timeout_message="census did not finish within its time budget",
                           cancel_error=CensusCancelled, cancel_message="the census was cancelled",
                           track_gaps=True)
        self.is_stdlib = is_stdlib or (lambda name: False)
        self._exclude = exclude
        self.seconds = 0.0
        self.tracked = 0
        # The same walk in C when it is importable here (and not turned off): see _census_walk.c.
        self.walk = ClaimWalk(self.clock, progress or (lambda phase, done: None), walk_module=_walk,
                              compiled=compiled, work_per_call=_WORK_PER_CALL)
        self.walker = self.walk.walker
        # With a pause budget, the one step that cannot be split (gc.get_objects(), which the
        # split of unreached objects needs) is skipped when it would exceed the budget.
        self.max_pause_ms = max_pause_ms
        # owners=False: the totals, types and what no root reaches, without owners (one walk
        # from the list of every named root: _walk_all), for a request whose owners come
        # from the object graph's dominator tree (runner.py).
        self.with_owners = owners
        self.unreached = {"examined": True, "estimated_pause_ms": None, "reason": ""}  # type: wire.Unreached
        # reached: what the object graph's walk just reached (its bitmap, in this census's
        # regions: graph_reached), with owners=False. No walk from the roots then: the census
        # only splits what the graph did not reach, and counts only that (runner.py adds
        # the graph's own tallies).
        self._reached = reached
        # () -> the bytes the request may still take in the target (None: no budget), for
        # what is sized after the walk (_size_after_walk)
        self._memory_left = memory_left

    def _size_after_walk(self):
        """OpenSSL's contexts the walk met, sized now (census_walk.size_after_walk), within
        the request's time and memory left."""
        self.walk.size_after_walk(self.clock.deadline, after_walk_budget(self._memory_left))

    def run(self):
        started = time.perf_counter()
        self._gc_before = [g.get("collections", 0) for g in gc.get_stats()]
        self.clock.check()  # setting up (sizes.native_types) was a stretch of its own
        # (an earlier count in this process, with the headroom for growth since; None: none)
        last_fits, last_estimate = listing_fits(self.max_pause_ms)
        walked = False  # the census without owners walked before listing (below)
        if self._reached is not None:
            self.walk.claimed.regions.update(self._reached)
            self._reached = None
            census_roots.claim_own(self.walk, None, self._not_the_targets())
            self.unreached["sized_by"] = "the object graph's walk"
            walked = True
        elif self.max_pause_ms is not None and last_estimate is not None and last_fits:
            # An earlier census in this process listed few enough tracked objects that even
            # _TRACKED_HEADROOM times as many fit the budget: no sizing walk (it doubled the
            # census's cost).
            self.unreached["estimated_pause_ms"] = round(last_estimate, 1)
            self.unreached["ns_per_object"] = round(ns_per_object(), 1)
            self.unreached["rate"] = "measured" if _measured["ns_per_object"] else "default"
            self.unreached["sized_by"] = "the previous census"
        elif self.max_pause_ms is not None:
            # Walk what the named roots reach first, without the list of every tracked object,
            # to learn the heap's size; the full census runs only if that list fits the budget.
            # One walk from the list of the roots, no owners (the named walk, owners and all,
            # was the first inspection's biggest cost: 2.9 s of CPU against 1.7 s for the
            # next ones on the busy real worker); over the budget, the named walk then runs
            # as the census without the list.
            if self.with_owners:
                self._sizing_walk()
            else:
                # Without owners the walk is the sizing walk's (and sizes natively): over
                # the budget below, it is the census.
                self._walk_all(None)
            estimate = self._universe_pause_ms()
            skipped = unreached_over_budget(self._tracked_estimate(), estimate, self.max_pause_ms)
            self.unreached["estimated_pause_ms"] = skipped["estimated_pause_ms"]
            self.unreached["ns_per_object"] = skipped["ns_per_object"]
            self.unreached["rate"] = skipped["rate"]
            if not unsplit_step_fits(estimate, self.max_pause_ms):
                self.unreached.update(skipped)
                if self.with_owners:
                    self.walk.reset()
                    self.clock.phase("sizing walk")
                    self._walk_roots(None)
                # No list to count: the walk's own count of containers stands in for it.
                self.tracked = self._tracked_estimate()
                _measured["tracked"] = self.tracked
                self._size_after_walk()
                self.seconds = time.perf_counter() - started
                return
            if self.with_owners:
                self.walk.reset()
            else:
                # Without owners the walk stands: the list is taken now and what the walk did
                # not reach is split as below (a second walk from the list cost the busy real
                # worker's census half its time). An object made since the walk and reached
                # from a root is in the list unmarked: it counts, once, under the split's
                # <held from C> (owners this census does not report; the totals hold).
                walked = True
        self.clock.phase("sizing walk")
        # A yield right before the one step that cannot be split (check() alone looks at the
        # clock at most every 0.5 ms: it had looked just before, and the stretch before and
        # the step were one, 45 ms on the verifiers heap).
        self.clock.check()
        self.clock.yield_now()
        t0 = time.perf_counter()
        objects = tracked_objects()
        self.clock.step(t0)
        self.clock.phase("gc.get_objects")
        self.tracked = len(objects)
        _measured["tracked"] = len(objects)
        if len(objects) >= _RATE_MIN_OBJECTS:
            took_ns = (time.perf_counter() - t0) * 1e9
            _measured["ns_per_object"] = min(500.0, max(30.0, took_ns / len(objects)))
        if walked:
            self.walk.claimed.add(id(objects))
            self.walk.mark_own()  # what the walk made since it was marked: ours too
            self.walk.bookkeeping_bytes = self.walk.own_bytes(objects)
        elif self.with_owners:
            self._walk_roots(objects)
        else:
            self._walk_all(objects)
        # 7: what no named root reached: held from C, or cyclic garbage.
        self._split_unreached(objects)
        self.clock.phase("unreached")
        # Let go of the list in pieces: an object that died while the census ran is freed
        # when the census drops it (the list is then its last reference), and a big one
        # freed with everything it held is a long step of its own.
        while objects:
            self.clock.check()
            del objects[-_RELEASE_PER_STEP:]
        self.clock.phase("release")
        del objects
        self._size_after_walk()
        self.seconds = time.perf_counter() - started

    def _not_the_targets(self):
        """What a walk must not count: the caller's own objects, and this census."""
        return tuple(self._exclude) + (self, self.__dict__)

    def _walk_roots(self, objects):
        """Claim everything the named roots reach, each for its owner (census_roots)."""
        census_roots.walk_from_roots(self.walk, objects, self.is_stdlib, self._not_the_targets())

    def _walk_all(self, objects):
        """Claim everything the named roots reach for one owner (census_roots)."""
        census_roots.walk_all(self.walk, objects, self.is_stdlib, self._not_the_targets())

    def _split_unreached(self, objects):
        """Split what no named root reached: held from C, or cyclic garbage (census_unreached)."""
        census_unreached.split_unreached(self.walk, objects, self.unreached,
                                         None if self.with_owners else census_roots.NAMED_ROOTS)

    def _sizing_walk(self):
        """Claim what the roots reach (census_roots.roots_list: every module, every class, the asyncio
        tasks and their coroutines, the frames of the other threads' stacks) in one walk from
        the list of them, for one scratch owner: only the count of container-type objects is
        used (_tracked_estimate), and walk.reset() drops the rest. A running frame's locals (3.11+)
        are not in it: a floor, as the estimate is anyway."""
        walk = self.walk
        claimed = walk.claimed
        for own in (self, self.__dict__, walk, walk.__dict__, claimed.regions):
            claimed.add(id(own))
        roots = census_roots.roots_list(walk, self.is_stdlib, with_locals=False)
        claimed.add(id(roots))
        # No native sizing: a buffer's bytes do not change the count, and what code objects
        # hold (their constants and names, read in Python) is mostly untracked.
        walk.native = {}
        walk.claim_tree(walk.owner_slot("<sizing walk>", roots), roots, root_claimed=True)
        del roots

    def _tracked_estimate(self):
        """Objects of container types the walk claimed: about what gc.get_objects() lists."""
        types = self.walk.types
        return sum(types.counts[i] for i, tp in enumerate(types.keys) if id(tp) not in LEAF_TYPE_IDS)

    def _universe_pause_ms(self):
        # gc.get_objects() follows the collector's linked lists: one cache miss per object,
        # ~55-60 ns on the machines measured (docs/performance.md), or what it cost here last
        # time; objects the named roots did not reach add to it, so this is a floor.
        return self._tracked_estimate() * ns_per_object() / 1e6


    def _notes(self):
        """What the census could not look at, said in the report."""
        notes = []
        if self.walk.unread_frames:
            notes.append(
                "the locals of %d running frame(s) were not read (%s): what only they hold is "
                "counted under <held from C: ...>" % (self.walk.unread_frames,
                                                      frame_locals_unreadable(self.walk.walk_module))
            )
        return notes

    def result(self, *, top_types=50, top_owners=50):
        walk = self.walk
        types = walk.types
        type_order = sorted(range(len(types.keys)), key=lambda i: -types.bytes[i])[:top_types]
        # and the types holding a C library's memory no size counts, whatever their rank
        listed = set(type_order)
        type_order += [i for i in range(len(types.keys)) if i not in listed
                       and type_name(types.keys[i]) in wire.OPAQUE_NATIVE_TYPES]
        owners = walk.owners
        owner_order = sorted(range(len(owners.keys)), key=lambda i: -owners.bytes[i])[:top_owners]
        garbage = walk.garbage_types
        garbage_order = sorted(range(len(garbage.keys)), key=lambda i: -garbage.bytes[i])[:20]
        heap = {
            "objects": walk.total_objects,
            "bytes": walk.total_bytes,
            "gc_tracked": self.tracked,
            "untracked": max(0, walk.total_objects - self.tracked),
            "census_seconds": self.seconds,
            "walker": self.walker,
            "sizes": SIZE_MODEL,  # what a size is: the allocators' blocks (sizes.heap_block) or as requested
            "with_owners": self.with_owners,  # False: one owner, <named roots> (Census(owners=False))
            "unreached": self.unreached.copy(),
            "max_step_ms": self.clock.max_step * 1000.0,
            "max_pause_budget_ms": self.max_pause_ms or 0.0,  # the budget kept (0: none)
            # the longest the census ran between two yields of the GIL (its CPU time: an upper
            # bound on one hold), and how many times the duty cycle yielded
            "max_hold_ms": round(self.clock.max_held * 1000.0, 2),
            "yields": self.clock.yields,
            "max_hold_after": self.clock.max_held_after,  # the phase before the one it was in
            # where (file:line (function) of the census) the longest stretch began and ended,
            # and the longest run between two looks at the clock and where: diagnostics
            "max_hold_where": list(self.clock.max_held_where),
            "max_gap_ms": round(self.clock.max_gap * 1000.0, 2),
            "max_gap_where": list(self.clock.max_gap_where),
            # collections per generation while the census ran (by any thread, the census's
            # among them: a full one is one step of its own that no yield splits)
            "gc_collections": [g.get("collections", 0) - b for g, b in
                               zip(gc.get_stats(), getattr(self, "_gc_before", ()))],  # noqa: B905 - 3.8+
            # phase -> [wall s, CPU s of the census's thread]: wall minus CPU is waiting
            "phases": {k: [round(v[0], 4), round(v[1], 4)] for k, v in self.clock.phases.items()},
            "payload_peak_bytes": walk.bookkeeping_bytes,
            "native_bytes": walk.native_bytes,
            "native_mapped_bytes": mapped_native_bytes(walk._native_bases),
            "native_sqlite_bytes": sqlite_native_bytes(walk._native_bases),
            "native_ssl_bytes": ssl_native_bytes(walk._native_bases),
            "notes": self._notes(),
            "types": [
                {"type": type_name(types.keys[i]), "count": types.counts[i], "bytes": types.bytes[i]}
                for i in type_order
            ],
            "owners": [
                {
                    "path": owners.keys[i],
                    "type": type_name(walk.owner_types[i]),
                    "items": walk.owner_items[i],
                    "retained_bytes": owners.bytes[i],
                    "retained_objects": owners.counts[i],
                }
                for i in owner_order
                if owners.bytes[i] > 0
            ],
            "cyclic_garbage": {
                "objects": walk.garbage_objects,
                "bytes": walk.garbage_bytes,
                "types": [
                    {"type": type_name(garbage.keys[i]), "count": garbage.counts[i], "bytes": garbage.bytes[i]}
                    for i in garbage_order
                ],
            },
        }  # type: wire.Heap
        return heap
