"""tracemalloc left tracing a worker: its own tables, outside every Python object.

``PYTHONTRACEMALLOC=1`` (or a ``tracemalloc.start()`` nobody stopped) records a trace for
every allocation the worker makes, in tables tracemalloc mallocs for itself: a 300,000-dict
heap of 88 MiB carried 70 MiB of them, which the ledger put in "other" (56% of RSS) with no
word on why. The payload reads ``tracemalloc.get_tracemalloc_memory()`` (payload/arena.py);
the ledger shows it as its own row, and this says so and how to give it back.
"""

from __future__ import annotations

from leakhound.model import Finding, Snapshot
from leakhound.model.units import MiB, fmt_bytes

KIND = "tracemalloc_on"
# Under this it is a few traces (a test or a short trace in progress): info; at or over it,
# or this share of RSS, a warning
WARN_BYTES = 64 * MiB
WARN_SHARE = 0.10


def detect(snapshot: Snapshot) -> list[Finding]:
    held = snapshot.arena.tracemalloc_bytes
    if held <= 0:
        return []
    rss = max(1, snapshot.process.rss_bytes)
    severity = "warning" if held >= WARN_BYTES or held >= WARN_SHARE * rss else "info"
    return [
        Finding(
            kind=KIND,
            severity=severity,
            bytes=held,
            count=0,
            owner="<tracemalloc>",
            fix="",
            summary=(
                f"tracemalloc is tracing this worker: {fmt_bytes(held)} ({held / rss:.0%} of RSS) of its own "
                f"tables, a trace for every live allocation, outside every Python object; unless someone is "
                f"reading it now, tracemalloc.stop() in the worker gives it back (and PYTHONTRACEMALLOC unset "
                f"keeps the next one from starting it)"
            ),
            details={"tracemalloc_bytes": held},
        )
    ]
