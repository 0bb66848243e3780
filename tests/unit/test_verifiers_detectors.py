from __future__ import annotations

from typing import Any

from leakhound.analysis.detectors import intercepts, registry, steps
from leakhound.model import Owner
from tests.factories import MB, make_snapshot


def _probe(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "registry": {"runtimes": 1, "modules": ["verifiers.v1.runtime"], "entries": 10, "finished_entries": 8,
                     "inflight_entries": 2, "retained_bytes": 80 * MB, "finished_bytes": 64 * MB,
                     "finished_steps": 360},
        "steps": {"steps": 450, "bloated_steps": 450, "redundant_bytes": 30 * MB, "sidecar_steps": 0},
        "intercepts": {"servers": 1, "entries": 90, "delivered": 88, "pending": 2, "body_bytes": 200 * MB,
                       "delivered_body_bytes": 190 * MB, "base64_bytes": 180 * MB},
    }
    for key, value in over.items():
        doc[key] = {**doc[key], **value}
    return doc


OWNERS = (Owner("task:Task-1/run (w.py:1).<EnvWorker>.env.harness.runtime.trajectories", "dict", 10, 80 * MB),)


def test_registry_counts_finished_entries_and_names_the_owner() -> None:
    snap = make_snapshot(probes={"verifiers": _probe()}, owners=OWNERS)
    (f,) = registry.detect(snap)
    assert (f.count, f.bytes, f.fix, f.severity) == (8, 64 * MB, "registry", "critical")
    assert f.owner.endswith("runtime.trajectories")
    assert "10 trajectories, 8 of them from rollouts that have finished" in f.summary


def test_no_registry_finding_when_only_inflight_entries() -> None:
    snap = make_snapshot(probes={"verifiers": _probe(registry={"finished_entries": 0})})
    assert registry.detect(snap) == []


def test_intercepts_delivered_vs_pending_and_base64_share() -> None:
    (f,) = intercepts.detect(make_snapshot(probes={"verifiers": _probe()}))
    assert (f.count, f.bytes, f.fix) == (88, 190 * MB, "intercepts")
    assert "88 already delivered" in f.summary and "2 pending" in f.summary and "90% of body bytes" in f.summary


def test_step_bloat_reports_redundant_bytes() -> None:
    (f,) = steps.detect(make_snapshot(probes={"verifiers": _probe()}))
    assert (f.count, f.bytes, f.fix) == (450, 30 * MB, "steps")


def test_no_verifiers_in_target_is_skipped_with_reason() -> None:
    snap = make_snapshot(probes={"verifiers": {"skipped": "no verifiers v1 runtime in this process"}})
    for detector in (registry, intercepts, steps):
        (f,) = detector.detect(snap)
        assert f.skipped and "no verifiers" in f.summary
