"""Views of a watch: the live table on stderr while it runs, the final report, its JSON."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from leakhound.analysis.diff import SnapshotDiff
from leakhound.model.growth import GROWING, GrowthReport, TargetEnded, Trend, report_to_dict
from leakhound.model.names import CODE_OWNER, PAYLOAD_OWNER
from leakhound.model.snapshot import AllocationSite, SiteTracking
from leakhound.model.units import fmt_bytes
from leakhound.render.console import console, escaped
from leakhound.render.table import render_findings

WATCH_SCHEMA = "leakhound.watch/1"
# Owners that are no place in the worker's program: its code, and what leakhound's payload holds.
_NOT_SHOWN = frozenset({CODE_OWNER, PAYLOAD_OWNER})
_VERDICT_STYLE = {"growing": "bold red", "plateaued": "yellow", "static": "green", "unknown": "dim"}


def _rate(bytes_per_min: float) -> str:
    return f"{'+' if bytes_per_min > 0 else ''}{fmt_bytes(bytes_per_min)}/min"


def _signed(bytes_per_min: float) -> str:
    return f"{'+' if bytes_per_min > 0 else ''}{fmt_bytes(bytes_per_min)}"


def _verdict(verdict: str) -> str:
    style = _VERDICT_STYLE.get(verdict, "")
    return f"[{style}]{verdict}[/{style}]" if style else verdict


def owners_table(report: GrowthReport, *, top: int = 8) -> Group:
    """The process's line (verdict, RSS, samples) over its owners' table. The line is its own
    text, not the table's title: a title wraps to the table's width, which its minimum
    column widths can put past the console's, and the console then cut the title's end."""
    heap = "" if report.heap is None else f"  heap {fmt_bytes(report.heap.last_bytes)}"
    title = Text.from_markup(
        f"pid {report.pid} {escape(report.name)}: {_verdict(report.verdict)}  "
        f"RSS {fmt_bytes(report.rss.last_bytes)} ({_rate(report.rss.bytes_per_min)})"
        f"{heap}  {report.samples} samples over {report.seconds:.0f} s"
        + (f"  owners: {report.owner_model}" if report.owner_model else "")
        + (f" ({report.owner_model_reason})" if report.owner_model_reason else ""),
        overflow="fold",
    )
    table = Table(show_edge=False)
    # the owner's path gets what the numbers leave (at 80 columns it was 13 wide); the rate
    # columns say "/min" once, in their header
    table.add_column("owner", overflow="fold", ratio=1, min_width=16)
    table.add_column("type", overflow="fold", max_width=12)
    table.add_column("items", justify="right")
    table.add_column("size", justify="right")
    table.add_column("bytes/min", justify="right")
    table.add_column("items/min", justify="right")
    table.add_column("verdict", no_wrap=True, min_width=len("plateaued"))
    rows: list[Trend] = [t for t in report.owners if t.name not in _NOT_SHOWN][:top]
    garbage = report.cyclic_garbage
    if garbage is not None and (garbage.last_bytes or garbage.verdict in ("growing", "plateaued")):
        rows.append(garbage)
    for t in rows:
        # An owner renamed during the watch (another path to the same object) says its
        # first name: the one an earlier inspect or sample showed.
        name = escape(t.name) + (f"\n[dim](was {escape(t.was[0])})[/dim]" if t.was else "")
        table.add_row(
            name, escape(t.type or "cycles"), f"{t.last_items:,}", fmt_bytes(t.last_bytes),
            _signed(t.bytes_per_min), f"{t.items_per_min:+,.0f}", _verdict(t.verdict),
        )
    return Group(title, table)


class LiveView:
    """The table of every watched process, redrawn each tick on stderr when it is a
    terminal; otherwise one plain line per process per tick (logs, CI)."""

    def __init__(self, *, file: TextIO | None = None, top: int = 8) -> None:
        self.file = file or sys.stderr
        self.top = top
        self._console = console(self.file)
        self._live: Live | None = None
        if self._console.is_terminal:
            self._live = Live(console=self._console, refresh_per_second=4, transient=True)
            self._live.start()

    def update(self, reports: tuple[GrowthReport, ...]) -> None:
        if self._live is not None:
            self._live.update(Group(*(owners_table(r, top=self.top) for r in reports)))
            return
        for r in reports:
            print(escaped(plain_line(r)), file=self.file, flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def plain_line(r: GrowthReport) -> str:
    """A sample's line where stderr is no terminal (logs, CI): RSS and its rate, and the owner
    growing most, or, where none grows, the largest one. The table's first row was said as
    "top owner" whatever it was: a 140 KiB cache growing by the payload's first imports
    (unknown) came before a 50 MiB list that did not grow."""
    shown = [t for t in r.owners if t.name not in _NOT_SHOWN]
    growing = [t for t in shown if t.verdict == GROWING]
    lead = growing[0] if growing else max(shown, key=lambda t: t.last_bytes, default=None)
    owner = ""
    if lead is not None:
        said = "growing most" if growing else "largest owner"
        owner = f" {said} {lead.name} {fmt_bytes(lead.last_bytes)} ({_rate(lead.bytes_per_min)}, {lead.verdict})"
    rss = f"RSS {fmt_bytes(r.rss.last_bytes)} ({_rate(r.rss.bytes_per_min)})"
    return f"leakhound: pid {r.pid} sample {r.samples}: {rss}{owner}"


def render_reports(reports: tuple[GrowthReport, ...], *, top: int = 10, file: TextIO | None = None,
                   ended: tuple[TargetEnded, ...] = ()) -> None:
    con = console(file)
    for gone in ended:
        con.print(f"[bold red]pid {gone.pid} {escape(gone.name)} ended ({gone.how.value}):[/bold red] "
                  f"{escape(gone.message)}")
    if not reports:
        con.print("no samples")
        return
    for report in reports:
        con.print(owners_table(report, top=top))
        growing_types = [t for t in report.types if t.verdict == "growing"][:5]
        if growing_types:
            con.print(
                "  growing types: "
                + ", ".join(f"{t.name} {t.items_per_min:+,.0f}/min" for t in growing_types)
            )
        for warning in report.warnings:
            con.print(f"  [yellow]warning:[/yellow] {warning}")
        render_findings(report.findings, pid=report.pid, file=file)
        if report.sites is not None:
            render_sites(report, file=file)


# Frames of a site shown on screen (the JSON has all the tracker kept), innermost first.
SITE_FRAMES = 3
SITES_SHOWN = 5


def _frame(file: str, line: int, function: str) -> str:
    return f"{file.rsplit('/', 1)[-1]}:{line} {function}"


def render_sites(report: GrowthReport, *, file: TextIO | None = None) -> None:
    """Where each growing owner's surviving bytes were allocated (``watch --sites``)."""
    con = console(file)
    tracking = report.sites
    assert tracking is not None
    for finding in report.findings:
        if finding.sites:
            con.print(sites_table(f"allocation sites of {escape(finding.owner)} (its bytes allocated during the "
                                  "watch and still alive, estimated from samples)", finding.sites))
    render_tracking(tracking, con=con)


