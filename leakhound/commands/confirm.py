"""``leakhound confirm``: the A/B table that justifies shipping the fixes."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from leakhound.commands.common import Reporter, new_reporter
from leakhound.commands.options import JsonOpt
from leakhound.core.confirm import CONFIRM_SCHEMA, Workload, run_confirm
from leakhound.render import json as json_render
from leakhound.render import patch as patch_render


def command(
    rollouts: Annotated[int, typer.Option(
        "--rollouts", min=1, metavar="N", help="Rollouts per configuration.")] = 8,
    turns: Annotated[int, typer.Option("--turns", min=1, metavar="N", help="Turns per rollout.")] = 45,
    concurrency: Annotated[int, typer.Option(
        "--concurrency", min=1, metavar="N", help="Rollouts in flight.")] = 4,
    image_kb: Annotated[int, typer.Option(
        "--image-kb", min=0, metavar="KIB", help="Screenshot size per turn, KiB.")] = 96,
    as_json: JsonOpt = False,
) -> None:
    """Run the same churn workload once per configuration (no fixes, each fix alone, all fixes)
    in fresh worker processes, and print peak RSS, resting RSS and what each leak retained,
    against no fixes. Takes a minute or two."""
    run(workload=Workload(rollouts=rollouts, turns=turns, concurrency=concurrency, image_kb=image_kb),
        as_json=as_json, reporter=new_reporter())


def run(*, workload: Workload, as_json: bool, reporter: Reporter) -> list[dict[str, Any]]:
    rows = run_confirm(workload=workload, progress=reporter.note)
    if as_json:
        json_render.render_document({"schema": CONFIRM_SCHEMA, "workload": workload.__dict__, "rows": rows})
    else:
        patch_render.render_confirm(rows)
    return rows
