"""``leakhound patch``: apply, verify, list and revert the built-in fixes in live workers."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from typing import Annotated

import typer

from leakhound.commands.common import SETTINGS, Reporter, new_reporter
from leakhound.commands.options import (
    FIX_HELP,
    ForceOpt,
    JsonOpt,
    MatchOpt,
    MethodOpt,
    PidsArg,
    SitesRateOpt,
    TimeoutOpt,
    complete_fixes,
    finite,
    fixes_from,
    request_options,
)
from leakhound.core.patch import patch_process
from leakhound.core.request import RequestOptions
from leakhound.core.simulated import leaking_simulated_worker
from leakhound.core.targets import chosen_pids
from leakhound.core.verify import verify_process
from leakhound.core.watch import DEFAULT_SITES_RATE, SitesOptions
from leakhound.errors import LeakhoundError, PatchPartlyRefused
from leakhound.model import PatchOutcome
from leakhound.model.names import FIX_NAMES, Method, PatchAction
from leakhound.model.verify import VerifyReport, verify_to_dict
from leakhound.render import json_doc as json_render
from leakhound.render import patch as patch_render

PATCH_SCHEMA = "leakhound.patch/1"


def command(
    pids: PidsArg = None,
    fix: Annotated[str | None, typer.Option(
        "--fix", "-f", metavar="FIX[,FIX]", autocompletion=complete_fixes,
        help=f"The fixes: {FIX_HELP} Needed to apply to a live worker; --status, --revert and "
             "--dry-run take all when it is left out.")] = None,
    match: MatchOpt = None,
    revert: Annotated[bool, typer.Option("--revert", help="Restore the original code exactly.")] = False,
    status: Annotated[bool, typer.Option(
        "--status", help="List which fixes are applied, with their counters.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run",
        help="Check the target's code is recognised and say what each fix would change (the function "
             "it replaces, what it does differently, what stays until restart); change nothing.")] = False,
    verify: Annotated[float, typer.Option(
        "--verify", min=0, callback=finite, metavar="SECONDS",
        help="Prove the fix in memory: sample RSS, the live heap and the fixed owner for --baseline "
             "seconds before applying and this many after, and say what their slopes (the intercept "
             "dict's level, where it shows none) support.")] = 0.0,
    baseline: Annotated[float | None, typer.Option(
        "--baseline", min=1.0, callback=finite, metavar="SECONDS",
        help="With --verify: the window measured before applying (default: as long as --verify).")] = None,
    trim_every: Annotated[float, typer.Option(
        "--trim-every", min=1.0, max=3600.0, callback=finite, metavar="SECONDS",
        help="The trim fix's cadence: malloc_trim(0) every SECONDS.")] = 10.0,
    method: MethodOpt = Method.AUTO,
    timeout: TimeoutOpt = 60.0,
    as_json: JsonOpt = False,
    force: ForceOpt = False,
    sites: Annotated[bool, typer.Option(
        "--sites", help="With --verify: also sample allocations in the worker for the window after the fix (a "
                        "hook removed afterwards, and by itself if leakhound dies): the proof says which Python "
                        "stacks allocated the fixed owner's growth that remains, and the process's.")] = False,
    sites_rate: SitesRateOpt = DEFAULT_SITES_RATE,
) -> None:
    """Apply a known fix to a live worker as a runtime monkeypatch, and prove with numbers
    measured in the worker that it moves what it should. Without PID or --match, shows the fix
    on a fresh simulated worker.

    Fixes (verifiers v1 env workers): steps (trajectory steps keep identity/usage only),
    registry (evict finished rollouts from Runtime.trajectories at cleanup_group), intercepts
    (drop request bodies once delivered), trim (malloc_trim(0) every 10 s or --trim-every,
    never gc.collect()). Code that is missing or not what the fix was written for is refused,
    and nothing changes; when some fixes apply and others are refused, the exit code is 16.

    --verify SECONDS proves it in memory: RSS, the live heap and the fixed owner sampled in a
    window before the fix (--baseline) and one after, their slopes in MiB/min (the intercept
    dict's level where it rises and falls with no slope), and a verdict (stopped, slowed,
    still-growing, not-proven; docs/patch.md). --dry-run says which function
    each fix replaces, what changes from then on, and what stays until the worker restarts.
    """
    if sum((revert, status, dry_run)) > 1:
        raise typer.BadParameter("choose at most one of --revert, --status, --dry-run")
    action = (PatchAction.REVERT if revert else PatchAction.STATUS if status
              else PatchAction.DRY_RUN if dry_run else PatchAction.APPLY)
    live = bool(pids or match)
    if action != PatchAction.APPLY and not live:
        raise typer.BadParameter("give a PID or --match with --revert, --status or --dry-run", param_hint="PID")
    if fix is None and action == PatchAction.APPLY and live:
        raise typer.BadParameter(
            f"name the fixes to apply to a live worker: --fix {','.join(FIX_NAMES)} (or a part of it), "
            "or --fix all", param_hint="--fix")
    if baseline is not None and not verify:
        raise typer.BadParameter("--baseline is the window before the fix that --verify compares with: "
                                 "give --verify SECONDS too", param_hint="--baseline")
    if sites and live and not verify:
        raise typer.BadParameter("--sites samples allocations for the window after the fix that --verify "
                                 "measures: give --verify SECONDS too", param_hint="--sites")
    fixes = fixes_from(fix if fix is not None else "all")
    reporter = new_reporter(quiet=as_json and not SETTINGS["verbose"])
    run(pids=tuple(pids or ()), match=match, fixes=fixes, action=action, verify=verify,
        request=request_options(method=method, timeout=timeout, reporter=reporter, force=force),
        as_json=as_json, trim_every=trim_every, baseline=baseline, reporter=reporter,
        sites_rate=sites_rate if sites else None)


def run(
    *,
    pids: Sequence[int],
    match: str | None,
    fixes: Sequence[str],
    action: PatchAction,
    verify: float,
    request: RequestOptions,
    as_json: bool,
    reporter: Reporter,
    trim_every: float | None = None,
    baseline: float | None = None,
    sites_rate: int | None = None,
) -> tuple[PatchOutcome, ...]:
    """``sites_rate``: with ``verify``, the allocation-site tracker's rate (None: no tracker)."""
    targets = chosen_pids(pids, match)
    proofs: list[VerifyReport] = []
    if not targets:
        outcomes = _on_simulated_worker(fixes=fixes, verify=verify or 5.0, baseline=baseline, request=request,
                                        reporter=reporter, trim_every=trim_every, proofs=proofs,
                                        sites_rate=sites_rate)
    else:
        done: list[PatchOutcome] = []
        for pid in targets:
            try:
                if verify and action == PatchAction.APPLY:
                    outcomes, proof = _verified(pid, fixes=fixes, verify=verify, baseline=baseline,
                                                request=request, reporter=reporter, trim_every=trim_every,
                                                sites_rate=sites_rate)
                    done.extend(outcomes)
                    proofs.append(proof)
                    continue
                done.extend(patch_process(pid, fixes=list(fixes), action=action, request=request,
                                          trim_every=trim_every))
            except LeakhoundError:
                # What already changed in the workers before this one is shown, never left unsaid.
                if done:
                    _render(done, proofs, as_json=as_json)
                raise
        outcomes = tuple(done)
    _render(outcomes, proofs, as_json=as_json)
    _raise_if_partly_refused(outcomes)
    return outcomes


