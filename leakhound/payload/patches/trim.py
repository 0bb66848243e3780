"""trim: hand freed glibc pages back to the kernel with ``malloc_trim(0)``, now and every 10 s
(or every ``trim_every`` seconds, from the request's options: 1 to 3600).

The cadence runs on a daemon thread of its own, never on the worker's event loop: on a
fragmented 4-6 GB heap one ``malloc_trim`` took 248-540 ms, and ctypes releases the GIL for
the call, so on its own thread the loop keeps running meanwhile. Reverting stops the thread
and joins it; a fix applied again starts one thread, never a second. Never ``gc.collect()``:
full collections on fat heaps stalled real workers past their heartbeat timeout.
"""

import os
import sys
import threading
import time

from .. import arena
from ..arena import process_libc

FIX = "trim"
DESCRIPTION = "malloc_trim(0) once now and every 10 s (--trim-every) on a thread of its own (never gc.collect())"
INTERVAL = 10.0  # seconds; the story's production cadence
THREAD_NAME = "leakhound-trim"
# A revert waits this long for a trim in progress to end (the longest seen: 540 ms).
JOIN_SECONDS = 5.0


def _malloc_trim():
    libc = process_libc()  # one CDLL per process (see arena.process_libc); a CDLL call releases the GIL
    return getattr(libc, "malloc_trim", None) if libc is not None else None


def recognise():
    if not sys.platform.startswith("linux") or _malloc_trim() is None:
        return None, "malloc_trim is not available (not glibc)"
    return [], None


def _stop_strays():
    """Trim threads no applied fix owns (a payload loaded twice, a revert whose join timed
    out): one cadence per process."""
    for thread in threading.enumerate():
        wake = getattr(thread, "leakhound_wake", None)
        if thread.name == THREAD_NAME and wake is not None:
            wake.set()
            thread.join(JOIN_SECONDS)


def start(entry):
    trim = _malloc_trim()
    counters = entry["counters"]
    interval = (entry.get("options") or {}).get("trim_every", INTERVAL)
    counters["interval_s"] = interval
    control = {"stopped": False}  # type: dict
    entry["control"] = control

    def trim_once():
        began = time.perf_counter()
        trim(0)
        counters["trims"] = counters.get("trims", 0) + 1
        took = (time.perf_counter() - began) * 1000.0
        counters["max_trim_ms"] = max(counters.get("max_trim_ms", 0.0), round(took, 2))
        counters["last_trim_ms"] = round(took, 2)

    _stop_strays()
    # The first trim runs in the request (the payload's thread) and is measured right around
    # the call: a busy worker's RSS moves by tens of MB per second, so numbers read by
    # separate requests would drown its effect.
    counters["first_trim_predicted_bytes"] = arena.arena_stats()["trimmable_bytes"]
    counters["first_trim_rss_before"] = arena.rss_bytes()
    trim_once()
    counters["first_trim_rss_after"] = arena.rss_bytes()

    def start_thread():
        # A fresh event each time: the one of a parent that forked may have been held.
        wake = threading.Event()

        def run():
            while not wake.wait(interval):
                trim_once()

        thread = threading.Thread(target=run, name=THREAD_NAME, daemon=True)
        vars(thread)["leakhound_wake"] = wake  # found by _stop_strays()
        control["wake"] = wake
        control["thread"] = thread
        control["thread_pid"] = os.getpid()
        thread.start()

    control["where"] = "trim thread (off the event loop)"
    control["start_timer"] = start_thread
    counters["cadence"] = control["where"]
    start_thread()


def after_fork_in_child(entry):
    """In a child forked from a process with the fix applied: the fix is the child's too (as
    the swapped functions are), so its timer thread, which a fork does not copy, runs again."""
    control = entry.get("control") or {}
    start_timer = control.get("start_timer")
    if start_timer is not None and not control.get("stopped") and control.get("thread_pid") != os.getpid():
        start_timer()


def stop(entry):
    control = entry.get("control") or {}
    control["stopped"] = True  # what an entry armed on the worker's loop checks at each tick
    wake = control.get("wake")
    if wake is not None:
        wake.set()
    thread = control.get("thread")
    if thread is not None and thread is not threading.current_thread():
        thread.join(JOIN_SECONDS)
