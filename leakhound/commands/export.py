"""``leakhound export``: serve Prometheus metrics for workers (docs/export.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from leakhound.commands.common import new_reporter
from leakhound.commands.options import (
    CensusTimeoutOpt,
    ForceOpt,
    MatchOpt,
    MaxPauseOpt,
    MethodOpt,
    PidsArg,
    finite,
    pids_or_match,
    request_options,
    wall_clock,
)
from leakhound.core.capture import DEFAULT_MAX_PAUSE_MS
from leakhound.core.export import export_processes
from leakhound.model.names import Method
from leakhound.render.prometheus import DEFAULT_TOP_OWNERS


def command(
    pids: PidsArg = None,
    match: MatchOpt = None,
    listen: Annotated[str, typer.Option(
        "--listen", metavar="HOST:PORT", help="Where to serve /metrics.")] = "127.0.0.1:9464",
    allow_remote: Annotated[bool, typer.Option(
        "--allow-remote", help="Allow a non-loopback --listen address.")] = False,
    interval: Annotated[float, typer.Option(
        "--interval", "-i", min=1.0, callback=finite, metavar="SECONDS",
        help="Seconds between censuses of each worker.")] = 120.0,
    method: MethodOpt = Method.AUTO,
    timeout: CensusTimeoutOpt = None,
    max_pause: MaxPauseOpt = DEFAULT_MAX_PAUSE_MS,
    top: Annotated[int, typer.Option(
        "--top", "-n", min=1, max=100, metavar="N",
        help="Owners exported per worker (one series each).")] = DEFAULT_TOP_OWNERS,
    force: ForceOpt = False,
) -> None:
    """Serve Prometheus metrics for workers: RSS, live heap, trimmable bytes, top owners,
    growth rates and finding sizes, labelled by pid and worker (its script or module;
    docs/export.md). A worker with too little headroom under its memory limit is skipped
    that round, and said so."""
    reporter = new_reporter()
    export_processes(pids=pids_or_match(pids, match), match=match, listen=listen, allow_remote=allow_remote,
                     request=request_options(method=method, timeout=wall_clock(timeout), reporter=reporter,
                                             force=force),
                     interval=interval, note=reporter.note, max_pause_ms=max_pause, top=top)
