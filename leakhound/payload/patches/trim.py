"""trim: hand freed glibc pages back to the kernel with ``malloc_trim(0)``, now and every 10 s
(or every ``trim_every`` seconds, from the request's options: 1 to 3600).

The cadence runs on the worker's own event loop (``loop.call_later``, like
``EnvWorker.stats_loop``), or on a daemon timer thread when the process has no running
asyncio loop. Never ``gc.collect()``: full collections on fat heaps stalled real workers past
their heartbeat timeout.
"""

import os
import sys
import threading
import time

from .. import arena
from ..arena import _libc
from ..tasks import live_tasks

FIX = "trim"
DESCRIPTION = "malloc_trim(0) once now and every 10 s (--trim-every) on the worker's loop (never gc.collect())"
INTERVAL = 10.0  # seconds; the story's production cadence


def _malloc_trim():
    libc = _libc()  # one CDLL per process (see arena._libc)
    return getattr(libc, "malloc_trim", None) if libc is not None else None


def recognise():
    if not sys.platform.startswith("linux") or _malloc_trim() is None:
        return None, "malloc_trim is not available (not glibc)"
    return [], None


def _worker_loop():
    for task in live_tasks():
        try:
            loop = task.get_loop()
        except Exception:
            continue
        if loop is not None and loop.is_running() and not loop.is_closed():
            return loop
    return None


def start(entry):
    trim = _malloc_trim()
    counters = entry["counters"]
    interval = (entry.get("options") or {}).get("trim_every", INTERVAL)
    counters["interval_s"] = interval
    control = {"stopped": False, "handle": None}  # type: dict
    entry["control"] = control

    def trim_once():
        began = time.perf_counter()
        trim(0)
        counters["trims"] = counters.get("trims", 0) + 1
        took = (time.perf_counter() - began) * 1000.0
        counters["max_trim_ms"] = max(counters.get("max_trim_ms", 0.0), round(took, 2))

    # The first trim is measured right around the call: a busy worker's RSS moves by tens
    # of MB per second, so numbers read by separate requests would drown its effect.
    counters["first_trim_predicted_bytes"] = arena.arena_stats()["trimmable_bytes"]
    counters["first_trim_rss_before"] = arena.rss_bytes()
    trim_once()
    counters["first_trim_rss_after"] = arena.rss_bytes()
    loop = _worker_loop()
    if loop is not None:
        control["where"] = "event loop"

        def tick():
            if control["stopped"]:
                return
            trim_once()
            control["handle"] = loop.call_later(interval, tick)

        def arm():
            if not control["stopped"]:
                control["handle"] = loop.call_later(interval, tick)

        loop.call_soon_threadsafe(arm)
        control["loop"] = loop
    else:
        control["where"] = "timer thread"

        def start_timer():
            # A fresh event each time: the one of a parent that forked may have been held.
            wake = threading.Event()
            control["wake"] = wake

            def run():
                while not wake.wait(interval):
                    trim_once()

            thread = threading.Thread(target=run, name="leakhound-trim", daemon=True)
            control["thread"] = thread
            control["thread_pid"] = os.getpid()
            thread.start()

        control["start_timer"] = start_timer
        start_timer()
    counters["cadence"] = control["where"]


def after_fork_in_child(entry):
    """In a child forked from a process with the fix applied: the fix is the child's too (as
    the swapped functions are), so its timer thread, which a fork does not copy, runs again."""
    control = entry.get("control") or {}
    start_timer = control.get("start_timer")
    if start_timer is not None and not control.get("stopped") and control.get("thread_pid") != os.getpid():
        start_timer()


def stop(entry):
    control = entry.get("control") or {}
    control["stopped"] = True
    loop = control.get("loop")
    if loop is not None:
        def cancel():
            handle = control.get("handle")
            if handle is not None:
                handle.cancel()

        try:
            loop.call_soon_threadsafe(cancel)
        except RuntimeError:
            pass  # loop closed
    wake = control.get("wake")
    if wake is not None:
        wake.set()
