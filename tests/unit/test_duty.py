"""The duty cycle's yield keeps the target's costly collection out of the payload's stretches
(payload/duty.py): when the young generation's count is within a margin of its threshold, the
payload runs its next stretch with the collector off and gives it back before it lets go of
the GIL, so the collection runs in a thread of the target. Counted by which thread ran the
collection, not timed."""

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
    monkeypatch.setattr(duty, "_state", {"held": False, "holds": 0, "ran_elsewhere": 0, "counts": None})
    thresholds = gc.get_threshold()
    yield
    duty.release_collection()
    gc.enable()
    gc.set_threshold(*thresholds)


def _near_threshold(threshold: int, below: int) -> list[list[int]]:
    """Tracked objects kept until the young count is ``below`` under ``threshold``."""
    gc.collect()  # the test process's own: the count starts from 0
    gc.set_threshold(threshold, 10, 10)
    return [[] for _ in range(threshold - below - gc.get_count()[0])]


def test_a_costly_collection_due_runs_in_a_thread_of_the_target(fresh_duty: None) -> None:
    """The payload's stretch allocates past the threshold: no collection runs in it; the
    target's allocating thread runs it once the payload yields."""
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
            del junk[:]
            time.sleep(0)

    worker = threading.Thread(target=allocate)
    worker.start()
    kept = _near_threshold(60_000, below=3000)  # 60k > CHEAP_OBJECTS: a costly collection
    gc.callbacks.append(record)
    try:
        with _gil_held_by_us():
            go.set()
            assert duty.hold_collection()
            stretch = [[] for _ in range(10_000)]  # the payload's stretch: past the threshold
            assert not ran_in and not gc.isenabled()
        deadline = time.monotonic() + 30
        while not ran_in and time.monotonic() < deadline:
            duty.yield_gil()
    finally:
        gc.callbacks.remove(record)
        done.set()
        worker.join()
        kept.clear()
        del stretch
    assert ran_in, "no collection ran in the target's threads"
    assert ran_in[0] == allocator_ident[0] != threading.get_ident()
    assert duty.stats()["holds"] >= 1 and duty.stats()["ran_elsewhere"] >= 1


class _gil_held_by_us:  # noqa: N801 - a context manager read as a phrase
    """No switch to another thread for the block (a stretch of the payload holds the GIL)."""

    def __enter__(self) -> None:
        import sys

        self.interval = sys.getswitchinterval()
        sys.setswitchinterval(100.0)

    def __exit__(self, *exc: object) -> None:
        import sys

        sys.setswitchinterval(self.interval)


def test_the_collector_is_given_back_before_any_wait_and_at_the_end(fresh_duty: None) -> None:
    kept = _near_threshold(60_000, below=3000)
    try:
        assert duty.hold_collection() and not gc.isenabled()
        duty.sleep(0.001)  # a wait of the payload's own: the target's threads run meanwhile
        assert gc.isenabled()
        assert duty.hold_collection() and not gc.isenabled()
        duty.give_back()  # the request's end (runner.handle's finally)
        assert gc.isenabled()
    finally:
        kept.clear()


def test_a_cheap_collection_or_the_collector_off_nothing_held(fresh_duty: None) -> None:
    gc.collect()
    gc.set_threshold(700, 10, 10)  # the default: a young collection of ~700 objects is due
    assert not duty.hold_collection() and gc.isenabled()
    assert not duty.hold_collection(margin=0)  # a costly one, but not within the margin
    kept = _near_threshold(60_000, below=3000)
    assert not duty.hold_collection(margin=1000)
    gc.disable()  # the target's own choice
    try:
        assert not duty.hold_collection()
        duty.yield_gil()
        assert not gc.isenabled()  # left as the target set it
    finally:
        gc.enable()
        kept.clear()


def test_a_request_ends_with_the_collector_given_back(fresh_duty: None) -> None:
    from leakhound.payload import runner

    kept = _near_threshold(60_000, below=3000)
    try:
        out = runner.handle({"op": "snapshot", "max_pause_ms": 0.2}, lambda phase, done: None)
    finally:
        kept.clear()
    assert out.get("ok"), out
    assert gc.isenabled()


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
    monkeypatch.setattr(duty, "hold_collection", lambda: calls.__setitem__(0, calls[0] + 1))
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
