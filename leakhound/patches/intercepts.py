"""intercepts: a request body leaves InterceptionServer.intercepts once its response is delivered."""

from __future__ import annotations

from typing import Any

from leakhound.patches.base import Effect, FixSpec, Measurement, mb


def effect(before: Measurement, after: Measurement, counters: dict[str, Any]) -> Effect:
    b = before.section("intercepts")
    a = after.section("intercepts")
    if not b or not a:
        return Effect(None, None, "no verifiers runtime to measure")
    discarded = int(counters.get("bodies_discarded", 0))
    return Effect(
        float(b["delivered"]),
        float(a["delivered"]),
        f"delivered bodies held: {b['delivered']} ({mb(b['delivered_body_bytes'])}) -> "
        f"{a['delivered']} ({mb(a['delivered_body_bytes'])}); pending (in flight): {a['pending']}; "
        f"{discarded} bodies ({mb(counters.get('body_bytes_discarded', 0))}) discarded after delivery",
    )


SPEC = FixSpec(
    name="intercepts",
    summary="forward_request discards the intercepted request body once its response is delivered",
    metric="delivered request bodies still held",
    changes=("each intercepted request body leaves InterceptionServer.intercepts as soon as its "
             "response is delivered, not when its rollout ends"),
    stays="bodies delivered before the fix stay until their rollout ends",
    effect=effect,
)
