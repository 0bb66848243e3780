"""Growth over time: from a series of samples of one process, which owners keep growing.

Pure arithmetic over ``Sample``s (cheap in-target samples and full snapshots, see
``sample_from_snapshot``). For every owner, the process RSS, the live heap and the object
types, a least-squares slope over the whole window and over its recent part gives a verdict:

* ``growing``: grew by more than noise over the window and still grows at the end (a leak);
* ``plateaued``: grew, then stopped (a bounded cache that filled up);
* ``static``: did not grow by more than noise (a large table built once, or churn);
* ``unknown``: too few samples to tell.

Owners that grow become ``Finding(kind="growth")`` naming the owner path and its rate. An
owner is one series however its path was named from sample to sample: matched by its object
(its id() in the target and its type), else by its path without the numbers that change
while the worker runs. Findings never count a byte twice: of two growing owners one inside
the other only one is a finding, and their sum is held to what the heap (or RSS) grew by.
A growing owner a detector recommended a fix for (``registry``, ``intercepts``) carries that
``--fix``; unreachable cycles piling up (a collector switched off) are a finding of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from leakhound.analysis.ranking import rank
from leakhound.model import Finding, Owner, Snapshot
from leakhound.model.growth import (
    GROWING,
    PLATEAUED,
    STATIC,
    UNKNOWN,
    GrowthReport,
    OwnerSample,
    Sample,
    Trend,
    enclosing_paths,
    followed_by_steps,
    in_a_frame,
    named_binding,
    normalized_path,
    shared_parts,
)
from leakhound.model.names import (
    CODE_OWNER,
    MADE_DURING_WALK_PREFIX,
    NOT_ATTRIBUTED_PREFIX,
    PAYLOAD_OWNER,
    SUBCLASSES_STEP,
)
from leakhound.model.units import fmt_bytes

KIND = "growth"
_NOT_LEAKS = frozenset({CODE_OWNER, PAYLOAD_OWNER})


@dataclass(frozen=True)
class Thresholds:
    """What counts as growth rather than noise, over the whole watch window."""

    min_bytes: int = 256 * 1024
    # RSS moves in allocator steps: a dict's table resized in a 22 MiB worker whose bounded
    # cache had filled up was a 0.7 MiB step in the last third of a 7 s watch.
    min_rss_bytes: int = 1024 * 1024
    min_items: int = 100
    relative: float = 0.02  # of the starting size
    plateau_ratio: float = 0.25  # recent slope below this share of the overall slope
    recent_fraction: float = 1 / 3  # the recent part of the window
    min_points: int = 3


DEFAULT_THRESHOLDS = Thresholds()


# -- building samples --------------------------------------------------------------------------


def estimate_owners(
    reference: Sequence[Owner], measured: Sequence[tuple[bool, int | None]]
) -> tuple[OwnerSample, ...]:
    """Owners of a cheap sample: for each owner of the reference census (the last full one),
    whether it was found again and its item count now; bytes scaled from the reference's by
    items. An owner not found, or with no item count (an instance, a namespace: its bytes
    cannot be scaled from anything measured now), is left out, not guessed."""
    out = []
    for owner, (found, items) in zip(reference, measured, strict=True):
        if not found or items is None:
            continue
        size = round(owner.retained_bytes * items / owner.items) if owner.items > 0 else owner.retained_bytes
        out.append(OwnerSample(owner.path, owner.type, items, size, estimated=True, object_id=owner.object_id,
                               by_steps=followed_by_steps(owner.path, owner.path_steps)))
    return tuple(out)


# -- the arithmetic ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """A least-squares line through (time, value) points."""

    per_second: float  # its slope; 0 for fewer than two distinct times
    stderr: float  # the slope's standard error; 0 below three points


def least_squares(points: Sequence[tuple[float, float]]) -> Fit:
    """The least-squares line through ``points`` (seconds, value)."""
    n = len(points)
    if n < 2:
        return Fit(0.0, 0.0)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return Fit(0.0, 0.0)
    per_second = sum((t - mean_t) * (v - mean_v) for t, v in points) / spread
    if n < 3:
        return Fit(per_second, 0.0)
    residual = sum((v - mean_v - per_second * (t - mean_t)) ** 2 for t, v in points)
    return Fit(per_second, float((residual / (n - 2) / spread) ** 0.5))


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope (units per second); 0 for fewer than two distinct times."""
    return least_squares(points).per_second


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
        # window is a leak. The recent third alone, against the window's 2% noise floor, would
        # call a steady leak that grows by 2-6% of its size in the window "plateaued".
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


