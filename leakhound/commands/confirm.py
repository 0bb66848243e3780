"""``leakhound confirm``: the A/B table that justifies shipping the fixes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from leakhound.commands.common import Reporter, new_reporter
from leakhound.commands.options import JsonOpt, MethodOpt
from leakhound.model.names import Method
from leakhound.render import json_doc as json_render
from leakhound.simulate.workload import Workload

if TYPE_CHECKING:
    from leakhound.core.confirm_workload import WorkerCommand

# The confirm machinery (the simulator's fleet, the patches, their rendering) is imported
# when confirm runs: every other command's start paid ~130-170 ms for it (-X importtime).

_DEFAULT = Workload()
_ROLLOUTS: int = _DEFAULT.rollouts if _DEFAULT.rollouts is not None else 1  # confirm's runs end


def command(
    rollouts: Annotated[int, typer.Option(
        "--rollouts", min=1, metavar="N", help="Rollouts per configuration.")] = _ROLLOUTS,
    turns: Annotated[int, typer.Option("--turns", min=1, metavar="N", help="Turns per rollout.")] = _DEFAULT.turns,
    concurrency: Annotated[int, typer.Option(
        "--concurrency", min=1, metavar="N", help="Rollouts in flight.")] = _DEFAULT.concurrency,
    image_kb: Annotated[int, typer.Option(
        "--image-kb", min=0, metavar="KIB", help="Screenshot size per turn, KiB.")] = _DEFAULT.image_kb,
    as_json: JsonOpt = False,
    worker_cmd: Annotated[str | None, typer.Option(
        "--worker-cmd", metavar="COMMAND",
        help="Measure your own workload instead of the simulator: this command is started once per "
             "configuration and the fixes applied live to its worker. It may name {dir}, {ready}, {go} "
             "and {done} (docs/confirm.md).")] = None,
    worker_match: Annotated[str | None, typer.Option(
        "--worker-match", metavar="REGEX",
        help="With --worker-cmd: the worker to patch and measure, by title or command line (any case), among "
             "the command's processes (default: the command's own process).")] = None,
    method: MethodOpt = Method.AUTO,
) -> None:
    """Run the same churn workload once per configuration (no fixes, each fix alone, all fixes)
    in fresh worker processes, and print peak RSS, resting RSS and what each leak retained,
    against no fixes. Takes a minute or two."""
    from leakhound.core.confirm import STATS_INTERVAL  # noqa: PLC0415
    from leakhound.core.confirm_workload import WorkerCommand  # noqa: PLC0415

    if worker_cmd is not None:
        run_worker(worker=WorkerCommand(command=worker_cmd, match=worker_match, method=method),
                   as_json=as_json, reporter=new_reporter())
        return
    run(workload=Workload(rollouts=rollouts, turns=turns, concurrency=concurrency, image_kb=image_kb,
                          stats_interval=STATS_INTERVAL),
        as_json=as_json, reporter=new_reporter())


def run(*, workload: Workload, as_json: bool, reporter: Reporter) -> list[dict[str, Any]]:
    from leakhound.core.confirm import CONFIRM_SCHEMA, run_confirm  # noqa: PLC0415
    from leakhound.render import patch as patch_render  # noqa: PLC0415

    rows = run_confirm(workload=workload, progress=reporter.note)
    if as_json:
        json_render.render_document({"schema": CONFIRM_SCHEMA, "workload": workload.__dict__, "rows": rows})
    else:
        patch_render.render_confirm(rows)
    return rows


def run_worker(*, worker: WorkerCommand, as_json: bool, reporter: Reporter) -> list[dict[str, Any]]:
    from leakhound.core.confirm_workload import WORKER_CONFIRM_SCHEMA, run_workload_confirm  # noqa: PLC0415
    from leakhound.render import patch as patch_render  # noqa: PLC0415

    rows = run_workload_confirm(worker=worker, progress=reporter.note)
    if as_json:
        json_render.render_document({"schema": WORKER_CONFIRM_SCHEMA, "worker_cmd": worker.command,
                                     "worker_match": worker.match, "rows": rows})
    else:
        patch_render.render_confirm_workload(rows)
    return rows
