"""Stacks: what the worker's threads are doing, from py-spy (read-only).

py-spy reads the target's memory from outside (it pauses it for the instant of the read, no
code runs inside it), so it also works when the payload cannot run: a main thread stuck in a
system call, a target that refuses injection. ``dump_stacks`` is the core function other
commands can call for that.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from leakhound.attach.process import resolve_target
from leakhound.attach.pyspy import py_spy_path
from leakhound.errors import AttachFailed, AttachTimeout, MethodUnavailable, PermissionDenied
from leakhound.model.stacks import Frame, Local, ThreadStack


def _parse(doc: Any) -> tuple[ThreadStack, ...]:
    threads = []
    for t in doc if isinstance(doc, list) else ():
        frames = tuple(
            Frame(
                function=str(f.get("name", "?")),
                filename=str(f.get("filename", "?")),
                line=int(f.get("line", 0) or 0),
                short_filename=str(f.get("short_filename") or f.get("filename", "?")),
                locals=tuple(
                    Local(name=str(v.get("name", "?")), repr=str(v.get("repr") or "?"), arg=bool(v.get("arg")))
                    for v in f.get("locals") or ()
                ),
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


def dump_stacks(pid: int, *, timeout: float = 20.0, with_locals: bool = False,
                native: bool = False) -> tuple[ThreadStack, ...]:
    """Every Python thread's stack (innermost frame first); ``with_locals``: each frame's local
    variables as py-spy reads them; ``native``: C, C++ and Cython frames too."""
    resolve_target(pid)
    exe = py_spy_path()
    if exe is None:
        raise MethodUnavailable(
            "py-spy not found", hint="Install it next to leakhound: `pip install py-spy`."
        )
    try:
        proc = subprocess.run(
            [exe, "dump", "--json", "--pid", str(pid), *(["--locals"] if with_locals else []),
             *(["--native"] if native else [])],
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
