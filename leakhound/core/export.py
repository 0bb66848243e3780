"""Exporting: a Prometheus endpoint with each watched worker's memory numbers.

A refresh loop takes a full snapshot of every process every ``interval`` seconds (the same
never-harm census and the same dominator owners as ``inspect``); scrapes read the last
snapshots plus RSS measured at scrape time, so a scrape never attaches to anything.
``--match`` re-discovers workers each round. A process that ends is said (a line, and a
series saying when and how: the OOM killer, a signal, its own exit) and the others go on
being served.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from leakhound.analysis.growth import analyse_growth
from leakhound.attach import choose_method, death
from leakhound.attach.process import Target, alive, match_processes, resolve_target, rss_bytes
from leakhound.core.capture import DEFAULT_MAX_PAUSE_MS, take_snapshot
from leakhound.core.request import SHORT_REQUESTS, RequestOptions
from leakhound.core.targets import no_process_matches
from leakhound.errors import HeadroomTooSmall, LeakhoundError, TargetExited, TargetNotFound, TracerStuck
from leakhound.model import Snapshot
from leakhound.model.growth import Sample, sample_from_snapshot
from leakhound.model.names import OwnerModel, Owners
from leakhound.render.prometheus import (
    DEFAULT_TOP_OWNERS,
    EndedView,
    ProcessView,
    SnapshotCollector,
    labelled_sample,
    worker_label,
)

GROWTH_WINDOW = 12  # censuses kept per process for the growth-rate metric
# Processes that ended, kept as series of their own: the latest ones (bounded, as every label).
ENDED_KEPT = 50


class ListenError(LeakhoundError):
    EXIT_CODE = 2
    HELP_TEXT = "Pass --listen HOST:PORT with a free port (e.g. 127.0.0.1:9464)."


@dataclass
class _Exported:
    target: Target
    # the request's options, into this process by the method chosen for it
    request: RequestOptions
    snapshot: Snapshot | None = None
    history: deque[Sample] = field(default_factory=lambda: deque(maxlen=GROWTH_WINDOW))
    errors: int = 0
    up: bool = True  # until a census fails: a process not yet censused is not down
    gone: bool = False
    # Read while it runs: what says how it ended if it dies (its cgroup's OOM kills, parent).
    facts: death.ProcessFacts | None = None

    @property
    def worker(self) -> str:
        return worker_label(self.target.cmdline.split(), self.target.name)


def parse_listen(listen: str, *, allow_remote: bool) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenError(f"--listen {listen!r} is not HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_remote:
        raise ListenError(
            f"refusing to listen on {host}: the metrics name processes and code paths",
            hint="Listen on 127.0.0.1 (scrape through a sidecar), or pass --allow-remote.",
        )
    return host, int(port)


def _quiet(_: str) -> None:
    pass


class Exporter:
    """The state behind the endpoint: processes, their last snapshots, a refresh loop."""

    def __init__(self, *, pids: tuple[int, ...], match: str | None, request: RequestOptions = SHORT_REQUESTS,
                 interval: float, note: Callable[[str], None] = _quiet,
                 max_pause_ms: float = DEFAULT_MAX_PAUSE_MS, top: int = DEFAULT_TOP_OWNERS) -> None:
        self.match = match
        self.top = top
        self.max_pause_ms = max_pause_ms
        self.request = request
        self.interval = interval
        self.log = request.log
        self.note = note
        self.processes: dict[int, _Exported] = {}
        self.ended: deque[EndedView] = deque(maxlen=ENDED_KEPT)
        self.lock = threading.Lock()
        self.rounds = 0
        for pid in pids:
            target = resolve_target(pid)  # explicit pids must be valid: fail before serving
            self.processes[pid] = _Exported(target, request.via(choose_method(target, request.method)),
                                            facts=death.read_facts(pid))
        self._discover()
        if not self.processes:
            raise no_process_matches(match) if match else TargetNotFound("no process to export")

    def _discover(self) -> None:
        if self.match is None:
            return
        for pid in match_processes(self.match, exclude=frozenset(self.processes)):
            try:
                target = resolve_target(pid)
                exported = _Exported(target, self.request.via(choose_method(target, self.request.method)),
                                     facts=death.read_facts(pid))
            except LeakhoundError as exc:
                self.log(f"skipping process {pid}: {exc}")
                continue
            with self.lock:
                self.processes[pid] = exported

    def refresh(self) -> None:
        """One round: a census of every live process (sequential, so one stop at a time)."""
        self._discover()
        for exported in list(self.processes.values()):
            if exported.gone:
                continue
            pid = exported.target.pid
            try:
                snap = take_snapshot(pid, request=exported.request, top=max(self.top, 20),
                                     max_pause_ms=self.max_pause_ms, owners=Owners.AUTO)
            except HeadroomTooSmall as exc:
                # Not a failure of the target's: skipped this round (its last snapshot stands).
                self.note(f"leakhound: process {pid}: skipped this round: {exc}")
                continue
            except (TargetNotFound, TargetExited) as exc:
                self._ended(exported, exc)
                continue
            except TracerStuck:
                raise  # only our exit lets that worker's main thread go: stop serving
            except LeakhoundError as exc:
                if not alive(pid):
                    # (a zombie fails the attach in other ways, e.g. its /proc/PID/exe unreadable)
                    self._ended(exported, exc)
                    continue
                exported.errors += 1
                exported.up = False
                self.note(f"leakhound: process {pid}: snapshot failed: {exc}")
                continue
            last = exported.snapshot
            if snap.heap.owner_model == OwnerModel.NOT_ATTRIBUTED and (
                    last is None or last.heap.owner_model_reason != snap.heap.owner_model_reason):
                # (its bytes are labelled "<not attributed: ...>"; said when the reason changes)
                self.note(f"leakhound: process {pid}: owners not attributed: {snap.heap.owner_model_note} "
                          f"(owner_model_reason: {snap.heap.owner_model_reason})")
            with self.lock:
                exported.snapshot = snap
                exported.history.append(labelled_sample(sample_from_snapshot(snap)))
                exported.up = True
        with self.lock:
            # Forget processes that exited: their series end, as in any exporter.
            for pid in [p for p, e in self.processes.items() if e.gone]:
                del self.processes[pid]
            self.rounds += 1

    def _ended(self, exported: _Exported, exc: LeakhoundError) -> None:
        pid = exported.target.pid
        exported.gone = True
        exported.up = False
        ended = death.target_ended(exported.facts, exc, pid=pid, name=exported.target.name,
                                   doing="exporting it (between censuses)")
        self.note(f"leakhound: process {pid} ({exported.worker}) ended, {ended.how.value}: {ended.message}")
        with self.lock:
            self.ended.append(EndedView(pid=pid, worker=exported.worker, how=ended.how.value, at=time.time()))

    def views(self) -> list[ProcessView]:
        with self.lock:
            processes = list(self.processes.values())
        views = []
        for e in processes:
            try:
                rss: int | None = rss_bytes(e.target.pid)
            except LeakhoundError:
                rss = None
            history = list(e.history)
            views.append(
                ProcessView(
                    pid=e.target.pid, worker=e.worker, snapshot=e.snapshot,
                    growth=analyse_growth(history, snapshot=e.snapshot) if len(history) >= 3 else None,
                    rss_bytes=rss, up=e.up and rss is not None, errors=e.errors,
                )
            )
        return views

    def ended_views(self) -> list[EndedView]:
        with self.lock:
            return list(self.ended)

    def loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            self.refresh()
            stop.wait(max(0.0, self.interval - (time.monotonic() - started)))


def serve(exporter: Exporter, *, host: str, port: int, stop: threading.Event,
          ready: threading.Event | None = None) -> int:
    """Serve /metrics until ``stop`` is set; returns the bound port (useful with port 0)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(exporter.views, top_owners=exporter.top, ended=exporter.ended_views))
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = int(server.server_address[1])
    exporter.note(f"leakhound: serving metrics on http://{host}:{bound}/metrics")
    if ready is not None:
        ready.set()
    try:
        exporter.loop(stop)
    finally:
        server.shutdown()
        server.server_close()
    return bound


def export_processes(*, pids: tuple[int, ...], match: str | None, request: RequestOptions = SHORT_REQUESTS,
                     listen: str, allow_remote: bool, interval: float, note: Callable[[str], None] = _quiet,
                     max_pause_ms: float = DEFAULT_MAX_PAUSE_MS, top: int = DEFAULT_TOP_OWNERS) -> None:
    """Serve /metrics for ``pids`` and the ``match``ing processes until Ctrl-C."""
    host, port = parse_listen(listen, allow_remote=allow_remote)
    exporter = Exporter(pids=pids, match=match, request=request, interval=interval, note=note,
                        max_pause_ms=max_pause_ms, top=top)
    stop = threading.Event()
    try:
        serve(exporter, host=host, port=port, stop=stop)
    except KeyboardInterrupt:
        stop.set()
