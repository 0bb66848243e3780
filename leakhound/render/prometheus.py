"""Prometheus metrics from snapshots: a collector the ``export`` endpoint serves.

Every number comes from the last full snapshot of each process (and RSS read at scrape time,
which is free). Names follow the Prometheus conventions (base units, ``_total`` only on
counters, one HELP per metric; ``promtool check metrics`` passes, see tests) and labels are
bounded and stable: ``pid`` and ``worker`` (the script or module the process runs) on every
series; ``owner`` without the line numbers and task/thread numbers that change while the
worker runs; no label whose value flips with a verdict or a severity. Documented in
docs/export.md, a stable interface for dashboards and alerts.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from leakhound.model import Snapshot
from leakhound.model.growth import UNKNOWN, GrowthReport, OwnerSample, Sample, normalized_path
from leakhound.model.names import CODE_OWNER, Fix, NotAttributed, OwnerModel

PREFIX = "leakhound"
DEFAULT_TOP_OWNERS = 10
# Finding kinds whose count and bytes become metrics of their own (the verifiers detectors,
# named as their fix; the metric names say what is counted):
# kind -> ((count metric, its HELP), (bytes metric, its HELP)).
NAMED_FINDINGS = {
    Fix.REGISTRY.value: (
        ("registry_entries", "Entries in the verifiers trajectory registry (Runtime.trajectories)."),
        ("registry_bytes", "Bytes retained by the verifiers trajectory registry's entries."),
    ),
    Fix.INTERCEPTS.value: (
        ("intercepts_bodies", "Intercepted request bodies verifiers still holds after delivering them."),
        ("intercepts_bytes", "Bytes of the intercepted request bodies verifiers still holds."),
    ),
}
# Census owners that are not a place in the program (the code itself).
_NOT_OWNERS = frozenset({CODE_OWNER})

_PYTHON = re.compile(r"^(python|pypy)[\d.]*m?$")
# Interpreter options that take a value in the next argument.
_OPTIONS_WITH_VALUE = frozenset({"-X", "-W", "--check-hash-based-pycs"})


def owner_label(path: str) -> str:
    """An owner path as a label value that stays the same while the worker runs:
    ``task:Task-7/run (worker.py:123).x`` -> ``task:Task-*/run (worker.py).x``."""
    return normalized_path(path)


def worker_label(argv: Sequence[str], name: str) -> str:
    """What a process runs, from its command line: the module of ``python -m MODULE``, the
    script's file name, ``-c``, or the executable's name when it is not a Python launcher."""
    if not argv:
        return name
    executable = os.path.basename(argv[0])
    if not _PYTHON.match(executable):
        return executable or name
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else executable
        if arg.startswith("-m") and not arg.startswith("--"):
            return arg[2:]
        if arg == "-c":
            return "-c"
        if arg in _OPTIONS_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        return os.path.basename(arg) or executable
    return executable


def labelled_sample(sample: Sample) -> Sample:
    """``sample`` with its owners merged under their labels, so that the growth rate of a task's
    owner is measured across censuses that saw its coroutine at different lines."""
    merged: dict[str, OwnerSample] = {}
    for o in sample.owners:
        label = owner_label(o.path)
        seen = merged.get(label)
        # One owner keeps its identity; owners merged under one label are matched by it.
        merged[label] = OwnerSample(label, o.type, o.items, o.bytes, o.estimated, o.object_id) if seen is None \
            else OwnerSample(label, seen.type, seen.items + o.items, seen.bytes + o.bytes,
                             seen.estimated or o.estimated)
    return dataclasses.replace(sample, owners=tuple(merged.values()))


@dataclass(frozen=True)
class ProcessView:
    """What the collector knows about one process at scrape time."""

    pid: int
    worker: str
    snapshot: Snapshot | None
    growth: GrowthReport | None = None
    rss_bytes: int | None = None  # read at scrape time; None when the process is gone
    up: bool = True  # False once a census failed, until one succeeds again
    errors: int = 0


@dataclass(frozen=True)
class EndedView:
    """A process that ended while exported: how (``EndedHow``'s value) and when (unix time)."""

    pid: int
    worker: str
    how: str
    at: float


class SnapshotCollector(Collector):
    """Turns ``views()`` into metric families on every scrape (no state of its own)."""

    def __init__(self, views: Callable[[], Sequence[ProcessView]], *, top_owners: int = DEFAULT_TOP_OWNERS,
                 ended: Callable[[], Sequence[EndedView]] | None = None) -> None:
        self.views = views
        self.top_owners = top_owners
        self.ended = ended

    def collect(self) -> Iterator[Metric]:
        ended = self.ended() if self.ended is not None else ()
        return iter(collect_metrics(self.views(), top_owners=self.top_owners, ended=ended))


def _g(name: str, doc: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels))


def _summed(rows: Sequence[tuple[tuple[str, ...], float]]) -> dict[tuple[str, ...], float]:
    """Rows whose labels became equal (owners differing only by a line number) add up: every
    object belongs to one owner, so the sum is what the label's owners retain together."""
    out: dict[tuple[str, ...], float] = {}
    for labels, value in rows:
        out[labels] = out.get(labels, 0.0) + value
    return out


