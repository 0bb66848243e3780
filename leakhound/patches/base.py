"""The interface each fix module implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leakhound.model.units import fmt_bytes


@dataclass(frozen=True)
class Measurement:
    """What the payload's ``measure`` reports: the verifiers probe, allocator stats, RSS."""

    rss_bytes: int
    arena: dict[str, Any] = field(default_factory=dict)
    verifiers: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_payload(cls, doc: dict[str, Any]) -> Measurement:
        return cls(
            rss_bytes=int(doc.get("rss_bytes", 0)),
            arena=dict(doc.get("arena") or {}),
            verifiers=dict(doc.get("verifiers") or {}),
        )

    def section(self, name: str) -> dict[str, Any]:
        value = self.verifiers.get(name)
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Effect:
    before: float | None
    after: float | None
    summary: str


@dataclass(frozen=True)
class FixSpec:
    name: str
    summary: str
    metric: str
    # (before, after, counters) -> Effect
    effect: Callable[[Measurement, Measurement, dict[str, Any]], Effect]
    # True when the effect is read right after applying (trim acts at once; waiting would
    # mix in the worker's own churn), False when it needs a window of new work.
    immediate: bool = False
    # One sentence each, said by --dry-run and by inspect once the fix is applied: what the
    # worker does differently from the moment it lands, and what it does not give back.
    changes: str = ""
    stays: str = ""


def mb(n: float) -> str:
    return fmt_bytes(n, "MiB")
