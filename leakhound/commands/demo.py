"""``leakhound demo``: the whole story on a simulated worker, start to finish, in under a minute."""

from __future__ import annotations

import tempfile
from typing import Annotated

import typer

from leakhound.analysis.ledger import ledger
from leakhound.commands.common import Reporter, new_reporter
from leakhound.commands.options import MethodOpt, finite, request_options
from leakhound.core.capture import FOLLOW_PROGRESS, take_snapshot
from leakhound.core.request import SHORT_REQUESTS, RequestOptions
from leakhound.core.simulated import leaking_simulated_worker
from leakhound.core.verify import verify_process
from leakhound.model import Snapshot
from leakhound.model.names import FIX_NAMES, Method, Owners
from leakhound.render import patch as patch_render
from leakhound.render import table
from leakhound.render.console import console

# What the demo suggests watching next: verifiers' env workers by the title each gives itself
# (Verifiers::EnvWorker0; --match ignores case), not the EnvServer that routes to them.
WORKER_MATCH = "EnvWorker"


def command(
    method: MethodOpt = Method.AUTO,
    verify: Annotated[float, typer.Option(
        "--verify", min=1, callback=finite, metavar="SECONDS", help="Seconds to watch the fixes work.")] = 6.0,
) -> None:
    """The whole story on a simulated worker in under a minute: start a leaking verifiers-shaped
    worker, inspect it live, apply the four fixes live and prove them with before/after slopes,
    inspect again (the fixes known as applied), shut it down."""
    reporter = new_reporter()
    run(request=request_options(method=method, timeout=FOLLOW_PROGRESS, reporter=reporter), verify=verify,
        reporter=reporter)


def run(*, request: RequestOptions, verify: float, reporter: Reporter) -> None:
    con = console()
    with tempfile.TemporaryDirectory(prefix="leakhound-demo-") as tmp:
        con.print("[bold]1. A simulated verifiers env worker[/bold]: 4 concurrent rollouts of 24 turns, "
                  "each turn adding a 64 KiB base64 screenshot to the history (the four production leaks).")
        # Mid-rollout, so every leak has something to show: finished rollouts in the registry
        # and delivered request bodies still held (the worker's own report).
        with leaking_simulated_worker(
            tmp, until=lambda r: r["trajectories"]["finished_entries"] >= 8 and r["intercepts"]["delivered"] >= 16
        ) as fleet:
            pid = fleet.pids[0]
            con.print(f"\n[bold]2. leakhound inspect {pid} --owners dominator[/bold] (the worker keeps running)\n")
            # dominator owners always (inspect's default, auto, falls back to the census when the
            # graph would hold more than its memory budget in the worker: this one is borderline)
            snapshot = take_snapshot(pid, request=request, top=8, progress=reporter.progress,
                                     owners=Owners.DOMINATOR)
            for _ in range(3):
                if _delivered_bodies(snapshot) > 0:
                    break
                # The worker's four rollouts run in step: if they had all just ended, their
                # request bodies were dropped with them. Inspect again mid-rollout.
                ticks = fleet.reports()[0]["stats_ticks"]
                fleet.wait_for(lambda r, t=ticks: r["stats_ticks"] > t and r["intercepts"]["delivered"] >= 16,
                               timeout=60, what="deliver request bodies again")
                snapshot = take_snapshot(pid, request=request, top=8, progress=reporter.progress,
                                         owners=Owners.DOMINATOR)
            reporter.done()
            table.render_snapshot(snapshot, ledger(snapshot), top=8)
            con.print(f"\n[bold]3. leakhound patch {pid} --fix all --verify {verify:.0f}[/bold] "
                      f"(live monkeypatches: {verify:.0f}s measured in the worker before, then {verify:.0f}s after)\n")
            try:
                outcomes, proof = verify_process(pid, fixes=list(FIX_NAMES), verify_seconds=verify,
                                                 baseline_seconds=verify,
                                                 request=request.within(SHORT_REQUESTS.timeout), say=reporter.status,
                                                 progress=reporter.progress)
            finally:
                reporter.done()
            patch_render.render_outcomes(outcomes)
            patch_render.render_verify(proof)
            con.print(f"\n[bold]4. leakhound inspect {pid}[/bold] again: the fixes are known as applied "
                      "(what they leaked before stays until the worker restarts)\n")
            after = take_snapshot(pid, request=request, top=8, progress=reporter.progress)
            reporter.done()
            table.render_findings(after.findings, pid=pid)
    con.print("\n[bold]Next[/bold]: `leakhound inspect PID` on a real worker; `leakhound confirm` for the "
              f"A/B table; `leakhound watch --match {WORKER_MATCH}` (the title verifiers' env workers give "
              "themselves, Verifiers::EnvWorker0) to tell a leak from a plateau.")


def _delivered_bodies(snapshot: Snapshot) -> int:
    verifiers = snapshot.probes.get("verifiers") or {}
    return int((verifiers.get("intercepts") or {}).get("delivered", 0))
