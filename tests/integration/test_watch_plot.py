"""watch --plot end to end: a real watch of a leaking worker, stopped for a while in the
middle (as a laptop sleeps or a terminal is suspended), draws that stretch as a gap."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leakhound.analysis.growth import analyse_growth
from leakhound.model.growth import sample_from_dict
from leakhound.render.plot import build_figure, sample_gaps
from tests.utils import spawn_target, wait_for_agent_socket

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ptrace_ok")]
pytest.importorskip("matplotlib")

STOPPED_S = 4.0
INTERVAL_S = 0.5


def test_a_watch_stopped_midway_plots_the_stretch_as_a_gap(tmp_path: Path) -> None:
    plot = tmp_path / "watch.png"
    with spawn_target("steady_leak", tmp_path, env={"LEAKHOUND_AGENT": "1"}) as child:
        wait_for_agent_socket(child.pid)
        watch = subprocess.Popen(
            [sys.executable, "-m", "leakhound", "watch", str(child.pid), "--method", "agent",
             "-i", str(INTERVAL_S), "-d", "9", "--full-every", "100", "--json", "--plot", str(plot)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "80"},
        )
        try:
            time.sleep(3.0)
            watch.send_signal(signal.SIGSTOP)
            time.sleep(STOPPED_S)
            watch.send_signal(signal.SIGCONT)
            out, err = watch.communicate(timeout=120)
        finally:
            if watch.poll() is None:
                watch.kill()
                watch.wait()
    assert watch.returncode == 0, err.decode()
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The samples the watch printed, drawn again as the plot drew them: the stop is one gap,
    # and every line is broken across it.
    lines = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    samples = [sample_from_dict(doc) for doc in lines if doc["event"] == "sample"]
    (gap,) = sample_gaps([s.taken_at for s in samples])
    assert gap[1] - gap[0] >= STOPPED_S - INTERVAL_S, gap
    fig = build_figure(samples, [analyse_growth(samples)])
    try:
        (ax,) = fig.axes
        rss = next(line for line in ax.get_lines() if line.get_label() == "RSS")
        assert sum(math.isnan(v) for v in rss.get_ydata()) == 1
        assert len(ax.patches) == 1  # the shaded gap
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