@dataclass
class _OwnerSeries:
    """One owner over the window: its points and every path it was named by (latest last)."""

    type: str
    paths: list[str] = field(default_factory=list)
    points: list[tuple[float, int, int]] = field(default_factory=list)
    full_at: set[float] = field(default_factory=set)  # the full samples it was an owner in
    object_id: int = 0  # the latest known


def _owner_series(samples: Sequence[Sample]) -> list[_OwnerSeries]:
    """Owners across samples (in time order), matched by what they are: the same object (its
    id() in the target and its type); where either side's object is not known (first-reacher
    owners, owners merged under one label), the same normalized path. A path renamed between
    samples (another preferred path to the same object) is the same owner; two objects are
    never one owner (the lists of two short-lived tasks both named ``task:Task-*/fetch.<list>``
    are two owners), but where the same names from a module reach an object of the same type
    (``named_binding``, or steps the samples follow: ``OwnerSample.by_steps``): the program
    rebound the name (a linked list's new head, ``HISTORY = Entry(HISTORY, ...)``; ``CACHE =
    CACHE | {...}``; a DataFrame concatenated anew), and what it holds is what grows."""
    series: list[_OwnerSeries] = []
    by_object: dict[tuple[int, str], int] = {}
    by_path: dict[str, int] = {}
    for sample in samples:
        claimed: set[int] = set()
        for owner in sample.owners:
            norm = normalized_path(owner.path)
            k = by_object.get((owner.object_id, owner.type)) if owner.object_id else None
            if k is None or k in claimed:
                k = by_path.get(norm)
                if k is not None and (k in claimed or series[k].type != owner.type
                                      or (owner.object_id and series[k].object_id
                                          and not ((named_binding(owner.path) or owner.by_steps)
                                                   and series[k].paths[-1] == owner.path))):
                    k = None
            if k is None:
                k = len(series)
                series.append(_OwnerSeries(owner.type))
            claimed.add(k)
            entry = series[k]
            if not entry.paths or entry.paths[-1] != owner.path:
                entry.paths.append(owner.path)
            entry.points.append((sample.taken_at, owner.bytes, owner.items))
            if sample.full:
                entry.full_at.add(sample.taken_at)
            if owner.object_id:
                by_object[(owner.object_id, owner.type)] = k
                entry.object_id = owner.object_id
            by_path[norm] = k
    return series


def owner_histories(samples: Iterable[Sample]) -> list[tuple[str, str, tuple[tuple[float, int, int], ...]]]:
    """Each owner over the samples as ``analyse_growth`` follows it: its latest path, its type
    and its (time, bytes, items) points (what a chart of owners over time draws)."""
    ordered = sorted(samples, key=lambda s: s.taken_at)
    return [(entry.paths[-1], entry.type, tuple(entry.points)) for entry in _owner_series(_modelled(ordered))]


