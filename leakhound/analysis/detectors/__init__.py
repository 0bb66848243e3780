"""Detectors: pure functions ``detect(snapshot) -> list[Finding]``, one module each.

A detector that recommends a fix is named as the fix (``--fix registry``, finding kind
``registry``, the payload probe's ``registry`` section); the others by the shape they see."""

from __future__ import annotations

from collections.abc import Callable

from leakhound.analysis.detectors import (
    applied,
    arena_fragmentation,
    cyclic_garbage,
    intercepts,
    registry,
    steps,
)
from leakhound.model import Finding, Snapshot

DETECTORS: dict[str, Callable[[Snapshot], list[Finding]]] = {
    arena_fragmentation.KIND: arena_fragmentation.detect,
    cyclic_garbage.KIND: cyclic_garbage.detect,
    registry.KIND: registry.detect,
    intercepts.KIND: intercepts.detect,
    steps.KIND: steps.detect,
}

_ORDER = {"critical": 0, "warning": 1, "info": 2, "skipped": 3}


def analyse(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with its findings computed afresh from its facts (owners, arena, probes):
    what capture does once a snapshot is complete, and what re-analyses a saved one."""
    return snapshot.with_findings(run_detectors(snapshot))


def run_detectors(snapshot: Snapshot) -> tuple[Finding, ...]:
    findings: list[Finding] = []
    for detect in DETECTORS.values():
        findings.extend(detect(snapshot))
    findings.sort(key=lambda f: (_ORDER.get(f.severity, 9), -f.bytes))
    # after the order is settled: the next fix recommended is the first one not applied
    return applied.mark_applied(snapshot, findings)
