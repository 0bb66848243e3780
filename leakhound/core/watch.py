"""Watching workers over time: sample one or many and say which owners keep growing.

The core operation behind ``leakhound watch`` (as ``capture`` is behind ``inspect``). Three
kinds of sample, from cheapest to dearest:

* RSS only, read with psutil from outside (the target never notices), every ``interval``;
* a cheap in-target sample (item counts of the owners the last dominator census named, each
  found again by the ids along its path, and gc-tracked type counts): every ``interval`` with
  the agent and the ptrace injector (no stop, or a median 0.5 ms); at most every ``attach_every``
  seconds with gdb, whose attach stops the target ~40 ms;
* a full census (``take_snapshot`` with the owners ``inspect`` reads: dominator owners where
  the graph fits its budget): first, every ``full_every`` seconds, and last.

``watch_processes`` is the loop; the analysis is ``leakhound.analysis.growth``; rendering is
``leakhound.render.watch``.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from leakhound.analysis.growth import DEFAULT_THRESHOLDS, analyse_growth, estimate_owners
from leakhound.attach import RemoteResult, choose_method, death
from leakhound.attach.channel import Progress
from leakhound.attach.memory_limit import MemoryCost
from leakhound.attach.process import Target, alive, match_processes, resolve_target, rss_bytes
from leakhound.core.capture import DEFAULT_MAX_PAUSE_MS, counted_at, take_snapshot
from leakhound.core.decode import SampleOutcome, decode_sample
from leakhound.core.request import SHORT_REQUESTS, RequestOptions, ask
from leakhound.core.targets import no_process_matches
from leakhound.errors import (
    Interrupted,
    LeakhoundError,
    ProtocolViolation,
    SitesUnavailable,
    TargetExited,
    TargetNotFound,
    TracerStuck,
)
from leakhound.model import Owner, RequestCost, Snapshot
from leakhound.model.growth import (
    GrowthReport,
    OwnerSample,
    Sample,
    TargetEnded,
    followed_by_steps,
    sample_from_snapshot,
)
from leakhound.model.names import ATEXIT_OWNER, ROOTS_ALIKE, SUBCLASSES_STEP, Method, OwnerModel, Owners
from leakhound.payload import wire

# Owners whose item counts a cheap sample re-reads (the biggest named ones of the last census).
SAMPLED_OWNERS = 30
SAMPLED_TYPES = 30
# Processes sampled at once: each sample is mostly waiting (on the target, a debugger or the
# helper), so a few threads keep a fleet on schedule without loading leakhound's machine.
MAX_SAMPLERS = 8
# Owner paths the payload cannot walk by name (held from C, unreached, a thread's frame): a
# first-reacher owner without ids is re-read only by its name. Owners named "<...>" start at
# no named root (held from C, unreached, the payload's own): full censuses alone count them.
_UNRESOLVABLE = ("<", "thread:")
_NO_ROOT = "<"
# Owner types whose census item count is their C length, as a cheap sample reads it (the
# graph's entries of these built-in containers). Any other owner's census count is not (an
# OrderedDict's is its keys and values in the dominator tree, 2x its length): its length is
# read right after the census and is its item count in the watch, census and cheap samples
# alike (an owner with no length has none, and cheap samples leave it out).
_LENGTH_IS_ITEMS = frozenset({"list", "dict", "set", "frozenset", "tuple"})


@dataclass(frozen=True)
class SitesOptions:
    """``watch --sites``: the allocation-site tracker's rate and its own deadline in the target."""

    mean_bytes: int
    # The tracker removes itself this long after the watch's window would end, whatever
    # happens to leakhound: the final census must read it before then.
    seconds: float
    max_samples: int = wire.SITES_MAX_SAMPLES


# One sample per this many bytes allocated on average (docs/watch.md).
DEFAULT_SITES_RATE = wire.SITES_MEAN_BYTES

# Past the window, the time the final census has to read the tracker: at least this, or a few
# times what the first census took (a 2 GB worker's census under load: 100 s).
SITES_GRACE_SECONDS = 20.0
SITES_GRACE_FACTOR = 3.0