def _modelled(samples: Sequence[Sample]) -> list[Sample]:
    """The samples whose owners are followed: the dominator model's when any sample has it
    (a census over its graph budget falls back to first-reacher owners, which would be other
    owners over the same bytes), else all."""
    if any(s.owner_model == "dominator" for s in samples):
        return [s for s in samples if s.owner_model == "dominator"]
    return list(samples)


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
    snapshot: Snapshot | None = None,
) -> GrowthReport:
    """Trends and ``growth`` findings for one process from its samples (any order).
    ``snapshot``: its last full snapshot, whose detectors' fixes growing owners carry."""
    ordered = sorted(samples, key=lambda s: s.taken_at)
    if not ordered:
        raise ValueError("no samples")
    pids = {s.pid for s in ordered}
    if len(pids) != 1:
        raise ValueError(f"samples of several processes: {sorted(pids)}")
    last = ordered[-1]
    rss = trend(
        "rss", "rss", [(s.taken_at, s.rss_bytes, 0) for s in ordered],
        thresholds=replace(thresholds, min_bytes=max(thresholds.min_bytes, thresholds.min_rss_bytes)), use_items=False,
    )
    heap_points = [(s.taken_at, s.heap_bytes, 0) for s in ordered if s.heap_bytes is not None]
    heap = (
        trend("heap", "heap", heap_points, thresholds=thresholds, use_items=False)
        if heap_points
        else None
    )
    garbage_points = [(s.taken_at, s.cyclic_garbage_bytes, s.cyclic_garbage_objects)
                      for s in ordered if s.cyclic_garbage_bytes is not None]
    garbage = (
        trend(CYCLES_OWNER, "cyclic_garbage", garbage_points, thresholds=thresholds)
        if garbage_points
        else None
    )
    if garbage is not None and garbage.verdict in (GROWING, PLATEAUED) and _grown(garbage) < thresholds.min_bytes:
        # Cycles the collector frees as it runs come and go by the thousand objects; growth
        # is what piles up bytes.
        garbage = replace(garbage, verdict=STATIC)
    followed = _modelled(ordered)
    series = _owner_series(followed)
    fixes = _fixes(snapshot)
    censuses = sum(1 for s in followed if s.full)
    owners = []
    for entry, outer in zip(series, _outer_owners(series), strict=True):
        name = entry.paths[-1]
        owner = replace(
            trend(name, "owner", entry.points, thresholds=thresholds, type_name=entry.type),
            was=tuple(dict.fromkeys(p for p in entry.paths[:-1] if p != name)),
            within=outer,
            fix=_fix_for(entry.paths, fixes),
        )
        if len(entry.full_at) < min(2, censuses):
            # Named by one census only, its other points scaled from that census's bytes: a
            # task's local list filling up through its short life is not a leak (the simulated
            # worker's rollouts gave a dozen such "growing" owners in a 12 s watch).
            owner = replace(owner, verdict=UNKNOWN)
        owners.append(owner)
    owners.sort(key=lambda t: (_ORDER[t.verdict], -t.bytes_per_min, -t.last_bytes, t.name))
    types = [
        trend(name, "type", points, thresholds=thresholds)
        for name, points in _type_series(ordered).items()
    ]
    types.sort(key=lambda t: (_ORDER[t.verdict], -t.items_per_min, t.name))
    warnings: tuple[str, ...] = ()
    fell_back = sum(1 for s in ordered if s.full and s.owner_model and s.owner_model != followed[-1].owner_model)
    if fell_back:
        warnings += (f"{fell_back} full census(es) could not attribute owners (the object graph not walked or not "
                     "finished): their bytes are not followed, the dominator model's owners are",)
    model = followed[-1].owner_model if followed else ""
    reason = snapshot.heap.owner_model_reason if snapshot is not None and snapshot.heap.owner_model == model else ""
    # A thread's or task's local is held as long as its call runs: one not found again has
    # ended (the frame returned, the name rebound), no sign the sample read the wrong thing.
    unresolved = sorted({p for s in ordered for p in s.unresolved if not in_a_frame(p)})
    if unresolved:
        warnings += (f"cheap samples could not find again {len(unresolved)} owner(s) of the last census by their "
                     f"ids (left out of those samples, not counted as anything else): {', '.join(unresolved[:5])}",)
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
        cyclic_garbage=garbage,
        owner_model=model,
        owner_model_reason=reason,
        warnings=warnings,
        sites=snapshot.sites if snapshot is not None else None,
    )
    return GrowthReport(**{**_fields(report), "findings": _with_sites(growth_findings(report), snapshot)})


def _with_sites(findings: tuple[Finding, ...], snapshot: Snapshot | None) -> tuple[Finding, ...]:
    """Growth findings with their owner's allocation sites from the last full snapshot
    (``watch --sites``): the stacks that allocated what it still holds."""
    if snapshot is None or snapshot.sites is None:
        return findings
    by_path = {o.path: o.sites for o in snapshot.owners if o.sites}
    return tuple(replace(f, sites=by_path[f.owner]) if f.kind == KIND and f.owner in by_path else f
                 for f in findings)


