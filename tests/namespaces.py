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


def _keep_checkout(setup: str, ready_dir: Path, needed: list[Path]) -> str:
    """``setup``, keeping the checkout visible where a fresh /tmp would hide it.

    A checkout under /tmp (a CI clone, say) holds the fixtures, the venv and leakhound
    itself (the agent's .pth imports it): a tmpfs mounted on /tmp would hide them all. The old
    /tmp is held aside first and the checkout bound back at its own path afterwards (the new
    /tmp made writable for the mountpoint a moment if it was mounted read-only)."""
    root = FIXTURES.parent.resolve()
    if not root.is_relative_to("/tmp") or not any(p.resolve().is_relative_to(root) for p in needed):
        return setup
    hold = ready_dir / ".old-tmp"
    hold.mkdir(exist_ok=True)
    q = shlex.quote
    rel = root.relative_to("/tmp")
    return (
        f"mount --rbind /tmp {q(str(hold))} && {setup} && "
        f"ro=$(awk '$2==\"/tmp\" {{print $4}}' /proc/self/mounts | tail -n1 | grep -c '^ro') ; "
        f"{{ [ \"$ro\" = 0 ] || mount -o remount,rw /tmp; }} && mkdir -p {q(str(root))} && "
        f"mount --rbind {q(str(hold / rel))} {q(str(root))} && "
        f"{{ [ \"$ro\" = 0 ] || mount -o remount,ro /tmp; }} && umount -l {q(str(hold))}"
    )


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
    setup = _keep_checkout(setup, ready_dir, [fixtures, Path(python or sys.executable)])
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
