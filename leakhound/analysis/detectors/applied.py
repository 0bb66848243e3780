"""Findings whose fix is applied already: marked ``applied``, and the next fix recommended.

The target records each fix leakhound applied in it (when, by whom: the ``patches`` probe).
A finding whose fix is among them keeps its bytes (what is held now) but no longer recommends
that fix: its summary says what the fix does not give back (the fix's ``stays``, e.g. the
finished rollouts already registered stay until the worker restarts) and names the next fix
not applied yet, the first one the findings recommend in their order.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from leakhound.model import AppliedFix, Finding, Snapshot
from leakhound.patches import FIXES

PROBE = "patches"


def applied_fixes(snapshot: Snapshot) -> dict[str, AppliedFix]:
    """The fixes the target says are applied, by name (empty for a snapshot of a leakhound
    that did not ask, or a probe answer that is not the expected shape)."""
    found = snapshot.probes.get(PROBE)
    entries = found.get("applied") if isinstance(found, dict) else None
    out: dict[str, AppliedFix] = {}
    for entry in entries if isinstance(entries, list) else ():
        fix = applied_fix(entry)
        if fix is not None:
            out[fix.fix] = fix
    return out


def applied_fix(entry: Any) -> AppliedFix | None:
    """An ``AppliedFix`` from the target's record of one fix (the ``patches`` probe's entries,
    and the patch answers' results: ``fix``, ``functions``, ``applied_at``, ``applied_by``)."""
    # From inside the target, whose owner controls it: only known fixes and plain values.
    if not isinstance(entry, dict) or entry.get("fix") not in FIXES:
        return None
    found_by = entry.get("applied_by")
    by: dict[str, Any] = found_by if isinstance(found_by, dict) else {}
    at = entry.get("applied_at")
    uid = by.get("uid")
    functions = entry.get("functions")
    return AppliedFix(
        fix=str(entry["fix"]),
        applied_at=float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None,
        uid=uid if isinstance(uid, int) and not isinstance(uid, bool) else -1,
        user=str(by.get("user") or "")[:64],
        leakhound_version=str(by.get("leakhound_version") or "")[:40],
        functions=tuple(str(f) for f in functions) if isinstance(functions, list) else (),
    )


def when_and_who(applied: AppliedFix) -> str:
    """``applied 2026-12-02 01:52 UTC by root (uid 0, leakhound 0.1.0)``."""
    when = (time.strftime(" %Y-%m-%d %H:%M UTC", time.gmtime(applied.applied_at))
            if applied.applied_at is not None else "")
    who = [f"uid {applied.uid}"] if applied.uid >= 0 else []
    if applied.leakhound_version:
        who.append(f"leakhound {applied.leakhound_version}")
    by = f" by {applied.user} ({', '.join(who)})" if applied.user else (f" ({', '.join(who)})" if who else "")
    return f"applied{when}{by}"


def mark_applied(snapshot: Snapshot, findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """``findings`` (in their order) with each one whose fix is applied marked so."""
    applied = applied_fixes(snapshot)
    if not applied:
        return tuple(findings)
    pending = [f.fix for f in findings if f.fix and f.fix not in applied and not f.skipped]
    next_fix = pending[0] if pending else ""
    out = []
    for f in findings:
        fix = applied.get(f.fix) if f.fix else None
        if fix is None:
            out.append(f)
            continue
        out.append(dataclasses.replace(
            f, fix="", applied=fix,
            summary=f"{f.summary}. Fix {fix.fix} {when_and_who(fix)}: {FIXES[fix.fix].stays}",
            # the fix to apply next ("" when none is left), shown as its command
            details={**f.details, "next_fix": next_fix},
        ))
    return tuple(out)
