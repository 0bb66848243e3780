"""registry: finished rollouts are evicted from Runtime.trajectories at cleanup_group."""

from __future__ import annotations

from typing import Any

from leakhound.patches.base import Effect, FixSpec, Measurement


def effect(before: Measurement, after: Measurement, counters: dict[str, Any]) -> Effect:
    b = before.section("registry")
    a = after.section("registry")
    if not b or not a:
        return Effect(None, None, "no verifiers runtime to measure")
    evicted = int(counters.get("evicted", 0))
    grew = int(a["finished_entries"]) - int(b["finished_entries"])
    verdict = "stopped growing" if grew <= 0 else f"still grew by {grew}"
    return Effect(
        float(b["finished_entries"]),
        float(a["finished_entries"]),
        f"finished rollouts held: {b['finished_entries']} -> {a['finished_entries']} ({verdict}); "
        f"{evicted} entries evicted at cleanup_group; entries leaked before the fix stay until restart",
    )


SPEC = FixSpec(
    name="registry",
    summary="Runtime.cleanup_group evicts finished rollouts from Runtime.trajectories (safe for grouped rollouts)",
    metric="finished rollouts still in Runtime.trajectories",
    changes=("each group's trajectories leave Runtime.trajectories when cleanup_group ends, so finished "
             "rollouts stop accumulating"),
    stays=("the finished rollouts already in Runtime.trajectories stay until the worker restarts "
           "(only the worker knew which were finished when they ended)"),
    effect=effect,
)
