"""``patch --verify``: memory measured in the target in a window before a fix and one after.

In order, in one process:

1. a dry run of the fixes (nothing changes): refused code is said before any waiting, and
   the payload names, by id(), the containers each fix empties (``owner_ids``);
2. a census with dominator owners (as ``watch`` takes): the fixed owner is the owner that
   *is* one of those containers (its ``object_id``), else the owners inside one; never a path
   matched by its wording;
3. the window before: every ``interval`` seconds, RSS read from /proc and a cheap sample in
   the target (the fixed owners' item counts, found again by the ids along their paths, as
   ``watch`` re-reads owners, and the allocators' in-use bytes: the live heap);
4. the fix applied (``patch_process``), then the window after, sampled the same way, then
   the fix's own number measured (``patch_process``'s ``measure``);
5. the verdict (``leakhound.analysis.verify``).

With ``--sites``, the allocation-site tracker runs for the window after the fix (started as
the fix lands, so its surviving samples are the growth the fix left, not what the window before
added), and a census after that window reads it: the fixed owners' sites and the process's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from leakhound.analysis.sites import merged_sites
from leakhound.analysis.verify import (
    OWNER_JUDGED,
    FixedOwner,
    count_window,
    judge,
    owner_window,
    rate,
    window_stats,
)
from leakhound.attach import choose_method
from leakhound.attach.channel import Progress
from leakhound.attach.deadline import FOLLOW_PROGRESS
from leakhound.attach.process import Target, resolve_target, rss_bytes
from leakhound.core.capture import take_snapshot
from leakhound.core.decode import decode_sample
from leakhound.core.patch import _outcome, _raise_if_all_refused, _request, patch_process
from leakhound.core.request import SHORT_REQUESTS, RequestOptions, ask
from leakhound.core.watch import (
    _LENGTH_IS_ITEMS,
    SitesOptions,
    start_site_tracker,
    stop_site_tracker,
)
from leakhound.errors import LeakhoundError, SitesUnavailable, TargetExited, TargetNotFound
from leakhound.model import Owner, PatchOutcome, Snapshot
from leakhound.model.names import Fix, OwnerModel, Owners, PatchAction
from leakhound.model.units import fmt_bytes
from leakhound.model.verify import FixedOwnerSites, VerifyPoint, VerifyReport
from leakhound.payload import wire

# Samples per window when the interval is not given, within these bounds (seconds).
SAMPLES_PER_WINDOW = 10
MIN_INTERVAL = 0.5
MAX_INTERVAL = 10.0

#: Progress while a window is sampled: one line (said on a terminal in place, else appended).
Say = Callable[[str], None]


def default_interval(seconds: float) -> float:
    return min(MAX_INTERVAL, max(MIN_INTERVAL, seconds / SAMPLES_PER_WINDOW))


@dataclass
class _Tracked:
    """A fixed owner as the census named it, and how a sample scales its bytes."""

    fix: str
    owner: Owner
    items_at_census: int | None  # None: its census count is not its length (the first sample's is used)


def fixed_owners(snapshot: Snapshot, owner_ids: dict[str, list[int]]) -> dict[str, list[Owner]]:
    """Per fix, the census owners that are a container it empties (by id), else the owners
    inside one (the container's id on their path from the root)."""
    out: dict[str, list[Owner]] = {}
    for fix, ids in owner_ids.items():
        wanted = set(ids)
        exact = [o for o in snapshot.owners if o.object_id and o.object_id in wanted]
        inside = [o for o in snapshot.owners if wanted.intersection(o.path_ids) and o not in exact]
        if exact or inside:
            out[fix] = exact or inside
    return out


class _Sampler:
    def __init__(self, target: Target, *, request: RequestOptions, interval: float,
                 tracked: list[_Tracked], say: Say, count_registry: bool) -> None:
        self.target = target
        self.count_registry = count_registry
        self.request = request
        self.interval = interval
        self.tracked = tracked
        self.say = say
        self.notes: list[str] = []

    def window(self, label: str, seconds: float) -> list[VerifyPoint]:
        points: list[VerifyPoint] = []
        started = time.monotonic()
        tick = 0
        while True:
            point = self._sample()
            if point is not None:
                points.append(point)
            elapsed = time.monotonic() - started
            self.say(self._progress(label, elapsed, seconds, points))
            if elapsed >= seconds - 1e-6:
                return points
            tick += 1
            time.sleep(max(0.0, min(started + tick * self.interval, started + seconds) - time.monotonic()))

    def _sample(self) -> VerifyPoint | None:
        pid = self.target.pid
        taken_at = time.time()
        rss = rss_bytes(pid)  # from outside, before the request: the worker's, not the request's
        owners_doc = [{"ids": list(t.owner.path_ids), "steps": list(t.owner.path_steps), "type": t.owner.type,
                       "path": t.owner.path}
                      for t in self.tracked]
        try:
            remote = ask(pid, {"op": wire.OP_SAMPLE, "owners": owners_doc, "top_types": 0, "allocator": True,
                               "registry": self.count_registry}, request=self.request, target=self.target)
        except (TargetNotFound, TargetExited):
            raise
        except LeakhoundError as exc:  # a busy or slow target misses a sample, as in watch
            self.notes.append(f"a sample was skipped: {exc}")
            self.request.log(f"process {pid}: sample skipped: {exc}")
            return None
        sampled = decode_sample(pid, remote.result, asked=len(self.tracked))
        heap, finished = sampled.allocator_in_use_bytes, sampled.finished_entries
        per_fix: dict[str, tuple[int, int]] = {}
        for t, (found, items) in zip(self.tracked, sampled.owners, strict=True):
            if not found or items is None:
                continue
            if t.items_at_census is None:
                t.items_at_census = items  # the first sample's count stands for the census's
            size = round(t.owner.retained_bytes * items / t.items_at_census) if t.items_at_census else \
                t.owner.retained_bytes
            was = per_fix.get(t.fix, (0, 0))
            per_fix[t.fix] = (was[0] + items, was[1] + size)
        return VerifyPoint(taken_at=taken_at, rss_bytes=rss, heap_bytes=heap,
                           owner_items=tuple((fix, n, b) for fix, (n, b) in per_fix.items()),
                           finished_rollouts=finished)

    def _progress(self, label: str, elapsed: float, seconds: float, points: list[VerifyPoint]) -> str:
        line = f"pid {self.target.pid}: {label}: {min(elapsed, seconds):.0f}/{seconds:.0f}s"
        if points:
            last = points[-1]
            line += f", RSS {fmt_bytes(last.rss_bytes)}"
            stats = window_stats(points) if len(points) >= 2 else None
            if stats is not None:
                line += f" ({rate(stats.rss_bytes_per_min)})"
            if last.heap_bytes is not None:
                line += f", live heap {fmt_bytes(last.heap_bytes)}"
                if stats is not None and stats.heap_bytes_per_min is not None:
                    line += f" ({rate(stats.heap_bytes_per_min)})"
            if last.finished_rollouts is not None:
                held = count_window(points)
                line += f", finished rollouts held {last.finished_rollouts:,}"
                if held is not None:
                    line += f" ({held.per_min:+,.0f}/min)"
            for fix, items, _size in last.owner_items:
                owner = owner_window(points, fix)
                line += f", {fix} owner {items:,} items"
                if owner is not None:
                    line += f" ({owner.items_per_min:+,.0f}/min)"
        return line


def verify_process(
    pid: int,
    *,
    fixes: list[str],
    verify_seconds: float,
    baseline_seconds: float,
    interval: float | None = None,
    request: RequestOptions = SHORT_REQUESTS,
    say: Say | None = None,
    progress: Progress | None = None,
    trim_every: float | None = None,
    sites: SitesOptions | None = None,
) -> tuple[tuple[PatchOutcome, ...], VerifyReport]:
    """Apply ``fixes`` in ``pid`` between a window of ``baseline_seconds`` and one of
    ``verify_seconds``, sampled every ``interval`` seconds (default: a tenth of the longer
    window, 0.5 to 10 s), and judge what the slopes support. ``say``: a line per step and per
    sample; ``progress``: the census's phases. Raises PatchRefused (nothing changed, nothing
    waited for) when every fix is refused. ``request.timeout`` bounds each short request; the
    census before the fix follows its progress, as inspect's. ``sites``: the allocation-site
    tracker over the window after the fix (a tracker that cannot run there is a note)."""
    say = say or (lambda line: None)
    target = resolve_target(pid)
    request = request.via(choose_method(target, request.method))
    every = interval or default_interval(max(verify_seconds, baseline_seconds))
    notes: list[str] = []

    say(f"pid {pid}: checking the fixes are recognised (nothing changes)")
    dry = _request(pid, PatchAction.DRY_RUN, fixes, request=request)
    planned = tuple(_outcome(pid, r) for r in dry["results"])
    _raise_if_all_refused(pid, planned)
    # Only the fixes judged by their owner's growth have it sampled (steps shares registry's
    # owner but makes new entries smaller, not fewer: the live heap judges it).
    every_owner_ids = {str(r["fix"]): [i for i in r.get("owner_ids") or () if type(i) is int]
                       for r in dry["results"] if r.get("owner_ids")}
    owner_ids = {fix: ids for fix, ids in every_owner_ids.items() if fix in OWNER_JUDGED}
    already = [o.fix for o in planned if o.status == "already-applied"]
    if already:
        notes.append(f"already applied before this run: {', '.join(already)}; the window before is not "
                     "before those fixes")

    say(f"pid {pid}: census before the fix (owners by dominator tree)")
    # As inspect's: given up when it stops progressing (a multi-GB heap's census outlasts the
    # patch's own --timeout, which bounds each short request here).
    census_began = time.monotonic()
    snapshot = take_snapshot(pid, request=request.within(FOLLOW_PROGRESS), top=50, owners=Owners.AUTO,
                             progress=progress)
    census_seconds = time.monotonic() - census_began
    found = fixed_owners(snapshot, owner_ids)
    tracked = [_Tracked(fix, o, o.items if o.type in _LENGTH_IS_ITEMS else None)
               for fix, owners in found.items() for o in owners if o.path_ids]
    owners = {fix: FixedOwner(fix=fix, path=owners[0].path + (f" and {len(owners) - 1} more" if len(owners) > 1
                                                               else ""),
                              type=owners[0].type, object_id=owners[0].object_id)
              for fix, owners in found.items()}
    unnamed = ("the census named no owner at the container it empties (below its top owners)"
               if snapshot.heap.owner_model != OwnerModel.NOT_ATTRIBUTED.value else
               f"the census attributed no owners ({snapshot.heap.owner_model_reason}: "
               f"{snapshot.heap.owner_model_note})")
    notes.extend(f"{fix}: {unnamed}: its owner is not followed" for fix in fixes
                 if fix in owner_ids and fix not in found)
    sampler = _Sampler(target, request=request, interval=every, tracked=tracked, say=say,
                       count_registry=Fix.REGISTRY in fixes)
    before = sampler.window("before the fix", baseline_seconds)
    after: list[VerifyPoint] = []
    with_sites: list[Snapshot] = []

    def after_window(seconds: float) -> None:
        say(f"pid {pid}: applied {', '.join(fixes)}")
        tracking = sites is not None and _start_tracker(target, request, sites, seconds=seconds,
                                                         census_seconds=census_seconds, notes=notes)
        try:
            after.extend(sampler.window("after the fix", seconds))
            if tracking:
                say(f"pid {pid}: census after the fix, with the allocation sites")
                with_sites.append(take_snapshot(pid, request=request.within(FOLLOW_PROGRESS), top=50,
                                                owners=Owners.AUTO, progress=progress, sites=True))
        finally:
            if tracking and not with_sites:
                stop_site_tracker(target, request)
        say(f"pid {pid}: measuring the fix's own number")

    outcomes = patch_process(pid, fixes=fixes, action=PatchAction.APPLY, verify_seconds=verify_seconds,
                             request=request, wait=after_window, trim_every=trim_every)
    landed = {o.fix for o in outcomes if o.status in ("applied", "already-applied")}
    next_fixes = list(dict.fromkeys(f.fix for f in snapshot.findings
                                    if f.fix and not f.skipped and f.fix not in fixes))
    report = judge(pid=pid, fixes=[f for f in fixes if f in landed], owners=owners, before_points=before,
                   after_points=after, interval_seconds=every, next_fixes=next_fixes,
                   notes=[*notes, *dict.fromkeys(sampler.notes)])
    if with_sites:
        report = _with_owner_sites(report, with_sites[0], every_owner_ids)
    return outcomes, report


def _start_tracker(target: Target, request: RequestOptions, sites: SitesOptions, *, seconds: float,
                   census_seconds: float, notes: list[str]) -> bool:
    """The tracker started for a window of ``seconds`` and the census after it; where it cannot
    run, a note (the fix is applied by now: its proof goes on without sites)."""
    try:
        start_site_tracker(target, request, sites, window_seconds=seconds, census_seconds=census_seconds)
    except SitesUnavailable as exc:
        notes.append(f"no allocation sites: {exc}")
        return False
    return True


def _with_owner_sites(report: VerifyReport, snapshot: Snapshot, owner_ids: dict[str, list[int]]) -> VerifyReport:
    """``report`` with the tracker's totals and each fixed owner's sites, from the census after
    the window (its owners found again by identity, as before the fix)."""
    found = fixed_owners(snapshot, owner_ids)
    owner_sites = tuple(
        FixedOwnerSites(fix=fix, path=found[fix][0].path + (f" and {len(found[fix]) - 1} more"
                                                          if len(found[fix]) > 1 else ""),
                        sites=merged_sites([o.sites for o in found[fix]]))
        if fix in found else FixedOwnerSites(fix=fix, path="")
        for fix in report.fixes if fix in owner_ids)
    return replace(report, sites=snapshot.sites, owner_sites=owner_sites)
