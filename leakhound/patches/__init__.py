"""The four fixes, CLI side: what each one moves and how to read its effect.

The code that runs in the target lives in ``leakhound/payload/patches/`` (one module per fix:
recognise, apply, revert). Here, one module per fix declares its ``METRIC`` and turns two
measurements taken in the target (before and after, see ``Measurement``) plus the patch's own
counters into before/after numbers and a one-line effect (``outcome``). Pure functions.
"""

from __future__ import annotations

from leakhound.patches import intercepts, registry, steps, trim
from leakhound.patches.base import FixSpec, Measurement

FIXES: dict[str, FixSpec] = {m.SPEC.name: m.SPEC for m in (steps, registry, intercepts, trim)}
ORDER = ("steps", "registry", "intercepts", "trim")

__all__ = ["FIXES", "ORDER", "FixSpec", "Measurement", "parse_fixes"]


def parse_fixes(text: str) -> list[str]:
    """``all`` or a comma list of fix names, in canonical order. Raises ValueError."""
    names = {part.strip() for part in text.split(",") if part.strip()}
    if "all" in names:
        names = set(ORDER) | (names - {"all"})
    unknown = sorted(names - set(ORDER))
    if unknown or not names:
        raise ValueError(f"unknown fix {', '.join(unknown) or '(none)'}; choose from all, {', '.join(ORDER)}")
    return [name for name in ORDER if name in names]
