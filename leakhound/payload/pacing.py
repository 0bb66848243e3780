"""The pacing of every walk of a request (the census, the object graph, the probes): how long
the payload holds the GIL before it yields it, its deadline and cancel checks (``Clock``), and
keeping the target's own collections that run in the payload's thread out of those measures.

Standard library only; runs inside the target.

The payload never switches the collector off, never changes its thresholds and never collects:
every thread of the target, and every child it forks meanwhile, must see the collector as the
target set it. The interpreter hands the GIL to other threads inside any stretch of the
payload's (every switch interval), so they would see a switch; a child forked then would keep
it for good.

So a collection of the target's own can run in the payload's thread: CPython runs it in
whichever thread allocates the object that takes the young generation's count over its
threshold (3.12+: at that thread's next eval-breaker check). It was due anyway, examines the
target's objects, and holds the GIL as long as it would in any other thread (a worker with
``gc.set_threshold(150_000, 10, 10)`` runs one of up to ~300 ms every so often). It is not the
payload's pause: while a request runs, a ``gc.callbacks`` entry times the collections that run
in its thread (``stats``), and the clocks measure their stretches in ``own_cpu()`` (the
thread's CPU time minus those collections'), so ``max_hold_ms`` says what the payload held and
the collections are reported beside it. The entry is removed when the request ends (and in a
child forked meanwhile, ``reset_after_fork``).
"""

# mypy: disable-error-code="assignment, var-annotated, arg-type, unused-ignore"
# (payload code, Python 3.8+ without annotations)

import gc
import sys
import threading
import time

# A yield: a sleep releases the GIL at once for every thread waiting on it.
YIELD_SECONDS = 0.001

# thread: the ident of the thread a request runs on, while one runs (None otherwise);
# started_wall / started_cpu: when a collection in that thread began (None outside one);
# cpu / wall: the CPU and wall seconds collections took in it, summed over this process;
# collections: per generation, how many ran there; max_wall: the longest, seconds
_state = {"thread": None, "started_wall": None, "started_cpu": None, "cpu": 0.0, "wall": 0.0,
          "collections": [0, 0, 0], "max_wall": 0.0}  # type: dict


def _on_collection(phase, info):
    """gc.callbacks entry: times the collections that run in the request's thread."""
    state = _state
    if threading.get_ident() != state["thread"]:
        return
    if phase == "start":
        state["started_wall"] = time.perf_counter()
        state["started_cpu"] = time.thread_time()
        return
    began_wall, began_cpu = state["started_wall"], state["started_cpu"]
    if began_wall is None:
        return  # the request began during this collection (a callback of the target's ran it)
    wall = time.perf_counter() - began_wall
    state["cpu"] += time.thread_time() - began_cpu
    state["wall"] += wall
    state["started_wall"] = state["started_cpu"] = None
    generation = info.get("generation") if type(info) is dict else None
    if type(generation) is int and 0 <= generation < len(state["collections"]):
        state["collections"][generation] += 1
    if wall > state["max_wall"]:
        state["max_wall"] = wall


def watch_collections():
    """At a request's start, on its thread: time the target's collections that run in it."""
    _state["thread"] = threading.get_ident()
    _state["started_wall"] = _state["started_cpu"] = None
    _state["max_wall"] = 0.0
    if not any(cb is _on_collection for cb in gc.callbacks):
        gc.callbacks.append(_on_collection)


def unwatch_collections():
    """At a request's end: the payload's entry out of ``gc.callbacks`` (by identity: the
    target's own entries are left where they are)."""
    _state["thread"] = None
    callbacks = gc.callbacks
    for i in range(len(callbacks) - 1, -1, -1):
        if callbacks[i] is _on_collection:
            del callbacks[i]


def reset_after_fork():
    """In a child forked while a request ran: no request runs here, nothing to time."""
    unwatch_collections()
    _state["started_wall"] = _state["started_cpu"] = None


def own_cpu():
    """This thread's CPU seconds, less those the target's collections took in it: the clock
    the walks measure their stretches (holds of the GIL) in."""
    return time.thread_time() - _state["cpu"]


