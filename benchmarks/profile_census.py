"""Where the census spends its time and memory: leakhound.payload.census.Census run
in-process on the bench heap (fixtures/bench_heap.py, built in this process).

Four separate runs on the same heap, each printed as a table:

1. plain: wall time, with a 5 ms heartbeat thread standing in for the event loop (worst lag)
   and gc callbacks recording every collection the census's own allocations trigger
2. phases: wall time of the census's phases (roots, named roots, walls, thread frames,
   unreached split), by wrapping its methods
3. memory: tracemalloc peak during the run, and what the census's bookkeeping holds at the end
4. cProfile: the top functions by own time

Usage:

    .venv/bin/python benchmarks/profile_census.py [--quick] [--objects N]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import sys
import threading
import time
import tracemalloc
from typing import Any

import _common as c

sys.path.insert(0, str(c.FIXTURES))
sys.path.insert(0, str(c.ROOT))


def new_census() -> Any:
    from leakhound.payload import census

    return census.Census(timeout=3600, is_stdlib=_is_stdlib)


def _is_stdlib(name: str) -> bool:
    # Same rule as leakhound.payload.runner._is_stdlib, without importing the runner (and
    # with it every payload operation) into the profile.
    top = name.split(".", 1)[0]
    names = sys.stdlib_module_names
    return top in names or top.startswith("_") and top[1:] in names


class Heartbeat:
    """A thread that sleeps 5 ms at a time and records its worst lateness (like the loop)."""

    def __init__(self) -> None:
        self.max_lag_ms = 0.0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._halt.is_set():
            time.sleep(0.005)
            now = time.perf_counter()
            self.max_lag_ms = max(self.max_lag_ms, (now - last - 0.005) * 1000)
            last = now

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        time.sleep(0.05)
        self.max_lag_ms = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join()


class GcLog:
    def __init__(self) -> None:
        self.events: list[tuple[int, float, int]] = []
        self._start: dict[int, float] = {}

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start[info["generation"]] = time.perf_counter()
        else:
            began = self._start.pop(info["generation"], time.perf_counter())
            self.events.append((info["generation"], time.perf_counter() - began,
                                info.get("collected", 0)))

    def __enter__(self) -> GcLog:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def run_in_thread(census: Any) -> None:
    worker = threading.Thread(target=census.run, name="census")
    worker.start()
    worker.join()


def plain(results: dict[str, Any]) -> None:
    census = new_census()
    with Heartbeat() as beat, GcLog() as log:
        started = time.perf_counter()
        run_in_thread(census)
        wall = time.perf_counter() - started
    result = census.result()
    results["result"] = result
    rows = [
        ["census wall (own thread)", c.secs(wall)],
        ["census.seconds", c.secs(census.seconds)],
        ["objects / gc-tracked", f"{result['objects']:,} / {result['gc_tracked']:,}"],
        ["heap bytes (getsizeof)", c.mib(result["bytes"])],
        ["per object", f"{wall / max(1, result['objects']) * 1e9:,.0f} ns"],
        ["max single step (census clock)", f"{result['max_step_ms']:,.1f} ms"],
        ["heartbeat thread worst lag", f"{beat.max_lag_ms:,.1f} ms"],
    ]
    for gen in (0, 1, 2):
        evs = [e for e in log.events if e[0] == gen]
        if evs:
            rows.append([f"gc gen{gen} collections during census",
                         f"{len(evs)} (total {sum(e[1] for e in evs) * 1000:,.1f} ms, "
                         f"longest {max(e[1] for e in evs) * 1000:,.1f} ms)"])
    print(c.table(["plain run", ""], rows, title="1. Plain run (census in its own thread)"))
    print()


def phases() -> None:
    from leakhound.payload import census as mod

    timings: dict[str, float] = {}
    calls: dict[str, int] = {}
    census = new_census()
    # Time the top-level phases through the methods run() calls; nested calls are not
    # double counted (only the outermost call of each method is timed).
    depth = {"n": 0}

    def wrap(name: str, fn: Any) -> Any:
        def inner(*a: Any, **k: Any) -> Any:
            if depth["n"]:
                return fn(*a, **k)
            depth["n"] += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                depth["n"] -= 1
                timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
                calls[name] = calls.get(name, 0) + 1
        return inner

    census.walk.claim_named = wrap("named roots (claim_named)", census.walk.claim_named)
    census.walk.claim_tree = wrap("walls + frames (claim_tree)", census.walk.claim_tree)
    census._split_unreached = wrap("unreached split", census._split_unreached)
    get_objects = gc.get_objects
    got = {}

    def timed_get_objects(*a: Any) -> Any:
        t0 = time.perf_counter()
        out = get_objects(*a)
        got["s"] = time.perf_counter() - t0
        return out

    mod.gc.get_objects = timed_get_objects  # type: ignore[attr-defined]
    try:
        started = time.perf_counter()
        census.run()
        total = time.perf_counter() - started
    finally:
        mod.gc.get_objects = get_objects  # type: ignore[attr-defined]
    rows = [["gc.get_objects()", c.ms(got.get("s")), "1"]]
    rows += [[k, c.ms(v), f"{calls[k]:,}"] for k, v in timings.items()]
    accounted = sum(timings.values()) + got.get("s", 0.0)
    rows.append(["rest (walls/classes setup, sorting)", c.ms(total - accounted), ""])
    rows.append(["total", c.ms(total), ""])
    print(c.table(["phase", "time", "calls"], rows, title="2. Phases (main thread, no heartbeat)"))
    print()


def memory() -> None:
    census = new_census()
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    census.run()
    after, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    claimed = census.walk.claimed
    rows = [
        ["tracemalloc peak during run() (over start)", c.mib(peak - before)],
        ["held at the end of run() (claimed marks etc.)", c.mib(after - before)],
        ["claimed marks: address bitmap", f"{c.mib(claimed.nbytes())} ({len(claimed.regions):,} regions)"],
        ["gc.get_objects() list (tracked x 8 B)", c.mib(census.tracked * 8)],
        ["owners", f"{len(census.walk.owners.keys):,}"],
    ]
    print(c.table(["memory", ""], rows, title="3. Memory (tracemalloc, separate run)"))
    print()


def profile(top: int) -> None:
    census = new_census()
    prof = cProfile.Profile()
    prof.enable()
    census.run()
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls"))
    print(f"4. cProfile, top {top} by own time (profiler overhead inflates per-call costs)")
    print("\n".join(ln.replace(str(c.ROOT) + "/", "") for ln in lines[start:]))
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small heap (100k objects)")
    parser.add_argument("--objects", type=int, default=None, help="heap size (default 1,000,000)")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    objects = args.objects or (100_000 if args.quick else 1_000_000)
    os.environ["BENCH_OBJECTS"] = str(objects)
    c.header(f"Census profile on a ~{objects:,}-object heap (in-process)",
             ["benchmarks/profile_census.py", *sys.argv[1:]])
    import bench_heap  # noqa: F401 - builds the heap in this process

    results: dict[str, Any] = {}
    # Each run starts from the same heap: the previous census (the phase wrappers make it a
    # cycle) must not linger as garbage the next one would count.
    for run in (lambda: plain(results), phases, memory, lambda: profile(args.top)):
        gc.collect()
        run()
    return 0


if __name__ == "__main__":
    c.main_guard(main)
