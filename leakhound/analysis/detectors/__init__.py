"""Detectors: pure functions ``detect(snapshot) -> list[Finding]``, one module each."""

from __future__ import annotations

from collections.abc import Callable

from leakhound.analysis.detectors import (
    arena_fragmentation,
    cyclic_garbage,
    intercept_bodies,
    step_bloat,
    trajectory_registry,
)
from leakhound.model import Finding, Snapshot

DETECTORS: dict[str, Callable[[Snapshot], list[Finding]]] = {
    arena_fragmentation.KIND: arena_fragmentation.detect,
    cyclic_garbage.KIND: cyclic_garbage.detect,
    trajectory_registry.KIND: trajectory_registry.detect,
    intercept_bodies.KIND: intercept_bodies.detect,
    step_bloat.KIND: step_bloat.detect,
}

_ORDER = {"critical": 0, "warning": 1, "info": 2, "skipped": 3}


def run_detectors(snapshot: Snapshot) -> tuple[Finding, ...]:
    findings: list[Finding] = []
    for detect in DETECTORS.values():
        findings.extend(detect(snapshot))
    findings.sort(key=lambda f: (_ORDER.get(f.severity, 9), -f.bytes))
    return tuple(findings)
