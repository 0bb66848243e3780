"""Registry leak: ``Runtime.trajectories`` keeps every finished rollout's trajectory.

An entry whose rollout no live task still holds is retained only by the process-lifetime
Runtime; the registry fix evicts it at the safe point (``cleanup_group``, which grouped and
ungrouped rollouts both reach after their last borrower).
"""

from __future__ import annotations

from leakhound.analysis.detectors._verifiers import owner_count_note, owner_path, probe
from leakhound.analysis.detectors.base import mb, skipped
from leakhound.model import Finding, Snapshot
from leakhound.model.names import Fix
from leakhound.model.units import count

KIND = Fix.REGISTRY.value  # named as the fix it recommends and the payload probe that measures it


def detect(snapshot: Snapshot) -> list[Finding]:
    facts, reason = probe(snapshot)
    if facts is None:
        return [skipped(KIND, reason)]
    reg = facts["registry"]
    finished = int(reg["finished_entries"])
    if finished == 0:
        return []
    counted = owner_count_note(snapshot, ".trajectories", reg, int(reg["entries"]), holders=int(reg.get("runtimes", 1)))
    share = reg["finished_bytes"] / max(1, snapshot.process.rss_bytes)
    return [
        Finding(
            kind=KIND,
            severity="critical" if share >= 0.2 else "warning",
            bytes=int(reg["finished_bytes"]),
            count=finished,
            owner=owner_path(snapshot, ".trajectories", "Runtime.trajectories"),
            fix=KIND,
            summary=(
                f"Runtime.trajectories holds {count(reg['entries'], 'trajectory', 'trajectories')}"
                f"{counted}, {finished} of them "
                f"from rollouts that have finished ({reg['finished_steps']} steps, "
                f"{mb(reg['finished_bytes'])}); nothing evicts them, so every completed rollout "
                "stays in memory for the life of the worker"
            ),
            details=dict(reg),
        )
    ]
