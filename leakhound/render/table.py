"""The rich view of a snapshot: ledger, top owners, top types, findings."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TextIO

from rich.markup import escape
from rich.table import Table

from leakhound.analysis.detectors.native_state import HOLDS
from leakhound.analysis.ledger import LedgerRow
from leakhound.model import Finding, Owner, RequestCost, Snapshot
from leakhound.model.names import CODE_OWNER, MADE_DURING_WALK_PREFIX, ROOTS_ALIKE
from leakhound.model.units import count, fmt_bytes, percent
from leakhound.render.console import console

# Owner names that are no path from a named root, said in words under the owners table
# (prefix without its closing ">", meaning).
_SPECIAL_NAMES = (
    ("<held from C", "referenced only by C code or the interpreter, no Python name reaches it"),
    ("<made during the walk", "made while the graph was walked, after what holds it had been walked"),
    (CODE_OWNER[:-1], "module objects, their globals' dicts, classes and code"),
    ("<not attributed", "the whole heap, no owner computed (the owners line above says why)"),
)
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
        f"[bold]pid {snapshot.pid}[/bold] {p.name}  Python {snapshot.python_version}  {when}  "
        f"leakhound {version} via {snapshot.method}"
    )
    con.print(
        f"memory: RSS {fmt_bytes(p.rss_bytes)} in RAM, {fmt_bytes(p.uss_bytes)} of it its own (USS), "
        f"swap {fmt_bytes(p.swap_bytes)}, {count(p.num_threads, 'thread')}"
    )
    h = snapshot.heap
    # the pure-Python walk is the compiled one's slower twin, used when that cannot load
    walk = " (the Python walk: the compiled one did not load)" if h.walker == "python" else ""
    if h.sizes == "requested":  # not the allocators' blocks (docs/inspect.md): said where it is read
        walk += ", sizes as requested (debug allocator hooks: not the blocks they take)"
    con.print(f"measured: {h.objects:,} live Python objects ({fmt_bytes(h.bytes)}) in {h.census_seconds:.1f} s, "
              f"the worker running{walk}")
    con.print(_waited_line(snapshot))
    for broken in snapshot.over_budget:
        con.print(f"[bold yellow]WARNING:[/bold yellow] {broken.text}")
    if snapshot.cost is not None:
        con.print(cost_line(snapshot.cost, tables=h.payload_peak_bytes))
    else:  # files from before the cost was measured: the census's own count
        con.print(f"cost to the worker: {fmt_bytes(h.payload_peak_bytes)} for leakhound's bookkeeping at its peak")
    if h.target_gc_in_payload_thread:
        con.print(f"the worker's own garbage collector ran {count(h.target_gc_in_payload_thread, 'time')} in "
                  f"leakhound's thread (it was due anyway; the longest {h.target_gc_in_payload_thread_max_ms:.0f} ms, "
                  "not in the wait above)")
    if not h.unreached_examined:
        con.print(f"[yellow]not examined:[/yellow] objects no named root reaches: {h.unreached_note}")
    con.print(_owner_model_line(snapshot))
    for warning in snapshot.warnings:
        con.print(f"[yellow]warning:[/yellow] {warning}")
    con.print(next_step_line(snapshot))

    table = Table(title="memory ledger", title_justify="left", show_edge=False)
    table.add_column("where RSS goes")
    table.add_column("bytes", justify="right")
    table.add_column("of RSS", justify="right")
    table.add_column("note")
    for row in ledger:
        table.add_row(row.name, fmt_bytes(row.bytes), percent(row.share), row.note)
    con.print(table)

    shown = snapshot.owners[:top]
    owners = Table(title=f"top owners ({len(shown)} of {len(snapshot.owners)}): who holds the memory",
                   title_justify="left", show_edge=False)
    owners.add_column("#", justify="right")
    # the whole path, folded: its tail names the leak; the type column gives way to it
    owners.add_column("owner", overflow="fold", ratio=1)
    owners.add_column("type", overflow="fold", max_width=14)
    owners.add_column("items", justify="right")
    owners.add_column("retained", justify="right")
    for rank, owner in enumerate(shown, 1):
        owners.add_row(str(rank), escape(owner.path), escape(owner.type), f"{owner.items:,}",
                       fmt_bytes(owner.retained_bytes))
    con.print(owners)
    for name, meaning in _SPECIAL_NAMES:
        if any(o.path.startswith(name) for o in shown):
            con.print(f"[dim]{name}...>: {meaning}[/dim]")
    _render_retainers(con, shown[:3])

    types = Table(title="top types", title_justify="left", show_edge=False)
    types.add_column("type")
    types.add_column("count", justify="right")
    types.add_column("bytes", justify="right")
    for stat in snapshot.types[:top]:
        types.add_row(escape(stat.type), f"{stat.count:,}", fmt_bytes(stat.bytes))
    con.print(types)
    render_findings(snapshot.findings, pid=snapshot.pid, file=file)


def _waited_line(snapshot: Snapshot) -> str:
    """How long the worker waited for leakhound at most, against the budget it was promised."""
    h = snapshot.heap
    waited = max(h.max_pause_ms, h.max_hold_ms)
    budget = f" (budget {h.max_pause_budget_ms:.0f} ms, --max-pause)" if h.max_pause_budget_ms else " (no budget)"
    return f"the worker waited: at most {waited:.0f} ms at once{budget}"


def _owner_model_line(snapshot: Snapshot) -> str:
    h = snapshot.heap
    if h.owner_model == "dominator":
        line = (f"owners: retained = what freeing the owner would give back (object graph: {h.graph_nodes:,} "
                f"objects, walked in {h.graph_seconds:.1f} s, analysed in {h.dominator_seconds:.1f} s)")
    elif h.owner_model == "not-attributed":  # no owner named: the note says why and what would allow it
        return f"[bold yellow]owners: not attributed[/bold yellow]: {h.owner_model_note}"
    else:
        line = "owners: each object counted under the first named root that reaches it (no object graph)"
    if h.owner_model_note:
        line += f" [dim]({h.owner_model_note})[/dim]"
    return line


def next_step_line(snapshot: Snapshot) -> str:
    """What to do next: the fix for the finding with the most at stake (findings are ranked,
    analysis.ranking), else a watch to tell a leak from a plateau."""
    fixable = next((f for f in snapshot.findings if f.fix and not f.skipped), None)
    if fixable is not None:
        return (f"[bold]next:[/bold] leakhound patch {snapshot.pid} --fix {fixable.fix} --dry-run  "
                f"({fmt_bytes(fixable.bytes)} at stake)")
    return (f"[bold]next:[/bold] leakhound watch {snapshot.pid} -d 600  "
            "(no known leak shape with a fix: see which owner keeps growing)")


def _render_retainers(con: object, owners: tuple[Owner, ...]) -> None:
    from rich.console import Console

    assert isinstance(con, Console)
    for rank, owner in enumerate(owners, 1):
        others = [path for path in owner.retainers if path != owner.path]
        if others:
            con.print(f"#{rank} is also kept alive by (freeing it takes dropping these too):")
            for path in others:
                con.print(f"  {path}")


def render_why(query: str, found: tuple[Owner, ...], snapshot: Snapshot, *, file: TextIO | None = None) -> None:
    """``--why QUERY``: only what was asked: each matching owner, how it is held (the last
    reference on its own path) and the other paths from roots that keep it alive."""
    con = console(file)
    if snapshot.heap.owner_model != "dominator":
        con.print(f"why {query}: no object graph ({snapshot.heap.owner_model_note or 'first-reacher owners'})")
        return
    if not found:
        con.print(f"why {query}: no owner path or type of that name")
        return
    con.print(f"why {query}: {count(len(found), 'match', 'matches')}")
    for owner in found:
        items = f", {count(owner.items, 'item')}" if owner.items else ""
        con.print(f"[bold]{owner.path}[/bold] ({owner.type}{items})")
        opaque = HOLDS.get(owner.type)
        if opaque:
            con.print(f"  retains {fmt_bytes(owner.retained_bytes)} of Python objects, and {opaque} (not counted: "
                      "no size of it can be read)")
        else:
            con.print(f"  retains {fmt_bytes(owner.retained_bytes)}: what freeing it would give back")
        con.print(f"  held as: {held_as(owner.path)}")
        others = [path for path in owner.retainers if path != owner.path]
        for path in others:
            con.print(f"  also kept alive by {path}")
        if others:
            con.print("  freeing it takes dropping every one of these references")
        else:
            con.print("  no other path from a root keeps it alive: dropping that reference frees it")


_LAST_STEP = re.compile(
    r"^(?P<parent>.+?)(?:\[(?P<key>'[^']*'|\"[^\"]*\")\]|(?P<entry>\[\])|\.<(?P<unnamed>[^<>]+)>|\.(?P<attr>[A-Za-z_]\w*))$")


def held_as(path: str) -> str:
    """The last reference on an owner's path, in words (docs/snapshot-schema.md, "Paths")."""
    if path.startswith("<held from C:") and path.endswith(">"):
        return "referenced only by C code or the interpreter (no Python name reaches it)"
    if path.startswith(MADE_DURING_WALK_PREFIX) and path.endswith(">"):
        return "made while the graph was walked, after what holds it had been walked (its holder not known)"
    alike = ROOTS_ALIKE.match(path)
    if alike is not None:
        what = {"task": "tasks running", "thread": "threads running"}.get(alike["kind"] or "", "modules named")
        return f"each a root of its own: the {what} {alike['what'] or path}, together"
    step = _LAST_STEP.match(path)
    if step is None:
        return f"a root of its own ({path})"
    parent = step["parent"]
    if step["key"]:
        return f"the entry {step['key']} of the dict {parent}"
    if step["entry"]:
        return f"an entry of {parent} (a list, tuple, set, or a dict with a key that is not a str)"
    if step["unnamed"]:
        return f"a reference with no name (a {step['unnamed']}) from {parent}"
    if re.fullmatch(r"(task|thread):[^.\[]*", parent):  # a coroutine's or a thread's frame
        return f"the local variable {step['attr']} of {parent}"
    return f"the attribute {step['attr']} of {parent}"


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
        text = f"[bold]{f.kind}[/bold]{size}{'  [green]applied[/green]' if f.applied else ''}\n{escape(f.summary)}"
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


