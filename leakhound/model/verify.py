"""What ``patch --verify`` measured: memory slopes in a window before a fix and one after.

Frozen, like the snapshot model; ``leakhound.analysis.verify`` computes them from samples
taken in the target, and the JSON of ``patch --json`` is ``verify_to_dict`` (docs/patch.md).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

from leakhound.model.snapshot import AllocationSite, SiteTracking


class VerifyVerdict(str, enum.Enum):
    """What the slopes before and after a fix support (docs/patch.md, "Verify")."""

    STOPPED = "stopped"  # what the fix acts on grew before, and no longer grows
    SLOWED = "slowed"  # it grows at most half as fast as before
    STILL_GROWING = "still-growing"  # it grows about as fast as before
    NOT_PROVEN = "not-proven"  # nothing grew before by more than noise, or it was not measured

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class VerifyPoint:
    """One sample: RSS read from /proc, the allocators' in-use bytes read in the target (None:
    not read), and per fix the item count and estimated bytes of its owner (None: not found)."""

    taken_at: float
    rss_bytes: int
    heap_bytes: int | None = None
    owner_items: tuple[tuple[str, int, int], ...] = ()  # (fix, items, estimated bytes)
    # The trajectory registries' finished entries (what the registry fix stops), read in the
    # target at the sample (None: not asked for, or no registry the probe knows).
    finished_rollouts: int | None = None


@dataclass(frozen=True)
class WindowStats:
    """RSS and the live heap over one window: first and last values, least-squares slopes and
    each slope's standard error (how far the samples scatter around the line)."""

    started_at: float
    ended_at: float
    samples: int
    rss_first_bytes: int
    rss_last_bytes: int
    rss_bytes_per_min: float
    heap_first_bytes: int | None = None
    heap_last_bytes: int | None = None
    heap_bytes_per_min: float | None = None
    rss_stderr_bytes_per_min: float = 0.0
    heap_stderr_bytes_per_min: float | None = None

    @property
    def seconds(self) -> float:
        return self.ended_at - self.started_at


@dataclass(frozen=True)
class OwnerWindow:
    """The fixed owner over one window (bytes estimated as ``watch`` does: its retained bytes at
    the census before the fix, scaled by its item count now)."""

    samples: int
    items_first: int
    items_last: int
    items_per_min: float
    bytes_first: int
    bytes_last: int
    bytes_per_min: float
    # the mean item count over the window, and over its second half (where a fix's effect has
    # settled: what it let go is gone)
    items_mean: float = 0.0
    items_late_mean: float = 0.0


@dataclass(frozen=True)
class CountWindow:
    """A count over one window: first and last value and its least-squares slope."""

    samples: int
    first: int
    last: int
    per_min: float


@dataclass(frozen=True)
class FixVerdict:
    """One fix's verdict and the owner it was judged by (``path`` "" when it has none: judged by
    the live heap, or RSS)."""

    fix: str
    verdict: str
    summary: str
    judged_by: str  # finished-rollouts | owner | owner-level | heap | rss
    path: str = ""
    type: str = ""
    object_id: int = 0
    before: OwnerWindow | None = None
    after: OwnerWindow | None = None
    # registry: the finished rollouts held, per window (None for the other fixes)
    finished_rollouts_before: CountWindow | None = None
    finished_rollouts_after: CountWindow | None = None


@dataclass(frozen=True)
class FixedOwnerSites:
    """``--verify --sites``: where a fixed owner's bytes allocated after the fix and still alive
    at the end were allocated (its growth the fix left), from the census after the window."""

    fix: str
    path: str  # the fixed owner in that census ("" when it named none: its sites are then empty)
    sites: tuple[AllocationSite, ...] = ()


@dataclass(frozen=True)
class VerifyReport:
    """One process's proof: both windows, each fix's verdict, and the verdict of them all."""

    pid: int
    fixes: tuple[str, ...]
    interval_seconds: float
    before: WindowStats | None
    after: WindowStats | None
    per_fix: tuple[FixVerdict, ...]
    verdict: str
    summary: str
    notes: tuple[str, ...] = ()
    # --sites: the tracker's totals over the window after the fix (``process``: the whole
    # process's sites), and each fixed owner's sites
    sites: SiteTracking | None = None
    owner_sites: tuple[FixedOwnerSites, ...] = ()


def verify_to_dict(report: VerifyReport) -> dict[str, Any]:
    doc = asdict(report)
    for window in ("before", "after"):
        if doc[window] is not None:
            stats = getattr(report, window)
            doc[window]["seconds"] = round(stats.seconds, 3)
    return doc
