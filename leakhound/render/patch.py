"""Rendering patch outcomes and the confirm A/B table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from rich.table import Table

from leakhound.model import PatchOutcome
from leakhound.render.console import console, human_bytes

_STATUS_STYLE = {"applied": "green", "already-applied": "green", "would-apply": "cyan", "reverted": "cyan",
                 "refused": "red", "not-applied": "dim"}


def render_outcomes(outcomes: Sequence[PatchOutcome], *, file: TextIO | None = None) -> None:
    con = console(file)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column()
    for o in outcomes:
        style = _STATUS_STYLE.get(o.status, "")
        lines = []
        if o.effect:
            lines.append(o.effect)
        elif o.reason:
            lines.append(o.reason)
        if o.targets and o.status in ("applied", "would-apply", "reverted"):
            lines.append("[dim]" + ", ".join(o.targets) + "[/dim]")
        if o.counters and not o.effect and o.status in ("applied", "reverted"):
            lines.append("[dim]" + ", ".join(f"{k}={v}" for k, v in sorted(o.counters.items())) + "[/dim]")
        grid.add_row(f"pid {o.pid}", f"[bold]{o.fix}[/bold] [{style}]{o.status}[/{style}]", "\n".join(lines))
    con.print(grid)


def outcome_doc(o: PatchOutcome) -> dict[str, Any]:
    return {
        "fix": o.fix, "pid": o.pid, "status": o.status, "metric": o.metric, "before": o.before,
        "after": o.after, "effect": o.effect, "reason": o.reason, "targets": list(o.targets),
        "counters": o.counters,
    }


def render_confirm(rows: Sequence[dict[str, Any]], *, file: TextIO | None = None) -> None:
    con = console(file)
    table = Table(title="confirm: each fix measured in fresh worker processes", title_justify="left",
                  show_edge=False)
    for name, justify in (("fixes", "left"), ("peak RSS", "right"), ("vs none", "right"),
                          ("resting RSS", "right"), ("vs none", "right"), ("registry held", "right"),
                          ("intercept bodies (peak)", "right"), ("redundant step bytes", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    base = rows[0] if rows else None
    for row in rows:
        def delta(key: str, row: dict[str, Any] = row) -> str:
            if base is None or row is base or not base[key]:
                return ""
            return f"{(row[key] - base[key]) / base[key]:+.0%}"

        table.add_row(
            row["fixes"], human_bytes(row["peak_rss_bytes"]), delta("peak_rss_bytes"),
            human_bytes(row["resting_rss_bytes"]), delta("resting_rss_bytes"),
            human_bytes(row["registry_retained_bytes"]), human_bytes(row["intercept_peak_body_bytes"]),
            human_bytes(row["step_redundant_bytes"]),
        )
    con.print(table)
