"""The verdict of ``patch --verify``: slopes before and after a fix, and what they support.

Pure arithmetic over ``VerifyPoint``s (core/verify.py samples them). Each series gets a
least-squares slope per window. A fix is judged by the owner it acts on where it has one and
it was found (registry and intercepts: the growth of the container the fix empties), else by
the live heap (steps: new steps are smaller, the registry's item count does not show it), else
by RSS (trim). The rules, with their noise floors, are documented in docs/patch.md ("Verify").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from leakhound.analysis.growth import least_squares, slope
from leakhound.model.units import MiB
from leakhound.model.verify import (
    CountWindow,
    FixVerdict,
    OwnerWindow,
    VerifyPoint,
    VerifyReport,
    VerifyVerdict,
    WindowStats,
)

# Fixes judged by the growth of the owner they act on (the container they empty).
OWNER_JUDGED = frozenset({"registry", "intercepts"})
# Of those, the fixes whose owner fills and empties with each rollout (intercepts: a rollout's
# request bodies, kept until it ends): where it did not grow over the window before, they are
# judged by its level, its mean before against its mean once the fix has settled.
LEVEL_JUDGED = frozenset({"intercepts"})
# Fixes judged by the live heap when it was measured (else RSS).
HEAP_JUDGED = frozenset({"steps"})


@dataclass(frozen=True)
class Noise:
    """What a window's growth must exceed to count as growth rather than noise: RSS and the
    heap move in allocator steps (a dict's table resized, an arena kept), an owner's item count
    by the rollouts in flight (registered at their start, evicted at their end)."""

    rss_bytes: int = 1 * MiB
    heap_bytes: int = 1 * MiB
    owner_items: float = 2.0
    owner_bytes: int = 256 * 1024
    stopped_ratio: float = 0.10  # after at most this share of before: stopped
    slowed_ratio: float = 0.50  # at most this share: slowed
    # RSS and the heap scatter around their line (a request's working memory, a batch's
    # buffers): a slope counts only when it is this many standard errors above 0.
    standard_errors: float = 2.0


NOISE = Noise()


@dataclass(frozen=True)
class FixedOwner:
    """The owner a fix acts on, as the census before the fix named it."""

    fix: str
    path: str
    type: str
    object_id: int


def window_stats(points: Sequence[VerifyPoint]) -> WindowStats | None:
    if not points:
        return None
    rss = [(p.taken_at, float(p.rss_bytes)) for p in points]
    heap = [(p.taken_at, float(p.heap_bytes)) for p in points if p.heap_bytes is not None]
    rss_fit = least_squares(rss)
    heap_fit = least_squares(heap) if len(heap) >= 2 else None
    return WindowStats(
        started_at=points[0].taken_at,
        ended_at=points[-1].taken_at,
        samples=len(points),
        rss_first_bytes=points[0].rss_bytes,
        rss_last_bytes=points[-1].rss_bytes,
        rss_bytes_per_min=rss_fit.per_second * 60.0,
        heap_first_bytes=int(heap[0][1]) if heap else None,
        heap_last_bytes=int(heap[-1][1]) if heap else None,
        heap_bytes_per_min=heap_fit.per_second * 60.0 if heap_fit is not None else None,
        rss_stderr_bytes_per_min=rss_fit.stderr * 60.0,
        heap_stderr_bytes_per_min=heap_fit.stderr * 60.0 if heap_fit is not None else None,
    )


def owner_window(points: Sequence[VerifyPoint], fix: str) -> OwnerWindow | None:
    series = [(p.taken_at, items, size) for p in points for f, items, size in p.owner_items if f == fix]
    if len(series) < 2:
        return None
    late = series[len(series) // 2:]
    return OwnerWindow(
        samples=len(series),
        items_first=series[0][1],
        items_last=series[-1][1],
        items_per_min=slope([(t, float(i)) for t, i, _ in series]) * 60.0,
        bytes_first=series[0][2],
        bytes_last=series[-1][2],
        bytes_per_min=slope([(t, float(b)) for t, _, b in series]) * 60.0,
        items_mean=sum(i for _, i, _ in series) / len(series),
        items_late_mean=sum(i for _, i, _ in late) / len(late),
    )


def count_window(points: Sequence[VerifyPoint]) -> CountWindow | None:
    """The finished rollouts held over one window (None: fewer than two samples counted them)."""
    series = [(p.taken_at, p.finished_rollouts) for p in points if p.finished_rollouts is not None]
    if len(series) < 2:
        return None
    return CountWindow(samples=len(series), first=series[0][1], last=series[-1][1],
                       per_min=slope([(t, float(n)) for t, n in series]) * 60.0)


def rate(bytes_per_min: float | None) -> str:
    """``+41.0 MiB/min``; ``+0.0`` is within a tenth of a MiB."""
    if bytes_per_min is None:
        return "not measured"
    return f"{bytes_per_min / MiB:+.1f} MiB/min"


def _grows(per_min: float, seconds: float, floor: float, error: float = 0.0, noise: Noise = NOISE) -> bool:
    """Grew by more than ``floor`` over the window, and by more than its scatter."""
    return per_min * seconds / 60.0 >= floor and per_min >= noise.standard_errors * error


def _compare(before: float, after: float, before_s: float, after_s: float, floor: float,
             noise: Noise, errors: tuple[float, float] = (0.0, 0.0)) -> VerifyVerdict:
    """The verdict of one series: its slope before against after, in units per minute, each
    with its standard error (0 for exact counts)."""
    if not _grows(before, before_s, floor, errors[0], noise):
        return VerifyVerdict.NOT_PROVEN
    if after <= noise.stopped_ratio * before or not _grows(after, after_s, floor, errors[1], noise):
        return VerifyVerdict.STOPPED
    if after <= noise.slowed_ratio * before:
        return VerifyVerdict.SLOWED
    return VerifyVerdict.STILL_GROWING


def _level(before: OwnerWindow, after: OwnerWindow, noise: Noise) -> VerifyVerdict | None:
    """The verdict of an owner that rises and falls with each rollout (LEVEL_JUDGED) by its
    level: its mean items before against its mean over the second half of after (a request
    body delivered before the fix stays until its rollout ends). None where it held too few
    before for a level to say anything (under twice the items' noise floor)."""
    if before.items_mean < 2 * noise.owner_items:
        return None
    if after.items_late_mean <= noise.stopped_ratio * before.items_mean:
        return VerifyVerdict.STOPPED
    if after.items_late_mean <= noise.slowed_ratio * before.items_mean:
        return VerifyVerdict.SLOWED
    return VerifyVerdict.NOT_PROVEN


_WORDS = {VerifyVerdict.STOPPED: "growth stopped", VerifyVerdict.SLOWED: "growth slowed",
          VerifyVerdict.STILL_GROWING: "still grows"}


def judge_fix(fix: str, owner: FixedOwner | None, before_points: Sequence[VerifyPoint],
              after_points: Sequence[VerifyPoint], before: WindowStats, after: WindowStats,
              noise: Noise = NOISE) -> FixVerdict:
    """One fix's verdict from the series it is judged by."""
    ob = oa = None
    name = ""
    if owner is not None:
        ob, oa = owner_window(before_points, fix), owner_window(after_points, fix)
        name = owner.path.rsplit(".", 1)[-1] or owner.path
    owner_numbers = (f"{name} {rate(ob.bytes_per_min)} -> {rate(oa.bytes_per_min)}"
                     if owner is not None and ob is not None and oa is not None else "")

    def verdict_of(verdict: VerifyVerdict, text: str, judged_by: str,
                   held: tuple[CountWindow | None, CountWindow | None] = (None, None)) -> FixVerdict:
        out = FixVerdict(fix=fix, verdict=verdict.value, summary=text, judged_by=judged_by,
                         finished_rollouts_before=held[0], finished_rollouts_after=held[1])
        if owner is not None and ob is not None and oa is not None:
            out = replace(out, path=owner.path, type=owner.type, object_id=owner.object_id, before=ob, after=oa)
        return out

    held_b, held_a = (count_window(before_points), count_window(after_points)) if fix == "registry" else (None, None)
    if held_b is not None and held_a is not None:
        # The registry's entries are finished rollouts plus those in flight (registered at their
        # start, evicted at their end): the finished ones are what the fix stops.
        verdict = _compare(held_b.per_min, held_a.per_min, before.seconds, after.seconds, noise.owner_items, noise)
        numbers = f"finished rollouts held {held_b.per_min:+.0f} -> {held_a.per_min:+.0f}/min"
        if owner_numbers:
            numbers += f"; {owner_numbers}"
        text = (f"{fix}: not proven: no rollout finished while it was watched before the fix ({numbers})"
                if verdict == VerifyVerdict.NOT_PROVEN else f"{fix} {_WORDS[verdict]} ({numbers})")
        return verdict_of(verdict, text, "finished-rollouts", (held_b, held_a))
    if fix in OWNER_JUDGED and owner is not None and ob is not None and oa is not None:
        verdict = _compare(ob.items_per_min, oa.items_per_min, before.seconds, after.seconds,
                           noise.owner_items, noise)
        if verdict == VerifyVerdict.NOT_PROVEN and _grows(ob.bytes_per_min, before.seconds, noise.owner_bytes):
            verdict = _compare(ob.bytes_per_min, oa.bytes_per_min, before.seconds, after.seconds,
                               noise.owner_bytes, noise)
        numbers = f"{owner_numbers}, {ob.items_per_min:+.0f} -> {oa.items_per_min:+.0f} items/min"
        if verdict == VerifyVerdict.NOT_PROVEN and fix in LEVEL_JUDGED:
            level = _level(ob, oa, noise)
            if level is not None:
                held = (f"{name} held {ob.items_mean:.0f} items on average before, "
                        f"{oa.items_late_mean:.0f} once the fix settled")
                text = (f"{fix}: the level fell: {held} ({numbers})" if level != VerifyVerdict.NOT_PROVEN
                        else f"{fix}: not proven: {name} neither grew nor fell ({held}; {numbers})")
                return verdict_of(level, text, "owner-level")
        if verdict == VerifyVerdict.NOT_PROVEN:
            text = f"{fix}: not proven: {name} did not grow before the fix ({numbers})"
        else:
            text = f"{fix} {_WORDS[verdict]} ({numbers})"
        return verdict_of(verdict, text, "owner")
    use_heap = fix in HEAP_JUDGED | OWNER_JUDGED and before.heap_bytes_per_min is not None \
        and after.heap_bytes_per_min is not None
    if use_heap:
        b, a, floor, what = (before.heap_bytes_per_min or 0.0, after.heap_bytes_per_min or 0.0,
                             noise.heap_bytes, "live heap")
        errors = (before.heap_stderr_bytes_per_min or 0.0, after.heap_stderr_bytes_per_min or 0.0)
    else:
        b, a, floor, what = before.rss_bytes_per_min, after.rss_bytes_per_min, noise.rss_bytes, "RSS"
        errors = (before.rss_stderr_bytes_per_min, after.rss_stderr_bytes_per_min)
    verdict = _compare(b, a, before.seconds, after.seconds, floor, noise, errors)
    numbers = f"{what} {rate(b)} -> {rate(a)}"
    if verdict == VerifyVerdict.NOT_PROVEN:
        text = f"{fix}: not proven: {what} slope within noise before the fix ({numbers})"
    else:
        text = f"{fix}: {what} {_WORDS[verdict]} ({numbers})"
    return FixVerdict(fix=fix, verdict=verdict.value, summary=text, judged_by="heap" if use_heap else "rss")


# Of several fixes' verdicts, the one said first: a fix that did not work, then one proven.
_PRECEDENCE = (VerifyVerdict.STILL_GROWING, VerifyVerdict.STOPPED, VerifyVerdict.SLOWED, VerifyVerdict.NOT_PROVEN)


def judge(*, pid: int, fixes: Sequence[str], owners: dict[str, FixedOwner], before_points: Sequence[VerifyPoint],
          after_points: Sequence[VerifyPoint], interval_seconds: float, next_fixes: Sequence[str] = (),
          notes: Sequence[str] = (), noise: Noise = NOISE) -> VerifyReport:
    """The report of one process: both windows, each fix's verdict, the overall verdict and its
    sentence. ``next_fixes``: fixes the census before recommended that are neither applied
    nor asked for now (named when RSS still grows)."""
    before = window_stats(before_points)
    after = window_stats(after_points)
    if before is None or after is None or before.samples < 2 or after.samples < 2:
        missing = "before" if before is None or before.samples < 2 else "after"
        text = f"not proven: too few samples {missing} the fix to draw a slope (a longer window, or a less busy target)"
        return VerifyReport(pid=pid, fixes=tuple(fixes), interval_seconds=interval_seconds, before=before,
                            after=after, per_fix=(), verdict=VerifyVerdict.NOT_PROVEN.value, summary=text,
                            notes=tuple(notes))
    per_fix = tuple(judge_fix(fix, owners.get(fix), before_points, after_points, before, after, noise)
                    for fix in fixes)
    verdicts = {VerifyVerdict(v.verdict) for v in per_fix}
    overall = next(v for v in _PRECEDENCE if v in verdicts or v == VerifyVerdict.NOT_PROVEN)
    clauses = [v.summary for v in per_fix]
    if _grows(after.rss_bytes_per_min, after.seconds, noise.rss_bytes, after.rss_stderr_bytes_per_min, noise):
        then = f": {' or '.join(next_fixes)} next" if next_fixes else ""
        clauses.append(f"RSS still grows {rate(after.rss_bytes_per_min)}{then}")
    elif _grows(before.rss_bytes_per_min, before.seconds, noise.rss_bytes, before.rss_stderr_bytes_per_min, noise):
        clauses.append(f"RSS {rate(before.rss_bytes_per_min)} -> {rate(after.rss_bytes_per_min)}")
    else:
        clauses.append(f"RSS slope within noise ({rate(before.rss_bytes_per_min)} -> "
                       f"{rate(after.rss_bytes_per_min)})")
    return VerifyReport(pid=pid, fixes=tuple(fixes), interval_seconds=interval_seconds, before=before, after=after,
                        per_fix=per_fix, verdict=overall.value, summary="; ".join(clauses), notes=tuple(notes))
