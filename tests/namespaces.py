"""Targets in their own mount and pid namespaces (`unshare`), the stand-in for a container.

The target gets a private tmpfs on /tmp (nothing leakhound writes to its own /tmp is visible
there) and its own pid numbering; its ready file lives in a directory both sides see (under
/run, not /tmp). The child's ``pid`` is the target's pid as leakhound sees it (the host's).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.utils import FIXTURES, Child


@dataclass
class NamespacedChild(Child):
    host_pid: int = 0

    @property
    def pid(self) -> int:
        return self.host_pid

    def inside(self, path: str) -> Path:
        """``path`` as the target sees it, reached from here."""
        return Path(f"/proc/{self.host_pid}/root{path}")


@contextlib.contextmanager
def shared_dir() -> Iterator[Path]:
    """A directory outside /tmp, seen by both sides, writable by any target user."""
    path = Path(tempfile.mkdtemp(prefix="leakhound-ns-test-", dir="/run" if os.access("/run", os.W_OK) else None))
    os.chmod(path, 0o777)
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)


@contextlib.contextmanager
def spawn_in_namespaces(
    fixture: str,
    ready_dir: Path,
    *,
    env: dict[str, str] | None = None,
    as_init: bool = False,
    setup: str = "mount -t tmpfs tmpfs /tmp",
    prefix: list[str] | None = None,
    python: str | None = None,
    fixtures: Path = FIXTURES,
    timeout: float = 30.0,
) -> Iterator[NamespacedChild]:
    """Run ``fixtures/FIXTURE.py`` under ``unshare -m -p -f --mount-proc`` after ``setup``
    (shell commands run as root inside the new namespaces). ``as_init``: the target is pid 1
    of its namespace, as in many containers; otherwise a shell is, and the target a child."""
    ready = ready_dir / f"{fixture}.ready.json"
    argv = [*(prefix or []), python or sys.executable, str(fixtures / f"{fixture}.py"), str(ready)]
    script = f"{setup} && {'exec ' if as_init else ''}{shlex.join(argv)}"
    full_env = {**os.environ, **(env or {})}
    full_env.pop("LEAKHOUND_READY_FILE", None)
    proc = subprocess.Popen(
        ["unshare", "-m", "-p", "-f", "--mount-proc", "sh", "-c", script],
        env=full_env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"fixture {fixture} in namespaces exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"fixture {fixture} not ready after {timeout}s")
            time.sleep(0.05)
        descendants = psutil.Process(proc.pid).children(recursive=True)
        target = [p for p in descendants if str(fixtures) in " ".join(p.cmdline()) and "python" in p.exe()]
        assert len(target) == 1, target
        yield NamespacedChild(proc, ready, host_pid=target[0].pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
