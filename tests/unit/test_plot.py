"""watch --plot: the figure's structure (titles, time axis, legend placement, which owners are
drawn) from matplotlib's own objects, the saved PNG, and the error without matplotlib."""

from __future__ import annotations

import datetime
import importlib.util
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from leakhound.analysis.growth import analyse_growth
from leakhound.errors import PlottingUnavailable
from leakhound.model.growth import GrowthReport, OwnerSample, Sample
from leakhound.render.plot import build_figure, plot_samples, require_plotting, worker_names
from tests.factories import MB, make_snapshot

# Imported by the tests that draw, not as the fast tier collects: matplotlib is ~38k objects
# more in the heap of the test process, which the payload's tests walk whole.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed")
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


def test_a_stretch_without_samples_is_a_gap() -> None:
    from leakhound.render.plot import GAP_FACTOR, sample_gaps

    every_10s = [T0 + 10.0 * i for i in range(6)]
    assert sample_gaps(every_10s) == []
    # A missed tick or a slow sample (twice the interval) is not a gap; five minutes are.
    late = [*every_10s, every_10s[-1] + 20.0]
    assert sample_gaps(late) == []
    resumed = [late[-1] + 300.0 + 10.0 * i for i in range(4)]
    assert sample_gaps(late + resumed) == [(late[-1], resumed[0])]
    # Exactly GAP_FACTOR median intervals counts; the order samples arrive in does not matter.
    edge = [*every_10s, every_10s[-1] + 10.0 * GAP_FACTOR]
    assert sample_gaps(list(reversed(edge))) == [(edge[-2], edge[-1])]
    # Three intervals or fewer say nothing about the cadence.
    assert sample_gaps([T0, T0 + 1, T0 + 300]) == []


def test_a_line_is_broken_where_a_gap_lies_between_two_points() -> None:
    import math

    from leakhound.render.plot import broken_at_gaps

    points = [(0.0, 100.0), (10.0, 101.0), (20.0, 102.0), (320.0, 3300.0), (330.0, 3310.0)]
    times, values = broken_at_gaps(points, [(20.0, 320.0)])
    assert times == [0.0, 10.0, 20.0, 170.0, 320.0, 330.0]
    assert [math.isnan(v) for v in values] == [False, False, False, True, False, False]
    # A sparser series (an owner sampled every 60 s under gdb) is broken only across the gap
    # itself, not at every one of its own longer steps.
    sparse = [(0.0, 1.0), (60.0, 2.0), (120.0, 3.0)]
    assert broken_at_gaps(sparse, [(200.0, 500.0)]) == ([0.0, 60.0, 120.0], [1.0, 2.0, 3.0])
    assert broken_at_gaps(points, []) == ([p[0] for p in points], [p[1] for p in points])


def test_each_owner_keeps_one_colour() -> None:
    from leakhound.render.plot import OWNER_COLORS, owner_colors

    colors = owner_colors(["a", "b", "a", "c"])
    assert colors == {"a": OWNER_COLORS[0], "b": OWNER_COLORS[1], "c": OWNER_COLORS[2]}
    assert len(set(OWNER_COLORS)) == len(OWNER_COLORS)
    assert "#000000" not in OWNER_COLORS and "#2e86c1" not in OWNER_COLORS  # RSS, live heap


def _two_workers_with_a_gap() -> list[Sample]:
    """Two workers sharing an owner name; the first was not sampled for five minutes."""
    out = []
    for pid in (PID, PID + 1):
        for i in range(12):
            t = T0 + 10.0 * i + (300.0 if pid == PID and i >= 6 else 0.0)
            owners = (OwnerSample("__main__.SESSIONS", "dict", 1000 + 500 * i, (2 + i) * MB),
                      OwnerSample(f"__main__.CACHE_{pid}", "dict", min(i, 4) * 100, min(i, 4) * 2 * MB))
            out.append(Sample(pid=pid, taken_at=t, rss_bytes=(60 + 3 * i) * MB, owners=owners,
                              heap_bytes=None, full=i in (0, 11), name="python3", method="agent"))
    return out


def test_the_figure_keeps_owner_colours_across_panels_and_draws_gaps_as_gaps() -> None:
    import math

    import matplotlib.dates as mdates
    import matplotlib.patches

    samples = _two_workers_with_a_gap()
    reports = [analyse_growth([s for s in samples if s.pid == pid]) for pid in (PID, PID + 1)]
    fig = build_figure(samples, reports)
    try:
        gapped, steady = fig.axes[:2]

        def owner_lines(ax):  # type: ignore[no-untyped-def]
            return {line.get_label().split("\n")[0].split(": ", 1)[1]: line for line in ax.get_lines()
                    if line.get_label() not in ("RSS", "live heap (census)")}

        ones, others = owner_lines(gapped), owner_lines(steady)
        # The owner both workers have is one colour in both panels; the others differ from it
        # and from each other.
        assert ones["__main__.SESSIONS"].get_color() == others["__main__.SESSIONS"].get_color()
        colours = {line.get_color() for line in [*ones.values(), *others.values()]}
        assert len(colours) == 3
        # The gapped worker's lines end before the gap and start again after it: one NaN
        # between the sixth and seventh sample, in RSS and in every owner.
        for line in gapped.get_lines():
            values = list(line.get_ydata())
            assert [i for i, v in enumerate(values) if math.isnan(v)] == [6], line.get_label()
        assert not any(math.isnan(v) for line in steady.get_lines() for v in line.get_ydata())
        # The gap is shaded over its whole span and said in the legend; the steady panel has none.
        (shade,) = gapped.patches
        assert isinstance(shade, matplotlib.patches.Rectangle)
        start, end = (mdates.num2date(x).timestamp() for x in (shade.get_x(), shade.get_x() + shade.get_width()))
        assert (round(start), round(end)) == (round(T0 + 50.0), round(T0 + 360.0))
        assert "no samples" in {t.get_text() for t in gapped.get_legend().get_texts()}
        assert not steady.patches
        assert any(t.get_text().startswith("no samples\n5 min") for t in gapped.texts)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
