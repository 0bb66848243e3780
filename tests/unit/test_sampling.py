"""The watch's cheap sample: owner paths resolved again in the target without running its code."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from leakhound.payload import census, sampling


class _Runtime:
    def __init__(self) -> None:
        self.trajectories: dict[int, list[str]] = {i: ["step"] * 10 for i in range(7)}


class _Worker:
    def __init__(self) -> None:
        self.runtime = _Runtime()


async def _serve(worker: _Worker, result: dict[str, Any], ready: asyncio.Event, done: asyncio.Event) -> None:
    ready.set()
    await done.wait()
    result["worker"] = worker


def test_a_task_owned_path_from_the_census_is_sampled_again() -> None:
    # watch's cheap samples resolved module globals only: every owner under a task (where a
    # worker's state lives) dropped out after the first census, and watch said no Python owner
    # grew while runtime.trajectories did.
    result: dict[str, Any] = {}

    async def main() -> None:
        ready, done = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(_serve(_Worker(), result, ready, done), name="serve")
        await ready.wait()

        def look() -> None:
            walk = census.Census(timeout=60)
            walk.run()
            paths = [o["path"] for o in walk.result(top_owners=10000)["owners"]]
            path = next(p for p in paths if p.startswith("task:serve/") and p.endswith(".runtime.trajectories"))
            result["path"] = path
            result["sample"] = sampling.sample({"op": "sample", "owners": [{"path": path, "type": "dict"}]},
                                               lambda phase, done: None)

        thread = threading.Thread(target=look)
        thread.start()
        while thread.is_alive():
            await asyncio.sleep(0.01)
        done.set()
        await task

    asyncio.run(main())
    assert result["sample"]["owners"] == [{"found": True, "items": 7}]


def test_type_counts_never_hash_a_class() -> None:
    calls = [0]

    class Meta(type):
        def __hash__(cls) -> int:
            calls[0] += 1
            raise RuntimeError("a metaclass __hash__ ran")

    class Odd(metaclass=Meta):
        pass

    keep = [Odd() for _ in range(10)]
    out = sampling.sample({"op": "sample", "owners": [], "top_types": 1000}, lambda phase, done: None)
    assert calls[0] == 0
    assert any(t["type"].endswith("Odd") and t["count"] >= 10 for t in out["types"])
    del keep
