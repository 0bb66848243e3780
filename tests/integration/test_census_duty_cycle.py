"""The pause budget's duty cycle in a live, busy target (fixtures/busy_worker.py: its loop
serialises documents all the time, a thread spends its time in C): the census yields the GIL
as it goes and says how long it ran at most between two yields; the target's own heartbeat
keeps ticking. Structural: counts and bounds the payload reports, no timed assertions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leakhound.attach import run_request
from leakhound.model.names import Method
from tests.utils import spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


def test_a_census_in_a_busy_target_yields_the_gil_under_its_budget(tmp_path: Path) -> None:
    with spawn_target("busy_worker", tmp_path, env={"FIXTURE_C_THREADS": "1"}) as child:
        ticks_before = child.report()["ticks"]
        budgeted = run_request(child.pid, {"op": "snapshot", "max_pause_ms": 2}, method=Method.PTRACE, timeout=60)
        unbudgeted = run_request(child.pid, {"op": "snapshot"}, method=Method.PTRACE, timeout=60)
        after = child.report()
    heap = budgeted.result["heap"]
    # 1 ms of running between two yields: a census of a few hundred thousand objects yields.
    assert heap["yields"] >= 2
    assert heap["max_hold_ms"] > 0
    assert unbudgeted.result["heap"]["yields"] == 0
    # Where the time went, per phase, wall and CPU, in the census and in the request.
    assert {"roots", "module globals", "walls"} <= set(heap["phases"])
    assert all(len(v) == 2 and v[0] >= 0 and v[1] >= 0 for v in heap["phases"].values())
    assert {"census", "arena", "probes"} <= set(budgeted.result["phases"])
    # The target kept serving meanwhile (its loop ticked on).
    assert after["ticks"] > ticks_before
    # The target's own collections that ran in the payload's thread, per generation, reported
    # apart from the holds (payload/pacing.py: the collector is never switched off or on).
    for result in (budgeted.result, unbudgeted.result):
        ran = result["target_gc_in_payload_thread"]
        assert len(ran["collections"]) == 3 and min(ran["collections"]) >= 0 and ran["seconds"] >= 0
