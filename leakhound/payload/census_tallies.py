"""The census's bookkeeping: marks of claimed objects, count/byte tallies in ``array`` storage,
the clock that bounds each step, and the exceptions that stop a census. Standard library only.
"""

import array
import sys
import time

from .duty import own_cpu, yield_gil

if False:  # typing only; the payload imports nothing it does not need at run time
    from typing import Any  # noqa: F401

_REGION_SHIFT = 20  # 1 MiB of address space per bitmap region
_REGION_BYTES = 1 << (_REGION_SHIFT - 4 - 3)  # one bit per 16-byte granule: 8 KiB


class CensusTimeout(Exception):
    pass


class CensusCancelled(Exception):
    """The caller asked the census to stop (``Census(cancelled=...)`` returned True)."""



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


# How often ``_Clock.check`` looks at the deadline, the cancel hook and the duty cycle.
CHECK_EVERY = 0.0005


def _caller():
    """(code, line) of the nearest frame outside this module: the census code calling the
    clock. Kept as a code object and a number, never the frame (that would keep its locals)."""
    frame = sys._getframe(1)  # type: Any
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    if frame is None:
        return None
    where = (frame.f_code, frame.f_lineno)
    frame = None
    return where


def _where(spot):
    if spot is None:
        return "start"
    code, line = spot
    return "%s:%d (%s)" % (code.co_filename.rsplit("/", 1)[-1], line, code.co_name)


class _Clock:
    """Tracks the longest single uninterruptible step (one C call holding the GIL), the
    census's deadline and the caller's request to stop, and keeps the pause budget's duty
    cycle: with ``max_hold`` (seconds), once the census has run that long since it last
    yielded, it sleeps (``duty.yield_gil``) so every thread waiting for the GIL gets it.

    A stretch is measured in the census thread's CPU time (``duty.own_cpu``): a thread
    waiting for the GIL uses none, so time the interpreter gave to other threads inside a
    stretch does not count, while all the census ran does (a stretch over which it was handed
    the GIL back and forth counts whole: an upper bound on any one hold); a collection of the
    target's own that ran in this thread is not the census's and is reported apart
    (duty.py). ``max_held`` is the
    longest stretch between two yields; ``yields`` counts the sleeps.
    The duty cycle runs at every ``step`` and ``check``: the census calls one of them after
    every C call into the walk and often in its Python loops."""

    def __init__(self, deadline, cancelled=None, max_hold=None):
        self.deadline = deadline
        self.cancelled = cancelled
        self.max_step = 0.0
        self.max_hold = max_hold
        self.held_since = own_cpu()
        self.max_held = 0.0
        self.max_held_after = ""  # the phase marked last when the longest stretch ended
        self.last_phase = ""
        self.yields = 0
        self.next_check = 0.0
        # Where the census was (file:line of the census code calling the clock) when the
        # stretch began (the yield before) and when the longest one ended: a stretch far over
        # the budget points at a loop or C call without a check in it.
        self._began_at = None  # type: Any
        self.max_held_where = ("", "")
        self.max_gap = 0.0
        self.max_gap_where = ("", "")
        self._looked = self.held_since
        self._looked_at = None  # type: Any
        # Where the time went: phase -> [wall seconds, this thread's CPU seconds]; wall minus
        # CPU is time the census waited (for the GIL, mostly, on a busy target).
        self.phases = {}
        self._mark = (time.perf_counter(), time.thread_time())

    def phase(self, name):
        """Charge the time since the previous mark to ``name``."""
        now, cpu = time.perf_counter(), time.thread_time()
        wall0, cpu0 = self._mark
        spent = self.phases.get(name)
        if spent is None:
            spent = self.phases[name] = [0.0, 0.0]
        spent[0] += now - wall0
        spent[1] += cpu - cpu0
        self._mark = (now, cpu)
        self.last_phase = name

    def step(self, started):
        now = time.perf_counter()
        took = now - started
        if took > self.max_step:
            self.max_step = took
        return now

    def hold(self):
        """The duty cycle: yield the GIL once the census has held it ``max_hold``."""
        cpu = own_cpu()
        held = cpu - self.held_since
        at = _caller()
        # the longest run between two looks at the clock: the place with no check in it
        gap = cpu - self._looked
        if gap > self.max_gap:
            self.max_gap = gap
            self.max_gap_where = (_where(self._looked_at), _where(at))
        self._looked, self._looked_at = cpu, at
        if held > self.max_held:
            self.max_held = held
            self.max_held_after = self.last_phase
            self.max_held_where = (_where(self._began_at), _where(at))
        if self.max_hold is not None and held >= self.max_hold:
            yield_gil()
            self.yields += 1
            self.held_since = self._looked = own_cpu()
            self._began_at = at

    def yield_now(self):
        """With a budget, yield the GIL now (unless the census just did): the stretch before
        one step that cannot be split (gc.get_objects()) and the step are then not one."""
        self.hold()
        if self.max_hold is not None and own_cpu() - self.held_since > 0.001:
            yield_gil()
            self.yields += 1
            self.held_since = self._looked = own_cpu()
            self._began_at = self._looked_at = _caller()

    def yielded(self):
        """The census released the GIL some other way (a sleep of its own): a new stretch."""
        self.held_since = self._looked = own_cpu()
        self._began_at = self._looked_at = _caller()

    def check(self):
        # At most every CHECK_EVERY seconds: the checks cost system calls (thread_time, the
        # cancel poll), and the walk calls this after every short step.
        now = time.perf_counter()
        if now < self.next_check:
            return
        self.hold()
        # From after the yield: with a tiny budget (--max-pause 1, or the tests' 0.001) the
        # next check came due during the 1 ms sleep, and every check after it slept again,
        # ~1 ms per owner or wall: tens of seconds for a census of a few hundred ms.
        self.next_check = time.perf_counter() + CHECK_EVERY
        if time.monotonic() > self.deadline:
            raise CensusTimeout("census did not finish within its time budget")
        if self.cancelled is not None and self.cancelled():
            raise CensusCancelled("the census was cancelled")


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

