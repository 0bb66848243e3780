"""``--plot``: RSS vs live heap vs the top owners over time, one panel per process, as a PNG.

matplotlib with the Agg backend (no display needed); imported only when a plot is asked for.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from leakhound.analysis.growth import Sample, analyse_growth

MB = 1024 * 1024
_VERDICT_COLOR = {"growing": "#c0392b", "plateaued": "#d68910", "static": "#1e8449", "unknown": "#7f8c8d"}


def plot_samples(samples: Sequence[Sample], *, path: Path, top_owners: int = 4) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_pid: dict[int, list[Sample]] = defaultdict(list)
    for sample in samples:
        by_pid[sample.pid].append(sample)
    pids = sorted(by_pid)
    rows = max(1, len(pids))
    fig, axes = plt.subplots(rows, 1, figsize=(10, 3.6 * rows + 0.6), squeeze=False)
    t0 = min((s.taken_at for s in samples), default=0.0)
    for ax, pid in zip((a[0] for a in axes), pids, strict=False):
        series = sorted(by_pid[pid], key=lambda s: s.taken_at)
        report = analyse_growth(series)
        scale = 60.0 if series[-1].taken_at - t0 >= 180 else 1.0
        unit = "min" if scale == 60.0 else "s"

        def x(s: Sample, scale: float = scale) -> float:
            return (s.taken_at - t0) / scale

        ax.plot([x(s) for s in series], [s.rss_bytes / MB for s in series],
                color="black", linewidth=2.2, label="RSS")
        heap = [s for s in series if s.heap_bytes is not None]
        if heap:
            ax.plot([x(s) for s in heap], [(s.heap_bytes or 0) / MB for s in heap],
                    color="#2e86c1", linewidth=2, linestyle="--", marker="o", label="live heap (census)")
        owners = [t for t in report.owners if t.name != "<modules and classes>"]
        owners.sort(key=lambda t: -t.last_bytes)
        for trend in owners[:top_owners]:
            points = [
                (x(s), o.bytes / MB) for s in series for o in s.owners if o.path == trend.name
            ]
            color = _VERDICT_COLOR.get(trend.verdict, None)
            # The label starts with the verdict: matplotlib hides labels starting with "_".
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", color=color,
                    alpha=0.9, label=f"{trend.verdict}: {trend.name} ({trend.bytes_per_min / MB:+.2f} MB/min)")
        ax.set_title(f"pid {pid} {report.name}: {report.verdict}", loc="left", fontsize=11)
        ax.set_xlabel(f"time since start ({unit})")
        ax.set_ylabel("MB")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize=8, framealpha=0.85)
    fig.suptitle("leakhound watch: RSS vs live heap vs top owners", fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
    return path
