# mypy: disable-error-code="assignment, var-annotated, arg-type, unused-ignore"
# (payload code, Python 3.8+ without annotations)
"""The duty cycle's yield, shared by every walk of a request (the census's clock, the object
graph's, the probes'), and the account of the target's own collections that run in the
payload's thread.

Standard library only; runs inside the target.

The payload never switches the collector off, never changes its thresholds and never collects.
Every thread of the target, and every child it forks meanwhile, sees the collector exactly as
the target set it. Switching it off for the payload's stretches (what this module once did, to
keep a costly collection out of them) was seen by the target: the interpreter hands the GIL to
another thread inside a stretch every switch interval, so a thread polling ``gc.isenabled()``
saw it off 694 times over 5 inspections, a section where the target had switched it off
itself had it switched back on under it, and 103 of 198 children forked during 3 inspections
of a worker forking every 20 ms were born with it off for good.

So a collection of the target's own can run in the payload's thread: CPython runs it in
whichever thread allocates the object that takes the young generation's count over its
threshold (3.12+: at that thread's next eval-breaker check). It was due anyway, it examines
the target's objects, and it holds the GIL as long as it would have in any other thread of
the target; a worker with ``gc.set_threshold(150_000, 10, 10)`` (the real verifiers
EnvWorker) runs one of up to ~300 ms every so often. It is not the payload's pause: while a
request runs, a ``gc.callbacks`` entry of the payload's times the collections that run in
the payload's thread (``stats``), and the walks' clocks measure their stretches in
``own_cpu()`` (the thread's CPU time minus those collections'), so ``max_hold_ms`` says what
the payload held and the collections are reported beside it. The entry is removed when the
request ends (and in a child forked meanwhile, ``reset_after_fork``).
"""

import gc
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