def collect_metrics(views: Sequence[ProcessView], *, top_owners: int = DEFAULT_TOP_OWNERS,
                    ended: Sequence[EndedView] = ()) -> list[Metric]:
    base = ("pid", "worker")
    ended_at = _g("target_ended_timestamp_seconds", "Unix time an exported process was found ended, by how: "
                  "oom_killed, signal, exited (its own exit) or unknown (the exporter's last 50).", (*base, "how"))
    for gone in ended:
        ended_at.add_metric((str(gone.pid), gone.worker, gone.how), gone.at)
    up = _g("up", "1 while the process is exported and its last census, if any, succeeded; 0 after a failed one.",
            base)
    errors = CounterMetricFamily(f"{PREFIX}_snapshot_errors", "Censuses of the process that failed (busy, timeout, "
                                 "refused) since the exporter started.", labels=list(base))
    rss = _g("rss_bytes", "Resident set size of the process, read from /proc at scrape time.", base)
    heap = _g("live_heap_bytes", "Bytes held by live Python objects (last census).", base)
    objects = _g("live_heap_objects", "Number of live Python objects (last census).", base)
    trimmable = _g("trimmable_bytes", "Free glibc heap memory malloc_trim(0) would return to the system (last census).",
                   base)
    malloc_free = _g("malloc_free_bytes", "Free memory glibc's allocator keeps in the process (last census).", base)
    pymalloc_free = _g("pymalloc_free_bytes", "Free memory inside pymalloc's arenas (last census).", base)
    garbage = _g("cyclic_garbage_bytes", "Bytes of unreachable objects kept alive by reference cycles (last census).",
                 base)
    taken = _g("snapshot_timestamp_seconds", "Unix time the last census of the process was taken.", base)
    pause = _g("snapshot_pause_seconds", "Longest time the last census held the process's main thread.", base)
    not_attributed = _g("owners_not_attributed", "1 when the last census named no owner, for this reason "
                        "(owner_model_reason: the object graph past a budget), else 0; one series per reason.",
                        (*base, "reason"))
    owner_labels = (*base, "owner", "type")
    owner_bytes = _g("owner_retained_bytes", "Bytes a named owner retains: what freeing it would give back "
                     "(top owners, last census).", owner_labels)
    owner_items = _g("owner_items", "Items in a named owner's container (top owners, last census).", owner_labels)
    growth = _g("owner_growth_bytes_per_second", "Growth rate of an owner's retained bytes, least squares over "
                "the exporter's last censuses of the process.", (*base, "owner"))
    finding_bytes = _g("finding_bytes", "Bytes the findings of a kind are about (last census).", (*base, "kind"))
    finding_items = _g("finding_items", "Objects or entries the findings of a kind are about (last census).",
                       (*base, "kind"))
    named = {
        kind: (_g(count_name, count_doc, (*base, "owner")), _g(bytes_name, bytes_doc, (*base, "owner")))
        for kind, ((count_name, count_doc), (bytes_name, bytes_doc)) in NAMED_FINDINGS.items()
    }
    for view in views:
        labels = (str(view.pid), view.worker)
        up.add_metric(labels, 1.0 if view.up else 0.0)
        errors.add_metric(labels, float(view.errors))
        if view.rss_bytes is not None:
            rss.add_metric(labels, float(view.rss_bytes))
        snap = view.snapshot
        if snap is None:
            continue
        heap.add_metric(labels, float(snap.heap.bytes))
        objects.add_metric(labels, float(snap.heap.objects))
        if snap.arena.available:
            trimmable.add_metric(labels, float(snap.arena.trimmable_bytes))
            malloc_free.add_metric(labels, float(snap.arena.malloc_free_bytes))
            pymalloc_free.add_metric(labels, float(snap.arena.pymalloc_free_bytes))
        garbage.add_metric(labels, float(snap.cyclic_garbage.bytes))
        taken.add_metric(labels, snap.taken_at)
        pause.add_metric(labels, snap.heap.max_pause_ms / 1000.0)
        reason = snap.heap.owner_model_reason if snap.heap.owner_model == OwnerModel.NOT_ATTRIBUTED else None
        for code in NotAttributed:
            not_attributed.add_metric((*labels, code.value), 1.0 if code.value == reason else 0.0)
        top = [o for o in snap.owners if o.path not in _NOT_OWNERS][:top_owners]
        for key, value in _summed([((*labels, owner_label(o.path), o.type), float(o.retained_bytes))
                                   for o in top]).items():
            owner_bytes.add_metric(key, value)
        for key, value in _summed([((*labels, owner_label(o.path), o.type), float(o.items)) for o in top]).items():
            owner_items.add_metric(key, value)
        if view.growth is not None:
            trends = [t for t in view.growth.owners if t.verdict != UNKNOWN and t.name not in _NOT_OWNERS]
            for key, value in _summed([((*labels, owner_label(t.name)), t.bytes_per_min / 60.0)
                                       for t in trends[:top_owners]]).items():
                growth.add_metric(key, value)
        findings = [f for f in snap.findings if not f.skipped]
        for key, value in _summed([((*labels, f.kind), float(f.bytes)) for f in findings]).items():
            finding_bytes.add_metric(key, value)
        for key, value in _summed([((*labels, f.kind), float(f.count)) for f in findings]).items():
            finding_items.add_metric(key, value)
        for kind, (count_family, bytes_family) in named.items():
            of_kind = [f for f in findings if f.kind == kind]
            for key, value in _summed([((*labels, owner_label(f.owner)), float(f.count)) for f in of_kind]).items():
                count_family.add_metric(key, value)
            for key, value in _summed([((*labels, owner_label(f.owner)), float(f.bytes)) for f in of_kind]).items():
                bytes_family.add_metric(key, value)
    families: list[Metric] = [up, errors, rss, heap, objects, trimmable, malloc_free, pymalloc_free,
                              garbage, taken, pause, not_attributed, owner_bytes, owner_items, growth,
                              finding_bytes, finding_items, ended_at]
    for count_family, bytes_family in named.values():
        families.extend((count_family, bytes_family))
    return families


def metric_names() -> list[str]:
    """Every sample name the exporter can emit (counters with ``_total``), for docs and tests."""
    return [family.name + ("_total" if family.type == "counter" else "") for family in collect_metrics([])]
