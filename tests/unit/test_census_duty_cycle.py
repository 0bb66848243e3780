"""The pause budget's duty cycle (pacing.Clock): the census yields the GIL once it has
run half the budget since it last did, and says how long it ran at most between two yields.

Structural, not timed: counts of yields and the bound the clock reports, never wall-clock limits.
"""

from __future__ import annotations

import gc
import threading
import time

from leakhound.payload import census
from leakhound.payload.pacing import Clock


def _spin(clock: Clock, cpu_seconds: float) -> None:
    """Run ``cpu_seconds`` of this thread's CPU, checking the clock as the walk does."""
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        sum(range(200))
        clock.check()


def test_the_clock_yields_once_it_has_held_the_budget() -> None:
    clock = Clock(time.monotonic() + 60, max_hold=0.005)
    _spin(clock, 0.1)
    # 100 ms of running with a 5 ms stretch: a yield per stretch, and no stretch much longer
    # than the stretch plus one check interval (CPU time, so a loaded machine does not stretch it).
    assert clock.yields >= 10
    assert clock.max_held < 0.005 + 0.005


def test_without_a_budget_the_clock_never_yields() -> None:
    clock = Clock(time.monotonic() + 60)
    _spin(clock, 0.05)
    assert clock.yields == 0
    assert clock.max_held >= 0.04  # one stretch, reported whole


def test_a_yield_lets_a_waiting_thread_run() -> None:
    # A thread that wants the GIL runs between two stretches: the yield is a sleep, which
    # releases the GIL, not a wait for the switch interval.
    clock = Clock(time.monotonic() + 60, max_hold=0.002)
    ran = []
    stop = threading.Event()

    def other() -> None:
        while not stop.is_set():
            ran.append(clock.yields)
            time.sleep(0)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        _spin(clock, 0.05)
    finally:
        stop.set()
        thread.join()
    assert clock.yields >= 5
    assert len(set(ran)) >= 2  # the other thread ran in more than one of the census's gaps


def test_the_census_reports_its_longest_stretch_and_yields() -> None:
    walk = census.Census(max_pause_ms=2.0)
    walk.run()
    heap = walk.result()
    assert heap["yields"] >= 1  # this process's heap takes longer than 1 ms of walking
    assert heap["max_hold_ms"] > 0
    assert {"module globals", "class attributes", "walls"} <= set(heap["phases"])
    unbudgeted = census.Census()
    unbudgeted.run()
    assert unbudgeted.result()["yields"] == 0


def test_a_census_after_a_small_one_skips_the_sizing_walk(monkeypatch) -> None:
    # With a pause budget, the census first walked the roots without gc.get_objects() only to
    # learn the heap's size, then walked them all again: twice the cost on every inspection.
    # Once a census in this process has counted the tracked objects, the next one needs no
    # sizing walk while twice that count fits the budget; over it, it sizes the heap again.
    # (The sizing walk is one walk from the list of the roots, no owners: _sizing_walk.)
    walks = []
    original, original_sizing = census.Census._walk_roots, census.Census._sizing_walk

    def counting(self, objects):
        walks.append("named" if objects is not None else "named, no list")
        return original(self, objects)

    def sizing(self):
        walks.append("sizing")
        return original_sizing(self)

    monkeypatch.setattr(census.Census, "_walk_roots", counting)
    monkeypatch.setattr(census.Census, "_sizing_walk", sizing)
    monkeypatch.setitem(census._measured, "tracked", None)
    census.Census(max_pause_ms=1e6).run()
    assert walks == ["sizing", "named"]  # sizing walk, then the census
    del walks[:]
    again = census.Census(max_pause_ms=1e6)
    again.run()
    assert walks == ["named"] and again.unreached["sized_by"] == "the previous census"
    assert again.unreached["examined"]
    del walks[:]
    monkeypatch.setitem(census._measured, "tracked", 10**12)  # a heap grown past the budget
    census.Census(max_pause_ms=1e6).run()
    assert walks == ["sizing", "named"]
    del walks[:]
    # over the budget: the named walk is the census, without the list
    monkeypatch.setitem(census._measured, "tracked", None)
    small = census.Census(max_pause_ms=0.001)
    small.run()
    assert walks == ["sizing", "named, no list"]
    assert not small.unreached["examined"] and small.tracked > 0


def test_a_tiny_budget_yields_between_stretches_of_work_not_at_every_check() -> None:
    # The next look at the clock was due from before the yield's 1 ms sleep: with a tiny
    # budget every check after it slept again, ~1 ms per owner (a few-hundred-ms census took
    # tens of seconds; 18,651 yields for 1,734 owners here). Now at most one yield per
    # CHECK_EVERY of work: far fewer yields than owners.
    classes = [type(f"Tiny{i}", (), {}) for i in range(3000)]
    walk = census.Census(max_pause_ms=0.001, timeout=120)
    walk.run()
    assert 0 < walk.clock.yields < len(walk.walk.owners.keys), (walk.clock.yields, len(walk.walk.owners.keys))
    del classes, walk
    gc.collect()  # classes are reference cycles: out of the subclass tree of the tests after this


def test_a_stretch_ends_on_the_wall_clock_too(monkeypatch) -> None:
    # On a loaded machine the walk's thread is descheduled holding the GIL: 25 ms of its CPU
    # lasted 60-130 ms, and the target's loop waited that long. A stretch also ends once the
    # budget has passed on the wall clock.
    from types import SimpleNamespace

    from leakhound.payload import pacing

    now = [1000.0]
    fake_time = SimpleNamespace(perf_counter=lambda: now[0], thread_time=time.thread_time,
                                monotonic=time.monotonic, sleep=lambda s: None)
    monkeypatch.setattr(pacing, "time", fake_time)
    cpu = [5.0]
    monkeypatch.setattr(pacing, "own_cpu", lambda: cpu[0])
    clock = Clock(time.monotonic() + 60, max_hold=0.025)
    now[0] += 0.010
    cpu[0] += 0.004
    clock.hold()
    assert clock.yields == 0
    now[0] += 0.020  # descheduled: 30 ms of wall clock, 4 ms of CPU
    clock.hold()
    assert clock.yields == 1
    assert clock.max_held < 0.025 and clock.max_held_wall > 0.029
    cpu[0] += 0.025  # and still by CPU time alone
    clock.hold()
    assert clock.yields == 2