@dataclass
class Watched:
    """Per-process state of a watch (mutable; everything it hands out is frozen)."""

    target: Target
    # the request's options, into this process by the method chosen for it
    request: RequestOptions
    samples: list[Sample] = field(default_factory=list)
    last_full: Sample | None = None
    last_snapshot: Snapshot | None = None
    # The full sample and snapshot whose owners cheap samples re-read: the last with dominator
    # owners (else the last): a census whose owners were not attributed (graph over its
    # budget) does not switch the model cheap samples follow.
    reference: Sample | None = None
    reference_snapshot: Snapshot | None = None
    # owner path -> its length read right after the reference census (see _LENGTH_IS_ITEMS)
    census_lengths: dict[str, int] = field(default_factory=dict)
    # owner path -> its own size read right after the reference census (see _sized)
    census_sizes: dict[str, int] = field(default_factory=dict)
    # The reasons said of censuses whose owners were not attributed (names.NotAttributed)
    not_attributed: set[str] = field(default_factory=set)
    last_full_at: float = float("-inf")
    last_attach_at: float = float("-inf")
    gone: bool = False
    skipped_ticks: int = 0
    warnings: list[str] = field(default_factory=list)
    # RSS the request that loaded the payload left in the target (its modules, ~4 MB, and the
    # allocator's arenas of its first census, ~2 MB, kept for the next request): taken out of
    # every later sample's RSS, which is the worker's growth, not leakhound's (a 5 MB target
    # was given "growth 74.6 MiB/min" from it)
    payload_resident: int = 0
    # Read while it runs: what says how it ended if it dies (its cgroup's OOM kills, parent).
    facts: death.ProcessFacts | None = None
    # --sites: the tracker's options; whether it was started in this process, and read.
    sites: SitesOptions | None = None
    sites_started: bool = False
    sites_read: bool = False


@dataclass(frozen=True)
class WatchResult:
    reports: tuple[GrowthReport, ...]
    samples: tuple[Sample, ...]
    snapshots: tuple[Snapshot, ...]  # the last full snapshot of each process
    interrupted: bool = False
    ended: tuple[TargetEnded, ...] = ()


def _full(w: Watched, *, top: int, max_pause_ms: float, progress: Progress | None = None,
          final: bool = False) -> Sample:
    # RSS is read before the census: the series is the worker's, not the worker's plus what
    # the census itself briefly allocates in it.
    rss = rss_bytes(w.target.pid) - w.payload_resident
    read_sites = final and w.sites_started and not w.sites_read
    began = time.monotonic()
    snapshot = take_snapshot(w.target.pid, request=w.request, top=top, max_pause_ms=max_pause_ms, progress=progress,
                             owners=Owners.AUTO, sites=read_sites)
    if read_sites:
        w.sites_read = True
    elif w.sites is not None and not w.sites_started and not final:
        _start_sites(w, w.sites, census_seconds=time.monotonic() - began, progress=progress)
    w.payload_resident += _left_by_loading(snapshot.cost)
    w.last_snapshot = snapshot
    sample = dataclasses.replace(sample_from_snapshot(snapshot), rss_bytes=rss)
    if snapshot.heap.owner_model == "dominator" or w.reference is None or w.reference.owner_model != "dominator":
        w.reference_snapshot = snapshot
        w.census_lengths, w.census_sizes = _census_lengths(w, progress=progress)
        sample = dataclasses.replace(sample, owners=tuple(
            dataclasses.replace(o, items=w.census_lengths[o.path]) if o.path in w.census_lengths else o
            for o in sample.owners))
        w.reference = sample
    w.last_full = sample
    # a budget the census did not keep is said where the watch's report says what went wrong
    w.warnings.extend(f"a full census: {broken.text}" for broken in snapshot.over_budget)
    if snapshot.heap.owner_model == OwnerModel.NOT_ATTRIBUTED:
        # Said once per reason: every census of a heap past the graph's budget is.
        if snapshot.heap.owner_model_reason not in w.not_attributed:
            w.not_attributed.add(snapshot.heap.owner_model_reason)
            w.warnings.append(f"owners not attributed: {snapshot.heap.owner_model_note}" + (
                "; cheap samples re-read the owners of the last dominator census" if w.reference is not sample
                else "") + f" (owner_model_reason: {snapshot.heap.owner_model_reason})")
    elif w.reference is not sample:
        reason = snapshot.heap.owner_model_reason
        w.warnings.append(f"a full census fell back to {snapshot.heap.owner_model} owners "
                          f"({snapshot.heap.owner_model_note}); cheap samples re-read the owners of the last "
                          "dominator census" + (f" (owner_model_reason: {reason})" if reason else ""))
    return sample


