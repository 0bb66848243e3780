"""``patch --verify``'s verdict, ``--dry-run``'s words, and findings of fixes already applied.

The verdict is pure arithmetic over samples (leakhound/analysis/verify.py): these series are
built so that the slope of each is known exactly; the live tests are
tests/integration/test_patch_verify.py.
"""

from __future__ import annotations

import io
import json

import pytest

from leakhound.analysis.detectors import run_detectors
from leakhound.analysis.verify import FixedOwner, judge
from leakhound.model import PatchOutcome, snapshot_from_json, snapshot_to_json
from leakhound.model.units import MiB
from leakhound.model.verify import VerifyPoint, verify_to_dict
from leakhound.patches import FIXES
from leakhound.render.patch import render_outcomes, render_verify
from leakhound.render.table import render_findings
from tests.factories import make_snapshot
from tests.unit.test_verifiers_detectors import OWNERS, _probe

OWNER = FixedOwner(fix="registry", path="__main__.WORKER.runtime.trajectories", type="dict", object_id=77)
ITEM = 400 * 1024  # bytes one registry entry holds


def _points(start: float, seconds: int, *, rss_per_min: float, heap_per_min: float, items_per_min: float,
            items0: int = 20, rss0: int = 500 * MiB) -> list[VerifyPoint]:
    """One sample a second, each series a straight line of the given slope."""
    out = []
    for s in range(seconds + 1):
        items = items0 + round(items_per_min * s / 60)
        out.append(VerifyPoint(taken_at=start + s, rss_bytes=int(rss0 + rss_per_min * s / 60),
                               heap_bytes=int(300 * MiB + heap_per_min * s / 60),
                               owner_items=(("registry", items, items * ITEM),)))
    return out


def test_registry_growth_stopped_and_rss_still_growing_names_the_next_fixes() -> None:
    before = _points(0, 30, rss_per_min=160 * MiB, heap_per_min=150 * MiB, items_per_min=120)
    after = _points(40, 30, rss_per_min=120 * MiB, heap_per_min=110 * MiB, items_per_min=0, items0=80)
    report = judge(pid=7, fixes=["registry"], owners={"registry": OWNER}, before_points=before,
                   after_points=after, interval_seconds=1.0, next_fixes=["intercepts", "steps"])
    assert report.verdict == "stopped"
    (fix,) = report.per_fix
    assert fix.judged_by == "owner" and fix.object_id == 77
    assert fix.before is not None and fix.after is not None
    assert fix.before.items_per_min == pytest.approx(120, rel=0.05)
    assert fix.after.items_per_min == 0
    assert report.summary == ("registry growth stopped (trajectories +46.9 MiB/min -> +0.0 MiB/min, +120 -> +0 "
                              "items/min); RSS still grows +120.0 MiB/min: intercepts or steps next")
    doc = json.loads(json.dumps(verify_to_dict(report)))
    assert doc["verdict"] == "stopped" and doc["before"]["rss_bytes_per_min"] == pytest.approx(160 * MiB)
    assert doc["per_fix"][0]["after"]["items_per_min"] == 0 and doc["before"]["seconds"] == 30


def test_an_owner_growing_as_fast_after_the_fix_is_still_growing() -> None:
    before = _points(0, 20, rss_per_min=60 * MiB, heap_per_min=60 * MiB, items_per_min=60)
    after = _points(30, 20, rss_per_min=60 * MiB, heap_per_min=60 * MiB, items_per_min=55, items0=60)
    report = judge(pid=7, fixes=["registry"], owners={"registry": OWNER}, before_points=before,
                   after_points=after, interval_seconds=1.0)
    assert report.verdict == "still-growing"
    assert report.summary.startswith("registry still grows (trajectories +23.4 MiB/min -> +21.1 MiB/min")


def test_half_the_growth_is_slowed() -> None:
    before = _points(0, 20, rss_per_min=0, heap_per_min=0, items_per_min=60)
    after = _points(30, 20, rss_per_min=0, heap_per_min=0, items_per_min=24, items0=60)
    report = judge(pid=7, fixes=["registry"], owners={"registry": OWNER}, before_points=before,
                   after_points=after, interval_seconds=1.0)
    assert report.verdict == "slowed"


