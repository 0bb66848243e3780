"""``--plot``: RSS vs live heap vs the top owners over time, one panel per process, as a PNG.

matplotlib with the Agg backend (no display needed), from the ``leakhound[plot]`` extra;
imported only when a plot is asked for (``require_plotting`` says so before a watch starts).
Each panel is titled by the worker (its script or module, as the Prometheus ``worker`` label),
has a wall-clock time axis, and its legend beside the data, never over it. Owners seen in
fewer than ``MIN_OWNER_POINTS`` samples (named by one census only) are left out: one dot is
not a trend; so are static owners under ``MIN_OWNER_SHARE`` of the peak RSS.
"""

from __future__ import annotations

import datetime
import importlib
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leakhound.analysis.growth import GrowthReport, Sample
from leakhound.errors import PlottingUnavailable
from leakhound.model import Snapshot
from leakhound.model.units import MiB

MIN_OWNER_POINTS = 2
MIN_OWNER_SHARE = 0.02  # of the panel's peak RSS, for an owner that neither grows nor plateaued
_CODE_OWNER = "<modules and classes>"
_VERDICT_COLOR = {"growing": "#c0392b", "plateaued": "#d68910", "static": "#1e8449", "unknown": "#7f8c8d"}
# Line styles so that owners of the same verdict stay apart.
_STYLES = ("-", "-.", ":", (0, (5, 1, 1, 1)))
_VERDICT_TEXT = {
    "growing": "growing (a leak)",
    "plateaued": "grew, then plateaued",
    "static": "static",
    "unknown": "too few samples to judge",
}


def require_plotting() -> None:
    """Raise ``PlottingUnavailable`` unless matplotlib can be imported (before any work)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise PlottingUnavailable(f"--plot needs matplotlib, which is not installed ({exc})") from None


def worker_names(snapshots: Sequence[Snapshot]) -> dict[int, str]:
    """pid -> what the worker runs (its script or module), from its censuses' command lines."""
    from leakhound.render.prometheus import worker_label

    return {
        s.pid: worker_label(s.process.cmdline.split(), s.process.name)
        for s in snapshots
        if s.process.cmdline or s.process.name
    }


def _when(t: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t).astimezone()


def build_figure(
    samples: Sequence[Sample], reports: Sequence[GrowthReport], *, workers: dict[int, str] | None = None,
    top_owners: int = 4,
) -> Any:
    """The figure (a matplotlib ``Figure``, not yet saved): one panel per process with samples,
    drawn from its growth report as ``watch`` computed it (a plot computes nothing)."""
    require_plotting()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mdates: Any = importlib.import_module("matplotlib.dates")  # partly typed: used as Any

    workers = workers or {}
    by_pid: dict[int, list[Sample]] = defaultdict(list)
    for sample in samples:
        by_pid[sample.pid].append(sample)
    by_report = {r.pid: r for r in reports}
    pids = sorted(pid for pid in by_pid if pid in by_report)
    rows = max(1, len(pids))
    fig, axes = plt.subplots(rows, 1, figsize=(13, 3.8 * rows + 0.8), squeeze=False)
    zone = _when(min((s.taken_at for s in samples), default=0.0)).strftime("%Z, %Y-%m-%d")
    for ax, pid in zip((a[0] for a in axes), pids, strict=False):
        series = sorted(by_pid[pid], key=lambda s: s.taken_at)
        report = by_report[pid]
        ax.plot([_when(s.taken_at) for s in series], [s.rss_bytes / MiB for s in series],
                color="black", linewidth=2.2, label="RSS")
        heap = [s for s in series if s.heap_bytes is not None]
        if heap:
            ax.plot([_when(s.taken_at) for s in heap], [(s.heap_bytes or 0) / MiB for s in heap],
                    color="#2e86c1", linewidth=2, linestyle="--", marker="o", label="live heap (census)")
        # Owners that moved, or big enough to see next to RSS: flat slivers at the bottom of the
        # panel are clutter, not information.
        visible = MIN_OWNER_SHARE * max(s.rss_bytes for s in series)
        owners = [
            t for t in report.owners
            if t.name != _CODE_OWNER and t.points >= MIN_OWNER_POINTS
            and (t.verdict in ("growing", "plateaued") or t.last_bytes >= visible)
        ]
        owners.sort(key=lambda t: -t.last_bytes)
        for i, trend in enumerate(owners[:top_owners]):
            points = [
                (_when(s.taken_at), o.bytes / MiB) for s in series for o in s.owners
                if o.path == trend.name or o.path in trend.was
            ]
            # The label starts with the verdict: matplotlib hides labels starting with "_".
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=".",
                    color=_VERDICT_COLOR.get(trend.verdict), linestyle=_STYLES[i % len(_STYLES)], alpha=0.9,
                    label=f"{trend.verdict}: {trend.name}\n  {trend.bytes_per_min / MiB:+.2f} MiB/min, "
                          f"now {trend.last_bytes / MiB:.1f} MiB")
        worker = workers.get(pid) or report.name or "python"
        ax.set_title(
            f"{worker}  (pid {pid}): {_VERDICT_TEXT.get(report.verdict, report.verdict)}, "
            f"{report.samples} samples over "
            + (f"{report.seconds / 60:.0f} min" if report.seconds >= 120 else f"{report.seconds:.0f} s"),
            loc="left", fontsize=11,
        )
        locator = mdates.AutoDateLocator(minticks=4, maxticks=10)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=_when(series[0].taken_at).tzinfo))
        ax.set_xlabel(f"wall-clock time ({zone})")
        ax.set_ylabel("MiB")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        # Beside the panel, never over the data.
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)
    fig.suptitle("leakhound watch: RSS vs live heap vs top owners", fontsize=12)
    fig.tight_layout()
    return fig


def plot_samples(
    samples: Sequence[Sample], reports: Sequence[GrowthReport], *, path: Path, snapshots: Sequence[Snapshot] = (),
    top_owners: int = 4,
) -> Path:
    fig = build_figure(samples, reports, workers=worker_names(snapshots), top_owners=top_owners)
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, dpi=100, format="png")
    finally:
        plt.close(fig)
    return path