def _verified(pid: int, *, fixes: Sequence[str], verify: float, baseline: float | None, request: RequestOptions,
              reporter: Reporter, trim_every: float | None,
              sites_rate: int | None = None) -> tuple[tuple[PatchOutcome, ...], VerifyReport]:
    before = baseline if baseline is not None else verify
    reporter.note(f"leakhound: pid {pid}: {before:.0f}s before applying {', '.join(fixes)}, then {verify:.0f}s after")
    try:
        return verify_process(pid, fixes=list(fixes), verify_seconds=verify, baseline_seconds=before,
                              request=request, say=reporter.status, progress=reporter.progress,
                              trim_every=trim_every,
                              sites=None if sites_rate is None else SitesOptions(mean_bytes=sites_rate, seconds=verify))
    finally:
        reporter.done()


def _raise_if_partly_refused(outcomes: Sequence[PatchOutcome]) -> None:
    """Exit 16 when a worker applied some of the fixes asked for and refused others."""
    for pid in dict.fromkeys(o.pid for o in outcomes):
        mine = [o for o in outcomes if o.pid == pid]
        refused = [o.fix for o in mine if o.status == "refused"]
        landed = [o.fix for o in mine if o.status in ("applied", "already-applied", "would-apply")]
        if refused and landed:
            raise PatchPartlyRefused(
                f"process {pid}: refused: {', '.join(refused)} (shown above); "
                f"{'would apply' if any(o.status == 'would-apply' for o in mine) else 'applied'}: "
                f"{', '.join(landed)}")


def _render(outcomes: Sequence[PatchOutcome], proofs: Sequence[VerifyReport] = (), *, as_json: bool) -> None:
    if as_json:
        doc: dict[str, object] = {"schema": PATCH_SCHEMA,
                                  "outcomes": [patch_render.outcome_doc(o) for o in outcomes]}
        if proofs:
            doc["verify"] = [verify_to_dict(p) for p in proofs]
        json_render.render_document(doc)
    else:
        patch_render.render_outcomes(outcomes)
        for proof in proofs:
            patch_render.render_verify(proof)


def _on_simulated_worker(
    *, fixes: Sequence[str], verify: float, request: RequestOptions, reporter: Reporter,
    trim_every: float | None = None, baseline: float | None = None, proofs: list[VerifyReport],
    sites_rate: int | None = None,
) -> tuple[PatchOutcome, ...]:
    """No target given: show what the fix does on a fresh simulated worker, then stop it."""
    # Said first and always (even with --json): no worker of the user's is touched.
    print("leakhound: no PID given: starting a simulated (leaking) verifiers worker to show the fix on",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="leakhound-patch-demo-") as tmp:
        # A few rollouts in flight, so every leak has something to show.
        with leaking_simulated_worker(tmp, until=lambda r: r["intercepts"]["delivered"] >= 8) as fleet:
            outcomes, proof = _verified(fleet.pids[0], fixes=fixes, verify=verify, baseline=baseline,
                                        request=request, reporter=reporter, trim_every=trim_every,
                                        sites_rate=sites_rate)
            proofs.append(proof)
            return outcomes
