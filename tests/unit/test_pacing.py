"""The duty cycle's yield and the target's own collections (payload/pacing.py): the payload never
switches the collector; a collection of the target's that runs in the payload's thread is
timed apart and kept out of the walks' stretches; a child forked mid-request starts with none
of the request's state. Counted, not timed."""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from leakhound.payload import census, graph, pacing, probes, runner


@pytest.fixture
def fresh_pacing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(pacing, "_state", {"thread": None, "started_wall": None, "started_cpu": None, "cpu": 0.0,
                                         "wall": 0.0, "collections": [0, 0, 0], "max_wall": 0.0})
    thresholds = gc.get_threshold()
    yield
    pacing.unwatch_collections()
    gc.enable()
    gc.set_threshold(*thresholds)


class _Poller:
    """A thread of the target reading ``gc.isenabled()`` as fast as it can."""

    def __init__(self) -> None:
        self.reads = 0
        self.off = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self.done.is_set():
            self.reads += 1
            if not gc.isenabled():
                self.off += 1

    def __enter__(self) -> _Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


def test_a_request_near_a_costly_collection_never_switches_the_collector(fresh_pacing: None) -> None:
    # The real worker's threshold: every stretch of the payload's once ran with it off, and
    # the interpreter's thread switch showed that to the target's threads.
    gc.collect()
    gc.set_threshold(150_000, 10, 10)
    # The poller hands the GIL back after 0.5 ms, not the default 5 ms: it still looks at the
    # collector between every two of the payload's stretches (and more often within them),
    # and no yield of the payload's waits out the poller's 5 ms switch interval.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        with _Poller() as poller:
            out = runner.handle({"op": "snapshot", "max_pause_ms": 0.5}, lambda phase, done: None)
    finally:
        sys.setswitchinterval(interval)
    assert out.get("ok"), out
    assert poller.reads > 0 and poller.off == 0
    assert gc.isenabled() and gc.get_threshold() == (150_000, 10, 10)
    assert not any(cb is pacing._on_collection for cb in gc.callbacks)


def test_the_collector_off_stays_off(fresh_pacing: None) -> None:
    gc.disable()  # the target's own choice
    try:
        out = runner.handle({"op": "snapshot", "max_pause_ms": 0.5}, lambda phase, done: None)
        assert out.get("ok"), out
        pacing.yield_gil()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_collection_in_the_payloads_thread_is_timed_apart_from_its_stretch(fresh_pacing: None) -> None:
    keep = [[i] for i in range(300_000)]  # a full collection with something to examine
    pacing.watch_collections()
    try:
        cpu_before, own_before = time.thread_time(), pacing.own_cpu()
        gc.collect()  # stands for the one the payload's allocation sets off
        cpu_spent, own_spent = time.thread_time() - cpu_before, pacing.own_cpu() - own_before
    finally:
        pacing.unwatch_collections()
    stats = pacing.stats()
    assert stats["collections"] == [0, 0, 1]
    assert stats["max_ms"] > 0 and stats["seconds"] > 0
    # the collection's CPU is out of the payload's own clock: what is left is the callback's
    assert cpu_spent > 0 and own_spent < cpu_spent / 2, (cpu_spent, own_spent)
    del keep


def test_collections_in_the_targets_threads_are_not_counted(fresh_pacing: None) -> None:
    pacing.watch_collections()
    try:
        thread = threading.Thread(target=gc.collect)
        thread.start()
        thread.join()
    finally:
        pacing.unwatch_collections()
    assert pacing.stats()["collections"] == [0, 0, 0]


def test_the_payloads_callback_leaves_the_targets_own_where_they_are(fresh_pacing: None) -> None:
    def theirs(phase: str, info: dict[str, Any]) -> None:
        pass

    gc.callbacks.append(theirs)
    try:
        pacing.watch_collections()
        pacing.watch_collections()  # once, however often
        assert sum(cb is pacing._on_collection for cb in gc.callbacks) == 1
        pacing.unwatch_collections()
        assert theirs in gc.callbacks and not any(cb is pacing._on_collection for cb in gc.callbacks)
    finally:
        gc.callbacks.remove(theirs)


def test_a_request_reports_the_collections_that_ran_in_its_thread(fresh_pacing: None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # A collection set off in the request's thread (here: by the census's first phase).
    original = census.Census.run

    def run_with_a_collection(self: census.Census) -> None:
        gc.collect(0)
        original(self)

    monkeypatch.setattr(census.Census, "run", run_with_a_collection)
    out = runner.handle({"op": "snapshot", "max_pause_ms": 50}, lambda phase, done: None)
    assert out.get("ok"), out
    ran = out["target_gc_in_payload_thread"]
    assert ran["collections"][0] >= 1 and ran["max_ms"] >= 0


def test_a_child_forked_mid_request_starts_with_no_request_running(fresh_pacing: None) -> None:
    """The request lock and the gc.callbacks entry of a request running in another thread as
    the target forks: free and gone in the child (os.register_at_fork, runner.py)."""
    in_request, forked = threading.Event(), threading.Event()

    def request() -> None:
        with runner._busy:
            pacing.watch_collections()
            in_request.set()
            forked.wait(30)
            pacing.unwatch_collections()

    thread = threading.Thread(target=request)
    thread.start()
    in_request.wait(30)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once
        try:
            free = runner._busy.acquire(blocking=False)
            if free:
                runner._busy.release()
            doc = {"lock_free": free, "callback": any(cb is pacing._on_collection for cb in gc.callbacks),
                   "gc": gc.isenabled(),
                   "answered": runner.handle({"op": "ping"}).get("ok")}
            os.write(write, json.dumps(doc).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        child = json.loads(os.read(read, 4096) or b"{}")
    finally:
        os.close(read)
        os.waitpid(pid, 0)
        forked.set()
        thread.join()
    assert child == {"lock_free": True, "callback": False, "gc": True, "answered": True}


def test_every_walk_yields_through_the_shared_yield(monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps = [0]

    def sleep(seconds: float) -> None:
        sleeps[0] += 1
        time.sleep(seconds)

    monkeypatch.setattr(pacing, "time", SimpleNamespace(sleep=sleep, thread_time=time.thread_time,
                                                      perf_counter=time.perf_counter, monotonic=time.monotonic))
    keep = [[i] for i in range(200_000)]
    census.Census(max_pause_ms=0.2).run()
    after_census = sleeps[0]
    graph.build(timeout=60, progress=None, is_stdlib=lambda name: False, exclude=(), max_nodes=5_000_000,
                max_pause_ms=0.2, cancelled=None)
    after_graph = sleeps[0]
    clock = probes._Clock(max_hold=0.0)
    clock.tick()
    del keep
    assert after_census > 0 and after_graph > after_census and sleeps[0] == after_graph + 1
