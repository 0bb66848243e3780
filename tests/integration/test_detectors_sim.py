"""The verifiers leak-shape detectors on the simulated worker, checked against the worker's
own report of its registry, intercepts and steps (ground truth it computes about itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from leakhound.core.capture import take_snapshot
from leakhound.core.request import RequestOptions
from leakhound.model import Finding, Snapshot
from leakhound.simulate.fleet import start_fleet
from tests.utils import within

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


def _idle_worker(tmp_path: Path, fixes: str) -> tuple[Snapshot, dict[str, Any]]:
    # Two rollouts park after their last turn: in flight, holding their delivered intercepts.
    with start_fleet(workers=1, concurrency=4, turns=6, rollouts=6, image_kb=16, group_size=1, fixes=fixes,
                     hold=120, report_dir=tmp_path, stats_interval=1.0,
                     extra_args=["--park", "2", "--exact-sizes"]) as fleet:
        fleet.wait_idle(timeout=120, stats_ticks=1)
        snap = take_snapshot(fleet.pids[0], request=RequestOptions(timeout=60))
        report = fleet.reports()[0]
        fleet.stop()
    return snap, report


def _finding(snap: Snapshot, kind: str) -> Finding:
    return next(f for f in snap.findings if f.kind == kind)


def test_each_detector_matches_the_leaking_workers_own_numbers(tmp_path: Path) -> None:
    snap, report = _idle_worker(tmp_path, "none")
    traj, held = report["trajectories"], report["intercepts"]
    assert traj["finished_entries"] == 4 and traj["inflight_entries"] == 2

    registry = _finding(snap, "registry")
    assert registry.fix == "registry"
    assert registry.count == traj["finished_entries"]
    assert registry.details["entries"] == traj["entries"]
    assert registry.details["inflight_entries"] == traj["inflight_entries"]
    assert within(registry.details["retained_bytes"], traj["retained_bytes"])
    assert registry.owner.endswith("runtime.trajectories"), [o.path for o in snap.owners][:60]

    intercepts = _finding(snap, "intercepts")
    assert intercepts.fix == "intercepts"
    assert intercepts.count == held["delivered"] == 2 * 6
    assert intercepts.details["pending"] == held["pending"]
    assert intercepts.details["entries"] == held["entries"]
    assert within(intercepts.details["body_bytes"], held["body_bytes"])
    assert intercepts.details["base64_bytes"] > 0.8 * intercepts.details["body_bytes"]

    steps = _finding(snap, "steps")
    assert steps.fix == "steps"
    assert steps.count == traj["bloated_steps"] == traj["steps"]
    assert within(steps.bytes, traj["redundant_bytes"])


def test_no_leak_detector_fires_on_a_fixed_worker(tmp_path: Path) -> None:
    snap, report = _idle_worker(tmp_path, "all")
    kinds = {f.kind for f in snap.findings if not f.skipped}
    assert not kinds & {"registry", "intercepts", "steps"}
    assert not [f for f in snap.findings if f.fix], [f.summary for f in snap.findings]
    # The probe still saw the fixed structures: only in-flight entries, only sidecar steps.
    probe = snap.probes["verifiers"]
    assert probe["registry"]["entries"] == report["trajectories"]["entries"] == 2
    assert probe["steps"]["sidecar_steps"] == report["trajectories"]["sidecar_steps"]
    assert probe["intercepts"]["delivered"] == report["intercepts"]["delivered"] == 0