# How the cyclic_garbage detector names what it counts (analysis/detectors/cyclic_garbage.py).
CYCLES_OWNER = "<unreachable cycles>"
# Of two growing owners one inside the other, the inner one is the finding when it grew by at
# least this share of the outer's growth (the owner model's own rule: dominators.DESCEND_SHARE).
INNER_SHARE = 0.8


def _inside(inner: str, outer: str) -> bool:
    return len(inner) > len(outer) and inner.startswith(outer) and inner[len(outer)] in ".["


def _outer_owners(series: Sequence[_OwnerSeries]) -> list[str]:
    """For each owner, the latest path of the owner it lies inside (a path of its extends one
    of that owner's; the longest such), when the two were never owners in the same full sample
    (owners of one census never overlap, so two that were are apart); "" if none."""
    paths = [{normalized_path(p) for p in entry.paths} for entry in series]
    by_path: dict[str, list[int]] = {}
    for k, mine in enumerate(paths):
        for p in mine:
            by_path.setdefault(p, []).append(k)
    shared = [(j, [normalized_path(q) for p in entry.paths for q in shared_parts(p)]) for j, entry in enumerate(series)]
    shared = [(j, parts) for j, parts in shared if parts]
    out = []
    for k, entry in enumerate(series):
        # a part of a shared owner (``A`` of ``<shared by A, B>``, or what lies inside A): its
        # own bytes (mock's list of calls, its _Call tuples) grow with what the parts hold
        # together, one leak (both are owners of one census: no overlap, by design)
        best = next((series[j].paths[-1] for j, part_lists in shared
                     if j != k and any(p == q or _inside(p, q) for p in paths[k] for q in part_lists)), "")
        if best:
            out.append(best)
            continue
        best_len = 0
        for p in paths[k]:
            for outer in enclosing_paths(p):
                if len(outer) <= best_len:
                    break
                hit = next((j for j in by_path.get(outer, ()) if j != k and not series[j].full_at & entry.full_at),
                           None)
                if hit is not None:
                    best, best_len = series[hit].paths[-1], len(outer)
                    break
        out.append(best)
    return out


def _fixes(snapshot: Snapshot | None) -> dict[str, str]:
    """owner path -> the fix a detector of the last full snapshot recommends for it; of two
    for one owner, the one about more bytes (the registry's finished entries before the steps'
    redundant copies in them: what stops the growth). A detector names its shape by its class
    (``Runtime.trajectories``) when no owner path ends so: such a name is kept as it is."""
    if snapshot is None:
        return {}
    out: dict[str, str] = {}
    for f in sorted(snapshot.findings, key=lambda f: -f.bytes):
        if f.fix and not f.skipped and f.owner and not f.owner.startswith("<"):
            out.setdefault(normalized_path(f.owner), f.fix)
    return out


def _same_shape(path: str, owner: str) -> bool:
    """``path`` is, lies in or holds the detector's owner ``owner``; a class-named owner
    (``Runtime.trajectories``: no root, as the detectors fall back) by its attribute."""
    if path == owner or _inside(path, owner) or _inside(owner, path):
        return True
    root, _, attribute = owner.partition(".")
    if root[:1].isupper() and attribute.isidentifier():
        at = "." + attribute
        return any(path[k + len(at):k + len(at) + 1] in ("", ".", "[")
                   for k in range(len(path)) if path.startswith(at, k))
    return False


def _fix_for(paths: Sequence[str], fixes: dict[str, str]) -> str:
    """The fix of the known shape an owner is, lies in, or holds (by any path it had)."""
    for path in reversed(paths):
        mine = normalized_path(path)
        for owner, fix in fixes.items():
            if _same_shape(mine, owner):
                return fix
    return ""


def _fields(report: GrowthReport) -> dict[str, Any]:
    return {name: getattr(report, name) for name in GrowthReport.__dataclass_fields__}


