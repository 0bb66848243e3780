"""``leakhound inspect``: one snapshot of a live process."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from leakhound.commands.common import SETTINGS, Finished, Reporter, new_reporter
from leakhound.commands.options import (
    CensusTimeoutOpt,
    ForceOpt,
    HtmlOpt,
    JsonOpt,
    MaxPauseOpt,
    MethodOpt,
    OutputOpt,
    PidArg,
    TopOpt,
    check_report_path,
    request_options,
    wall_clock,
)
from leakhound.core.capture import DEFAULT_MAX_PAUSE_MS, capture
from leakhound.core.request import RequestOptions
from leakhound.model import Snapshot, snapshot_to_json
from leakhound.model.names import Method, Owners


def run(
    *,
    pid: int,
    request: RequestOptions,
    top: int,
    as_json: bool,
    save: Path | None,
    reporter: Reporter,
    max_pause_ms: float | None = DEFAULT_MAX_PAUSE_MS,
    owners: Owners = Owners.AUTO,
    why: str | None = None,
    heapsnapshot_path: Path | None = None,
    html_path: Path | None = None,
) -> Snapshot:
    if html_path is not None:
        check_report_path(html_path)
    taken = capture(pid, request=request, top=top, max_pause_ms=max_pause_ms, progress=reporter.progress,
                    owners=owners, why=why)
    # The renderers (rich and the rest, ~30 ms of imports) once there is something to render:
    # not before the attach, which an on-call engineer is waiting for.
    from leakhound.analysis.ledger import ledger  # noqa: PLC0415
    from leakhound.render import heapsnapshot, table  # noqa: PLC0415
    from leakhound.render import json_doc as json_render  # noqa: PLC0415

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
    if html_path is not None:
        from leakhound.analysis.dominators.parts import owner_parts  # noqa: PLC0415
        from leakhound.render import html  # noqa: PLC0415

        parts = owner_parts(taken.graph, taken.tree, snapshot.owners) if taken.graph and taken.tree else ()
        size = html.write_snapshot_report(html_path, snapshot, parts=parts)
        reporter.note(f"report written to {html_path} ({size / 1024:,.0f} KiB, self-contained HTML)")
    if as_json:
        if why is not None:
            json_render.render_why(why, taken.why, snapshot)
        else:
            json_render.render_snapshot(snapshot)
    elif why is not None:  # only what was asked; the whole report is one `inspect` away
        table.render_why(why, taken.why, snapshot)
    else:
        table.render_snapshot(snapshot, ledger(snapshot), top=top)
    return snapshot


def command(
    pid: PidArg,
    method: MethodOpt = Method.AUTO,
    top: TopOpt = 15,
    timeout: CensusTimeoutOpt = None,
    as_json: JsonOpt = False,
    save: OutputOpt = None,
    max_pause: MaxPauseOpt = DEFAULT_MAX_PAUSE_MS,
    owners: Annotated[Owners, typer.Option(
        "--owners", metavar="MODEL",
        help="How owners are found: auto (the dominator tree when the object graph fits its budgets: "
        "up to 6,000,000 nodes (LEAKHOUND_MAX_GRAPH_NODES), a quarter of the worker's RSS (at most 256 MiB) held "
        "by its walk, a share of the request's time; else no owner is named: the heap is one '<not attributed: "
        "...>' owner and the header says why), dominator (no memory budget), census (first reachers). The "
        "snapshot's owner model says which was used: dominator or not-attributed for auto and dominator, "
        "first-reacher for census.")] = Owners.AUTO,
    why: Annotated[str | None, typer.Option(
        "--why", help="What keeps OWNER (a path from the owners table) or the biggest objects of TYPE alive: "
        "a few distinct paths from roots.", metavar="OWNER_OR_TYPE")] = None,
    heapsnapshot_path: Annotated[Path | None, typer.Option(
        "--heapsnapshot", metavar="FILE",
        help="Also write the object graph as a Chrome DevTools .heapsnapshot file.")] = None,
    force: ForceOpt = False,
    html_path: HtmlOpt = None,
) -> None:
    """Which objects retain a live worker's memory, who owns them, and how much of RSS is not
    live objects at all (allocator fragmentation).

    Attaches without stopping the worker for more than an instant (a median 0.5 ms with the
    default ptrace injector on a loaded 2-core machine): the census runs at a safe point, in a short-lived thread, never
    calls gc.collect(), and leaves nothing behind but its payload module, reused next time.

    The first lines say what was measured, how long the worker waited (against the pause budget:
    a WARNING when over it) and the next command to run. Every term in the output (retained,
    owner, pause, held from C, ...) is defined in docs/glossary.md.
    """
    reporter = new_reporter(quiet=as_json and not SETTINGS["verbose"])
    run(pid=pid, request=request_options(method=method, timeout=wall_clock(timeout), reporter=reporter, force=force),
        top=top, as_json=as_json, save=save, max_pause_ms=max_pause, reporter=reporter, owners=owners,
        why=why, heapsnapshot_path=heapsnapshot_path, html_path=html_path)
    raise Finished
