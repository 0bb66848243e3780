"""Reference trackers for benchmarks/sites_overhead.py ``--real``, in every Python process it
starts (on PYTHONPATH) when ``LEAKHOUND_BENCH_TRACKERS_DIR`` is set; nothing otherwise.

SIGUSR2 starts tracemalloc (1 frame, its default) or stops it; SIGUSR1 starts memray's
Tracker (aggregated allocations, Python frames only, into ``<dir>/memray-<pid>-<n>.bin``) or
stops it, when memray is importable. A signal handler runs on the main thread, between two
bytecodes: the worker's own code is never changed. Each toggle appends a line to
``<dir>/trackers-<pid>.txt`` (``<time> <tracker> on|off|error ...``) so the benchmark knows
it took effect.
"""

import os
import signal
import time

_DIR = os.environ.get("LEAKHOUND_BENCH_TRACKERS_DIR")


def _say(line):
    with open(os.path.join(_DIR, f"trackers-{os.getpid()}.txt"), "a") as fh:
        fh.write(f"{time.time()} {line}\n")


def _install():
    import tracemalloc

    memray_state = {"tracker": None, "n": 0}

    def toggle_tracemalloc(signum, frame):
        if tracemalloc.is_tracing():
            tracemalloc.stop()
            _say("tracemalloc off")
        else:
            tracemalloc.start()
            _say("tracemalloc on")

    def toggle_memray(signum, frame):
        try:
            import memray
        except ImportError as exc:
            _say(f"memray error {exc!r}")
            return
        tracker = memray_state["tracker"]
        if tracker is not None:
            tracker.__exit__(None, None, None)
            memray_state["tracker"] = None
            _say("memray off")
            return
        memray_state["n"] += 1
        path = os.path.join(_DIR, f"memray-{os.getpid()}-{memray_state['n']}.bin")
        tracker = memray.Tracker(path, file_format=memray.FileFormat.AGGREGATED_ALLOCATIONS)
        tracker.__enter__()
        memray_state["tracker"] = tracker
        _say("memray on")

    signal.signal(signal.SIGUSR2, toggle_tracemalloc)
    signal.signal(signal.SIGUSR1, toggle_memray)


if _DIR:
    _install()
