"""``leakhound inspect``: one snapshot of a live process."""

from __future__ import annotations

from pathlib import Path

from leakhound.capture import DEFAULT_MAX_PAUSE_MS, take_snapshot
from leakhound.commands.common import Reporter
from leakhound.model import Snapshot, snapshot_to_json
from leakhound.render import json as json_render
from leakhound.render import table


def run(
    *,
    pid: int,
    method: str,
    top: int,
    timeout: float,
    as_json: bool,
    save: Path | None,
    reporter: Reporter,
    max_pause_ms: float | None = DEFAULT_MAX_PAUSE_MS,
) -> Snapshot:
    snapshot = take_snapshot(
        pid,
        method=method,
        top=top,
        timeout=timeout,
        max_pause_ms=max_pause_ms,
        progress=reporter.progress,
        log=reporter.log,
    )
    reporter.done()
    if save is not None:
        save.write_text(snapshot_to_json(snapshot))
        reporter.note(f"snapshot saved to {save}")
    if as_json:
        json_render.render_snapshot(snapshot)
    else:
        table.render_snapshot(snapshot, top=top)
    return snapshot
