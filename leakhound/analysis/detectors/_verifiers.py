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


def owner_count_note(snapshot: Snapshot, suffix: str, section: dict[str, Any], count: int, *,
                     holders: int = 1) -> str:
    """Why the probe's ``count`` of a collection is not the owners table's ``items`` for it,
    in words ("" when they agree, or the table has no such owner). The table counted the
    collection as the walk passed it; the probe counts it afterwards (``section["read_at"]``,
    seconds later on a big heap), and on a busy worker rollouts start and end in between;
    with several runtimes or servers the probe sums them all."""
    owner = next((o for o in snapshot.owners if o.path.endswith(suffix)), None)
    if owner is None or owner.items == count:
        return ""
    if holders > 1:
        return f" (summed over {holders}; the owners table counts each on its own row)"
    read_at = section.get("read_at")
    if isinstance(read_at, (int, float)) and read_at >= snapshot.taken_at:
        when = f"{read_at - snapshot.taken_at:.1f} s earlier"
    else:
        when = "earlier in this look"
    return f" ({owner.items:,} in the owners table, counted {when}: the worker kept running)"
