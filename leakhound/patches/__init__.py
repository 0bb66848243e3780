"""The four fixes, CLI side: what each one moves and how to read its effect.

The code that runs in the target lives in ``leakhound/payload/patches/`` (one module per fix:
recognise, apply, revert). Here, one module per fix declares its ``METRIC`` and turns two
measurements taken in the target (before and after, see ``Measurement``) plus the patch's own
counters into before/after numbers and a one-line effect (``outcome``). Pure functions.
"""

from __future__ import annotations

from leakhound.model.names import FIX_NAMES
from leakhound.patches import intercepts, registry, steps, trim
from leakhound.patches.base import FixSpec, Measurement

_SPECS = {m.SPEC.name: m.SPEC for m in (steps, registry, intercepts, trim)}
#: One spec per fix, in ``FIX_NAMES`` order (a fix without its module fails here, at import).
FIXES: dict[str, FixSpec] = {name: _SPECS[name] for name in FIX_NAMES}

__all__ = ["FIXES", "FixSpec", "Measurement"]
