"""``--plot``: RSS vs live heap vs the top owners over time, one panel per process, as a PNG.

matplotlib with the Agg backend (no display needed), from the ``leakhound[plot]`` extra;
imported only when a plot is asked for (``require_plotting`` says so before a watch starts).
Each panel is titled by the worker (its script or module, as the Prometheus ``worker`` label),
has a wall-clock time axis, and its legend beside the data, never over it. Owners seen in
fewer than ``MIN_OWNER_POINTS`` samples (named by one census only) are left out: one dot is
not a trend; so are static owners under ``MIN_OWNER_SHARE`` of the peak RSS.

An owner keeps one colour in every panel (its verdict is the line style); a stretch without
samples (``GAP_FACTOR`` times the median interval or longer: the watch was stopped, a
laptop slept) is shaded and no line crosses it, since a line across it drew a leak as a jump.
"""

from __future__ import annotations

import datetime
import importlib
import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leakhound.errors import PlottingUnavailable
from leakhound.model import Snapshot
from leakhound.model.growth import GrowthReport, Sample, Trend
from leakhound.model.units import MiB

MIN_OWNER_POINTS = 2
MIN_OWNER_SHARE = 0.02  # of the panel's peak RSS, for an owner that neither grows nor plateaued
# A gap: consecutive samples this many median intervals apart or more. A slow sample or a
# missed tick makes an interval of two; three is no sampling at all.
GAP_FACTOR = 3.0
_CODE_OWNER = "<modules and classes>"
# tab10 without its blue (the live heap's line) and grey (the gaps' shade), in its order.
OWNER_COLORS = ("#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
_VERDICT_STYLE: dict[str, Any] = {"growing": "-", "plateaued": "--", "static": ":", "unknown": "-."}
_GAP_COLOR = "#7f7f7f"
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


def sample_gaps(times: Sequence[float], *, factor: float = GAP_FACTOR) -> list[tuple[float, float]]:
    """(start, end) of each stretch without samples: consecutive times at least ``factor``
    median intervals apart. Fewer than three intervals say nothing about the cadence: none."""
    ordered = sorted(times)
    intervals = [b - a for a, b in itertools.pairwise(ordered)]
    if len(intervals) < 3:
        return []
    usual = statistics.median(intervals)
    if usual <= 0:
        return []
    return [(a, b) for a, b in itertools.pairwise(ordered) if b - a >= factor * usual]


def broken_at_gaps(
    points: Sequence[tuple[float, float]], gaps: Sequence[tuple[float, float]]
) -> tuple[list[float], list[float]]:
    """The points' times and values, with a NaN value between two points that have a gap
    between them (matplotlib ends a line at a NaN): one line, drawn in pieces."""
    times: list[float] = []
    values: list[float] = []
    for i, (t, v) in enumerate(points):
        if i and any(points[i - 1][0] <= start and end <= t for start, end in gaps):
            times.append((points[i - 1][0] + t) / 2)
            values.append(math.nan)
        times.append(t)
        values.append(v)
    return times, values


def owner_colors(names: Sequence[str]) -> dict[str, str]:
    """One colour per owner, in the order first drawn: the same owner the same colour in
    every panel. Past ``len(OWNER_COLORS)`` owners the colours repeat."""
    out: dict[str, str] = {}
    for name in names:
        if name not in out:
            out[name] = OWNER_COLORS[len(out) % len(OWNER_COLORS)]
    return out


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
    drawn = {pid: _drawn_owners(by_report[pid], by_pid[pid], top_owners) for pid in pids}
    colors = owner_colors([trend.name for pid in pids for trend in drawn[pid]])
    for ax, pid in zip((a[0] for a in axes), pids, strict=False):
        series = sorted(by_pid[pid], key=lambda s: s.taken_at)
        report = by_report[pid]
        gaps = sample_gaps([s.taken_at for s in series])
        _line(ax, [(s.taken_at, s.rss_bytes / MiB) for s in series], gaps=gaps, color="black", linewidth=2.2,
              label="RSS")
        heap = [(s.taken_at, s.heap_bytes / MiB) for s in series if s.heap_bytes is not None]
        if heap:
            _line(ax, heap, gaps=gaps, color="#2e86c1", linewidth=2, linestyle="--", marker="o",
                  label="live heap (census)")
        for trend in drawn[pid]:
            points = [
                (s.taken_at, o.bytes / MiB) for s in series for o in s.owners
                if o.path == trend.name or o.path in trend.was
            ]
            # The label starts with the verdict: matplotlib hides labels starting with "_".
            _line(ax, points, gaps=gaps, marker=".", color=colors[trend.name],
                  linestyle=_VERDICT_STYLE.get(trend.verdict, "-"), alpha=0.9,
                  label=f"{trend.verdict}: {trend.name}\n  {trend.bytes_per_min / MiB:+.2f} MiB/min, "
                        f"now {trend.last_bytes / MiB:.1f} MiB")
        for i, (start, end) in enumerate(gaps):
            ax.axvspan(_when(start), _when(end), color=_GAP_COLOR, alpha=0.15, linewidth=0,
                       label="no samples" if i == 0 else None)
            ax.annotate(f"no samples\n{_duration(end - start)}", xy=(_when((start + end) / 2), 1.0),
                        xycoords=("data", "axes fraction"), xytext=(0, -4), textcoords="offset points",
                        ha="center", va="top", fontsize=7, color="#555555")
        worker = workers.get(pid) or report.name or "python"
        ax.set_title(
            f"{worker}  (pid {pid}): {_VERDICT_TEXT.get(report.verdict, report.verdict)}, "
            f"{report.samples} samples over {_duration(report.seconds)}",
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


def _line(ax: Any, points: Sequence[tuple[float, float]], *, gaps: Sequence[tuple[float, float]],
          **style: Any) -> None:
    times, values = broken_at_gaps(points, gaps)
    ax.plot([_when(t) for t in times], values, **style)


def _drawn_owners(report: GrowthReport, series: Sequence[Sample], top_owners: int) -> list[Trend]:
    """The owners a panel draws, biggest first: those that moved, or big enough to see next to
    RSS (flat slivers at the bottom of the panel are clutter, not information)."""
    visible = MIN_OWNER_SHARE * max(s.rss_bytes for s in series)
    owners = [
        t for t in report.owners
        if t.name != _CODE_OWNER and t.points >= MIN_OWNER_POINTS
        and (t.verdict in ("growing", "plateaued") or t.last_bytes >= visible)
    ]
    owners.sort(key=lambda t: -t.last_bytes)
    return owners[:top_owners]


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


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
