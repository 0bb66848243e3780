"""Detectors: pure functions ``detect(snapshot) -> list[Finding]``, one module each.

A detector that recommends a fix is named as the fix (``--fix registry``, finding kind
``registry``, the payload probe's ``registry`` section); the others by the shape they see."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from leakhound.analysis.budgets import over_budget
from leakhound.analysis.detectors import (
    applied,
    arena_fragmentation,
    cyclic_garbage,
    intercepts,
    native_state,
    registry,
    steps,
    tracemalloc_on,
)
from leakhound.analysis.ranking import rank
from leakhound.model import Finding, Snapshot

DETECTORS: dict[str, Callable[[Snapshot], list[Finding]]] = {
    arena_fragmentation.KIND: arena_fragmentation.detect,
    cyclic_garbage.KIND: cyclic_garbage.detect,
    native_state.KIND: native_state.detect,
    registry.KIND: registry.detect,
    intercepts.KIND: intercepts.detect,
    steps.KIND: steps.detect,
    tracemalloc_on.KIND: tracemalloc_on.detect,
}


def analyse(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with its findings computed afresh from its facts (owners, arena, probes):
    what capture does once a snapshot is complete, and what re-analyses a saved one; with the
    budgets its look did not keep (analysis.budgets)."""
    return replace(snapshot.with_findings(run_detectors(snapshot)), over_budget=over_budget(snapshot))


def run_detectors(snapshot: Snapshot) -> tuple[Finding, ...]:
    findings: list[Finding] = []
    for detect in DETECTORS.values():
        findings.extend(detect(snapshot))
    # after the order is settled: the next fix recommended is the first one not applied
    return applied.mark_applied(snapshot, rank(findings))