def _start_sites(w: Watched, sites: SitesOptions, *, census_seconds: float, progress: Progress | None) -> None:
    """Start the allocation-site tracker in the target, for the window and the final census."""
    w.payload_resident += start_site_tracker(w.target, w.request, sites, window_seconds=sites.seconds,
                                             census_seconds=census_seconds, progress=progress)
    w.sites_started = True


def start_site_tracker(target: Target, request: RequestOptions, sites: SitesOptions, *, window_seconds: float,
                       census_seconds: float, progress: Progress | None = None) -> int:
    """Start the allocation-site tracker in ``target`` for a window of ``window_seconds`` and
    the census after it (which took ``census_seconds`` before): it removes itself once both
    should be over. The resident bytes the request's loading left there; SitesUnavailable where
    it cannot run."""
    seconds = window_seconds + max(SITES_GRACE_SECONDS, SITES_GRACE_FACTOR * census_seconds)
    remote = ask(target.pid, {"op": wire.OP_SITES, "action": wire.SITES_START, "mean_bytes": sites.mean_bytes,
                              "seconds": seconds, "max_samples": sites.max_samples},
                 request=request, target=target, progress=progress)
    answer = remote.result.get("sites")
    if not isinstance(answer, dict):
        raise ProtocolViolation(f"process {target.pid} answered the tracker's start without its state")
    if answer.get("started") is not True:
        raise SitesUnavailable(f"process {target.pid}: the allocation-site tracker cannot run there: "
                               f"{str(answer.get('reason') or 'no reason given')[:300]}")
    table = answer.get("table_bytes")
    request.log(f"process {target.pid}: allocation-site tracker started (one sample per "
                f"{sites.mean_bytes:,} bytes, tables {table if isinstance(table, int) else '?'} bytes, "
                f"removes itself in {seconds:.0f} s)")
    return _left_by_loading(remote.cost)


def stop_site_tracker(target: Target, request: RequestOptions) -> None:
    """The tracker stopped now (a run that ends without its final census); it would stop by
    itself at its deadline anyway."""
    try:
        ask(target.pid, {"op": wire.OP_SITES, "action": wire.SITES_STOP}, request=request.within(30.0),
            target=target, force=True)
    except LeakhoundError as exc:
        request.log(f"process {target.pid}: the tracker was not stopped ({exc}); it removes itself at its "
                    "deadline")


def _census_lengths(w: Watched, *, progress: Progress | None) -> tuple[dict[str, int], dict[str, int]]:
    """The lengths of the reference census's owners whose item count is not their length,
    and the own sizes of those measured by it (``_sized``), read at once after it (one more
    request, only when there is such an owner)."""
    assert w.reference_snapshot is not None
    asked, owners_doc = _owner_request(w.reference_snapshot.owners)
    if all(_length_is_items(o) for o in asked):
        return {}, {}
    try:
        _remote, sampled = _read_owners(w, owners_doc, len(asked), top_types=0, progress=progress)
    except LeakhoundError as exc:  # those owners are left out of cheap samples until the next census
        w.request.log(f"process {w.target.pid}: lengths after the census not read: {exc}")
        return {}, {}
    lengths = {o.path: items for o, (found, items) in zip(asked, sampled.owners, strict=True)
               if found and items is not None and not _length_is_items(o)}
    # (one with a length, a bytearray's, is counted by it: its own size is for those with none)
    sizes = {o.path: size for o, (found, _items), size in zip(asked, sampled.owners, _sizes(sampled, asked),
                                                              strict=True)
             if found and size and _sized(o) and o.path not in lengths}
    return lengths, sizes


