"""``leakhound show``: a saved snapshot, re-analysed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from leakhound.analysis.detectors import analyse
from leakhound.analysis.ledger import ledger
from leakhound.commands.diff import MAX_SNAPSHOT_MIB, load_snapshot
from leakhound.commands.options import HtmlOpt, JsonOpt, MaxSizeOpt, TopOpt, check_report_path
from leakhound.model import Snapshot
from leakhound.render import json_doc as json_render
from leakhound.render import table


def run(*, path: Path, top: int, as_json: bool, max_mib: int = MAX_SNAPSHOT_MIB,
        html_path: Path | None = None) -> Snapshot:
    if html_path is not None:
        check_report_path(html_path)
    snapshot = analyse(load_snapshot(path, max_mib=max_mib))
    if html_path is not None:
        from leakhound.render import html

        html.write_snapshot_report(html_path, snapshot)
    if as_json:
        json_render.render_snapshot(snapshot)
    else:
        table.render_snapshot(snapshot, ledger(snapshot), top=top)
    return snapshot


def command(
    path: Annotated[Path, typer.Argument(metavar="FILE", help="A snapshot (inspect --save or --json).")],
    top: TopOpt = 15,
    as_json: JsonOpt = False,
    max_size: MaxSizeOpt = MAX_SNAPSHOT_MIB,
    html_path: HtmlOpt = None,
) -> None:
    """A saved snapshot as inspect shows it, its findings computed afresh by this leakhound's
    detectors (a file from an older leakhound, or taken before a detector existed, gets
    today's findings)."""
    run(path=path, top=top, as_json=as_json, max_mib=max_size, html_path=html_path)
