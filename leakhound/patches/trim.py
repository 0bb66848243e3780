"""trim: malloc_trim(0) now and every 10 s on a thread of its own; never gc.collect()."""

from __future__ import annotations

from typing import Any

from leakhound.model.units import count, percent
from leakhound.patches.base import Effect, FixSpec, Measurement, mb


def effect(before: Measurement, after: Measurement, counters: dict[str, Any]) -> Effect:
    # Measured by the patch itself around its first malloc_trim(0) (see payload/patches/trim.py).
    predicted = int(counters.get("first_trim_predicted_bytes", before.arena.get("trimmable_bytes", 0)))
    rss_before = int(counters.get("first_trim_rss_before", before.rss_bytes))
    rss_after = int(counters.get("first_trim_rss_after", after.rss_bytes))
    before = Measurement(rss_bytes=rss_before)
    after = Measurement(rss_bytes=rss_after)
    dropped = before.rss_bytes - after.rss_bytes
    ratio = dropped / predicted if predicted else 0.0
    return Effect(
        float(before.rss_bytes),
        float(after.rss_bytes),
        f"RSS {mb(before.rss_bytes)} -> {mb(after.rss_bytes)} ({mb(-dropped)}); the ledger predicted "
        f"{mb(predicted)} trimmable ({percent(ratio)} of it came back); {count(int(counters.get('trims', 0)), 'trim')} "
        f"so far, longest {counters.get('max_trim_ms', 0)} ms, on the {counters.get('cadence', '?')}",
    )


SPEC = FixSpec(
    name="trim",
    summary="malloc_trim(0) once now and every 10 s on a thread of its own, off the event loop (never gc.collect())",
    metric="RSS (should drop by about the predicted trimmable bytes)",
    changes=("glibc hands its free pages back to the kernel at once and every 10 s (--trim-every) "
             "from a thread of its own"),
    stays=("live objects and free memory in chunks smaller than a page stay: trimming returns only "
           "whole free pages"),
    effect=effect,
    immediate=True,
)
