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
        return None, str(found["skipped"]) + _inspect_instead(found.get("env_worker_children"))
    return found, ""


def _inspect_instead(children: Any) -> str:
    """The env worker processes to inspect instead (the EnvServer's children that run the
    runtime), as ``capture`` named them; "" when none (or a saved file's are malformed)."""
    if not isinstance(children, list):
        return ""
    named = [(c["pid"], c["title"]) for c in children if isinstance(c, dict)
             and isinstance(c.get("pid"), int) and isinstance(c.get("title"), str)]
    if not named:
        return ""
    workers = ", ".join(f"{pid} ({title})" for pid, title in named)
    return f"; its env worker{'s' if len(named) > 1 else ''} {workers} run{'' if len(named) > 1 else 's'} it: " \
           f"leakhound inspect {named[0][0]}"


def owner_path(snapshot: Snapshot, suffix: str, fallback: str) -> str:
    """The census owner whose path ends with ``suffix`` (largest first), else ``fallback``."""
    for owner in snapshot.owners:
        if owner.path.endswith(suffix):
            return owner.path
    return fallback
