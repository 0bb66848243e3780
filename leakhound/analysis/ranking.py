"""The order findings are listed in: the most memory at stake first.

What is at stake is the bytes a finding names now plus, for an owner a watch saw growing, what
it adds in the next hour at its rate. Severity only breaks ties: a detector's severity is its
share of RSS against a threshold of its own, so a 510 B warning was listed above a 15 MiB info
finding. Findings a detector could not check come last.
"""

from __future__ import annotations

from leakhound.model import Finding

# How far ahead a growing owner's rate counts: what an on-call engineer weighs against a
# restart (a leak of 50 MiB/min outranks 1 GiB that stays put).
GROWTH_HORIZON_MINUTES = 60.0
_SEVERITY = {"critical": 0, "warning": 1, "info": 2, "skipped": 3}


def bytes_at_stake(finding: Finding) -> float:
    growth = finding.details.get("bytes_per_min", 0.0) if finding.details.get("verdict") == "growing" else 0.0
    rate = growth if isinstance(growth, (int, float)) and growth > 0 else 0.0
    return finding.bytes + rate * GROWTH_HORIZON_MINUTES


def rank(findings: list[Finding]) -> tuple[Finding, ...]:
    """``findings`` most at stake first; equal stakes by severity; skipped ones last."""
    return tuple(sorted(findings, key=lambda f: (f.skipped, -bytes_at_stake(f), _SEVERITY.get(f.severity, 9))))
