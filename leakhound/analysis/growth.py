"""Growth over time: from a series of samples of one process, which owners keep growing.

Pure arithmetic over ``Sample``s (cheap in-target samples and full snapshots, see
``sample_from_snapshot``). For every owner, the process RSS, the live heap and the object
types, a least-squares slope over the whole window and over its recent part gives a verdict:

* ``growing``: grew by more than noise over the window and still grows at the end (a leak);
* ``plateaued``: grew, then stopped (a bounded cache that filled up);
* ``static``: did not grow by more than noise (a large table built once, or churn);
* ``unknown``: too few samples to tell.

Owners that grow become ``Finding(kind="growth")`` naming the owner path and its rate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from leakhound.model import Finding
from leakhound.model.growth import (
    GROWING,
    PLATEAUED,
    STATIC,
    UNKNOWN,
    GrowthReport,
    OwnerSample,
    Sample,
    Trend,
    Verdict,
    report_to_dict,
    sample_from_dict,
    sample_from_snapshot,
    sample_to_dict,
    trend_to_dict,
)
from leakhound.model.names import CODE_OWNER
from leakhound.model.units import MiB, fmt_bytes

# The model's names stay importable from here, where they were computed first.
__all__ = [
    "GROWING", "PLATEAUED", "STATIC", "UNKNOWN", "GrowthReport", "OwnerSample", "Sample", "Thresholds",
    "Trend", "Verdict", "analyse_growth", "estimate_owners", "growth_findings", "report_to_dict",
    "sample_from_dict", "sample_from_snapshot", "sample_to_dict", "slope", "trend", "trend_to_dict",
]

KIND = "growth"
MB = MiB  # the old name, kept importable


@dataclass(frozen=True)
class Thresholds:
    """What counts as growth rather than noise, over the whole watch window."""

    min_bytes: int = 256 * 1024
    min_items: int = 100
    relative: float = 0.02  # of the starting size
    plateau_ratio: float = 0.25  # recent slope below this share of the overall slope
    recent_fraction: float = 1 / 3  # the recent part of the window
    min_points: int = 3


DEFAULT_THRESHOLDS = Thresholds()


# -- building samples --------------------------------------------------------------------------


def estimate_owners(
    reference: Sample, measured: dict[str, int]
) -> tuple[OwnerSample, ...]:
    """Owners of a cheap sample: item counts measured now, bytes scaled from ``reference``
    (the last full sample) by items. Owners not measured now are left out."""
    out = []
    for owner in reference.owners:
        if owner.path not in measured:
            continue
        items = measured[owner.path]
        if owner.items > 0:
            size = round(owner.bytes * items / owner.items)
        else:
            size = owner.bytes
        out.append(OwnerSample(owner.path, owner.type, items, size, estimated=True))
    return tuple(out)


# -- the arithmetic ----------------------------------------------------------------------------


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope (units per second); 0 for fewer than two distinct times."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / var


def _recent(points: Sequence[tuple[float, float]], fraction: float, minimum: int) -> list[tuple[float, float]]:
    end = points[-1][0]
    span = end - points[0][0]
    recent = [p for p in points if p[0] >= end - span * fraction]
    if len(recent) < minimum:
        recent = list(points[-minimum:])
    return recent


def _grew(points: Sequence[tuple[float, float]], per_second: float, floor: int, th: Thresholds) -> bool:
    span = points[-1][0] - points[0][0]
    growth = per_second * span
    base = max(0.0, points[0][1])
    return growth >= max(float(floor), th.relative * base)


def _verdict(
    points: Sequence[tuple[float, float]], per_second: float, floor: int, th: Thresholds, *, exact: bool = False
) -> tuple[str, float]:
    """(verdict, recent slope) of one series."""
    if len(points) < th.min_points or points[-1][0] <= points[0][0]:
        return UNKNOWN, 0.0
    recent = _recent(points, th.recent_fraction, th.min_points)
    recent_slope = slope(recent)
    if not _grew(points, per_second, floor, th):
        return STATIC, recent_slope
    if len(points) <= th.min_points:
        return GROWING, recent_slope
    if recent_slope < th.plateau_ratio * per_second:
        return PLATEAUED, recent_slope
    if exact:
        # Item counts are exact: still rising at a rate that would be growth over the whole
        # window is a leak. (Judged over the recent third alone, against the window's 2% noise
        # floor, any steady leak that grew by 2-6% of its size in the window was "plateaued".)
        if not _grew([points[0], points[-1]], recent_slope, floor, th):
            return PLATEAUED, recent_slope
        return GROWING, recent_slope
    # Bytes and RSS move in allocator steps (a census's own working memory is one): a series
    # slowing down whose recent part rose by less than noise has levelled off (an allocator
    # settling after a cache filled up is not a leak); one not slowing down has not.
    if recent_slope < per_second and not _grew(recent, recent_slope, floor, th):
        return PLATEAUED, recent_slope
    return GROWING, recent_slope


def trend(
    name: str,
    kind: str,
    series: Sequence[tuple[float, int, int]],
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    type_name: str = "",
    use_items: bool = True,
) -> Trend:
    """The trend of one series of (time, bytes, items) points, sorted by time.

    The verdict follows item counts when they are measured (exact even in cheap samples) and
    grew, bytes otherwise; ``use_items=False`` for series without item counts (RSS, heap).
    """
    th = thresholds
    series = sorted(series)
    by_bytes = [(t, float(b)) for t, b, _ in series]
    by_items = [(t, float(i)) for t, _, i in series]
    bytes_rate = slope(by_bytes)
    items_rate = slope(by_items) if use_items else 0.0
    verdict_b, recent_b = _verdict(by_bytes, bytes_rate, th.min_bytes, th)
    if use_items:
        verdict_i, recent_i = _verdict(by_items, items_rate, th.min_items, th, exact=True)
    else:
        verdict_i, recent_i = STATIC, 0.0
    if verdict_i in (GROWING, PLATEAUED):
        verdict = verdict_i
    elif verdict_b == UNKNOWN or verdict_i == UNKNOWN:
        verdict = UNKNOWN
    else:
        verdict = verdict_b
    first, last = series[0], series[-1]
    return Trend(
        name=name,
        kind=kind,
        verdict=verdict,
        bytes_per_min=bytes_rate * 60.0,
        items_per_min=items_rate * 60.0,
        recent_bytes_per_min=recent_b * 60.0,
        recent_items_per_min=recent_i * 60.0,
        first_bytes=first[1],
        last_bytes=last[1],
        first_items=first[2],
        last_items=last[2],
        points=len(series),
        seconds=last[0] - first[0],
        type=type_name,
    )


def _owner_series(samples: Sequence[Sample]) -> dict[str, tuple[str, list[tuple[float, int, int]]]]:
    series: dict[str, tuple[str, list[tuple[float, int, int]]]] = {}
    for sample in samples:
        for owner in sample.owners:
            entry = series.setdefault(owner.path, (owner.type, []))
            entry[1].append((sample.taken_at, owner.bytes, owner.items))
    return series


def _type_series(samples: Sequence[Sample]) -> dict[str, list[tuple[float, int, int]]]:
    # Census counts (all objects) and cheap counts (gc-tracked only) are not comparable:
    # follow whichever scope has more samples.
    scoped = {
        scope: [s for s in samples if s.types_scope == scope] for scope in ("all", "tracked")
    }
    chosen = max(scoped.values(), key=len)
    series: dict[str, list[tuple[float, int, int]]] = {}
    for sample in chosen:
        for stat in sample.types:
            series.setdefault(stat.type, []).append((sample.taken_at, stat.bytes, stat.count))
    return series


_ORDER: dict[str, int] = {GROWING: 0, PLATEAUED: 1, STATIC: 2, UNKNOWN: 3}


def analyse_growth(
    samples: Iterable[Sample],
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    top_types: int = 20,
) -> GrowthReport:
    """Trends and ``growth`` findings for one process from its samples (any order)."""
    ordered = sorted(samples, key=lambda s: s.taken_at)
    if not ordered:
        raise ValueError("no samples")
    pids = {s.pid for s in ordered}
    if len(pids) != 1:
        raise ValueError(f"samples of several processes: {sorted(pids)}")
    last = ordered[-1]
    rss = trend(
        "rss", "rss", [(s.taken_at, s.rss_bytes, 0) for s in ordered],
        thresholds=thresholds, use_items=False,
    )
    heap_points = [(s.taken_at, s.heap_bytes, 0) for s in ordered if s.heap_bytes is not None]
    heap = (
        trend("heap", "heap", heap_points, thresholds=thresholds, use_items=False)
        if heap_points
        else None
    )
    owners = [
        trend(path, "owner", points, thresholds=thresholds, type_name=type_name)
        for path, (type_name, points) in _owner_series(ordered).items()
    ]
    owners.sort(key=lambda t: (_ORDER[t.verdict], -t.bytes_per_min, -t.last_bytes, t.name))
    types = [
        trend(name, "type", points, thresholds=thresholds)
        for name, points in _type_series(ordered).items()
    ]
    types.sort(key=lambda t: (_ORDER[t.verdict], -t.items_per_min, t.name))
    report = GrowthReport(
        pid=last.pid,
        name=next((s.name for s in reversed(ordered) if s.name), ""),
        samples=len(ordered),
        full_samples=sum(1 for s in ordered if s.full),
        seconds=ordered[-1].taken_at - ordered[0].taken_at,
        rss=rss,
        heap=heap,
        owners=tuple(owners),
        types=tuple(types[:top_types]),
    )
    return GrowthReport(**{**_fields(report), "findings": growth_findings(report)})


def _fields(report: GrowthReport) -> dict[str, Any]:
    return {name: getattr(report, name) for name in GrowthReport.__dataclass_fields__}


def _mb(n: float) -> str:
    return fmt_bytes(n, "MiB", decimals=2)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def growth_findings(report: GrowthReport) -> tuple[Finding, ...]:
    """``growing`` owners are warnings, ``plateaued`` ones info; RSS growth that no owner
    explains is a warning of its own (fragmentation or memory outside Python objects)."""
    findings = []
    for t in report.owners:
        # The code owner grows with every import: no leak anyone can fix.
        if t.verdict not in (GROWING, PLATEAUED) or t.name == CODE_OWNER:
            continue
        details = {
            "pid": report.pid,
            "verdict": t.verdict,
            "bytes_per_min": round(t.bytes_per_min, 1),
            "items_per_min": round(t.items_per_min, 2),
            "recent_bytes_per_min": round(t.recent_bytes_per_min, 1),
            "recent_items_per_min": round(t.recent_items_per_min, 2),
            "window_seconds": round(t.seconds, 2),
            "samples": t.points,
        }
        if t.verdict == GROWING:
            summary = (
                f"{t.name} ({t.type}) keeps growing: {_mb(t.bytes_per_min)}/min, "
                f"{t.items_per_min:,.0f} items/min over {_minutes(t.seconds)} "
                f"(now {_mb(t.last_bytes)}, {t.last_items:,} items)"
            )
            severity = "warning"
        else:
            summary = (
                f"{t.name} ({t.type}) grew, then plateaued at {_mb(t.last_bytes)}, "
                f"{t.last_items:,} items (a bounded cache?)"
            )
            severity = "info"
        findings.append(
            Finding(
                kind=KIND, severity=severity, bytes=t.last_bytes, count=t.last_items,
                owner=t.name, fix="", summary=summary, details=details,
            )
        )
    if report.rss.verdict == GROWING and not any(t.verdict == GROWING for t in report.owners):
        r = report.rss
        heap_note = (
            f"live heap {_mb(report.heap.bytes_per_min)}/min"
            if report.heap is not None and report.heap.verdict != UNKNOWN
            else "live heap not measured"
        )
        findings.append(
            Finding(
                kind=KIND, severity="warning", bytes=r.last_bytes, count=0, owner="<rss>", fix="",
                summary=(
                    f"RSS keeps growing ({_mb(r.bytes_per_min)}/min over {_minutes(r.seconds)}) "
                    f"but no Python owner does ({heap_note}): look at allocator fragmentation "
                    "and memory held by C extensions"
                ),
                details={"pid": report.pid, "verdict": GROWING,
                         "bytes_per_min": round(r.bytes_per_min, 1), "window_seconds": round(r.seconds, 2)},
            )
        )
    order = {"warning": 0, "info": 1}
    findings.sort(key=lambda f: (order.get(f.severity, 9), -float(f.details.get("bytes_per_min", 0))))
    return tuple(findings)
