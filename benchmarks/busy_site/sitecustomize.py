"""Heartbeats for benchmarks/busy_real_worker.py, in every Python process it starts (on
PYTHONPATH) when ``LEAKHOUND_BENCH_HEARTBEAT_DIR`` is set; nothing otherwise.

* a thread that sleeps 5 ms at a time: how late it wakes is how long it waited for the GIL
  (or for a core), the wait any thread of the target, its main thread among them, has while
  another thread holds the GIL;
* the event loop's own callback every 5 ms, on the main thread (``run_forever`` of every
  loop started after this): how late it runs, which also counts the loop's own long
  callbacks (the fixture's ground-truth report walks its rollouts on the loop).

Each writes ``<dir>/hb-<pid>.txt``: ``<time.monotonic()> <lag ms> thread|loop`` for every
beat later than 10 ms, and a line ``<time> beats <n> <kind>`` every second, so a window
(one inspection) can be told from the time around it.

SIGUSR2 runs guppy3's ``hpy().heap()`` on the main thread (a signal handler runs there)
when ``LEAKHOUND_BENCH_GUPPY_PATH`` names a site-packages holding guppy3, and writes
``<dir>/guppy-<pid>.txt``: its wall seconds, objects and bytes.
"""

import os
import sys
import threading
import time

_DIR = os.environ.get("LEAKHOUND_BENCH_HEARTBEAT_DIR")
_PERIOD = 0.005
_REPORT_MS = 10.0


def _writer(path):
    fh = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's lifetime
    lock = threading.Lock()

    def write(line):
        with lock:
            fh.write(line + "\n")

    return write


def _thread_beat(write):
    beats = 0
    last_report = time.monotonic()
    while True:
        started = time.perf_counter()
        time.sleep(_PERIOD)
        lag = (time.perf_counter() - started - _PERIOD) * 1000.0
        beats += 1
        now = time.monotonic()
        if lag >= _REPORT_MS:
            write(f"{now:.4f} {lag:.2f} thread")
        if now - last_report >= 1.0:
            write(f"{now:.4f} beats {beats} thread")
            last_report = now


def _patch_loop(write):
    import asyncio.base_events  # noqa: PLC0415

    original = asyncio.base_events.BaseEventLoop.run_forever
    state = {"beats": 0, "last": time.monotonic()}

    def run_forever(self):
        def beat(due):
            now = time.perf_counter()
            lag = (now - due) * 1000.0
            state["beats"] += 1
            mono = time.monotonic()
            if lag >= _REPORT_MS:
                write(f"{mono:.4f} {lag:.2f} loop")
            if mono - state["last"] >= 1.0:
                write(f"{mono:.4f} beats {state['beats']} loop")
                state["last"] = mono
            self.call_later(_PERIOD, beat, time.perf_counter() + _PERIOD)

        self.call_soon(beat, time.perf_counter())
        return original(self)

    asyncio.base_events.BaseEventLoop.run_forever = run_forever


def _guppy(write_dir):
    import signal  # noqa: PLC0415

    path = os.environ.get("LEAKHOUND_BENCH_GUPPY_PATH")
    if not path:
        return

    def run(_signum, _frame):
        if path not in sys.path:
            sys.path.append(path)
        out = os.path.join(write_dir, f"guppy-{os.getpid()}.txt")
        try:
            from guppy import hpy  # noqa: PLC0415

            started = time.perf_counter()
            heap = hpy().heap()
            took = time.perf_counter() - started
            line = f"{time.monotonic():.4f} {took:.3f} {heap.count} {heap.size}"
            del heap
        except Exception as exc:  # noqa: BLE001 - said in the file
            line = f"error {type(exc).__name__}: {exc}"
        with open(out, "a") as fh:
            fh.write(line + "\n")

    signal.signal(signal.SIGUSR2, run)


if _DIR:
    _write = _writer(os.path.join(_DIR, f"hb-{os.getpid()}.txt"))
    threading.Thread(target=_thread_beat, args=(_write,), name="bench-heartbeat", daemon=True).start()
    _patch_loop(_write)
    _guppy(_DIR)
