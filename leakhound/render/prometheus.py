"""Prometheus metrics from snapshots: a collector the ``export`` endpoint serves.

Every number comes from the last full snapshot of each process (and RSS read at scrape time,
which is free), labelled by ``pid`` and process ``name``. Metric names and labels are
documented in docs/export.md; they are a stable interface for dashboards and alerts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from leakhound.analysis.growth import GrowthReport
from leakhound.model import Snapshot

PREFIX = "leakhound"
# Finding kinds whose count/bytes become metrics of their own (the verifiers detectors).
NAMED_FINDINGS = {
    "trajectory_registry": ("trajectory_registry_entries", "trajectory_registry_bytes",
                            "Entries and bytes in the trajectory registry (verifiers detector)."),
    "intercept_bodies": ("intercept_bodies", "intercept_bodies_bytes",
                         "Retained intercepted request/response bodies (verifiers detector)."),
}


@dataclass(frozen=True)
class ProcessView:
    """What the collector knows about one process at scrape time."""

    pid: int
    name: str
    snapshot: Snapshot | None
    growth: GrowthReport | None = None
    rss_bytes: int | None = None  # read at scrape time; None when the process is gone
    up: bool = True
    errors: int = 0


class SnapshotCollector(Collector):
    """Turns ``views()`` into metric families on every scrape (no state of its own)."""

    def __init__(self, views: Callable[[], Sequence[ProcessView]], *, top_owners: int = 10) -> None:
        self.views = views
        self.top_owners = top_owners

    def collect(self) -> Iterator[Metric]:
        return iter(collect_metrics(self.views(), top_owners=self.top_owners))


def _g(name: str, doc: str, labels: Sequence[str], unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels), unit=unit)


def collect_metrics(views: Sequence[ProcessView], *, top_owners: int = 10) -> list[Metric]:
    base = ("pid", "name")
    up = _g("up", "1 when the last snapshot of the process succeeded.", base)
    errors = CounterMetricFamily(f"{PREFIX}_snapshot_errors", "Snapshots that failed.", labels=list(base))
    rss = _g("rss_bytes", "Resident set size, read at scrape time.", base)
    heap = _g("live_heap_bytes", "Bytes of live Python objects (last census).", base)
    objects = _g("live_heap_objects", "Live Python objects (last census).", base)
    trimmable = _g("trimmable_bytes", "Free glibc memory malloc_trim(0) would return.", base)
    malloc_free = _g("malloc_free_bytes", "Free memory glibc holds.", base)
    pymalloc_free = _g("pymalloc_free_bytes", "Free memory inside pymalloc arenas.", base)
    garbage = _g("cyclic_garbage_bytes", "Unreachable objects kept alive by reference cycles.", base)
    taken = _g("snapshot_timestamp_seconds", "When the last census was taken (unix time).", base)
    pause = _g("snapshot_pause_ms", "Longest pause of the target during the last census.", base)
    owner_labels = (*base, "owner", "type")
    owner_bytes = _g("owner_retained_bytes", "Bytes retained by the top owners (last census).", owner_labels)
    owner_items = _g("owner_items", "Items in the top owners' containers (last census).", owner_labels)
    growth = _g("owner_growth_bytes_per_minute", "Growth rate of an owner over the recent censuses.",
                (*base, "owner", "verdict"))
    finding_labels = (*base, "kind", "severity")
    finding_bytes = _g("finding_bytes", "Bytes a finding is about.", finding_labels)
    finding_count = _g("finding_count", "Objects/entries a finding is about.", finding_labels)
    named = {
        kind: (_g(count_name, doc, (*base, "owner")), _g(bytes_name, doc, (*base, "owner")))
        for kind, (count_name, bytes_name, doc) in NAMED_FINDINGS.items()
    }
    for view in views:
        labels = [str(view.pid), view.name]
        up.add_metric(labels, 1.0 if view.up and view.snapshot is not None else 0.0)
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
        pause.add_metric(labels, snap.heap.max_pause_ms)
        for top in [o for o in snap.owners if o.path != "<modules and classes>"][:top_owners]:
            owner_bytes.add_metric([*labels, top.path, top.type], float(top.retained_bytes))
            owner_items.add_metric([*labels, top.path, top.type], float(top.items))
        if view.growth is not None:
            for t in view.growth.owners[:top_owners]:
                if t.verdict != "unknown":
                    growth.add_metric([*labels, t.name, t.verdict], t.bytes_per_min)
        # Several findings may share labels: one sample per label set, summed.
        per_kind: dict[tuple[str, str], list[float]] = {}
        per_named: dict[tuple[str, str], list[float]] = {}
        for f in snap.findings:
            if f.skipped:
                continue
            totals = per_kind.setdefault((f.kind, f.severity), [0.0, 0.0])
            totals[0] += f.count
            totals[1] += f.bytes
            if f.kind in named:
                totals = per_named.setdefault((f.kind, f.owner), [0.0, 0.0])
                totals[0] += f.count
                totals[1] += f.bytes
        for (kind, severity), (count, size) in per_kind.items():
            finding_count.add_metric([*labels, kind, severity], count)
            finding_bytes.add_metric([*labels, kind, severity], size)
        for (kind, owner), (count, size) in per_named.items():
            named[kind][0].add_metric([*labels, owner], count)
            named[kind][1].add_metric([*labels, owner], size)
    families: list[Metric] = [up, errors, rss, heap, objects, trimmable, malloc_free, pymalloc_free,
                              garbage, taken, pause, owner_bytes, owner_items, growth,
                              finding_bytes, finding_count]
    for count_family, bytes_family in named.values():
        families.extend((count_family, bytes_family))
    return families
