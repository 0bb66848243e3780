"""``leakhound inspect``: one snapshot of a live process."""

from __future__ import annotations

from pathlib import Path

from leakhound.capture import DEFAULT_MAX_PAUSE_MS, capture
from leakhound.commands.common import Reporter
from leakhound.model import Snapshot, snapshot_to_json
from leakhound.render import heapsnapshot, table
from leakhound.render import json as json_render

# --owners: how owners are found (docs/inspect.md)
OWNER_MODELS = ("auto", "dominator", "census")


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
    owner_model: str = "auto",
    why: str | None = None,
    heapsnapshot_path: Path | None = None,
) -> Snapshot:
    taken = capture(
        pid,
        method=method,
        top=top,
        timeout=timeout,
        max_pause_ms=max_pause_ms,
        progress=reporter.progress,
        log=reporter.log,
        owner_model=owner_model,
        why=why,
    )
    snapshot = taken.snapshot
    reporter.done()
    if save is not None:
        save.write_text(snapshot_to_json(snapshot))
        reporter.note(f"snapshot saved to {save}")
    if heapsnapshot_path is not None:
        if taken.graph is None or taken.tree is None:
            reporter.note(f"no heap snapshot written: {snapshot.heap.owner_model_note or 'no object graph'}")
        else:
            heapsnapshot.write(heapsnapshot_path, taken.graph)
            reporter.note(f"heap snapshot written to {heapsnapshot_path} (Chrome DevTools format)")
    if as_json:
        if why is not None:
            json_render.render_why(why, taken.why, snapshot)
        else:
            json_render.render_snapshot(snapshot)
    else:
        table.render_snapshot(snapshot, top=top)
        if why is not None:
            table.render_why(why, taken.why, snapshot)
    return snapshot
