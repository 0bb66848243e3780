"""``leakhound watch``: the live view, JSON lines and plot around ``leakhound.core.watch``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from leakhound.commands.common import SETTINGS, Reporter, new_reporter
from leakhound.commands.options import (
    CensusTimeoutOpt,
    ForceOpt,
    HtmlOpt,
    MatchOpt,
    MaxPauseOpt,
    MethodOpt,
    PidsArg,
    SitesRateOpt,
    check_report_path,
    finite,
    pids_or_match,
    request_options,
    wall_clock,
)
from leakhound.core.capture import DEFAULT_MAX_PAUSE_MS
from leakhound.core.request import RequestOptions
from leakhound.core.watch import DEFAULT_SITES_RATE, SitesOptions, WatchResult, watch_processes
from leakhound.errors import TargetExited
from leakhound.model.growth import GrowthReport, Sample
from leakhound.model.names import Method


def command(
    pids: PidsArg = None,
    match: MatchOpt = None,
    interval: Annotated[float, typer.Option(
        "--interval", "-i", min=0.1, callback=finite, metavar="SECONDS", help="Seconds between samples.")] = 10.0,
    duration: Annotated[float | None, typer.Option(
        "--duration", "-d", min=0.0, callback=finite, metavar="SECONDS",
        help="Stop after this many seconds (or Ctrl-C).")] = None,
    full_every: Annotated[float, typer.Option(
        "--full-every", min=0.0, callback=finite, metavar="SECONDS",
        help="Seconds between full censuses (first and last are always full).")] = 300.0,
    attach_every: Annotated[float, typer.Option(
        "--attach-every", min=0.0, callback=finite, metavar="SECONDS",
        help="gdb: at most one in-target sample per this many seconds (each gdb attach stops the "
             "worker ~40 ms; RSS is still read every interval). The agent, ptrace and remote-exec "
             "methods are sampled every interval.")] = 60.0,
    method: MethodOpt = Method.AUTO,
    timeout: CensusTimeoutOpt = None,
    max_pause: MaxPauseOpt = DEFAULT_MAX_PAUSE_MS,
    as_json: Annotated[bool, typer.Option(
        "--json", help="One JSON line per sample, then a final report line (docs/watch.md).")] = False,
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE", help="Also draw RSS vs live heap vs top owners over time (PNG).")] = None,
    force: ForceOpt = False,
    html_path: HtmlOpt = None,
    sites: Annotated[bool, typer.Option(
        "--sites", help="Also sample allocations in the worker for the watch (a hook removed afterwards, "
                        "and by itself if leakhound dies): each growing owner's finding says which Python "
                        "stacks allocated its surviving bytes. Needs --duration.")] = False,
    sites_rate: SitesRateOpt = DEFAULT_SITES_RATE,
) -> None:
    """Watch workers over time: which owners keep growing (a leak), which grew and plateaued
    (a bounded cache), which are big but static.

    RSS is read from outside every interval; owner item counts and type counts are sampled in
    the worker (cheaply with the agent, sparingly with gdb); a full census runs first, every
    --full-every seconds, and last. Findings of kind `growth` name the owner and its rate.
    A worker that ends during the watch is said with how it ended (OOM-killed, a signal, its
    own exit), and the watch exits 12.
    """
    if sites and duration is None:
        raise typer.BadParameter("--sites needs --duration: the tracker's own deadline in the worker comes "
                                 "from it", param_hint="--sites")
    reporter = new_reporter(quiet=as_json and not SETTINGS["verbose"])
    run(pids=pids_or_match(pids, match), match=match, interval=interval, duration=duration,
        full_every=full_every, attach_every=attach_every, max_pause_ms=max_pause, as_json=as_json, plot=plot,
        request=request_options(method=method, timeout=wall_clock(timeout), reporter=reporter, force=force),
        reporter=reporter, html_path=html_path,
        sites=SitesOptions(mean_bytes=sites_rate, seconds=duration) if sites and duration is not None else None)


def run(
    *,
    pids: tuple[int, ...],
    match: str | None,
    request: RequestOptions,
    interval: float,
    duration: float | None,
    full_every: float,
    attach_every: float,
    as_json: bool,
    plot: Path | None,
    reporter: Reporter,
    max_pause_ms: float = DEFAULT_MAX_PAUSE_MS,
    html_path: Path | None = None,
    sites: SitesOptions | None = None,
) -> WatchResult:
    from leakhound.model.growth import sample_to_dict
    from leakhound.render import json_doc as json_render
    from leakhound.render import watch as watch_render

    if plot is not None:
        from leakhound.render.plot import require_plotting

        require_plotting()  # before the watch, not after it
    if html_path is not None:
        check_report_path(html_path)
    view = None if as_json else watch_render.LiveView()

    def on_sample(sample: Sample) -> None:
        if as_json:
            json_render.render_line({"event": "sample", **sample_to_dict(sample)})

    def on_tick(reports: tuple[GrowthReport, ...]) -> None:
        if view is not None:
            view.update(reports)

    try:
        result = watch_processes(
            pids=pids, match=match, request=request, interval=interval, duration=duration,
            full_every=full_every, attach_every=attach_every, max_pause_ms=max_pause_ms,
            on_sample=on_sample, on_tick=on_tick, sites=sites,
        )
    finally:
        if view is not None:
            view.close()
    if plot is not None:
        from leakhound.render.plot import plot_samples

        plot_samples(result.samples, result.reports, path=plot, snapshots=result.snapshots)
        reporter.note(f"plot written to {plot}")
    if html_path is not None:
        from leakhound.render import html

        size = html.write_watch_report(html_path, result.samples, result.reports, result.snapshots,
                                       ended=result.ended)
        reporter.note(f"report written to {html_path} ({size / 1024:,.0f} KiB, self-contained HTML)")
    if as_json:
        json_render.render_line(watch_render.report_document(result.reports, interrupted=result.interrupted,
                                                             ended=result.ended))
    else:
        watch_render.render_reports(result.reports, ended=result.ended)
    if result.ended:
        # A watch that lost a worker (most often to the OOM killer) is not a clean watch.
        watched = len({s.pid for s in result.samples} | {e.pid for e in result.ended})
        raise TargetExited(
            f"{len(result.ended)} of {watched} watched process(es) ended during the watch: "
            + "; ".join(f"pid {e.pid} {e.how.value}" for e in result.ended),
            hint="How each ended is said above (its exit status or signal, the OOM killer from its "
                 "memory cgroup or the kernel log).")
    return result

