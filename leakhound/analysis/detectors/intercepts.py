"""Intercept bodies: ``InterceptionServer.intercepts`` keeps each request's body after the
response was delivered (until the rollout ends); with screenshots in the message history
this is the dominant term of a worker's peak."""

from __future__ import annotations

from leakhound.analysis.detectors._verifiers import owner_count_note, owner_path, probe
from leakhound.analysis.detectors.base import mb, skipped
from leakhound.model import Finding, Snapshot
from leakhound.model.names import Fix
from leakhound.model.units import count, percent

KIND = Fix.INTERCEPTS.value  # named as the fix it recommends and the payload probe that measures it


def detect(snapshot: Snapshot) -> list[Finding]:
    facts, reason = probe(snapshot)
    if facts is None:
        return [skipped(KIND, reason)]
    held = facts["intercepts"]
    if held["servers"] == 0:
        return [skipped(KIND, "no InterceptionServer reachable from the runtimes")]
    delivered = int(held["delivered"])
    if delivered == 0:
        return []
    counted = owner_count_note(snapshot, ".intercepts", held, int(held["entries"]), holders=int(held["servers"]))
    b64 = held["base64_bytes"] / max(1, held["body_bytes"])
    share = held["delivered_body_bytes"] / max(1, snapshot.process.rss_bytes)
    return [
        Finding(
            kind=KIND,
            severity="critical" if share >= 0.2 else "warning",
            bytes=int(held["delivered_body_bytes"]),
            count=delivered,
            owner=owner_path(snapshot, ".intercepts", "InterceptionServer.intercepts"),
            fix=KIND,
            summary=(
                f"InterceptionServer.intercepts holds {count(held['entries'], 'request body', 'request bodies')}"
                f"{counted}: "
                f"{delivered} already delivered ({mb(held['delivered_body_bytes'])}), "
                f"{held['pending']} pending; {percent(b64)} of body bytes are base64"
            ),
            details=dict(held),
        )
    ]
