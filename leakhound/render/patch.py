"""Rendering patch outcomes and the confirm A/B table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, TextIO

from rich.table import Table

from leakhound.analysis.detectors.applied import when_and_who
from leakhound.analysis.verify import rate
from leakhound.model import PatchOutcome
from leakhound.model.units import MiB, change, fmt_bytes
from leakhound.model.verify import OwnerWindow, VerifyReport, WindowStats
from leakhound.patches import FIXES
from leakhound.render.console import console

_STATUS_STYLE = {"applied": "green", "already-applied": "green", "would-apply": "cyan", "reverted": "cyan",
                 "refused": "red", "not-applied": "dim"}


def render_outcomes(outcomes: Sequence[PatchOutcome], *, file: TextIO | None = None) -> None:
    con = console(file)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")  # a function's whole dotted name, folded: never cut
    for o in outcomes:
        style = _STATUS_STYLE.get(o.status, "")
        lines = []
        if o.effect:
            lines.append(o.effect)
        elif o.reason:
            lines.append(o.reason)
        spec = FIXES.get(o.fix)
        if o.status == "would-apply" and spec is not None:
            replaced = ", ".join(o.functions) if o.functions else "no function (a helper thread)"
            lines.append(f"replaces: {replaced}")
            lines.append(f"from then on: {spec.changes}")
            lines.append(f"stays until restart: {spec.stays}")
        elif o.functions and o.status in ("applied", "reverted"):
            lines.append("[dim]" + ", ".join(o.functions) + "[/dim]")
        if o.applied is not None and o.applied.applied_at is not None and o.status in ("applied",
                                                                                       "already-applied"):
            lines.append(f"[dim]{when_and_who(o.applied)}[/dim]")
        if o.counters and not o.effect and o.status in ("applied", "reverted"):
            lines.append("[dim]" + ", ".join(f"{k}={v}" for k, v in sorted(o.counters.items())) + "[/dim]")
        grid.add_row(f"pid {o.pid}", f"[bold]{o.fix}[/bold] [{style}]{o.status}[/{style}]", "\n".join(lines))
    con.print(grid)


def outcome_doc(o: PatchOutcome) -> dict[str, Any]:
    spec = FIXES.get(o.fix)
    return {
        "fix": o.fix, "pid": o.pid, "status": o.status, "metric": o.metric, "before": o.before,
        "after": o.after, "effect": o.effect, "reason": o.reason, "functions": list(o.functions),
        "counters": o.counters, "changes": spec.changes if spec else "", "stays": spec.stays if spec else "",
        "applied": asdict(o.applied) if o.applied is not None else None,
    }


_VERDICT_STYLE = {"stopped": "green", "slowed": "yellow", "still-growing": "red", "not-proven": "yellow"}


def _with_scatter(per_min: float, error: float | None) -> str:
    """``+38.5 ±6.1 MiB/min`` (the ± is the slope's standard error; left out below 0.05)."""
    if error is None or error < 0.05 * MiB:
        return rate(per_min)
    return f"{per_min / MiB:+.1f} ±{error / MiB:.1f} MiB/min"


def _window(stats: WindowStats | None) -> tuple[str, str]:
    """RSS and live-heap slopes, each with its standard error."""
    if stats is None:
        return "no samples", ""
    heap = (_with_scatter(stats.heap_bytes_per_min, stats.heap_stderr_bytes_per_min)
            if stats.heap_bytes_per_min is not None else "not measured")
    return _with_scatter(stats.rss_bytes_per_min, stats.rss_stderr_bytes_per_min), heap


def _owner(window: OwnerWindow | None) -> tuple[str, str]:
    if window is None:
        return "not found", "not found"
    return rate(window.bytes_per_min), f"{window.items_per_min:+,.0f}/min"


def render_verify(report: VerifyReport, *, file: TextIO | None = None) -> None:
    """The proof: slopes before and after the fix, per series, then the verdict."""
    con = console(file)
    b, a = report.before, report.after
    con.print(f"[bold]pid {report.pid}: slopes measured in the worker, before and after the fix[/bold]")
    table = Table(show_edge=False, padding=(0, 1))
    table.add_column("", no_wrap=True)
    table.add_column("before", justify="right", no_wrap=True)
    table.add_column("after", justify="right", no_wrap=True)
    (rss_b, heap_b), (rss_a, heap_a) = _window(b), _window(a)
    table.add_row("RSS", rss_b, rss_a)
    table.add_row("live heap", heap_b, heap_a)
    for v in report.per_fix:
        if v.finished_rollouts_before is not None and v.finished_rollouts_after is not None:
            table.add_row("finished rollouts held", f"{v.finished_rollouts_before.per_min:+,.0f}/min",
                          f"{v.finished_rollouts_after.per_min:+,.0f}/min")
    owners = [v for v in report.per_fix if v.path]
    for v in owners:
        (bytes_b, items_b), (bytes_a, items_a) = _owner(v.before), _owner(v.after)
        table.add_row(f"{v.fix} owner", bytes_b, bytes_a)
        table.add_row(f"{v.fix} owner items", items_b, items_a)
    con.print(table)
    if b is not None and a is not None:
        con.print(f"[dim]windows: {b.seconds:.0f}s before ({b.samples} samples), {a.seconds:.0f}s after "
                  f"({a.samples}), one every {report.interval_seconds:g}s[/dim]")
    for v in owners:
        now = f", {v.after.items_last:,} items now" if v.after is not None else ""
        con.print(f"[dim]{v.fix} owner: {v.path} ({v.type}{now})[/dim]")
    style = _VERDICT_STYLE.get(report.verdict, "")
    con.print(f"[bold]verdict:[/bold] [{style}]{report.verdict}[/{style}]: {report.summary}")
    for note in report.notes:
        con.print(f"[dim]note: {note}[/dim]")


def _mb(n: float) -> str:
    return fmt_bytes(n, "MiB", decimals=0)


def _delta(base: dict[str, Any] | None, row: dict[str, Any], key: str) -> str:
    """``row[key]`` against the first row (no fixes); blank on that row itself."""
    if base is None or row is base or not base[key]:
        return ""
    return change(base[key], row[key])


def render_confirm(rows: Sequence[dict[str, Any]], *, file: TextIO | None = None) -> None:
    con = console(file)
    table = Table(title="confirm: each fix measured in fresh worker processes", title_justify="left",
                  show_edge=False, padding=(0, 1))
    for name, justify in (("fixes", "left"), ("peak", "right"), ("Δ", "right"),
                          ("resting", "right"), ("Δ", "right"), ("registry", "right"),
                          ("intercepts", "right"), ("steps", "right")):
        # the numbers whole; the list of fixes folds when 80 columns are short of it
        table.add_column(name, justify=justify, no_wrap=name != "fixes", overflow="fold")  # type: ignore[arg-type]
    base = rows[0] if rows else None
    for row in rows:
        table.add_row(
            row["fixes"], _mb(row["peak_rss_bytes"]), _delta(base, row, "peak_rss_bytes"),
            _mb(row["resting_rss_bytes"]), _delta(base, row, "resting_rss_bytes"),
            _mb(row["registry_retained_bytes"]), _mb(row["intercept_peak_body_bytes"]),
            _mb(row["step_redundant_bytes"]),
        )
    con.print(table)
    con.print("[dim]peak: VmHWM; resting: VmRSS when idle after a stats tick; Δ: against no fixes; "
              "registry: finished rollouts' trajectories held; intercepts: peak request-body bytes "
              "held; steps: bytes only bloated step messages hold (workers' own reports)[/dim]")


def render_confirm_workload(rows: Sequence[dict[str, Any]], *, file: TextIO | None = None) -> None:
    """``confirm --worker-cmd``: peak and resting RSS of the user's worker per configuration."""
    con = console(file)
    table = Table(title="confirm: each fix measured on your workload, started afresh for each",
                  title_justify="left", show_edge=False, padding=(0, 1))
    for name, justify in (("fixes", "left"), ("peak", "right"), ("Δ", "right"), ("resting", "right"),
                          ("Δ", "right"), ("applied", "left"), ("refused", "left")):
        table.add_column(name, justify=justify, no_wrap=name not in ("fixes", "applied", "refused"),  # type: ignore[arg-type]
                         overflow="fold")
    base = rows[0] if rows else None
    for row in rows:
        table.add_row(row["fixes"], _mb(row["peak_rss_bytes"]), _delta(base, row, "peak_rss_bytes"),
                      _mb(row["resting_rss_bytes"]), _delta(base, row, "resting_rss_bytes"),
                      ", ".join(row["applied"]) or "-", ", ".join(row["refused"]) or "-")
    con.print(table)
    con.print("[dim]peak: the worker's VmHWM; resting: its VmRSS once the workload is done (and a few "
              "seconds later); Δ: against no fixes; the fixes were applied live, as `leakhound patch` "
              "does[/dim]")