def _sizes(sampled: SampleOutcome, asked: list[Owner]) -> tuple[int | None, ...]:
    return sampled.owner_bytes if len(sampled.owner_bytes) == len(asked) else (None,) * len(asked)


def _sized(owner: Owner) -> bool:
    """Whether cheap samples measure ``owner`` by its own size: one that retains only itself
    and has no items or length a sample reads (an array.array a stream's data is appended to,
    a 3.12+ io.StringIO written to, a numpy array concatenated anew, found by its path's steps;
    a bytearray is counted by its length): its bytes, scaled from the census's by its size
    then and now. Such bytes were measured by full censuses alone ("2 are too few to tell" in
    a watch of -d 120)."""
    return (owner.items == 0 and owner.retained_objects == 1 and not owner.count_ids
            and owner.type not in _LENGTH_IS_ITEMS)


def _length_is_items(owner: Owner) -> bool:
    """Whether the length a cheap sample reads of ``owner`` is its census item count: a built-in
    collection's, not a shared owner's (counted by one of its parts: its length is read after
    each census, and that is its item count, see _census_lengths); a chain's head's links,
    counted by the sample as the census counts them."""
    return (owner.type in _LENGTH_IS_ITEMS or owner.chain) and not owner.count_ids and owner.path != ATEXIT_OWNER


def _threads_alike(path: str) -> bool:
    """The threads named alike (``ROOTS_ALIKE``): counted again by name, unlike a thread's frame."""
    alike = ROOTS_ALIKE.match(path)
    return alike is not None and alike["kind"] == "thread"


def _owner_request(owners: tuple[Owner, ...]) -> tuple[list[Owner], list[dict[str, object]]]:
    """The owners a cheap sample re-reads (ids for dominator owners, names for the census's)
    and how they are asked for."""
    # (a step along a C field no referent shows, a class's registry of its subclasses: its ids
    # cannot be walked either; full censuses alone count its owner)
    # (a shared owner, ``<shared by A, B>``: counted by the length of its part that has its items)
    asked = [o for o in owners if o.count_ids or (
        not o.path.startswith(_NO_ROOT) and SUBCLASSES_STEP not in o.path
        and (o.path_ids or not o.path.startswith(_UNRESOLVABLE) or _threads_alike(o.path)))][:SAMPLED_OWNERS]
    return asked, [{"ids": list(o.count_ids), "type": o.count_type, "path": o.path} if o.count_ids else
                   {"ids": list(o.path_ids), "steps": list(o.path_steps), "type": o.type, "path": o.path,
                    **({"size": True} if _sized(o) else {}),
                    **({"chain": True, "chain_end": o.chain_end} if o.chain else {})}
                   for o in asked]


def _cheap(w: Watched, *, progress: Progress | None = None, max_pause_ms: float | None = None) -> Sample:
    assert w.reference is not None
    reference = w.reference
    asked, owners_doc = _owner_request(w.reference_snapshot.owners if w.reference_snapshot is not None else ())
    taken_at = time.time()
    rss = rss_bytes(w.target.pid) - w.payload_resident  # before the request (see _full)
    remote, sampled = _read_owners(w, owners_doc, len(asked), top_types=SAMPLED_TYPES, progress=progress,
                                   max_pause_ms=max_pause_ms)
    if sampled.types_skipped:
        w.request.log(f"process {w.target.pid}: no type counts in this sample: {sampled.types_skipped}")
    measured = sampled.owners
    taken_at = counted_at(sampled.started_at, taken_at)
    counted = estimate_owners([_counted(o, w.census_lengths) for o in asked], [
        answer if _length_is_items(o) or o.path in w.census_lengths else (answer[0], None)
        for o, answer in zip(asked, measured, strict=True)])
    sized = tuple(
        OwnerSample(o.path, o.type, o.items, round(o.retained_bytes * size / w.census_sizes[o.path]), estimated=True,
                    object_id=o.object_id, by_steps=followed_by_steps(o.path, o.path_steps))
        for o, (found, _items), size in zip(asked, measured, _sizes(sampled, asked), strict=True)
        if found and size is not None and _sized(o) and w.census_sizes.get(o.path) and o.path not in w.census_lengths)
    return Sample(
        pid=w.target.pid,
        taken_at=taken_at,
        rss_bytes=rss,
        owners=counted + sized,
        types=sampled.types,
        name=w.target.name,
        method=str(remote.method),
        pause_ms=round(max(remote.attach_stop_ms, remote.main_thread_ms, sampled.max_step_ms), 2),
        types_scope="tracked" if sampled.types else "",
        owner_model=reference.owner_model,
        unresolved=tuple(o.path for o, (found, _) in zip(asked, measured, strict=True) if not found),
    )


