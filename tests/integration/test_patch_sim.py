"""patch on the simulated worker: each fix moves its number, reverts exactly, refuses strangers.

Ground truth comes from the worker's own report (leakhound/simulate/report.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.cli import app
from leakhound.core.patch import patch_process
from leakhound.errors import PatchRefused
from leakhound.simulate.fleet import Fleet, start_fleet
from tests.utils import assert_only_the_payload_stays, spawn_target

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]


@pytest.fixture
def churning(tmp_path: Path) -> Iterator[Fleet]:
    with start_fleet(workers=1, concurrency=4, turns=12, rollouts=None, image_kb=24, group_size=1,
                     fixes="none", hold=0, report_dir=tmp_path, stats_interval=1.0) as fleet:
        fleet.wait_ready(timeout=60)
        yield fleet


def _report(fleet: Fleet) -> dict:  # type: ignore[type-arg]
    report = fleet.report(fleet.pids[0])
    assert report is not None
    return report


def test_registry_fix_stops_finished_rollouts_accumulating(churning: Fleet) -> None:
    pid = churning.pids[0]
    (outcome,) = patch_process(pid, fixes=["registry"])
    assert outcome.status == "applied"
    at_apply = _report(churning)
    time.sleep(3)
    later = _report(churning)
    assert later["rollouts_completed"] > at_apply["rollouts_completed"] + 2
    # Entries leaked before the fix stay; none are added by rollouts finishing after it.
    assert later["trajectories"]["finished_entries"] <= at_apply["trajectories"]["finished_entries"] + 1
    (status,) = patch_process(pid, fixes=["registry"], action="status")
    assert status.status == "applied" and status.counters["evicted"] >= 2


def test_intercepts_fix_leaves_only_inflight_bodies(churning: Fleet) -> None:
    pid = churning.pids[0]
    (outcome,) = patch_process(pid, fixes=["intercepts"], verify_seconds=2)
    assert outcome.status == "applied"
    assert outcome.counters["bodies_discarded"] > 0
    assert outcome.after is not None and outcome.before is not None
    assert outcome.after <= 4  # delivered-but-held: at most the in-flight rollouts' current requests
    report = _report(churning)
    assert report["intercepts"]["delivered"] <= report["rollouts_inflight"]


def test_steps_fix_slims_new_steps_and_keeps_truncation_sidecars(churning: Fleet) -> None:
    pid = churning.pids[0]
    (outcome,) = patch_process(pid, fixes=["steps"], verify_seconds=2)
    assert outcome.status == "applied"
    assert outcome.before is not None and outcome.after is not None
    assert outcome.after < outcome.before / 5
    assert outcome.counters["sidecars"] >= 1  # every other rollout truncates its last turn
    report = _report(churning)
    traj = report["trajectories"]
    assert traj["sidecar_steps"] >= 1
    assert traj["truncated_steps_with_raw_tokens"] == traj["truncated_steps"]


def test_trim_returns_about_the_predicted_trimmable_bytes(tmp_path: Path) -> None:
    # An idle worker after churn: fragmented, and nothing allocating meanwhile.
    with start_fleet(workers=1, concurrency=4, turns=16, rollouts=8, image_kb=48, group_size=1,
                     fixes="none", hold=120, report_dir=tmp_path, stats_interval=1.0) as fleet:
        fleet.wait_idle(timeout=120, stats_ticks=1)
        (outcome,) = patch_process(fleet.pids[0], fixes=["trim"])
        # The worker's own report (next stats tick) sees the trim counter of the live patch.
        fleet.wait_for(lambda r: r["trim"]["count"] >= 1, timeout=10, what="see the trim")
    assert outcome.status == "applied"
    predicted = outcome.counters["first_trim_predicted_bytes"]
    dropped = outcome.counters["first_trim_rss_before"] - outcome.counters["first_trim_rss_after"]
    assert predicted > 8 * 1024 * 1024
    assert abs(dropped - predicted) <= 0.15 * predicted, (dropped, predicted)
    assert outcome.counters["cadence"] == "trim thread (off the event loop)"


def test_revert_restores_every_original_and_status_lists_nothing(churning: Fleet) -> None:
    pid = churning.pids[0]
    fixes = ["steps", "registry", "intercepts", "trim"]
    applied = patch_process(pid, fixes=fixes)
    assert [o.status for o in applied] == ["applied"] * 4
    again = patch_process(pid, fixes=fixes)
    assert [o.status for o in again] == ["already-applied"] * 4
    reverted = patch_process(pid, fixes=fixes, action="revert")
    assert [o.status for o in reverted] == ["reverted"] * 4
    assert all(not o.reason for o in reverted)  # nothing was clobbered
    status = patch_process(pid, fixes=fixes, action="status")
    assert [o.status for o in status] == ["not-applied"] * 4
    # Leaking again: delivered bodies are held once more after the revert.
    time.sleep(1.5)
    assert _report(churning)["intercepts"]["peak_delivered"] > 0


def test_dry_run_changes_nothing(churning: Fleet) -> None:
    pid = churning.pids[0]
    result = CliRunner().invoke(app, ["patch", str(pid), "--fix", "all", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {o["status"] for o in doc["outcomes"]} == {"would-apply"}
    status = patch_process(pid, fixes=["steps", "registry"], action="status")
    assert [o.status for o in status] == ["not-applied"] * 2


def test_a_process_without_verifiers_is_refused_and_unchanged(tmp_path: Path) -> None:
    with spawn_target("growing_cache", tmp_path) as child:
        with pytest.raises(PatchRefused, match="no verifiers v1 Runtime"):
            patch_process(child.pid, fixes=["registry", "steps", "intercepts"])
        result = CliRunner().invoke(app, ["patch", str(child.pid), "--fix", "registry"])
        report = child.report()
    assert result.exit_code == 10
    assert "hint:" in result.output and "Traceback" not in result.output
    assert_only_the_payload_stays(report["leakhound_modules"])


def test_trim_cadence_is_configurable_and_runs_off_the_workers_loop(tmp_path: Path) -> None:
    with spawn_target("fragmentation", tmp_path) as child:
        (applied,) = patch_process(child.pid, fixes=["trim"], trim_every=1.0)
        time.sleep(3.6)
        (status,) = patch_process(child.pid, fixes=["trim"], action="status")
        patch_process(child.pid, fixes=["trim"], action="revert")
        assert child.proc.poll() is None
    assert applied.status == "applied" and applied.counters["interval_s"] == 1.0
    assert applied.counters["cadence"] == "trim thread (off the event loop)"
    # The first trim at once, then one a second on the trim thread.
    assert status.counters["trims"] >= 3, status.counters
    with pytest.raises(ValueError):
        patch_process(1, fixes=["trim"], trim_every=0.5)
