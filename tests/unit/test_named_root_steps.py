"""A step from a root through a variable (a thread's frame's, a coroutine's, a task's context
variable) is named by the variable and walked again by identity: the ``names`` request
(graph_wire.name_paths) and watch's cheap sample (sampling.owner_items), in this process."""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from leakhound.payload import graph_wire, sampling
from leakhound.payload.graph_roots import _walk_module
from leakhound.payload.roots import frame_locals
from leakhound.payload.tasks import c_future_class, context_variables, task_context

REQUEST_LOG: contextvars.ContextVar[list[str]] = contextvars.ContextVar("request_log")
needs_311 = pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 frames list their locals as referents")


@pytest.fixture
def worker_frame() -> Iterator[tuple[Any, list[str], list[str]]]:
    """(the frame of a thread blocked in ``ingest``, its ``pending`` list, its captured ``seen``)."""
    ready, done = threading.Event(), threading.Event()
    held: dict[str, Any] = {}

    def ingest() -> None:
        pending = [f"record {i}" for i in range(10)]
        seen = ["captured"]

        def remember() -> list[str]:  # a closure: ``seen`` is a cell of this frame
            return seen

        held["frame"] = sys._getframe()
        held["values"] = (pending, remember())
        ready.set()
        done.wait()

    thread = threading.Thread(target=ingest, name="ingest-worker", daemon=True)
    thread.start()
    ready.wait()
    try:
        yield held["frame"], *held["values"]
    finally:
        held.clear()
        done.set()
        thread.join()


@needs_311
def test_a_threads_variable_is_named_and_found_again(worker_frame: tuple[Any, list[str], list[str]]) -> None:
    frame, pending, seen = worker_frame
    answer = graph_wire.name_paths({"paths": [[id(frame), id(pending)]]})
    assert answer["labels"] == [["apending"]]
    (found,) = sampling.owner_items([{"ids": [id(frame), id(pending)], "type": "list", "path": ""}])
    assert found == {"found": True, "items": 10}
    # a captured variable is its cell, named by the variable
    cell = dict(frame_locals(frame, _walk_module) or [])["seen"]
    label, value = graph_wire.step_label(frame, id(cell))
    assert label == "aseen" and value.cell_contents is seen


def test_a_tasks_context_variable_and_a_coroutines_variable_are_named_and_found_again() -> None:
    async def consume(started: asyncio.Event, stop: asyncio.Future[None]) -> None:
        REQUEST_LOG.set(["request 1"])
        started.set()
        await stop

    async def main() -> tuple[Any, Any]:
        started = asyncio.Event()
        stop = asyncio.get_running_loop().create_future()
        task = asyncio.get_running_loop().create_task(consume(started, stop), name="consumer")
        await started.wait()
        ctx = task_context(task, c_future_class())
        log = dict(context_variables(ctx) if ctx is not None else [])["request_log"]
        coro = task.get_coro()
        answer = graph_wire.name_paths({"paths": [[id(task), id(log)], [id(task), id(coro), id(stop)]]})
        found = sampling.owner_items([{"ids": [id(task), id(log)], "type": "list", "path": ""}])
        stop.set_result(None)
        await task
        return answer, found

    answer, found = asyncio.run(main())
    assert answer["labels"][0] == ["crequest_log"]
    assert answer["labels"][1] == ["", "astop"]
    assert found == [{"found": True, "items": 1}]