def _counted(owner: Owner, census_lengths: dict[str, int]) -> Owner:
    """``owner`` with its length read after the census as its item count (see _LENGTH_IS_ITEMS)."""
    return dataclasses.replace(owner, items=census_lengths[owner.path]) if owner.path in census_lengths else owner


def _read_owners(w: Watched, owners_doc: list[dict[str, object]], asked: int, *, top_types: int,
                 progress: Progress | None, max_pause_ms: float | None = None) -> tuple[RemoteResult, SampleOutcome]:
    """The ``sample`` request: its answer, and that answer decoded. ``max_pause_ms``: the type
    counts (one listing of every tracked object) are skipped when they would hold longer."""
    asked_doc: dict[str, object] = {"op": wire.OP_SAMPLE, "owners": owners_doc, "top_types": top_types}
    if max_pause_ms:
        asked_doc["max_pause_ms"] = max_pause_ms
    remote = ask(w.target.pid, asked_doc, request=w.request, target=w.target, progress=progress)
    w.payload_resident += _left_by_loading(remote.cost)
    return remote, decode_sample(w.target.pid, remote.result, asked=asked)


def _left_by_loading(cost: RequestCost | MemoryCost | None) -> int:
    """The RSS a request that loaded the payload left in the target; 0 for any other."""
    if cost is None or cost.payload_load_bytes <= 0:
        return 0
    return max(cost.payload_load_bytes, cost.rss_bytes)


def _rss_only(w: Watched) -> Sample:
    if not alive(w.target.pid):  # a zombie's RSS reads as 0, not as gone
        raise TargetNotFound(f"process {w.target.pid} exited")
    return Sample(
        pid=w.target.pid, taken_at=time.time(), rss_bytes=rss_bytes(w.target.pid) - w.payload_resident,
        name=w.target.name, method="rss",
    )


def _sample_one(
    w: Watched, *, now: float, final: bool, full_every: float, attach_every: float,
    top: int, max_pause_ms: float, progress: Progress | None = None,
) -> Sample:
    stops_target = w.request.method == Method.GDB
    if w.last_full is None or final or now - w.last_full_at >= full_every:
        w.last_full_at = w.last_attach_at = now
        return _full(w, top=top, max_pause_ms=max_pause_ms, progress=progress, final=final)
    if not stops_target or now - w.last_attach_at >= attach_every:
        w.last_attach_at = now
        return _cheap(w, progress=progress, max_pause_ms=max_pause_ms)
    return _rss_only(w)


def _add(pid: int, watched: dict[int, Watched], *, request: RequestOptions, explicit: bool,
         sites: SitesOptions | None = None) -> None:
    try:
        target = resolve_target(pid)
        watched[pid] = Watched(target=target, request=request.via(choose_method(target, request.method)),
                               facts=death.read_facts(pid), sites=sites)
    except LeakhoundError as exc:
        if explicit:
            raise
        request.log(f"skipping process {pid}: {exc}")


