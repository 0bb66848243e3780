"""The duty cycle's yield leaves the target's costly collection to the target's own threads
(payload/duty.py): when the young generation's count is within a margin of its threshold, the
payload sleeps until a thread of the target has allocated past it, so the collection runs there
and not as a step of the inspection. Counted by which thread ran the collection, not timed."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from leakhound.payload import census, duty, graph, probes


@pytest.fixture
def fresh_duty(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(duty, "_state", {"gave_up_at": -1e9, "waits": 0, "waited": 0.0, "ran_elsewhere": 0})
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)


def _near_threshold(threshold: int, below: int) -> list[list[int]]:
    """Tracked objects kept until the young count is ``below`` under ``threshold``."""
    gc.collect()  # the test process's own: the count starts from 0
    gc.set_threshold(threshold, 10, 10)
    return [[] for _ in range(threshold - below - gc.get_count()[0])]


def test_a_costly_collection_due_runs_in_the_thread_that_allocates(fresh_duty: None) -> None:
    ran_in: list[int] = []

    def record(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            ran_in.append(threading.get_ident())

    go, done = threading.Event(), threading.Event()
    allocator_ident: list[int] = []

    def allocate() -> None:
        allocator_ident.append(threading.get_ident())
        go.wait()
        junk: list[list[int]] = []
        while not done.is_set():
            junk.extend([] for _ in range(100))  # a busy worker's loop, allocating
            time.sleep(0)
        junk.clear()

    worker = threading.Thread(target=allocate)
    worker.start()
    kept = _near_threshold(60_000, below=3000)  # 60k > CHEAP_OBJECTS: a costly collection
    gc.callbacks.append(record)
    try:
        go.set()
        waited = duty.leave_collection_to_target(max_wait=30)
    finally:
        gc.callbacks.remove(record)
        done.set()
        worker.join()
        kept.clear()
    assert ran_in, "no collection ran while the payload waited"
    assert ran_in[0] == allocator_ident[0] != threading.get_ident()
    assert waited > 0
    assert duty.stats()["ran_elsewhere"] == 1


def test_an_idle_target_is_waited_for_once_then_left(fresh_duty: None) -> None:
    kept = _near_threshold(60_000, below=3000)
    try:
        sleeps = [0]

        def sleep(seconds: float) -> None:
            sleeps[0] += 1
            time.sleep(seconds)

        duty.leave_collection_to_target(max_wait=0.02, sleep=sleep)
        first = sleeps[0]
        assert duty.leave_collection_to_target(max_wait=0.02, sleep=sleep) == 0.0
    finally:
        kept.clear()
    assert first > 0 and sleeps[0] == first  # nobody allocated: not waited for again
    assert duty.stats()["waits"] == 1 and duty.stats()["ran_elsewhere"] == 0


def test_far_from_the_threshold_or_collector_off_no_wait(fresh_duty: None) -> None:
    gc.collect()
    gc.set_threshold(60_000, 10, 10)
    assert duty.leave_collection_to_target(sleep=pytest.fail) == 0.0
    kept = _near_threshold(60_000, below=3000)
    gc.disable()
    try:
        assert duty.leave_collection_to_target(sleep=pytest.fail) == 0.0
    finally:
        gc.enable()
        kept.clear()


@pytest.mark.parametrize(("counts", "thresholds", "costly"), [
    ((5, 0, 0), (700, 10, 10), False),      # the default young collection: 700 objects
    ((5, 10, 3), (700, 10, 10), False),     # with the middle generation: ~7,700
    ((5, 10, 10), (700, 10, 10), True),     # and the old one: the whole heap
    ((5, 0, 0), (150_000, 10, 10), True),   # the real worker's raised threshold
    ((5, 30, 0), (2000, 30, 10), True),     # a middle generation of ~62,000 due
    ((5, 0, 0), (0, 10, 10), False),        # threshold 0: collections off
])
def test_which_collections_are_costly(counts: tuple[int, int, int], thresholds: tuple[int, int, int],
                                      costly: bool) -> None:
    assert duty.collection_due_is_costly(counts, thresholds) is costly


def test_every_walk_yields_through_the_shared_yield(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0]
    monkeypatch.setattr(duty, "leave_collection_to_target", lambda: calls.__setitem__(0, calls[0] + 1))
    keep = [[i] for i in range(200_000)]
    census.Census(max_pause_ms=0.2).run()
    after_census = calls[0]
    graph.build(timeout=60, progress=None, is_stdlib=lambda name: False, exclude=(), max_nodes=5_000_000,
                max_pause_ms=0.2, cancelled=None)
    after_graph = calls[0]
    clock = probes._Clock(max_hold=0.0)
    clock.tick()
    del keep
    assert after_census > 0 and after_graph > after_census and calls[0] == after_graph + 1
