"""``leakhound watch``: the live view, JSON lines and plot around ``leakhound.core.watch``."""

from __future__ import annotations

from pathlib import Path

from leakhound.analysis.growth import GrowthReport, Sample
from leakhound.capture import DEFAULT_MAX_PAUSE_MS
from leakhound.commands.common import Reporter
from leakhound.core.watch import WatchResult, watch_processes


def run(
    *,
    pids: tuple[int, ...],
    match: str | None,
    method: str,
    interval: float,
    duration: float | None,
    full_every: float,
    attach_every: float,
    timeout: float,
    as_json: bool,
    plot: Path | None,
    reporter: Reporter,
    max_pause_ms: float = DEFAULT_MAX_PAUSE_MS,
) -> WatchResult:
    from leakhound.analysis.growth import sample_to_dict
    from leakhound.render import json as json_render
    from leakhound.render import watch as watch_render

    view = None if as_json else watch_render.LiveView()

    def on_sample(sample: Sample) -> None:
        if as_json:
            json_render.render_line({"event": "sample", **sample_to_dict(sample)})

    def on_tick(reports: tuple[GrowthReport, ...]) -> None:
        if view is not None:
            view.update(reports)

    try:
        result = watch_processes(
            pids=pids, match=match, method=method, interval=interval, duration=duration,
            full_every=full_every, attach_every=attach_every, timeout=timeout,
            max_pause_ms=max_pause_ms, log=reporter.log, on_sample=on_sample, on_tick=on_tick,
        )
    finally:
        if view is not None:
            view.close()
    if plot is not None:
        from leakhound.render.plot import plot_samples

        plot_samples(result.samples, path=plot)
        reporter.note(f"plot written to {plot}")
    if as_json:
        json_render.render_line(watch_render.report_document(result.reports, interrupted=result.interrupted))
    else:
        watch_render.render_reports(result.reports)
    return result