def watch_processes(
    *,
    pids: tuple[int, ...] = (),
    match: str | None = None,
    request: RequestOptions = SHORT_REQUESTS,
    interval: float = 10.0,
    duration: float | None = None,
    full_every: float = 300.0,
    attach_every: float = 60.0,
    top: int = 50,
    max_pause_ms: float = DEFAULT_MAX_PAUSE_MS,
    on_sample: Callable[[Sample], None] | None = None,
    on_tick: Callable[[tuple[GrowthReport, ...]], None] | None = None,
    max_samplers: int = MAX_SAMPLERS,
    sites: SitesOptions | None = None,
) -> WatchResult:
    """Sample every process until ``duration`` has passed (or Ctrl-C) and analyse growth.

    Errors on a process's first census propagate for pids given explicitly; later ones (a
    busy target, a slow attach) become warnings of that process and the watch goes on.
    Processes are sampled concurrently (at most ``max_samplers`` at once, one request per
    process, each bounded by ``request.timeout``): a slow or stalled worker misses ticks, the others
    do not. A sample of a process with too little headroom under its memory limit is
    refused (HeadroomTooSmall: the watch ends on a first census, later ones are skipped with
    a warning) unless ``request.force``. A process that ends (OOM-killed, killed by a signal, exited on its own) leaves
    the watch and is said in ``ended``, how it ended read as ``inspect`` reads it.
    """
    log = request.log
    watched: dict[int, Watched] = {}
    for pid in pids:
        _add(pid, watched, request=request, explicit=True, sites=sites)
    explicit = set(pids)
    if match is not None:
        for pid in match_processes(match, exclude=frozenset(watched)):
            _add(pid, watched, request=request, explicit=False, sites=sites)
    if not watched:
        raise no_process_matches(match) if match else TargetNotFound("no process to watch")
    samplers = _Samplers(max(1, min(max_samplers, len(watched))))
    owed: set[int] = set()  # processes whose tick came while their last sample was being taken

    def submit(w: Watched, final: bool) -> None:
        samplers.submit(w.target.pid, functools.partial(
            _sample_one, w, now=time.monotonic(), final=final, full_every=full_every,
            attach_every=attach_every, top=top, max_pause_ms=max_pause_ms, progress=samplers.check,
        ))

    started = time.monotonic()
    tick = 0
    interrupted = False
    ended: list[TargetEnded] = []
    try:
        while True:
            now = time.monotonic()
            final = duration is not None and now - started >= duration - 1e-6
            if match is not None and tick > 0:
                for pid in match_processes(match, exclude=frozenset(watched)):
                    _add(pid, watched, request=request, explicit=False, sites=sites)
                samplers.grow(min(max_samplers, len(watched)))
            for w in watched.values():
                if w.gone:
                    continue
                if w.target.pid in samplers.busy:
                    # Its last sample is still being taken (a slow or stalled worker): the
                    # others are not held up by it, and it is not asked twice at once. It is
                    # sampled as soon as that one is done; a second tick meanwhile is missed.
                    if w.target.pid in owed:
                        w.skipped_ticks += 1
                    owed.add(w.target.pid)
                    continue
                submit(w, final)
            next_at = started + (tick + 1) * interval
            if duration is not None:
                next_at = min(next_at, started + duration)
            # Final tick: every sample in flight is waited for (each ends within its timeout).
            until = None if final else next_at
            for pid, outcome in samplers.collect(until):
                w = watched[pid]
                if isinstance(outcome, Sample):
                    w.samples.append(outcome)
                    if on_sample is not None:
                        on_sample(outcome)
                elif isinstance(outcome, (TargetNotFound, TargetExited)) or (
                        isinstance(outcome, LeakhoundError) and not alive(pid)):
                    # (a zombie fails the attach in other ways, e.g. its /proc/PID/exe unreadable:
                    # it ended all the same, and waiting out the watch would not bring it back)
                    w.gone = True
                    ended.append(death.target_ended(w.facts, outcome, pid=pid, name=w.target.name,
                                                     doing="watching it (between samples)"))
                    w.warnings.append(ended[-1].message)
                    log(f"process {pid}: {ended[-1].message}")
                elif isinstance(outcome, TracerStuck):
                    raise outcome  # only our exit lets that worker's main thread go: end the watch
                elif isinstance(outcome, LeakhoundError):
                    if not w.samples and pid in explicit:
                        raise outcome
                    w.warnings.append(f"sample skipped: {outcome}")
                    log(f"process {pid}: sample skipped: {outcome}")
                else:
                    raise outcome
                if pid in owed:
                    owed.discard(pid)
                    if w.gone:
                        pass
                    elif final and len(w.samples) < DEFAULT_THRESHOLDS.min_points - 1:
                        # The window went by while its first census was taken (a 2 GB worker
                        # under load: 100 s): a cheap sample now, then the final census, or
                        # its growth would have two points, no trend (no finding at all).
                        owed.add(pid)
                        submit(w, False)
                    else:
                        submit(w, final)  # on the last tick: its final census
            if on_tick is not None:
                on_tick(_reports(watched))
            if final or all(w.gone for w in watched.values()):
                break
            tick += 1
            time.sleep(max(0.0, next_at - time.monotonic()))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        samplers.close()
        for w in watched.values():
            if w.sites_started and not w.sites_read and not w.gone:
                stop_site_tracker(w.target, w.request)
    for w in watched.values():
        if w.skipped_ticks:
            w.warnings.append(
                f"{w.skipped_ticks} tick(s) without a sample: the previous one was still being taken"
            )
    return WatchResult(
        reports=_reports(watched),
        samples=tuple(s for w in watched.values() for s in w.samples),
        snapshots=tuple(w.last_snapshot for w in watched.values() if w.last_snapshot is not None),
        interrupted=interrupted,
        ended=tuple(ended),
    )


