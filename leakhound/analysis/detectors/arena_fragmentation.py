"""Arena fragmentation: RSS held by the allocators, not by live objects.

Fires when glibc holds free pages ``malloc_trim(0)`` could return (then ``fix: trim``); when
glibc holds free memory it cannot return (free chunks smaller than two pages, between live
allocations: fragmentation no trim undoes); and reports pymalloc's free space separately
because trimming cannot return it.
"""

from __future__ import annotations

from leakhound.analysis.detectors.base import mb, skipped
from leakhound.model import Finding, Snapshot
from leakhound.model.units import MiB

KIND = "arena_fragmentation"
# Trimmable memory worth acting on: at least this much, and this share of RSS.
MIN_TRIMMABLE = 16 * MiB
MIN_SHARE = 0.10


def detect(snapshot: Snapshot) -> list[Finding]:
    arena = snapshot.arena
    if not arena.available:
        return [skipped(KIND, f"allocator statistics unavailable: {arena.reason}")]
    rss = max(1, snapshot.process.rss_bytes)
    trimmable = arena.trimmable_bytes
    share = trimmable / rss
    live = snapshot.heap.bytes
    details = {
        "trimmable_bytes": trimmable,
        "malloc_free_bytes": arena.malloc_free_bytes,
        "pymalloc_free_bytes": arena.pymalloc_free_bytes,
        "rss_bytes": snapshot.process.rss_bytes,
        "live_bytes": live,
        "rss_to_live": round(rss / max(1, live), 2),
    }
    findings = []
    if trimmable >= MIN_TRIMMABLE and share >= MIN_SHARE:
        findings.append(
            Finding(
                kind=KIND,
                severity="critical" if share >= 0.3 else "warning",
                bytes=trimmable,
                count=0,
                owner="<glibc arenas>",
                fix="trim",
                summary=(
                    f"glibc holds {mb(trimmable)} of free pages ({share:.0%} of RSS) that "
                    f"malloc_trim(0) would return; RSS is {rss / max(1, live):.1f}x the live heap"
                ),
                details=details,
            )
        )
    untrimmable = max(0, arena.malloc_free_bytes - trimmable)
    if untrimmable >= MIN_TRIMMABLE and untrimmable / rss >= MIN_SHARE:
        findings.append(
            Finding(
                kind=KIND,
                severity="warning",
                bytes=untrimmable,
                count=0,
                owner="<glibc arenas: untrimmable>",
                fix="",
                summary=(
                    f"glibc holds {mb(untrimmable)} free ({untrimmable / rss:.0%} of RSS) that "
                    "malloc_trim cannot return: free chunks too small to hold a whole page, "
                    "between live allocations. It is reused for new allocations of those sizes; "
                    "it shrinks only when its neighbours are freed (fewer malloc arenas, "
                    "MALLOC_ARENA_MAX=2, or another allocator such as jemalloc, fragment less)"
                ),
                details=dict(details, untrimmable_bytes=untrimmable),
            )
        )
    if findings:
        return findings
    if arena.pymalloc_free_bytes >= MIN_TRIMMABLE and arena.pymalloc_free_bytes / rss >= MIN_SHARE:
        return [
            Finding(
                kind=KIND,
                severity="info",
                bytes=arena.pymalloc_free_bytes,
                count=arena.pymalloc_arenas,
                owner="<pymalloc arenas>",
                fix="",
                summary=(
                    f"pymalloc keeps {mb(arena.pymalloc_free_bytes)} free inside partly used "
                    "arenas; malloc_trim cannot return it (arenas are freed only when empty)"
                ),
                details=details,
            )
        ]
    return []
