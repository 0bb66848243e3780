"""``leakhound stacks``: what the worker's threads are doing, from py-spy (read-only).

py-spy reads the target's memory from outside (it pauses it for the instant of the read, no
code runs inside it), so it also works when the payload cannot run: a main thread stuck in a
system call, a target that refuses injection. ``dump_stacks`` is the core function other
commands can call for that.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any, TextIO

from leakhound.attach.process import resolve_target
from leakhound.attach.pyspy import py_spy_path
from leakhound.errors import AttachFailed, AttachTimeout, MethodUnavailable, PermissionDenied

STACKS_SCHEMA = "leakhound.stacks/1"


@dataclass(frozen=True)
class Frame:
    function: str
    filename: str
    line: int


@dataclass(frozen=True)
class ThreadStack:
    thread_id: int
    name: str
    os_thread_id: int
    active: bool
    owns_gil: bool
    frames: tuple[Frame, ...]


def _parse(doc: Any) -> tuple[ThreadStack, ...]:
    threads = []
    for t in doc if isinstance(doc, list) else ():
        frames = tuple(
            Frame(
                function=str(f.get("name", "?")),
                filename=str(f.get("filename", "?")),
                line=int(f.get("line", 0) or 0),
            )
            for f in t.get("frames", ())
        )
        threads.append(
            ThreadStack(
                thread_id=int(t.get("thread_id", 0) or 0),
                name=str(t.get("thread_name") or ""),
                os_thread_id=int(t.get("os_thread_id", 0) or 0),
                active=bool(t.get("active", False)),
                owns_gil=bool(t.get("owns_gil", False)),
                frames=frames,
            )
        )
    return tuple(threads)


def dump_stacks(pid: int, *, timeout: float = 20.0) -> tuple[ThreadStack, ...]:
    """Every Python thread's stack (innermost frame first)."""
    resolve_target(pid)
    exe = py_spy_path()
    if exe is None:
        raise MethodUnavailable(
            "py-spy not found", hint="Install it next to leakhound: `pip install py-spy`."
        )
    try:
        proc = subprocess.run(
            [exe, "dump", "--json", "--pid", str(pid)],
            capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise AttachTimeout(f"py-spy dump of process {pid} took more than {timeout:.0f}s") from None
    except OSError as exc:
        raise AttachFailed(f"cannot run py-spy: {exc}") from None
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().splitlines()
        last = message[-1] if message else f"exit code {proc.returncode}"
        if "ermission" in last or "ptrace" in last.lower():
            raise PermissionDenied(f"py-spy cannot read process {pid}: {last}")
        raise AttachFailed(f"py-spy dump of process {pid} failed: {last}")
    try:
        return _parse(json.loads(proc.stdout))
    except (ValueError, TypeError, AttributeError) as exc:
        raise AttachFailed(f"py-spy printed something unexpected: {exc}") from None


def stacks_document(pid: int, threads: tuple[ThreadStack, ...]) -> dict[str, Any]:
    from dataclasses import asdict

    return {"schema": STACKS_SCHEMA, "pid": pid, "threads": [asdict(t) for t in threads]}


def render_stacks(pid: int, threads: tuple[ThreadStack, ...], *, file: TextIO | None = None) -> None:
    from leakhound.render.console import console

    con = console(file)
    con.print(f"[bold]pid {pid}[/bold]: {len(threads)} Python threads")
    for t in threads:
        flags = ", ".join(f for f, on in (("active", t.active), ("holds the GIL", t.owns_gil)) if on)
        con.print(f"\n[bold]thread {t.name or t.thread_id}[/bold] (tid {t.os_thread_id}){' ' + flags if flags else ''}")
        for f in t.frames:
            con.print(f"  {f.function} ({f.filename}:{f.line})", markup=False)


def run(*, pid: int, timeout: float, as_json: bool) -> tuple[ThreadStack, ...]:
    threads = dump_stacks(pid, timeout=timeout)
    if as_json:
        from leakhound.render import json as json_render

        json_render.render_document(stacks_document(pid, threads))
    else:
        render_stacks(pid, threads)
    return threads
