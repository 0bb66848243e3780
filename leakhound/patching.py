"""Apply, revert, list and verify the built-in fixes in a live process.

Side effects at the edge (attach); the arithmetic of each fix's effect is in
``leakhound/patches``. Every action names fixes from the built-in set only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from leakhound.attach import run_request
from leakhound.attach.base import AttachLog
from leakhound.attach.process import resolve_target
from leakhound.errors import PatchRefused
from leakhound.model import PatchOutcome
from leakhound.patches import FIXES, Measurement

ACTIONS = ("apply", "revert", "status", "dry-run")


def _request(pid: int, action: str, fixes: list[str], *, method: str, timeout: float,
             log: AttachLog | None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"op": "patch", "action": action, "fixes": fixes}
    if options:
        request["options"] = options
    remote = run_request(
        pid,
        request,
        method=method,
        timeout=timeout,
        log=log,
        target=resolve_target(pid),
    )
    return remote.result


def patch_process(
    pid: int,
    *,
    fixes: list[str],
    action: str = "apply",
    verify_seconds: float = 0.0,
    method: str = "auto",
    timeout: float = 60.0,
    log: AttachLog | None = None,
    wait: Callable[[float], None] = time.sleep,
    trim_every: float | None = None,
) -> tuple[PatchOutcome, ...]:
    """Run ``action`` for ``fixes`` in ``pid``; with ``apply``, measure the declared numbers
    before and after (after ``verify_seconds`` when given). Raises PatchRefused when every
    requested fix was refused (nothing changed). ``trim_every``: the trim fix's cadence in
    seconds (1 to 3600; default 10)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    if action != "apply":
        doc = _request(pid, action, fixes, method=method, timeout=timeout, log=log)
        listed = tuple(_outcome(pid, r) for r in doc["results"])
        _raise_if_all_refused(pid, listed)
        return listed
    if trim_every is not None and not 1 <= trim_every <= 3600:
        raise ValueError("trim_every must be between 1 and 3600 seconds")
    options = {"trim_every": trim_every} if trim_every is not None else None
    applied = _request(pid, "apply", fixes, method=method, timeout=timeout, log=log, options=options)
    _raise_if_all_refused(pid, tuple(_outcome(pid, r) for r in applied["results"]))
    after_doc = applied
    if verify_seconds > 0:
        wait(verify_seconds)
        after_doc = _request(pid, "measure", fixes, method=method, timeout=timeout, log=log)
    before = Measurement.from_payload(applied["measure_before"])
    right_after = Measurement.from_payload(applied["measure"])
    after = Measurement.from_payload(after_doc["measure"])
    counters = {r["fix"]: r.get("counters", {}) for r in after_doc["results"]}
    outcomes: list[PatchOutcome] = []
    for result in applied["results"]:
        spec = FIXES[result["fix"]]
        outcome = _outcome(pid, result)
        if outcome.status in ("applied", "already-applied"):
            eff = spec.effect(before, right_after if spec.immediate else after, counters.get(spec.name, {}))
            outcome = PatchOutcome(
                **{**outcome.__dict__, "metric": spec.metric, "before": eff.before, "after": eff.after,
                   "effect": eff.summary, "counters": counters.get(spec.name, {})}
            )
        outcomes.append(outcome)
    return tuple(outcomes)


def _outcome(pid: int, result: dict[str, Any]) -> PatchOutcome:
    spec = FIXES.get(result["fix"])
    return PatchOutcome(
        fix=result["fix"],
        pid=pid,
        status=result["status"],
        metric=spec.metric if spec else "",
        reason=str(result.get("reason") or result.get("warning") or ""),
        targets=tuple(result.get("targets") or ()),
        counters=dict(result.get("counters") or {}),
    )


def _raise_if_all_refused(pid: int, outcomes: tuple[PatchOutcome, ...]) -> None:
    if outcomes and all(o.status == "refused" for o in outcomes):
        reasons = "; ".join(f"{o.fix}: {o.reason}" for o in outcomes)
        raise PatchRefused(f"process {pid}: {reasons}")
