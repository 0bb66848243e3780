"""Step bloat: each trajectory step stores the whole serialised response, whose ``message``
restates the completion and whose ``message.tokens`` restate the prompt ids and mask."""

from __future__ import annotations

from leakhound.analysis.detectors._verifiers import owner_path, probe
from leakhound.analysis.detectors.base import mb, skipped
from leakhound.model import Finding, Snapshot
from leakhound.model.names import Fix

KIND = Fix.STEPS.value  # named as the fix it recommends and the payload probe that measures it


def detect(snapshot: Snapshot) -> list[Finding]:
    facts, reason = probe(snapshot)
    if facts is None:
        return [skipped(KIND, reason)]
    steps = facts["steps"]
    bloated = int(steps["bloated_steps"])
    if bloated == 0:
        return []
    share = steps["redundant_bytes"] / max(1, snapshot.process.rss_bytes)
    return [
        Finding(
            kind=KIND,
            severity="warning" if share >= 0.05 else "info",
            bytes=int(steps["redundant_bytes"]),
            count=bloated,
            owner=owner_path(snapshot, ".trajectories", "Runtime.trajectories"),
            fix=KIND,
            summary=(
                f"{bloated:,} of {steps['steps']:,} trajectory steps store the whole serialised "
                f"response; its message restates the completion and prompt tokens "
                f"({mb(steps['redundant_bytes'])} redundant)"
            ),
            details=dict(steps),
        )
    ]
