"""Apply, revert, list and verify the built-in fixes in a live process.

Side effects at the edge (attach); the arithmetic of each fix's effect is in
``leakhound/patches``. Every action names fixes from the built-in set only.

A change that times out is never left unreported: the payload lands a patch's fixes all at
once after its last cancellation point, and when an apply or revert does not answer in time
what is applied is read back from the target (``status``) and the error says it, with an
exit code per outcome: nothing changed (6), fixes applied (13), could not be read (14).
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable
from typing import Any

from leakhound import __version__
from leakhound.analysis.detectors.applied import applied_fix
from leakhound.attach.process import resolve_target
from leakhound.core.decode import decode_patch
from leakhound.core.request import SHORT_REQUESTS, RequestOptions, ask
from leakhound.errors import (
    AttachTimeout,
    OutcomeUnknown,
    PatchIncomplete,
    PatchRefused,
    RequestCancelled,
    TargetBlocked,
    TargetBusy,
)
from leakhound.model import PatchOutcome
from leakhound.model.names import PatchAction
from leakhound.patches import FIXES, Measurement
from leakhound.payload import wire


def _request(pid: int, action: str, fixes: list[str], *, request: RequestOptions,
             options: dict[str, Any] | None = None) -> dict[str, Any]:
    asked: dict[str, Any] = {"op": wire.OP_PATCH, "action": str(action), "fixes": fixes}
    if options:
        asked["options"] = options
    if action == PatchAction.APPLY:
        asked["by"] = applied_by()
    # a revert and --status take memory back or only read: never refused for headroom
    remote = ask(pid, asked, request=request, target=resolve_target(pid),
                 force=action in (PatchAction.REVERT, PatchAction.STATUS))
    return dict(decode_patch(pid, remote.result))


def applied_by() -> dict[str, Any]:
    """Who applies a fix, recorded with it in the target (a later ``inspect`` says it): this
    process's uid, the user behind sudo when there is one, and leakhound's version."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = ""
    sudo_user = os.environ.get("SUDO_USER", "")
    if uid == 0 and sudo_user:
        user = f"{sudo_user} (sudo)"
    return {"uid": uid, "user": user, "leakhound_version": __version__}


def patch_process(
    pid: int,
    *,
    fixes: list[str],
    action: PatchAction = PatchAction.APPLY,
    verify_seconds: float = 0.0,
    request: RequestOptions = SHORT_REQUESTS,
    wait: Callable[[float], None] = time.sleep,
    trim_every: float | None = None,
) -> tuple[PatchOutcome, ...]:
    """Run ``action`` for ``fixes`` in ``pid``; with ``apply``, measure the declared numbers
    before and after (after ``verify_seconds`` when given). Raises PatchRefused when every
    requested fix was refused (nothing changed). ``trim_every``: the trim fix's cadence in
    seconds (1 to 3600; default 10). ``request.force``: apply (or dry-run, measure) with
    less headroom under the target's memory limit than the request may cost
    (HeadroomTooSmall)."""
    action = PatchAction(action)
    if action == PatchAction.REVERT:
        doc = _changing(pid, action, fixes, request=request)
        listed = tuple(_outcome(pid, r) for r in doc["results"])
        return listed
    if action != PatchAction.APPLY:
        doc = _request(pid, action, fixes, request=request)
        listed = tuple(_outcome(pid, r) for r in doc["results"])
        _raise_if_all_refused(pid, listed)
        return listed
    if trim_every is not None and not 1 <= trim_every <= 3600:
        raise ValueError("trim_every must be between 1 and 3600 seconds")
    options = {"trim_every": trim_every} if trim_every is not None else None
    applied = _changing(pid, action, fixes, request=request, options=options)
    _raise_if_all_refused(pid, tuple(_outcome(pid, r) for r in applied["results"]))
    live = [r["fix"] for r in applied["results"] if r["status"] in ("applied", "already-applied")]
    if "measure" not in applied:
        raise PatchIncomplete(
            f"process {pid}: applied: {', '.join(live) or 'none'}; the request ran out of time right "
            f"after they landed, before measuring them ({applied.get('measure_skipped', '')})"
        )
    after_doc = applied
    if verify_seconds > 0:
        wait(verify_seconds)
        try:
            after_doc = _request(pid, "measure", fixes, request=request)
        except (AttachTimeout, OutcomeUnknown) as exc:
            raise PatchIncomplete(
                f"process {pid}: applied: {', '.join(live) or 'none'}; the measurement "
                f"{verify_seconds:.0f}s later did not come back: {exc}"
            ) from None
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