def _mb(n: float) -> str:
    # as the watch's table prints the same numbers (its size and bytes/min columns): one
    # screen said "14.4 MiB" and "+40.4 MiB/min" above "40.44 MiB/min ... (now 14.45 MiB)"
    return fmt_bytes(n)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _grown(t: Trend | None) -> float:
    """What a series grew by over its window, by its least-squares rate (never negative)."""
    if t is None or t.points < 2:
        return 0.0
    return max(0.0, t.bytes_per_min) * t.seconds / 60.0


def _span(t: Trend | None) -> float:
    """What a series grew by from its first point to its last (never negative)."""
    return 0.0 if t is None else float(max(0, t.last_bytes - t.first_bytes))


def _counted_once(candidates: list[Trend]) -> list[Trend]:
    """Of growing owners one inside the other (``within``), one finding: the inner one when it
    grew by most of what the outer did (it is where the bytes go), else the outer."""
    by_name = {t.name: t for t in candidates}
    kept = []
    for t in candidates:
        outer = by_name.get(t.within)
        if outer is not None and _grown(t) < INNER_SHARE * _grown(outer):
            continue  # the outer one grew by more than this explains: it is the finding
        inner = [c for c in candidates if c.within == t.name]
        if any(_grown(c) >= INNER_SHARE * _grown(t) for c in inner):
            continue  # an inner one is where the bytes go: it is the finding
        kept.append(t)
    return kept


# An owner of unknown verdict growing at this share of RSS's rate or more is named in the RSS
# finding (growth_findings)
UNSURE_SHARE = 0.5


def _may_leak(t: Trend) -> bool:
    """An owner a growth finding may name. The code owner grows with every import, and the
    payload's own is leakhound's: no leak anyone can fix in the worker. What was made during a
    walk is no owner: its bytes grow with the walk's length (a growing heap takes longer to
    walk) while the target allocates. A class's registry of its subclasses grows by a weakref
    a class made, and shrinks as they die: whoever keeps the classes is the owner that grows
    (a thousand classes a minute kept in a list grew ``object.<subclasses>`` too)."""
    return (t.name not in _NOT_LEAKS and not t.name.startswith(MADE_DURING_WALK_PREFIX)
            and not t.name.endswith(SUBCLASSES_STEP))


