"""The rich view of a snapshot: ledger, top owners, top types, findings."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TextIO

from rich.table import Table

from leakhound.analysis.ledger import LedgerRow
from leakhound.model import Finding, Owner, RequestCost, Snapshot
from leakhound.model.units import fmt_bytes
from leakhound.render.console import console

_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan", "skipped": "dim"}


def render_snapshot(
    snapshot: Snapshot, ledger: Sequence[LedgerRow], *, top: int = 10, file: TextIO | None = None
) -> None:
    """Prints the snapshot and its ``ledger`` (``analysis.ledger.ledger(snapshot)``, computed
    by the caller: a renderer computes nothing)."""
    con = console(file)
    when = datetime.fromtimestamp(snapshot.taken_at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    p = snapshot.process
    version = snapshot.leakhound_version or "?"  # "?": a file written before versions were recorded
    con.print(
        f"[bold]pid {snapshot.pid}[/bold] {p.name}  Python {snapshot.python_version}  "
        f"leakhound {version} via {snapshot.method} at {when}"
    )
    con.print(
        f"RSS {fmt_bytes(p.rss_bytes)}  USS {fmt_bytes(p.uss_bytes)}  "
        f"swap {fmt_bytes(p.swap_bytes)}  threads {p.num_threads}"
    )
    h = snapshot.heap
    walk = f" ({h.walker} walk)" if h.walker else ""  # compiled (_walk.c) or its Python twin
    if h.counted_in == "graph":  # no census walk: the object graph's walk counted on the way
        split = ", what it did not reach split by a census" if h.unreached_examined else ""
        walk = f" (counted in the object graph's {h.walker} walk{split})"
    # the budget and the longest the census ran between two yields of the GIL (--max-pause)
    held = (f", held the GIL at most {h.max_hold_ms:.0f} ms at a time (budget {h.max_pause_budget_ms:.0f} ms)"
            if h.max_pause_budget_ms else "")
    # the memory it cost the target, measured (files from before that: the census's own count)
    extra = f", extra memory {fmt_bytes(h.payload_peak_bytes)}" if snapshot.cost is None else ""
    con.print(
        f"census{walk}: {h.objects:,} objects in {h.census_seconds:.2f}s, "
        f"longest pause {h.max_pause_ms:.0f} ms{held}{extra}"
    )
    if snapshot.cost is not None:
        con.print(cost_line(snapshot.cost))
    if h.target_gc_in_payload_thread:
        con.print(f"the target's own gc ran {h.target_gc_in_payload_thread} time(s) in the payload's thread "
                  f"(due anyway; the longest {h.target_gc_in_payload_thread_max_ms:.0f} ms, not in the holds above)")
    if not h.unreached_examined:
        con.print(f"[yellow]not examined:[/yellow] objects no named root reaches: {h.unreached_note}")
    con.print(_owner_model_line(snapshot))
    for warning in snapshot.warnings:
        con.print(f"[yellow]warning:[/yellow] {warning}")

    table = Table(title="memory ledger", title_justify="left", show_edge=False)
    table.add_column("where RSS goes")
    table.add_column("bytes", justify="right")
    table.add_column("of RSS", justify="right")
    table.add_column("note")
    for row in ledger:
        table.add_row(row.name, fmt_bytes(row.bytes), f"{row.share:.0%}", row.note)
    con.print(table)

    owners = Table(title=f"top owners (of {len(snapshot.owners)})", title_justify="left", show_edge=False)
    owners.add_column("#", justify="right")
    owners.add_column("owner", overflow="fold")  # the whole path: its tail names the leak
    owners.add_column("type")
    owners.add_column("items", justify="right")
    owners.add_column("retained", justify="right")
    for rank, owner in enumerate(snapshot.owners[:top], 1):
        owners.add_row(str(rank), owner.path, owner.type, f"{owner.items:,}", fmt_bytes(owner.retained_bytes))
    con.print(owners)
    _render_retainers(con, snapshot.owners[:3])

    types = Table(title="top types", title_justify="left", show_edge=False)
    types.add_column("type")
    types.add_column("count", justify="right")
    types.add_column("bytes", justify="right")
    for stat in snapshot.types[:top]:
        types.add_row(stat.type, f"{stat.count:,}", fmt_bytes(stat.bytes))
    con.print(types)
    render_findings(snapshot.findings, pid=snapshot.pid, file=file)


def _owner_model_line(snapshot: Snapshot) -> str:
    h = snapshot.heap
    if h.owner_model == "dominator":
        line = (f"owners: dominator tree (retained = what freeing it returns), graph of {h.graph_nodes:,} nodes "
                f"/ {h.graph_edges:,} edges walked in {h.graph_seconds:.2f}s, analysed in {h.dominator_seconds:.2f}s")
    else:
        line = "owners: first reacher (each object to the first named root that reaches it)"
    if h.owner_model_note:
        line += f" [dim]({h.owner_model_note})[/dim]"
    return line


def _render_retainers(con: object, owners: tuple[Owner, ...]) -> None:
    from rich.console import Console

    assert isinstance(con, Console)
    for rank, owner in enumerate(owners, 1):
        if len(owner.retainers) > 1:
            con.print(f"kept alive (#{rank}):")
            for path in owner.retainers:
                con.print(f"  {path}", soft_wrap=True)


def render_why(query: str, found: tuple[Owner, ...], snapshot: Snapshot, *, file: TextIO | None = None) -> None:
    """``--why QUERY``: what keeps the owner (or the biggest objects of a type) alive."""
    con = console(file)
    if snapshot.heap.owner_model != "dominator":
        con.print(f"why {query}: no object graph ({snapshot.heap.owner_model_note or 'first-reacher owners'})")
        return
    if not found:
        con.print(f"why {query}: no owner path or type of that name")
        return
    for owner in found:
        con.print(f"[bold]{owner.path}[/bold]  {owner.type}  retains {fmt_bytes(owner.retained_bytes)}")
        for path in owner.retainers or (owner.path,):
            con.print(f"  kept alive by {path}", soft_wrap=True)


def render_findings(findings: tuple[Finding, ...], *, pid: int, file: TextIO | None = None) -> None:
    con = console(file)
    if not findings:
        con.print("findings: none")
        return
    grid = Table.grid(padding=(0, 1))
    grid.title = "findings"
    grid.title_justify = "left"
    grid.add_column(no_wrap=True)
    grid.add_column()
    not_checked: dict[str, list[str]] = {}
    for f in findings:
        if f.skipped:
            not_checked.setdefault(f.summary, []).append(f.kind)
            continue
        style = _SEVERITY_STYLE.get(f.severity, "")
        size = f"  {fmt_bytes(f.bytes)}" if f.bytes else ""
        text = f"[bold]{f.kind}[/bold]{size}{'  [green]applied[/green]' if f.applied else ''}\n{f.summary}"
        if f.fix:
            text += f"\n[bold]fix:[/bold] leakhound patch {pid} --fix {f.fix}"
        elif f.applied and f.details.get("next_fix"):
            text += f"\n[bold]next:[/bold] leakhound patch {pid} --fix {f.details['next_fix']}"
        grid.add_row(f"[{style}]{f.severity.upper()}[/{style}]", text)
    if grid.row_count:
        con.print(grid)
    else:
        con.print("findings: none")
    for reason, kinds in not_checked.items():
        con.print(f"[dim]not checked: {', '.join(kinds)} ({reason})[/dim]")


def cost_line(cost: RequestCost) -> str:
    """What the inspection cost the target's memory, measured, and the budget it kept to."""
    charged = (f"its memory cgroup +{fmt_bytes(cost.cgroup_peak_bytes)} at peak, "
               if cost.cgroup_peak_bytes is not None else "")
    if cost.budget_bytes is None:
        budget = "no memory limit"
    else:
        budget = f"budget {fmt_bytes(cost.budget_bytes)}"
        if cost.headroom_bytes is not None:
            budget += f" of {fmt_bytes(cost.headroom_bytes)} headroom under its limit"
    return f"cost to the target: {charged}VmHWM +{fmt_bytes(cost.hwm_bytes)}, RSS {_signed(cost.rss_bytes)} ({budget})"


def _signed(n: int) -> str:
    return f"+{fmt_bytes(n)}" if n >= 0 else f"-{fmt_bytes(-n)}"
