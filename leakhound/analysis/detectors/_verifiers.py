"""Shared by the verifiers leak-shape detectors: the probe facts and owner naming."""

from __future__ import annotations

from typing import Any

from leakhound.model import Snapshot


def probe(snapshot: Snapshot) -> tuple[dict[str, Any] | None, str]:
    """The ``verifiers`` probe section, or None with the reason it is missing."""
    found = snapshot.probes.get("verifiers")
    if not isinstance(found, dict):
        return None, "this snapshot has no verifiers probe (taken by an older leakhound?)"
    if "skipped" in found:
        return None, str(found["skipped"])
    return found, ""


def owner_path(snapshot: Snapshot, suffix: str, fallback: str) -> str:
    """The census owner whose path ends with ``suffix`` (largest first), else ``fallback``."""
    for owner in snapshot.owners:
        if owner.path.endswith(suffix):
            return owner.path
    return fallback