class _Samplers:
    """At most ``size`` samples taken at once, one per process, each on its own thread.

    Each sample is bounded by the request's own timeout (which cancels it in the target). On
    Ctrl-C or an error the samples in flight are told to stop at their next progress report
    (the request is cancelled in the target as on Ctrl-C) and given ``CLOSE_GRACE`` seconds;
    a request still waiting on a stalled worker after that is left to its daemon thread, which
    dies with leakhound (as a killed leakhound does: the target is not harmed).
    """

    CLOSE_GRACE = 3.0

    def __init__(self, size: int) -> None:
        self.size = size
        self.busy: set[int] = set()
        self._slots = threading.Semaphore(size)
        self._done: queue.Queue[tuple[int, Sample | BaseException]] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def grow(self, size: int) -> None:
        for _ in range(size - self.size):
            self._slots.release()
        self.size = max(self.size, size)

    def check(self, phase: str, done: int) -> None:
        """The requests' progress callback: where a request in flight learns to stop."""
        del phase, done
        if self._stop.is_set():
            raise Interrupted(signal.SIGINT)

    def submit(self, pid: int, sample: Callable[[], Sample]) -> None:
        self.busy.add(pid)

        def run() -> None:
            with self._slots:
                try:
                    outcome: Sample | BaseException = sample()
                except BaseException as exc:  # handed to the watch loop, which decides
                    outcome = exc
            self._done.put((pid, outcome))

        thread = threading.Thread(target=run, name=f"leakhound-sample-{pid}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def collect(self, until: float | None) -> Iterator[tuple[int, Sample | BaseException]]:
        """Samples as they are done, until ``until`` (monotonic) or, if None, until none is in flight."""
        while self.busy:
            wait = None if until is None else until - time.monotonic()
            if wait is not None and wait <= 0:
                return
            try:
                pid, outcome = self._done.get(timeout=wait)
            except queue.Empty:
                return
            self.busy.discard(pid)
            yield pid, outcome

    def close(self) -> None:
        self._stop.set()
        deadline = time.monotonic() + self.CLOSE_GRACE
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def _reports(watched: dict[int, Watched]) -> tuple[GrowthReport, ...]:
    reports = []
    for w in watched.values():
        if not w.samples:
            continue
        report = analyse_growth(w.samples, snapshot=w.last_snapshot)
        if w.warnings:
            report = GrowthReport(**{**report.__dict__, "warnings": tuple(w.warnings)})
        reports.append(report)
    return tuple(reports)
