"""``leakhound confirm``: the A/B table that justifies shipping the fixes."""

from __future__ import annotations

from typing import Any

from leakhound.commands.common import Reporter
from leakhound.core.confirm import CONFIRM_SCHEMA, Workload, run_confirm
from leakhound.render import json as json_render
from leakhound.render import patch as patch_render


def run(*, workload: Workload, as_json: bool, reporter: Reporter) -> list[dict[str, Any]]:
    rows = run_confirm(workload=workload, progress=reporter.note)
    if as_json:
        json_render.render_document({"schema": CONFIRM_SCHEMA, "workload": workload.__dict__, "rows": rows})
    else:
        patch_render.render_confirm(rows)
    return rows
