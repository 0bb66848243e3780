"""The simulated worker staggers its rollouts as production's are (started at different times,
at different turns at any moment): the intercept leak is in flight whenever it is inspected.

Started together and all of the same length, the rollouts ran in lockstep: they all ended at
once, and until the next ones had a reply delivered the intercept dict held nothing to find.
The worker counts, on every 20 ms heartbeat while rollouts churn, whether any delivered
intercept was in flight (its own ground truth); inspections must find the leak every time.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.simulate.fleet import start_fleet

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


def test_rollouts_are_staggered_and_inspect_always_sees_the_intercept_leak(tmp_path: Path) -> None:
    # 10 turns of >= 30 ms each: a rollout lasts ~0.3 s+, so lockstep waves ended several
    # times a second, each leaving a gap of one turn (longer than a heartbeat) with nothing
    # delivered.
    with start_fleet(workers=1, concurrency=4, turns=10, rollouts=None, image_kb=8, group_size=1, fixes="none",
                     hold=60, report_dir=tmp_path, stats_interval=1.0,
                     extra_args=["--model-latency-ms", "30"]) as fleet:
        pid = fleet.pids[0]
        found = []
        for _ in range(4):
            time.sleep(0.7)
            snapshot = take_snapshot(pid, request=RequestOptions(timeout=60))
            finding = next((f for f in snapshot.findings if f.kind == "intercepts"), None)
            found.append(0 if finding is None else finding.count)
        time.sleep(1.5)
        report = fleet.report(pid)
        fleet.stop()
    assert report is not None
    churn = report["churn"]
    assert report["rollouts_completed"] >= 20, report["rollouts_completed"]
    assert churn["ticks"] >= 100, churn
    assert churn["ticks_without_delivered_intercepts"] == 0, churn
    assert all(count > 0 for count in found), found