# How long a read-back after a timeout keeps asking while the timed-out request still holds
# the target's lock (it stops at its next step once it runs).
READ_BACK_SECONDS = 30.0


def _changing(pid: int, action: str, fixes: list[str], *, request: RequestOptions,
              options: dict[str, Any] | None = None) -> dict[str, Any]:
    """An apply or revert whose outcome is known whatever happens to the request: on a
    timeout, what is applied is read back from the target and reported."""
    try:
        return _request(pid, action, fixes, request=request, options=options)
    except TargetBlocked as exc:
        raise TargetBlocked(f"{exc}; nothing was changed: the payload never started, and it never will "
                            f"(its directory is gone)") from None
    except (AttachTimeout, OutcomeUnknown) as exc:
        cause = exc
    applied = _read_back(pid, request=request)
    asked = ", ".join(fixes)
    if applied is None:
        raise OutcomeUnknown(
            f"{cause}; what is applied could not be read back from process {pid} within "
            f"{READ_BACK_SECONDS:.0f}s"
        )
    now = ", ".join(applied) or "none"
    cancelled = isinstance(cause, RequestCancelled)
    if action == "apply":
        landed = [f for f in fixes if f in applied]
        if not landed:
            raise RequestCancelled(
                f"process {pid}: the patch ({asked}) did not finish in time and "
                + ("was stopped in the target before any fix landed" if cancelled else "did not land")
                + f"; nothing was changed (read back: applied now: {now})"
            )
        raise PatchIncomplete(
            f"process {pid}: the patch did not answer in time, but fixes are applied (read back: "
            f"applied now: {now}); not measured"
        )
    still = [f for f in fixes if f in applied]
    if still:
        raise PatchIncomplete(
            f"process {pid}: the revert ({asked}) did not finish in time; still applied (read back): "
            f"{', '.join(still)}; applied now: {now}"
        )
    raise RequestCancelled(
        f"process {pid}: the revert did not answer in time, but none of {asked} is applied "
        f"(read back: applied now: {now})"
    )


def _read_back(pid: int, *, request: RequestOptions) -> list[str] | None:
    """Which fixes are applied in ``pid``, asked until the timed-out request has let go of the
    target's lock; None when it could not be read."""
    deadline = time.monotonic() + READ_BACK_SECONDS
    while True:
        remaining = deadline - time.monotonic()
        try:
            within = max(5.0, min(request.timeout, remaining))
            doc = _request(pid, PatchAction.STATUS, list(FIXES), request=request.within(within))
            return sorted(str(name) for name in doc.get("applied", ()))
        except (AttachTimeout, OutcomeUnknown, TargetBusy) as exc:
            request.log(f"reading back what is applied: {exc}")
            if time.monotonic() + 1.0 > deadline:
                return None
            time.sleep(1.0)


def _outcome(pid: int, result: dict[str, Any]) -> PatchOutcome:
    spec = FIXES.get(result["fix"])
    recorded = applied_fix(result) if result.get("status") in ("applied", "already-applied") else None
    return PatchOutcome(
        applied=recorded,
        fix=result["fix"],
        pid=pid,
        status=result["status"],
        metric=spec.metric if spec else "",
        reason=str(result.get("reason") or result.get("warning") or ""),
        functions=tuple(result.get("functions") or ()),
        counters=dict(result.get("counters") or {}),
    )


def _raise_if_all_refused(pid: int, outcomes: tuple[PatchOutcome, ...]) -> None:
    if outcomes and all(o.status == "refused" for o in outcomes):
        reasons = "; ".join(f"{o.fix}: {o.reason}" for o in outcomes)
        raise PatchRefused(f"process {pid}: {reasons}")