def cost_line(cost: RequestCost, *, tables: int = 0) -> str:
    """What the inspection cost the target's memory, measured, and the budget it kept to. The
    growths are the whole process's while leakhound ran: a busy worker's own allocations count
    too (a real verifiers worker under rollouts grew 48.8 MiB of RSS in a 4 s inspection),
    so ``tables`` (heap.payload_peak_bytes: what leakhound's own tables held at their peak, as
    it counts them) is said beside them."""
    charged = (f"its memory cgroup +{fmt_bytes(cost.cgroup_peak_bytes)} at peak, "
               if cost.cgroup_peak_bytes is not None else "")
    if cost.budget_bytes is None:
        budget = "no memory limit"
    else:
        budget = f"budget {fmt_bytes(cost.budget_bytes)}"
        if cost.headroom_bytes is not None:
            budget += f" of {fmt_bytes(cost.headroom_bytes)} headroom under its limit"
    own = f"; leakhound's tables {fmt_bytes(tables)} at their peak" if tables > 0 else ""
    return (f"cost to the worker: {charged}VmHWM +{fmt_bytes(cost.hwm_bytes)}, RSS {_signed(cost.rss_bytes)} while "
            f"leakhound ran, its own allocations included{own} ({budget})")


def _signed(n: int) -> str:
    return f"+{fmt_bytes(n)}" if n >= 0 else f"-{fmt_bytes(-n)}"
