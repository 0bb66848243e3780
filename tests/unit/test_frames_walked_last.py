"""The threads' frames are walked after every other root: a running function's temporary (a copy
of a registry) that dies while the graph is walked, its address taken by a new object that a
named root holds, must not lend that root the copy's edges to every entry (the compiled walk
names a node by its address)."""

from __future__ import annotations

import json
import queue
import sys
import threading
import types
from typing import Any

import pytest

from leakhound.analysis import dominators as dom
from leakhound.payload import graph
from leakhound.payload.graph_wire import binary_pieces, json_pieces

ENTRIES = 200
ENTRY_BYTES = 10_000


class Entry:
    def __init__(self, i: int) -> None:
        self.payload = bytes(ENTRY_BYTES) + str(i).encode()


def _report(registry: dict[int, Entry], later: list[Any], ask: threading.Event, answer: queue.Queue[bool],
            ready: threading.Event, done: threading.Event) -> None:
    """The worker's report: a copy of the registry in a running frame, dropped when asked once
    the walk has let go of it, and a new dict at its address put where a named root holds it."""
    copy = dict(registry)
    ready.set()
    spare = []
    while not done.is_set():
        if not ask.wait(0.01):
            continue
        ask.clear()
        if sys.getrefcount(copy) > 2:  # this frame's and the call's: the walk still holds it
            answer.put(False)
            continue
        address = id(copy)
        copy = None
        for _ in range(1000):
            d: dict[str, int] = {}
            if id(d) == address:
                later.append(d)
                break
            spare.append(d)
        answer.put(bool(later))
        break
    spare = []
    done.wait()


class _SwapsTheCopy(graph.CompiledGraph):
    work_per_call = 1  # a check between any two objects walked

    address = 0
    ask: threading.Event
    answer: queue.Queue[bool]
    swapped = False

    def check(self) -> None:
        graph.CompiledGraph.check(self)
        if self.swapped or not self.address or self.store is None:
            return
        if graph._walk_module.graph_find(self.store, self.address) is None:
            return  # not met yet
        self.ask.set()
        self.swapped = self.answer.get(timeout=10)


@pytest.mark.skipif(graph._walk_module is None, reason="the C walk was not built here")
def test_a_frames_dead_temporary_does_not_split_the_registry() -> None:
    held = types.ModuleType("lh_frames_last_registry")
    held.REGISTRY = {i: Entry(i) for i in range(ENTRIES)}  # type: ignore[attr-defined]
    other = types.ModuleType("lh_frames_last_other")
    other.LATER = []  # type: ignore[attr-defined]
    sys.modules[held.__name__] = held
    sys.modules[other.__name__] = other
    ask, ready, done = threading.Event(), threading.Event(), threading.Event()
    answer: queue.Queue[bool] = queue.Queue()
    worker = threading.Thread(target=_report, args=(held.REGISTRY, other.LATER, ask, answer, ready, done),  # type: ignore[attr-defined]
                              name="report", daemon=True)
    worker.start()
    try:
        assert ready.wait(10)
        # the copy's address, read from the worker's frame as the walk would
        frame = sys._current_frames()[worker.ident]  # type: ignore[index]
        while frame.f_code.co_name != "_report":
            frame = frame.f_back
        copy = [v for v in gc_referents_or_locals(frame) if type(v) is dict and len(v) == ENTRIES][0]
        walk = _SwapsTheCopy(timeout=120, progress=None, is_stdlib=None, exclude=(), max_nodes=5_000_000,
                             max_pause_ms=None, cancelled=None)
        walk.address, walk.ask, walk.answer = id(copy), ask, answer
        del copy, frame
        walk.run()
        out = walk.result()
        assert walk.swapped, "the copy's address was not taken again: nothing was tested"
        answer_doc = {"result": {"ok": True, "graph": out}}
        meta = json.loads("".join(json_pieces(answer_doc)))["result"]["graph"]
        raw = b"".join(binary_pieces(answer_doc))
        found = dom.find_owners(dom.soften(dom.decode_graph({**meta, "binary": raw})), top=50)
    finally:
        done.set()
        worker.join(10)
        sys.modules.pop(held.__name__, None)
        sys.modules.pop(other.__name__, None)
    # The process is the test runner's: other tests' leftovers may outweigh the registry, so
    # the registry is looked for by its name, not by rank; split, it retained next to nothing.
    seen = [(o.path, o.retained_bytes) for o in found.owners]
    (owner,) = [o for o in found.owners if o.path.endswith("lh_frames_last_registry.REGISTRY")] or [None]
    assert owner is not None, seen
    assert owner.retained_bytes >= ENTRIES * ENTRY_BYTES, seen


def gc_referents_or_locals(frame: Any) -> list[Any]:
    """A running frame's variables without writing them into the frame (f_locals would)."""
    from leakhound.payload import roots  # noqa: PLC0415

    found = roots.frame_locals(frame, graph._walk_module)
    if found:
        return [v for _name, v in found]
    import gc  # noqa: PLC0415

    return gc.get_referents(frame)
