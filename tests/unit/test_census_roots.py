"""Which named root owns what, for roots whose order matters (in-process census)."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

import pytest

from leakhound.payload import census


class _Holder:
    def __init__(self) -> None:
        self.rows = [bytes(100) + str(i).encode() for i in range(2000)]


async def _stepping_task(result: dict[str, Any]) -> None:
    holder = _Holder()

    def take() -> None:
        walk = census.Census(timeout=60)
        walk.run()
        result["owners"] = walk.result(top_owners=10000)["owners"]

    # The census runs while this task is mid-step: asyncio's _current_tasks names it.
    thread = threading.Thread(target=take)
    thread.start()
    thread.join()
    result["holder"] = holder


def test_a_task_caught_mid_step_belongs_to_its_task_root_not_to_current_tasks() -> None:
    result: dict[str, Any] = {}
    asyncio.run(_stepping_task(result))
    paths = [o["path"] for o in result["owners"]]
    assert not any(p.startswith(("_asyncio._current_tasks", "asyncio.tasks._current_tasks")) for p in paths)
    rows = [o for o in result["owners"] if o["path"].endswith("<_Holder>.rows")]
    assert rows and rows[0]["path"].startswith("task:"), paths[:20]
    assert rows[0]["retained_objects"] == 2001


async def _sleeper(holder: _Holder, started: asyncio.Event) -> None:
    started.set()
    await asyncio.sleep(3600)
    holder.rows.clear()


LOOP_REFERENCE: list[Any] = []


async def _loop_in_a_global(result: dict[str, Any]) -> None:
    # A module global holds the loop: its timers reach the sleeping task through a future.
    LOOP_REFERENCE.append(asyncio.get_running_loop())
    started = asyncio.Event()
    task = asyncio.create_task(_sleeper(_Holder(), started), name="sleeper")
    await started.wait()

    def take() -> None:
        walk = census.Census(timeout=60)
        walk.run()
        result["owners"] = walk.result(top_owners=10000)["owners"]

    await asyncio.to_thread(take)
    task.cancel()
    LOOP_REFERENCE.clear()


def test_a_sleeping_task_reached_from_a_global_loop_belongs_to_its_task_root() -> None:
    result: dict[str, Any] = {}
    asyncio.run(_loop_in_a_global(result))
    rows = [o for o in result["owners"] if o["path"].endswith("<_Holder>.rows")]
    assert rows and rows[0]["path"].startswith("task:sleeper/_sleeper"), [o["path"] for o in result["owners"][:20]]
    assert rows[0]["retained_objects"] == 2001


def test_the_pause_budget_learns_this_machines_rate_from_the_last_full_census(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(census, "_RATE_MIN_OBJECTS", 1000)  # this test process's heap is small
    monkeypatch.setitem(census._measured, "ns_per_object", None)
    first = census.Census(timeout=60, max_pause_ms=1e6)
    first.run()
    assert first.unreached["examined"] and first.unreached["rate"] == "default"
    assert first.unreached["ns_per_object"] == census._GET_OBJECTS_NS
    rate = census._measured["ns_per_object"]
    assert rate is not None and 30.0 <= rate <= 500.0  # measured on this process's own call
    second = census.Census(timeout=60, max_pause_ms=1e6)
    second.run()
    assert second.unreached["rate"] == "measured"
    assert second.unreached["ns_per_object"] == round(rate, 1)


def _hook_keeping_a_list() -> tuple[Any, int]:
    kept = [bytes(300_000)]

    def hook(kind: Any, value: Any, tb: Any, kept: list[bytes] = kept) -> None:
        return None

    return hook, id(kept)


def test_the_request_s_own_thread_is_left_out_of_the_walks() -> None:
    """A thread keeps the ``sys.excepthook`` of the moment it was made (its
    ``_invoke_excepthook`` closure): leakhound's thread, made at each inspection, held a chain
    of hooks each wrapping the one it replaced, and named it
    ``threading._active[]._invoke_excepthook.__closure__[]``. The request's own thread is left
    out of the walks (runner._own_thread)."""
    from leakhound.analysis.dominators import decode_graph
    from leakhound.payload import graph, runner
    from leakhound.payload.graph_wire import binary_pieces, json_pieces

    found: dict[str, bool] = {}
    done = threading.Event()
    hook, kept = _hook_keeping_a_list()

    def walk() -> None:
        try:
            for name, exclude in (("with", ()), ("without", runner._own_thread())):
                out = graph.build(timeout=120, progress=None, is_stdlib=lambda name: False, exclude=exclude,
                                  max_nodes=5_000_000, max_pause_ms=None, cancelled=None)
                text, raw = "".join(json_pieces({"graph": out})), b"".join(binary_pieces({"graph": out}))
                ids = list(decode_graph({**json.loads(text)["graph"], "binary": raw}).ids)
                # (left out, the hook is reached no other way: held from C, as C code's)
                found[name] = kept in ids and id(threading.current_thread()) in ids
        finally:
            done.set()

    before, sys.excepthook = sys.excepthook, hook
    try:
        thread = threading.Thread(target=walk)  # (its closure keeps ``hook``: nothing else, below)
    finally:
        sys.excepthook = before
    hook = None
    thread.start()
    thread = None  # (as boot.py's: no frame holds the thread)
    done.wait(120)
    assert found == {"with": True, "without": False}, found
