"""py-spy: reading the target's stacks from outside (no code runs in the target)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def py_spy_path() -> str | None:
    """py-spy on PATH, else next to this interpreter (a venv's bin/ is often not on PATH)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else None


def py_spy_dump(pid: int, *, timeout: float = 10.0) -> str:
    """What the target's threads are doing, as py-spy prints it (read-only, no injection)."""
    exe = py_spy_path()
    if exe is None:
        return "(py-spy is not installed; `pip install py-spy` to see where the threads are)"
    try:
        proc = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(py-spy dump unavailable: {exc})"
    return (proc.stdout or proc.stderr).strip()
