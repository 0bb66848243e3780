"""A running thread's locals belong to a ``thread:`` owner (in-process census, 3.11+ frames).

On 3.11+ ``gc.get_referents(frame)`` does not list a running frame's locals; before the fix
they were ``<held from C: list>`` and no ``thread:`` owner ever held anything. Where they
cannot be read (no compiled walk), the result says so in its notes.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from leakhound.payload import census
from tests.utils import block_size

needs_311 = pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 frames own their locals")


def _census_beside_a_thread(walk_module: Any) -> dict[str, Any]:
    started, stop = threading.Event(), threading.Event()
    truth: dict[str, int] = {}

    def hold_rows() -> None:
        rows = [f"row-{i:06d}-" * 20 for i in range(3000)]
        truth["bytes"] = block_size(rows) + sum(block_size(r) for r in rows)
        started.set()
        stop.wait(30)

    thread = threading.Thread(target=hold_rows, name="frames-holder", daemon=True)
    thread.start()
    started.wait(10)
    out: dict[str, Any] = {}

    def take() -> None:
        taken = census.Census(timeout=60)
        taken.walk.walk_module = walk_module
        taken.run()
        out.update(taken.result(top_owners=100000))

    try:
        runner = threading.Thread(target=take)
        runner.start()
        runner.join(120)
    finally:
        stop.set()
        thread.join(10)
    out["truth"] = truth["bytes"]
    return out


@needs_311
@pytest.mark.skipif(census._walk is None, reason="the C walk was not built here")
def test_a_running_thread_locals_are_its_owner() -> None:
    out = _census_beside_a_thread(census._walk)
    rows = [o for o in out["owners"] if o["path"].startswith("thread:frames-holder/hold_rows (")]
    assert rows and rows[0]["path"].endswith(".rows"), [o["path"] for o in out["owners"][:10]]
    assert rows[0]["retained_bytes"] == out["truth"]
    assert out["notes"] == []


@needs_311
def test_frames_that_cannot_be_read_are_said() -> None:
    out = _census_beside_a_thread(None)
    assert not [o for o in out["owners"] if o["path"].endswith(".rows")]
    assert any("running frame(s) were not read" in n and "compiled census walk" in n for n in out["notes"])
