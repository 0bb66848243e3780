"""steps: new trajectory steps keep identity/usage only (truncated ones also their raw token ids)."""

from __future__ import annotations

from typing import Any

from leakhound.model.units import change, count
from leakhound.patches.base import Effect, FixSpec, Measurement


def effect(before: Measurement, after: Measurement, counters: dict[str, Any]) -> Effect:
    slimmed = int(counters.get("steps_slimmed", 0))
    # Sized off the request path, a sample of the steps slimmed (payload/patches/steps.py).
    measured = int(counters.get("steps_measured", slimmed))
    if slimmed == 0:
        return Effect(None, None, "no new step since the fix was applied; watch longer (--verify)")
    if measured == 0:
        return Effect(None, None, f"{slimmed} steps slimmed, none sized yet; watch longer (--verify)")
    per_before = counters.get("response_bytes_before", 0) / measured
    per_after = counters.get("response_bytes_after", 0) / measured
    sidecars = int(counters.get("sidecars", 0))
    return Effect(
        per_before,
        per_after,
        f"stored response per new step {per_before:,.0f} -> {per_after:,.0f} bytes ({change(per_before, per_after)}) "
        f"over {measured} of {slimmed} steps (sized off the request path); {count(sidecars, 'step')} cut short by the "
        f"token budget kept the raw token ids the trainer reads back",
    )


SPEC = FixSpec(
    name="steps",
    summary=("trajectory steps keep identity/usage only (steps cut short by the token budget also keep their "
             "raw token ids)"),
    metric="bytes stored per new step's response",
    changes=("each new trajectory step stores its response without the message that restates the "
             "completion and prompt tokens (a truncated step keeps a raw-token sidecar)"),
    stays="the steps stored before the fix keep their whole response until the worker restarts",
    effect=effect,
)