def sites_table(title: str, sites: Sequence[AllocationSite]) -> Table:
    """The first sites with their share of them all (``title``: already escaped)."""
    total = sum(site.bytes for site in sites) or 1
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column("est. bytes", justify="right")
    table.add_column("share", justify="right")
    table.add_column("allocs", justify="right")
    table.add_column("stack (innermost first)")
    for site in sites[:SITES_SHOWN]:
        stack = " <- ".join(_frame(f.file, f.line, f.function) for f in site.stack[:SITE_FRAMES])
        table.add_row(fmt_bytes(site.bytes), f"{100.0 * site.bytes / total:.0f}%", f"{site.count:,}",
                      escape(stack))
    return table


def render_tracking(tracking: SiteTracking, *, con: Console) -> None:
    """The tracker's totals in a line, and its note."""
    expired = " [yellow]expired before it was read: no samples[/yellow]" if tracking.expired else ""
    con.print(f"  allocation sites: one sample per {fmt_bytes(tracking.mean_bytes)} allocated, "
              f"{tracking.sampled:,} sampled of {fmt_bytes(tracking.allocated_bytes)} allocated over "
              f"{tracking.seconds:.0f} s, {tracking.surviving:,} alive at the end "
              f"({fmt_bytes(tracking.attributed_bytes)} in owners, {fmt_bytes(tracking.not_attributed_bytes)} "
              f"not attributed); tracker's extra memory in the target {fmt_bytes(tracking.table_bytes)}{expired}")
    if tracking.note:
        con.print(f"  [yellow]allocation sites:[/yellow] {escape(tracking.note)}")


def report_document(reports: tuple[GrowthReport, ...], *, interrupted: bool = False,
                    ended: tuple[TargetEnded, ...] = ()) -> dict[str, Any]:
    """The final ``--json`` line of a watch (schema in docs/watch.md)."""
    return {
        "event": "report",
        "schema": WATCH_SCHEMA,
        "interrupted": interrupted,
        "ended": [{**asdict(gone), "how": gone.how.value} for gone in ended],
        "processes": [report_to_dict(r) for r in reports],
        "findings": [asdict(f) for r in reports for f in r.findings],
    }


def render_diff(diff: SnapshotDiff, *, top: int = 15, file: TextIO | None = None) -> None:
    """The rich view of ``leakhound diff`` (lives here with the other over-time views)."""
    con = console(file)
    con.print(
        f"[bold]pid {diff.before_pid}"
        + (f" -> {diff.after_pid}" if diff.after_pid != diff.before_pid else "")
        + f"[/bold]  {diff.seconds:.0f} s apart"
    )
    for d in (diff.rss, diff.heap, diff.trimmable):
        con.print(
            f"{d.name:10} {fmt_bytes(d.before_bytes)} -> {fmt_bytes(d.after_bytes)}  "
            f"({'+' if d.bytes >= 0 else ''}{fmt_bytes(d.bytes)}, {_rate(diff.per_minute(d.bytes))})"
        )
    for warning in diff.warnings:
        con.print(f"[yellow]warning:[/yellow] {warning}")
    for title, rows, count_label in (
        ("owners that grew most", diff.owners, "items"),
        ("types that grew most", diff.types, "objects"),
    ):
        table = Table(title=title, title_justify="left", show_edge=False)
        table.add_column("owner" if count_label == "items" else "type", overflow="fold")
        table.add_column(f"Δ {count_label}", justify="right")
        table.add_column("Δ bytes", justify="right")
        table.add_column("now", justify="right")
        table.add_column("per min", justify="right")
        for d in [r for r in rows if r.bytes or r.count][:top]:
            note = f" (only {d.only_in})" if d.only_in else f" (was {d.renamed_from})" if d.renamed_from else ""
            table.add_row(
                escape(f"{d.name}{note}"), f"{d.count:+,}", f"{'+' if d.bytes >= 0 else ''}{fmt_bytes(d.bytes)}",
                fmt_bytes(d.after_bytes), _rate(diff.per_minute(d.bytes)),
            )
        con.print(table)