def stats():
    """The target's collections that ran in the request's thread, so far in this process:
    {collections: per generation, seconds: their wall time summed, max_ms: the longest of the
    current request}."""
    return {"collections": list(_state["collections"]), "seconds": _state["wall"],
            "max_ms": round(_state["max_wall"] * 1000.0, 2)}


def yield_gil():
    """The duty cycle's yield: a sleep of ``YIELD_SECONDS`` (every thread waiting for the GIL
    gets it)."""
    time.sleep(YIELD_SECONDS)


# A step that cannot be split (gc.get_objects(): the list of every tracked object) is taken
# under a pause budget only when this many times its estimate fits the budget: the estimate
# is a quiet machine's rate (60 ns an object), and on a loaded one the call cost twice that
# (465k objects at load ~15: 48 ms of CPU, 103 ns each; the census's longest hold 62 ms
# against a 50 ms budget).
UNSPLIT_STEP_MARGIN = 2.0


def unsplit_step_fits(estimate_ms, max_pause_ms):
    """Whether a step that cannot be split, estimated at ``estimate_ms``, may run under the
    pause budget ``max_pause_ms`` (None: no budget, it may)."""
    return max_pause_ms is None or estimate_ms * UNSPLIT_STEP_MARGIN <= max_pause_ms


# How often a census's ``Clock.check`` looks at the deadline, the cancel hook and the duty
# cycle: the checks cost system calls (thread_time, the cancel poll), and the census calls it
# after every short step.
CHECK_EVERY = 0.0005


