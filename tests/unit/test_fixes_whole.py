"""Every fix is whole: the payload patch that lands it in the target, the probe that measures
what it acts on, the CLI's reading of its effect from that measurement, and the detector that
recommends it. A fix added without one of them fails here, not in a worker."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from leakhound import patches
from leakhound.analysis.detectors import analyse
from leakhound.model import Owner
from leakhound.model.names import Fix
from leakhound.patches import Measurement
from leakhound.payload import patches as payload_patches
from leakhound.simulate.runtime import Runtime
from tests.factories import MB, make_snapshot

# What the verifiers probe says of a worker where every leak shows (its sections' fields are
# the payload's own: test_the_leaking_probe_has_the_payloads_fields).
LEAKING: dict[str, dict[str, Any]] = {
    "registry": {"runtimes": 1, "modules": ["verifiers.v1.runtime"], "entries": 10, "finished_entries": 8,
                 "inflight_entries": 2, "retained_bytes": 80 * MB, "finished_bytes": 64 * MB, "finished_steps": 360},
    "steps": {"steps": 450, "bloated_steps": 450, "redundant_bytes": 30 * MB, "sidecar_steps": 0, "sidecar_bytes": 0},
    "intercepts": {"servers": 1, "entries": 90, "delivered": 88, "pending": 2, "body_bytes": 200 * MB,
                   "delivered_body_bytes": 190 * MB, "base64_bytes": 180 * MB},
}
REGISTRY_OWNER = Owner("task:Task-1/run (w.py:1).<EnvWorker>.env.harness.runtime.trajectories", "dict", 10, 80 * MB)


@pytest.fixture(scope="module")
def measured() -> Iterator[dict[str, Any]]:
    """The payload's measurement (what a patch reports before and after), in this process
    with a verifiers runtime loaded (the simulated one the probe knows)."""
    runtime = Runtime()
    runtime.trajectories["finished"] = [{"step": 1}]
    try:
        yield payload_patches._measure()
    finally:
        runtime.trajectories.clear()
        del runtime


@pytest.mark.parametrize("fix", list(Fix))
def test_every_fix_has_its_patch_probe_effect_and_detector(fix: Fix, measured: dict[str, Any]) -> None:
    # the payload's patch, by the same name; a dry run here (no worker code) answers for it
    module = payload_patches.FIXES[fix.value]
    assert module.FIX == fix.value and callable(module.recognise) and module.DESCRIPTION
    (result,) = payload_patches.handle({"action": "dry-run", "fixes": [fix.value]})["results"]
    assert result["fix"] == fix.value
    # the CLI's reading of its effect, from what the payload measures and the counters its
    # patch keeps (the names the CLI reads are the ones the patch writes): numbers, not blanks
    spec = patches.FIXES[fix.value]
    assert spec.name == fix.value and spec.metric and spec.changes and spec.stays
    written = set(re.findall(r'counters\["(\w+)"\] =', inspect.getsource(module)))
    read = set(re.findall(r'counters\.get\("(\w+)"', inspect.getsource(sys.modules[spec.effect.__module__])))
    assert read <= written, read - written
    before = Measurement.from_payload(measured)
    effect = spec.effect(before, before, dict.fromkeys(written, 1))
    assert effect.before is not None and effect.summary, (fix, effect, sorted(measured["verifiers"]))
    # the detector that recommends it, on a worker where every leak shows
    snapshot = analyse(make_snapshot(probes={"verifiers": LEAKING}, owners=(REGISTRY_OWNER,)))
    assert [f.kind for f in snapshot.findings if f.fix == fix.value], [(f.kind, f.fix) for f in snapshot.findings]


def test_the_leaking_probe_has_the_payloads_fields(measured: dict[str, Any]) -> None:
    for section, fields in LEAKING.items():
        assert set(fields) <= set(measured["verifiers"][section]), section
