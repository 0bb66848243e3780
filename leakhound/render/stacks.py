"""Rendering thread stacks (``leakhound stacks``) as text or the stacks JSON document."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, TextIO

from rich.markup import escape

from leakhound.model.stacks import STACKS_SCHEMA, ThreadStack
from leakhound.model.units import count
from leakhound.render.console import console


def stacks_document(pid: int, threads: tuple[ThreadStack, ...]) -> dict[str, Any]:
    return {"schema": STACKS_SCHEMA, "pid": pid, "threads": [asdict(t) for t in threads]}


def render_stacks(pid: int, threads: tuple[ThreadStack, ...], *, full_paths: bool = False,
                  file: TextIO | None = None) -> None:
    con = console(file)
    con.print(f"[bold]pid {pid}[/bold]: {count(len(threads), 'Python thread')}")
    for t in threads:
        flags = ", ".join(f for f, on in (("active", t.active), ("holds the GIL", t.owns_gil)) if on)
        name = escape(str(t.name or t.thread_id))
        con.print(f"\n[bold]thread {name}[/bold] (tid {t.os_thread_id}){' ' + flags if flags else ''}")
        for f in t.frames:
            path = f.filename if full_paths or not f.short_filename else f.short_filename
            con.print(f"  {f.function} ({path}:{f.line})", markup=False)
            for v in f.locals:
                con.print(f"      {v.name}{' (arg)' if v.arg else ''} = {v.repr}", markup=False)
