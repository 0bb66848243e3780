"""watch --plot: the figure's structure (titles, time axis, legend placement, which owners are
drawn) from matplotlib's own objects, the saved PNG, and the error without matplotlib."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.analysis.growth import GrowthReport, OwnerSample, Sample, analyse_growth
from leakhound.errors import PlottingUnavailable
from leakhound.render.plot import build_figure, plot_samples, require_plotting, worker_names
from tests.factories import MB, make_snapshot

matplotlib = pytest.importorskip("matplotlib")
T0 = 1_800_000_000.0
PID = 4242


def _samples() -> list[Sample]:
    out = []
    for i in range(12):
        t = T0 + 60.0 * i
        owners = [
            OwnerSample("__main__.SESSIONS", "dict", 1000 + 500 * i, (2 + i) * MB),  # growing
            OwnerSample("__main__.CACHE", "dict", min(i, 4) * 100, min(i, 4) * 2 * MB),  # plateaus
            OwnerSample("__main__.TINY", "dict", 10, 1000),  # static, too small to see
        ]
        if i == 5:  # named by one census only: one dot is not a trend
            owners.append(OwnerSample("__main__.ONCE", "list", 10, 30 * MB))
        out.append(Sample(pid=PID, taken_at=t, rss_bytes=(60 + 3 * i) * MB, owners=tuple(owners),
                          heap_bytes=(20 + i) * MB if i in (0, 5, 11) else None, full=i in (0, 5, 11),
                          name="python3", method="agent"))
    return out


def _reports() -> list[GrowthReport]:
    """What ``watch`` computed from the samples: the plot draws it, it does not recompute it."""
    return [analyse_growth(_samples())]


def test_the_plot_draws_the_report_it_is_given() -> None:
    import dataclasses

    (report,) = _reports()
    fig = build_figure(_samples(), [dataclasses.replace(report, name="as-watch-reported")])
    try:
        assert fig.axes[0].get_title(loc="left").startswith("as-watch-reported  (pid 4242)")
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def _worker_snapshot():  # type: ignore[no-untyped-def]
    snapshot = make_snapshot(pid=PID)
    process = snapshot.process.__class__(**{**snapshot.process.__dict__,
                                           "cmdline": "/usr/bin/python3 -m verifiers.envs.worker --port 9"})
    return snapshot.__class__(**{**snapshot.__dict__, "process": process})


def test_the_figure_a_person_can_read() -> None:
    import matplotlib.dates as mdates

    fig = build_figure(_samples(), _reports(), workers=worker_names([_worker_snapshot()]))
    try:
        (ax,) = fig.axes
        # Titled by the worker it runs, with the verdict in words.
        assert ax.get_title(loc="left").startswith("verifiers.envs.worker  (pid 4242): growing (a leak)")
        # A wall-clock time axis covering the samples.
        assert isinstance(ax.xaxis.get_major_formatter(), mdates.DateFormatter)
        start, end = (mdates.num2date(x).timestamp() for x in ax.get_xlim())
        assert start <= T0 and end >= T0 + 660
        assert ax.get_xlabel().startswith("wall-clock time (")
        fig.canvas.draw()
        labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert len(labels) >= 3
        for text in labels:
            datetime.datetime.strptime(text, "%H:%M:%S")
        # The legend is beside the panel, not over the data, and inside the picture.
        legend = ax.get_legend()
        renderer = fig.canvas.get_renderer()
        box, panel = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.x0 >= panel.x1
        assert box.x1 <= fig.bbox.x1 and box.y0 >= fig.bbox.y0
        # Owners drawn: the growing and the plateaued ones, each a line of many points; not
        # the one seen once, not a static sliver.
        owners = {line.get_label().split("\n")[0]: line for line in ax.get_lines()
                  if line.get_label() not in ("RSS", "live heap (census)")}
        assert set(owners) == {"growing: __main__.SESSIONS", "plateaued: __main__.CACHE"}
        assert all(len(line.get_xdata()) == 12 for line in owners.values())
        assert {t.get_text() for t in legend.get_texts()} >= {"RSS", "live heap (census)"}
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_unnamed_worker_falls_back_to_its_process_name() -> None:
    fig = build_figure(_samples(), _reports())
    try:
        assert fig.axes[0].get_title(loc="left").startswith("python3  (pid 4242)")
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_the_png_file(tmp_path: Path) -> None:
    import matplotlib.image

    path = plot_samples(_samples(), _reports(), path=tmp_path / "w.png", snapshots=[_worker_snapshot()])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width = matplotlib.image.imread(str(path)).shape[:2]
    assert (width, height) == (1300, 460)  # 13 x 4.6 inches at 100 dpi, one panel


def test_without_matplotlib_it_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(PlottingUnavailable) as info:
        require_plotting()
    assert info.value.EXIT_CODE == 17
    assert "leakhound[plot]" in info.value.hint


def test_watch_plot_without_matplotlib_exits_17_before_watching(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    from leakhound.cli import app

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    # A pid that does not exist: the plot check comes first, so this is not exit 3.
    result = CliRunner().invoke(app, ["watch", "999999999", "-d", "1", "--plot", str(tmp_path / "w.png")])
    assert result.exit_code == 17, result.output
    assert "leakhound[plot]" in result.output
    assert "Traceback" not in result.output