def _caller(wrappers=()):
    """(code, line) of the nearest frame outside this module and outside the walk's own
    wrappers of the clock (functions of these names): the walk's code calling the clock. Kept
    as a code object and a number, never the frame (that would keep its locals)."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == __file__ or frame.f_code.co_name in wrappers):
        frame = frame.f_back
    if frame is None:
        return None
    where = (frame.f_code, frame.f_lineno or 0)
    frame = None
    return where


_UNKNOWN = object()  # the caller not located yet


def _where(spot):
    if spot is None:
        return "start"
    code, line = spot
    return "%s:%d (%s)" % (code.co_filename.rsplit("/", 1)[-1], line, code.co_name)


class Clock(object):
    """One walk's pacing: the pause budget's duty cycle, its deadline and the caller's request
    to stop, and where the time went.

    With ``max_hold`` (seconds), once the walk has run that long since it last yielded, ``hold``
    sleeps (``yield_gil``; its ``before_yield`` argument first, e.g. the graph writing out its
    full blocks while the GIL is released anyway: an argument, so the clock holds no reference
    back to the walk, no cycle) so every thread waiting for the GIL gets it. A stretch is
    measured in the walk thread's CPU time (``own_cpu``): a thread waiting for the GIL uses
    none, so time the interpreter gave to other threads inside a stretch does not count, while
    all the walk ran does (an upper bound on any one hold); a collection of the target's own
    that ran in this thread is reported apart. A stretch also ends once ``max_hold`` has passed
    on the wall clock: on a loaded machine the walk's thread is descheduled while it holds the
    GIL, and its CPU time alone let a stretch of 25 ms of CPU last 60-130 ms (the target's
    event loop late as long; 1M objects at load ~17). ``max_held`` is the longest stretch between two
    yields and ``max_held_where`` where it began and ended (file:line (function) of the walk's
    code: a stretch far over the budget points at a loop or C call without a check in it);
    ``yields`` counts the sleeps.

    ``check`` runs the duty cycle, then raises ``timeout_error`` past ``deadline`` (a
    ``time.monotonic()`` value) and ``cancel_error`` once ``cancelled()`` answers True; it looks
    at most every ``check_every`` seconds. ``wrappers``: names of the walk's functions that only
    pass a check on, left out of the places reported. ``track_gaps``: also find the longest run
    between two looks at the clock and where it was (``max_gap``, ``max_gap_where``): it locates
    the caller at every look, which on 3.11+ makes frame objects (gc-tracked: counted towards the
    target's next collection); without it the caller is located only when a stretch is the
    longest yet or ends in a yield."""


    def __init__(self, deadline, cancelled=None, max_hold=None, check_every=CHECK_EVERY, wrappers=(),
                 timeout_error=TimeoutError, timeout_message="the walk did not finish within its time budget",
                 cancel_error=Exception, cancel_message="the walk was cancelled", track_gaps=False):
        self.deadline = deadline
        self.cancelled = cancelled
        self.max_hold = max_hold
        self.check_every = check_every
        self.wrappers = wrappers
        self.timeout_error, self.timeout_message = timeout_error, timeout_message
        self.cancel_error, self.cancel_message = cancel_error, cancel_message
        self.track_gaps = track_gaps
        self.max_step = 0.0
        self.held_since = own_cpu()
        self.held_since_wall = time.perf_counter()
        self.max_held = 0.0
        self.max_held_wall = 0.0  # the longest stretch between two yields on the wall clock
        self.max_held_after = ""  # the phase marked last when the longest stretch ended
        self.last_phase = ""
        self.yields = 0
        self.next_check = 0.0
        self._began_at = None
        self.max_held_where = ("", "")
        self.max_gap = 0.0
        self.max_gap_where = ("", "")
        self._looked = self.held_since
        self._looked_at = None
        # Where the time went: phase -> [wall seconds, this thread's CPU seconds]; wall minus
        # CPU is time the walk waited (for the GIL, mostly, on a busy target).
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
        """The end of one step that cannot be split (a C call), begun at ``started``
        (``time.perf_counter()``): the longest is ``max_step``."""
        now = time.perf_counter()
        took = now - started
        if took > self.max_step:
            self.max_step = took
        return now

    def _yield(self, before_yield=None):
        if before_yield is not None:
            before_yield()
        yield_gil()
        self.yields += 1

    def _began(self):
        """A stretch begins: after a yield, or another release of the GIL."""
        self.held_since = self._looked = own_cpu()
        self.held_since_wall = time.perf_counter()

    def hold(self, before_yield=None):
        """The duty cycle: yield the GIL once the walk has held it ``max_hold`` (its CPU time)
        or ``max_hold`` has passed since it last did (the wall clock)."""
        cpu = own_cpu()
        held = cpu - self.held_since
        held_wall = time.perf_counter() - self.held_since_wall
        if held_wall > self.max_held_wall:
            self.max_held_wall = held_wall
        at = _UNKNOWN
        if self.track_gaps:
            at = _caller(self.wrappers)
            # the longest run between two looks at the clock: the place with no check in it
            gap = cpu - self._looked
            if gap > self.max_gap:
                self.max_gap = gap
                self.max_gap_where = (_where(self._looked_at), _where(at))
            self._looked, self._looked_at = cpu, at
        if held > self.max_held:
            if at is _UNKNOWN:
                at = _caller(self.wrappers)
            self.max_held = held
            self.max_held_after = self.last_phase
            self.max_held_where = (_where(self._began_at), _where(at))
        if self.max_hold is not None and (held >= self.max_hold or held_wall >= self.max_hold):
            if at is _UNKNOWN:
                at = _caller(self.wrappers)
            self._yield(before_yield)
            self._began()
            self._began_at = at

    def yield_now(self):
        """With a budget, yield the GIL now (unless the walk just did): the stretch before
        one step that cannot be split (gc.get_objects()) and the step are then not one."""
        self.hold()
        if self.max_hold is not None and own_cpu() - self.held_since > 0.001:
            self._yield()
            self._began()
            self._began_at = self._looked_at = _caller(self.wrappers)

    def yielded(self):
        """The walk released the GIL some other way (a sleep of its own): a new stretch."""
        self._began()
        self._began_at = self._looked_at = _caller(self.wrappers)

    def check(self, before_yield=None):
        now = time.perf_counter()
        if now < self.next_check:
            return
        self.hold(before_yield)
        # From after the yield: with a tiny budget the next check would otherwise come due
        # during the 1 ms sleep, and every check after it sleep again (~1 ms per owner).
        self.next_check = time.perf_counter() + self.check_every
        if time.monotonic() > self.deadline:
            raise self.timeout_error(self.timeout_message)
        if self.cancelled is not None and self.cancelled():
            raise self.cancel_error(self.cancel_message)
