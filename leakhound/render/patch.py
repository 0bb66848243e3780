"""Rendering patch outcomes and the confirm A/B table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from rich.table import Table

from leakhound.model import PatchOutcome
from leakhound.model.units import change, fmt_bytes
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
        if o.functions and o.status in ("applied", "would-apply", "reverted"):
            lines.append("[dim]" + ", ".join(o.functions) + "[/dim]")
        if o.counters and not o.effect and o.status in ("applied", "reverted"):
            lines.append("[dim]" + ", ".join(f"{k}={v}" for k, v in sorted(o.counters.items())) + "[/dim]")
        grid.add_row(f"pid {o.pid}", f"[bold]{o.fix}[/bold] [{style}]{o.status}[/{style}]", "\n".join(lines))
    con.print(grid)


def outcome_doc(o: PatchOutcome) -> dict[str, Any]:
    return {
        "fix": o.fix, "pid": o.pid, "status": o.status, "metric": o.metric, "before": o.before,
        "after": o.after, "effect": o.effect, "reason": o.reason, "functions": list(o.functions),
        "counters": o.counters,
    }


def _mb(n: float) -> str:
    return fmt_bytes(n, "MiB", decimals=0)


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
        def delta(key: str, row: dict[str, Any] = row) -> str:
            if base is None or row is base or not base[key]:
                return ""
            return change(base[key], row[key])

        table.add_row(
            row["fixes"], _mb(row["peak_rss_bytes"]), delta("peak_rss_bytes"),
            _mb(row["resting_rss_bytes"]), delta("resting_rss_bytes"),
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
        def delta(key: str, row: dict[str, Any] = row) -> str:
            if base is None or row is base or not base[key]:
                return ""
            return change(base[key], row[key])

        table.add_row(row["fixes"], _mb(row["peak_rss_bytes"]), delta("peak_rss_bytes"),
                      _mb(row["resting_rss_bytes"]), delta("resting_rss_bytes"),
                      ", ".join(row["applied"]) or "-", ", ".join(row["refused"]) or "-")
    con.print(table)
    con.print("[dim]peak: the worker's VmHWM; resting: its VmRSS once the workload is done (and a few "
              "seconds later); Δ: against no fixes; the fixes were applied live, as `leakhound patch` "
              "does[/dim]")