def test_nothing_growing_before_is_not_proven_and_says_rss_within_noise() -> None:
    flat: dict[str, float] = {"rss_per_min": 0.5 * MiB, "heap_per_min": 0.0, "items_per_min": 0}
    report = judge(pid=7, fixes=["registry"], owners={"registry": OWNER}, before_points=_points(0, 10, **flat),
                   after_points=_points(20, 10, **flat), interval_seconds=1.0)
    assert report.verdict == "not-proven"
    assert "not proven" in report.summary and "RSS slope within noise (+0.5 MiB/min -> +0.5 MiB/min)" in report.summary


def test_steps_is_judged_by_the_live_heap() -> None:
    before = _points(0, 20, rss_per_min=80 * MiB, heap_per_min=90 * MiB, items_per_min=60)
    after = _points(30, 20, rss_per_min=30 * MiB, heap_per_min=20 * MiB, items_per_min=60)
    report = judge(pid=7, fixes=["steps"], owners={"registry": OWNER}, before_points=before,
                   after_points=after, interval_seconds=1.0)
    (fix,) = report.per_fix
    assert fix.judged_by == "heap" and report.verdict == "slowed"
    assert fix.summary == "steps: live heap growth slowed (live heap +90.0 MiB/min -> +20.0 MiB/min)"


def test_too_few_samples_is_not_proven() -> None:
    one = _points(0, 0, rss_per_min=0, heap_per_min=0, items_per_min=0)
    report = judge(pid=7, fixes=["registry"], owners={}, before_points=one,
                   after_points=_points(5, 5, rss_per_min=0, heap_per_min=0, items_per_min=0), interval_seconds=1.0)
    assert report.verdict == "not-proven" and "too few samples before the fix" in report.summary


def test_render_verify_shows_both_windows_and_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    before = _points(0, 30, rss_per_min=160 * MiB, heap_per_min=150 * MiB, items_per_min=120)
    after = _points(40, 30, rss_per_min=120 * MiB, heap_per_min=110 * MiB, items_per_min=0, items0=80)
    report = judge(pid=7, fixes=["registry"], owners={"registry": OWNER}, before_points=before,
                   after_points=after, interval_seconds=1.0, next_fixes=["steps"])
    out = io.StringIO()
    render_verify(report, file=out)
    text = out.getvalue()
    assert "\x1b[" not in text
    assert "RSS" in text and "+160.0 MiB/min" in text and "+120.0 MiB/min" in text
    assert "live heap" in text and "+150.0 MiB/min" in text and "+110.0 MiB/min" in text
    assert "+46.9 MiB/min" in text and "+0.0 MiB/min" in text
    assert "verdict: stopped: registry growth stopped" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 80


def test_dry_run_says_which_function_what_changes_and_what_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    out = io.StringIO()
    function = "verifiers.v1.runtime.Runtime.cleanup_group"
    render_outcomes([PatchOutcome(fix="registry", pid=7, status="would-apply", functions=(function,))], file=out)
    text = out.getvalue()
    spec = FIXES["registry"]
    assert f"replaces: {function}" in text
    assert f"from then on: {spec.changes}" in text
    assert f"stays until restart: {spec.stays}" in text
    for fix in FIXES.values():  # one sentence each, for every fix
        assert fix.changes and fix.stays and ". " not in fix.changes + fix.stays


APPLIED = {"applied": [{"fix": "registry", "functions": ["verifiers.v1.runtime.Runtime.cleanup_group"],
                        "applied_at": 1_800_000_000.0,
                        "applied_by": {"uid": 0, "user": "root", "leakhound_version": "0.1.0"}}]}