def growth_findings(report: GrowthReport) -> tuple[Finding, ...]:
    """``growing`` owners are warnings, ``plateaued`` ones info, growing unreachable cycles a
    warning; RSS growth that none explains is a warning of its own (fragmentation or memory
    outside Python objects). No byte is in two findings: owners nested in one another give
    one finding, and when the owners' growth (estimated in cheap samples) sums past what the
    heap or RSS grew by (from the window's first sample to its last), each finding's growth
    is scaled down to fit."""
    candidates = [t for t in report.owners if t.verdict in (GROWING, PLATEAUED) and _may_leak(t)]
    chosen = _counted_once(candidates)
    garbage = report.cyclic_garbage
    if garbage is not None and garbage.verdict in (GROWING, PLATEAUED):
        chosen.append(garbage)
    budget = max(_span(report.heap), _span(report.rss))
    total = sum(_grown(t) for t in chosen)
    scale = budget / total if total > budget else 1.0
    size_budget = max(report.heap.last_bytes if report.heap is not None else 0, report.rss.last_bytes)
    size_total = sum(t.last_bytes for t in chosen)
    size_scale = size_budget / size_total if size_total > size_budget > 0 else 1.0
    findings = []
    for t in chosen:
        rate = t.bytes_per_min * scale
        size = round(t.last_bytes * size_scale)
        details: dict[str, Any] = {
            "pid": report.pid,
            "verdict": t.verdict,
            "bytes_per_min": round(rate, 1),
            "items_per_min": round(t.items_per_min, 2),
            "recent_bytes_per_min": round(t.recent_bytes_per_min * scale, 1),
            "recent_items_per_min": round(t.recent_items_per_min, 2),
            "grown_bytes": round(_grown(t) * scale),
            "window_seconds": round(t.seconds, 2),
            "samples": t.points,
        }
        if scale < 1.0 or size_scale < 1.0:
            details["scaled_to_fit"] = round(min(scale, size_scale), 4)
        if t.was:
            details["was"] = list(t.was)
        capped = " (scaled to fit the heap's growth)" if scale < 1.0 else ""
        if t.kind == "cyclic_garbage":
            summary = (
                f"unreachable objects kept alive only by reference cycles keep piling up: {_mb(rate)}/min, "
                f"{t.items_per_min:,.0f} objects/min over {_minutes(t.seconds)} (now {_mb(size)}, "
                f"{t.last_items:,} objects){capped}: is the collector off (gc.disable(), a high threshold)? "
                "break the cycles (weakref, explicit clear)"
            )
            severity = "warning" if t.verdict == GROWING else "info"
        elif t.verdict == GROWING and t.name.startswith(NOT_ATTRIBUTED_PREFIX):
            summary = (
                f"the heap keeps growing: {_mb(rate)}/min, {t.items_per_min:,.0f} objects/min over "
                f"{_minutes(t.seconds)} (now {_mb(size)}){capped}, but no owner could be computed "
                f"({t.name[1:-1]}): the warnings say why and what would allow it"
            )
            severity = "warning"
        elif t.verdict == GROWING and not t.last_items and not t.items_per_min:
            # (an object with no items, a bytearray or an array a stream appends to: its bytes)
            summary = (f"{t.name} ({t.type}) keeps growing: {_mb(rate)}/min over {_minutes(t.seconds)} "
                       f"(now {_mb(size)}){capped}")
            severity = "warning"
        elif t.verdict == GROWING:
            summary = (
                f"{t.name} ({t.type}) keeps growing: {_mb(rate)}/min, "
                f"{t.items_per_min:,.0f} items/min over {_minutes(t.seconds)} "
                f"(now {_mb(size)}, {t.last_items:,} items){capped}"
            )
            severity = "warning"
        else:
            summary = (
                f"{t.name} ({t.type}) grew, then plateaued at {_mb(size)}, "
                f"{t.last_items:,} items (a bounded cache?)"
            )
            severity = "info"
        if t.fix:
            summary += f"; a known leak shape, fixed live by --fix {t.fix}"
        findings.append(
            Finding(
                kind=KIND, severity=severity, bytes=size, count=t.last_items,
                owner=t.name, fix=t.fix, summary=summary, details=details,
            )
        )
    if report.rss.verdict == GROWING and not any(t.verdict == GROWING for t in chosen):
        r = report.rss
        heap_note = (
            f"live heap {_mb(report.heap.bytes_per_min)}/min"
            if report.heap is not None and report.heap.verdict != UNKNOWN
            else "live heap not measured"
        )
        # An owner that grows in bytes alone (an array filling, a buffer appended to) is
        # measured by the full censuses only: with two of them (a watch shorter than
        # --full-every) it grew, but no trend can be told from two points.
        unsure = [t for t in report.owners if t.verdict == UNKNOWN and _may_leak(t)
                  and t.bytes_per_min >= UNSURE_SHARE * r.bytes_per_min > 0]
        if unsure:
            top = max(unsure, key=lambda t: t.bytes_per_min)
            summary = (
                f"RSS keeps growing ({_mb(r.bytes_per_min)}/min over {_minutes(r.seconds)}), and {top.name} "
                f"({top.type}) grew {_mb(top.bytes_per_min)}/min from one full census to the next (now "
                f"{_mb(top.last_bytes)}) in bytes alone, which only full censuses measure: {report.full_samples} "
                "are too few to tell growth from a plateau; watch longer, or with a shorter --full-every"
            )
        else:
            summary = (
                f"RSS keeps growing ({_mb(r.bytes_per_min)}/min over {_minutes(r.seconds)}) "
                f"but no Python owner does ({heap_note}): look at allocator fragmentation "
                "and memory held by C extensions"
            )
        findings.append(
            Finding(
                kind=KIND, severity="warning", bytes=r.last_bytes, count=0, owner="<rss>", fix="",
                summary=summary,
                details={"pid": report.pid, "verdict": GROWING,
                         "bytes_per_min": round(r.bytes_per_min, 1), "window_seconds": round(r.seconds, 2),
                         **({"unsure_owner": top.name} if unsure else {})},
            )
        )
    return rank(findings)
