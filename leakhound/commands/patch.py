"""``leakhound patch``: apply, verify, list and revert the built-in fixes in live workers."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence

from leakhound.attach.process import match_processes
from leakhound.commands.common import Reporter, leaking_simulated_worker
from leakhound.core.patch import patch_process
from leakhound.errors import LeakhoundError, TargetNotFound
from leakhound.model import PatchOutcome
from leakhound.render import json as json_render
from leakhound.render import patch as patch_render


def run(
    *,
    pids: Sequence[int],
    match: str | None,
    fixes: list[str],
    action: str,
    verify: float,
    method: str,
    timeout: float,
    as_json: bool,
    reporter: Reporter,
    trim_every: float | None = None,
) -> tuple[PatchOutcome, ...]:
    targets = list(pids)
    if match is not None:
        targets.extend(p for p in match_processes(match) if p not in targets)
        if not targets:
            raise TargetNotFound(f"no Python process matches {match!r}")
    if not targets:
        return _on_simulated_worker(fixes=fixes, verify=verify or 5.0, method=method, timeout=timeout,
                                    as_json=as_json, reporter=reporter, trim_every=trim_every)
    outcomes: list[PatchOutcome] = []
    for pid in targets:
        if verify and action == "apply":
            reporter.note(f"leakhound: pid {pid}: applying {', '.join(fixes)}, then watching {verify:.0f}s")
        try:
            outcomes.extend(
                patch_process(pid, fixes=fixes, action=action, verify_seconds=verify if action == "apply" else 0.0,
                              method=method, timeout=timeout, log=reporter.log, trim_every=trim_every)
            )
        except LeakhoundError:
            # What already changed in the workers before this one is shown, never left unsaid.
            if outcomes:
                _render(outcomes, as_json=as_json)
            raise
    _render(outcomes, as_json=as_json)
    return tuple(outcomes)


def _render(outcomes: Sequence[PatchOutcome], *, as_json: bool) -> None:
    if as_json:
        json_render.render_document({"schema": "leakhound.patch/1",
                                     "outcomes": [patch_render.outcome_doc(o) for o in outcomes]})
    else:
        patch_render.render_outcomes(outcomes)


def _on_simulated_worker(
    *, fixes: list[str], verify: float, method: str, timeout: float, as_json: bool, reporter: Reporter,
    trim_every: float | None = None,
) -> tuple[PatchOutcome, ...]:
    """No target given: show what the fix does on a fresh simulated worker, then stop it."""
    with tempfile.TemporaryDirectory(prefix="leakhound-patch-demo-") as tmp:
        reporter.note("leakhound: no PID given; starting a simulated (leaking) verifiers worker")
        # A few rollouts in flight, so every leak has something to show.
        with leaking_simulated_worker(tmp, until=lambda r: r["intercepts"]["delivered"] >= 8) as fleet:
            pid = fleet.pids[0]
            reporter.note(f"leakhound: pid {pid}: applying {', '.join(fixes)} live, then watching {verify:.0f}s")
            outcomes = patch_process(pid, fixes=fixes, action="apply", verify_seconds=verify, method=method,
                                     timeout=timeout, log=reporter.log, trim_every=trim_every)
    _render(outcomes, as_json=as_json)
    return outcomes
