"""The one interface every detector implements."""

from __future__ import annotations

from typing import Protocol

from leakhound.model import Finding, Snapshot
from leakhound.model.units import MiB, fmt_bytes


class Detector(Protocol):
    KIND: str

    def detect(self, snapshot: Snapshot) -> list[Finding]: ...


def skipped(kind: str, reason: str) -> Finding:
    """"Could not check" is a result, not an exception."""
    return Finding(kind=kind, severity="skipped", bytes=0, count=0, owner="", fix="", summary=reason)


def mb(n: float) -> str:
    """In MiB, as findings compare with one another; under 1 MiB in its own unit (510 B was
    "0.0 MiB": a number that is not zero said as zero)."""
    return fmt_bytes(n, "MiB") if n == 0 or abs(n) >= MiB else fmt_bytes(n)
