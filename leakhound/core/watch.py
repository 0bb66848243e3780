"""Watching workers over time: sample one or many and say which owners keep growing.

The core operation behind ``leakhound watch`` (as ``capture`` is behind ``inspect``). Three
kinds of sample, from cheapest to dearest:

* RSS only, read with psutil from outside (the target never notices), every ``interval``;
* a cheap in-target sample (item counts of the owners the last census named, gc-tracked type
  counts): every ``interval`` with the agent and the ptrace injector (no stop, or ~0.3 ms); at
  most every ``attach_every`` seconds with gdb, whose attach stops the target ~40 ms;
* a full census (``take_snapshot``): first, every ``full_every`` seconds, and last.

``watch_processes`` is the loop; the analysis is ``leakhound.analysis.growth``; rendering is
``leakhound.render.watch``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from leakhound.analysis.growth import (
    GrowthReport,
    Sample,
    analyse_growth,
    estimate_owners,
    sample_from_snapshot,
)
from leakhound.attach import choose_method, run_request
from leakhound.attach.base import AttachLog
from leakhound.attach.process import Target, match_processes, resolve_target, rss_bytes
from leakhound.capture import DEFAULT_MAX_PAUSE_MS, take_snapshot
from leakhound.errors import LeakhoundError, TargetExited, TargetNotFound, TracerStuck
from leakhound.model import Snapshot, TypeStat

# Owners whose item counts a cheap sample re-reads (the biggest named ones of the last census).
SAMPLED_OWNERS = 30
SAMPLED_TYPES = 30
_UNRESOLVABLE = ("<", "thread:")


@dataclass
class Watched:
    """Per-process state of a watch (mutable; everything it hands out is frozen)."""

    target: Target
    method: str
    samples: list[Sample] = field(default_factory=list)
    last_full: Sample | None = None
    last_snapshot: Snapshot | None = None
    last_full_at: float = float("-inf")
    last_attach_at: float = float("-inf")
    gone: bool = False
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WatchResult:
    reports: tuple[GrowthReport, ...]
    samples: tuple[Sample, ...]
    snapshots: tuple[Snapshot, ...]  # the last full snapshot of each process
    interrupted: bool = False


def _full(w: Watched, *, top: int, timeout: float, log: AttachLog, max_pause_ms: float) -> Sample:
    # RSS is read before the census: the series is the worker's, not the worker's plus what
    # the census itself briefly allocates in it.
    rss = rss_bytes(w.target.pid)
    snapshot = take_snapshot(w.target.pid, method=w.method, top=top, timeout=timeout, log=log,
                             max_pause_ms=max_pause_ms)
    w.last_snapshot = snapshot
    sample = dataclasses.replace(sample_from_snapshot(snapshot), rss_bytes=rss)
    w.last_full = sample
    return sample


def _cheap(w: Watched, *, timeout: float, log: AttachLog) -> Sample:
    assert w.last_full is not None
    reference = w.last_full
    paths = [o.path for o in reference.owners if not o.path.startswith(_UNRESOLVABLE)]
    taken_at = time.time()
    rss = rss_bytes(w.target.pid)  # before the request (see _full)
    remote = run_request(
        w.target.pid,
        {"op": "sample", "paths": paths[:SAMPLED_OWNERS], "top_types": SAMPLED_TYPES},
        method=w.method,
        timeout=timeout,
        log=log,
        target=w.target,
    )
    result = remote.result
    items = {str(k): int(v) for k, v in (result.get("items") or {}).items()}
    types = result.get("types")
    return Sample(
        pid=w.target.pid,
        taken_at=taken_at,
        rss_bytes=rss,
        owners=estimate_owners(reference, items),
        types=tuple(TypeStat(**t) for t in types) if types else (),
        name=w.target.name,
        method=remote.method,
        pause_ms=round(max(remote.attach_stop_ms, remote.main_thread_ms,
                           float(result.get("max_step_ms", 0.0))), 2),
        types_scope="tracked" if types else "",
    )


def _rss_only(w: Watched) -> Sample:
    return Sample(
        pid=w.target.pid, taken_at=time.time(), rss_bytes=rss_bytes(w.target.pid),
        name=w.target.name, method="rss",
    )


def _sample_one(
    w: Watched, *, now: float, final: bool, full_every: float, attach_every: float,
    top: int, timeout: float, log: AttachLog, max_pause_ms: float,
) -> Sample:
    stops_target = w.method == "gdb"
    if w.last_full is None or final or now - w.last_full_at >= full_every:
        w.last_full_at = w.last_attach_at = now
        return _full(w, top=top, timeout=timeout, log=log, max_pause_ms=max_pause_ms)
    if not stops_target or now - w.last_attach_at >= attach_every:
        w.last_attach_at = now
        return _cheap(w, timeout=timeout, log=log)
    return _rss_only(w)


def _add(pid: int, watched: dict[int, Watched], *, method: str, explicit: bool, log: AttachLog) -> None:
    try:
        target = resolve_target(pid)
        watched[pid] = Watched(target=target, method=choose_method(target, method))
    except LeakhoundError as exc:
        if explicit:
            raise
        log(f"skipping process {pid}: {exc}")


def watch_processes(
    *,
    pids: tuple[int, ...] = (),
    match: str | None = None,
    method: str = "auto",
    interval: float = 10.0,
    duration: float | None = None,
    full_every: float = 300.0,
    attach_every: float = 60.0,
    top: int = 50,
    timeout: float = 60.0,
    max_pause_ms: float = DEFAULT_MAX_PAUSE_MS,
    log: AttachLog | None = None,
    on_sample: Callable[[Sample], None] | None = None,
    on_tick: Callable[[tuple[GrowthReport, ...]], None] | None = None,
) -> WatchResult:
    """Sample every process until ``duration`` has passed (or Ctrl-C) and analyse growth.

    Errors on a process's first census propagate for pids given explicitly; later ones (a
    busy target, a slow attach) become warnings of that process and the watch goes on.
    """
    log = log or (lambda line: None)
    watched: dict[int, Watched] = {}
    for pid in pids:
        _add(pid, watched, method=method, explicit=True, log=log)
    explicit = set(pids)
    if match is not None:
        for pid in match_processes(match, exclude=frozenset(watched)):
            _add(pid, watched, method=method, explicit=False, log=log)
    if not watched:
        raise TargetNotFound(f"no Python process matches {match!r}" if match else "no process to watch")
    started = time.monotonic()
    tick = 0
    interrupted = False
    try:
        while True:
            now = time.monotonic()
            final = duration is not None and now - started >= duration - 1e-6
            if match is not None and tick > 0:
                for pid in match_processes(match, exclude=frozenset(watched)):
                    _add(pid, watched, method=method, explicit=False, log=log)
            for w in watched.values():
                if w.gone:
                    continue
                pid = w.target.pid
                try:
                    sample = _sample_one(
                        w, now=time.monotonic(), final=final, full_every=full_every,
                        attach_every=attach_every, top=top, timeout=timeout, log=log,
                        max_pause_ms=max_pause_ms,
                    )
                except (TargetNotFound, TargetExited) as exc:
                    w.gone = True
                    w.warnings.append(f"process {pid} exited during the watch: {exc}")
                    continue
                except TracerStuck:
                    raise  # only our exit lets that worker's main thread go: end the watch
                except LeakhoundError as exc:
                    if not w.samples and pid in explicit:
                        raise
                    w.warnings.append(f"sample skipped: {exc}")
                    log(f"process {pid}: sample skipped: {exc}")
                    continue
                w.samples.append(sample)
                if on_sample is not None:
                    on_sample(sample)
            if on_tick is not None:
                on_tick(_reports(watched))
            if final or all(w.gone for w in watched.values()):
                break
            tick += 1
            next_at = started + tick * interval
            if duration is not None:
                next_at = min(next_at, started + duration)
            time.sleep(max(0.0, next_at - time.monotonic()))
    except KeyboardInterrupt:
        interrupted = True
    return WatchResult(
        reports=_reports(watched),
        samples=tuple(s for w in watched.values() for s in w.samples),
        snapshots=tuple(w.last_snapshot for w in watched.values() if w.last_snapshot is not None),
        interrupted=interrupted,
    )


def _reports(watched: dict[int, Watched]) -> tuple[GrowthReport, ...]:
    reports = []
    for w in watched.values():
        if not w.samples:
            continue
        report = analyse_growth(w.samples)
        if w.warnings:
            report = GrowthReport(**{**report.__dict__, "warnings": tuple(w.warnings)})
        reports.append(report)
    return tuple(reports)