def test_an_applied_fix_marks_its_finding_and_recommends_the_next() -> None:
    snap = make_snapshot(probes={"verifiers": _probe(), "patches": APPLIED}, owners=OWNERS)
    findings = run_detectors(snap)
    registry = next(f for f in findings if f.kind == "registry")
    assert registry.applied is not None and registry.applied.uid == 0
    assert registry.applied.applied_at == 1_800_000_000.0 and registry.applied.leakhound_version == "0.1.0"
    assert registry.fix == ""  # no longer recommended
    pending = [f.fix for f in findings if f.fix]
    assert pending and registry.details["next_fix"] == pending[0] != "registry"
    assert "applied 2027-01-15 08:00 UTC by root (uid 0, leakhound 0.1.0)" in registry.summary
    assert FIXES["registry"].stays in registry.summary
    others = [f for f in findings if f.kind != "registry"]
    assert all(f.applied is None for f in others)
    # Saved and read back: the mark is part of the snapshot's findings.
    again = snapshot_from_json(snapshot_to_json(snap.with_findings(findings)))
    assert next(f for f in again.findings if f.kind == "registry").applied == registry.applied


def test_applied_findings_on_screen_say_applied_and_next(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    snap = make_snapshot(probes={"verifiers": _probe(), "patches": APPLIED}, owners=OWNERS)
    findings = run_detectors(snap)
    nxt = next(f for f in findings if f.kind == "registry").details["next_fix"]
    out = io.StringIO()
    render_findings(findings, pid=4242, file=out)
    text = out.getvalue()
    assert "--fix registry" not in text
    assert f"next: leakhound patch 4242 --fix {nxt}" in text
    registry_line = next(line for line in text.splitlines() if "registry" in line and "MiB" in line)
    assert "applied" in registry_line


def test_without_applied_fixes_findings_are_as_before() -> None:
    snap = make_snapshot(probes={"verifiers": _probe()}, owners=OWNERS)
    findings = run_detectors(snap)
    assert all(f.applied is None for f in findings)
    assert "registry" in [f.fix for f in findings]


def test_a_malformed_patches_probe_marks_nothing() -> None:
    bad = {"applied": [{"fix": "rm -rf", "applied_at": "soon"}, "registry", {"fix": "registry", "applied_at": True,
                                                                             "applied_by": "root"}]}
    findings = run_detectors(make_snapshot(probes={"verifiers": _probe(), "patches": bad}, owners=OWNERS))
    registry = next(f for f in findings if f.kind == "registry")
    assert registry.applied is not None and registry.applied.applied_at is None and registry.applied.uid == -1
    assert "applied (" not in registry.summary and "Fix registry applied:" in registry.summary


class _Patched:
    def method(self) -> str:
        return "original"


def test_the_payload_records_when_and_by_whom_and_the_patches_probe_reports_it() -> None:
    import time
    import types
    from typing import Any

    from leakhound.payload import probes
    from leakhound.payload.patches import _applied_by, _apply_all, _revert, _state

    def make(original: Any, counters: dict[str, int]) -> Any:
        return lambda self: "fixed"

    module = types.SimpleNamespace(FIX="registry", DESCRIPTION="test",
                                   recognise=lambda: ([(_Patched, "method", make)], None))
    # What the CLI says is input from another process: only numbers and short strings kept.
    by = _applied_by({"by": {"uid": 0, "user": "root" * 40, "leakhound_version": "0.1.0", "code": "x"}})
    assert by == {"uid": 0, "user": ("root" * 40)[:64], "leakhound_version": "0.1.0"}
    assert _applied_by({"by": {"uid": "0"}})["uid"] == -1 and _applied_by({}) == {}
    started = time.time()
    try:
        (result,) = _apply_all([module], False, {}, lambda phase: None, by)
        assert result["status"] == "applied" and result["applied_by"] == by
        assert _Patched().method() == "fixed"
        (entry,) = probes.patches_probe()["applied"]
        assert entry["fix"] == "registry" and entry["applied_by"] == by
        assert started <= entry["applied_at"] <= time.time()
        assert entry["functions"] == [f"{__name__}._Patched.method"]
    finally:
        _revert(module)
    assert _state.peek() == {} and probes.patches_probe() == {"applied": []}
    assert _Patched().method() == "original"


def test_the_fixed_owner_is_found_by_identity_not_by_its_path() -> None:
    from leakhound.core.verify import fixed_owners
    from leakhound.model import Owner

    path = "task:Task-1/run.self.env.harness.runtime.trajectories"
    decoy = Owner(path, "dict", 10, 5 * MiB, object_id=111, path_ids=(1, 2, 111))  # same words, another dict
    registry = Owner("__main__.RUNTIME.trajectories", "dict", 40, 60 * MiB, object_id=222, path_ids=(1, 222))
    inside = Owner("__main__.OTHER.trajectories['a']", "list", 3, 2 * MiB, object_id=444, path_ids=(1, 333, 444))
    snap = make_snapshot(owners=(decoy, registry, inside))
    assert fixed_owners(snap, {"registry": [222]}) == {"registry": [registry]}
    # A container the census split into owners inside it: those owners (its id on their path).
    assert fixed_owners(snap, {"intercepts": [333]}) == {"intercepts": [inside]}
    assert fixed_owners(snap, {"registry": [999]}) == {}


INTERCEPTS = FixedOwner(fix="intercepts", path="__main__.WORKER.server.intercepts", type="dict", object_id=88)


def _intercept_points(start: float, items: list[int]) -> list[VerifyPoint]:
    """One sample a second, the intercept dict holding ``items`` bodies in turn (RSS flat)."""
    return [VerifyPoint(taken_at=start + s, rss_bytes=500 * MiB, heap_bytes=300 * MiB,
                        owner_items=(("intercepts", n, n * ITEM),)) for s, n in enumerate(items)]


# What the demo's worker showed (6 s windows): its intercept dict rises and falls with each
# rollout's turns and ends, 33-53 bodies before the fix; after it, the bodies delivered before
# drain as their rollouts end and it holds the 2-4 requests in flight.
BEFORE = [53, 38, 51, 45, 36, 41, 33, 40, 46, 49, 42]
AFTER = [26, 12, 4, 2, 4, 4, 3, 3, 3, 2, 3]


def test_intercepts_that_rise_and_fall_with_rollouts_are_judged_by_their_level() -> None:
    """The dict did not grow over the 10 s before (its slope within noise): by slope alone the
    fix was "not proven" in 4 of 10 of the demo's runs, though its level fell from ~43 bodies to
    3. Judged by its level: its mean before, against its mean over the second half of after."""
    report = judge(pid=7, fixes=["intercepts"], owners={"intercepts": INTERCEPTS},
                   before_points=_intercept_points(0, BEFORE), after_points=_intercept_points(20, AFTER),
                   interval_seconds=1.0)
    (fix,) = report.per_fix
    assert fix.verdict == "stopped" and fix.judged_by == "owner-level", fix
    assert fix.before is not None and fix.after is not None
    assert fix.before.items_mean == pytest.approx(sum(BEFORE) / len(BEFORE))
    assert fix.after.items_late_mean == pytest.approx(sum(AFTER[5:]) / len(AFTER[5:]))
    assert fix.summary.startswith("intercepts: the level fell: intercepts held 43 items on average before, "
                                  "3 once the fix settled (")
    doc = json.loads(json.dumps(verify_to_dict(report)))
    assert doc["per_fix"][0]["after"]["items_late_mean"] == pytest.approx(fix.after.items_late_mean)


def test_intercepts_that_neither_grew_nor_fell_are_not_proven() -> None:
    report = judge(pid=7, fixes=["intercepts"], owners={"intercepts": INTERCEPTS},
                   before_points=_intercept_points(0, BEFORE), after_points=_intercept_points(20, BEFORE),
                   interval_seconds=1.0)
    (fix,) = report.per_fix
    assert fix.verdict == "not-proven" and fix.judged_by == "owner-level"
    assert "neither grew nor fell" in fix.summary


def test_a_level_of_a_few_items_says_nothing() -> None:
    # under twice the items' noise floor before: no level to judge by, the slope's verdict stays
    report = judge(pid=7, fixes=["intercepts"], owners={"intercepts": INTERCEPTS},
                   before_points=_intercept_points(0, [3, 2, 3, 3, 2, 3]), after_points=_intercept_points(20, [0] * 6),
                   interval_seconds=1.0)
    (fix,) = report.per_fix
    assert fix.verdict == "not-proven" and fix.judged_by == "owner"
    assert "did not grow before the fix" in fix.summary
