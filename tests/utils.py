"""Spawning real target programs for integration tests (always killed afterwards), and
running the CLI as an on-call engineer does."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
# An unprivileged user the tests act as (the target's owner, an attacker): nobody.
NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
T = TypeVar("T")
# The console script of this venv.
LEAKHOUND = str(Path(sys.executable).with_name("leakhound"))


def wait_until(condition: Callable[[], T], *, timeout: float = 10.0, what: str = "") -> T:
    """``condition()`` once it is true, asked every 20 ms; AssertionError after ``timeout``
    seconds. For a state the target or the kernel reaches a moment later: a fixed sleep
    before an assertion is too short on a loaded machine and too long on a quiet one."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what or condition}"
        time.sleep(0.02)


def run_cli(*args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``leakhound ARGS`` in a process of its own: its exit code, stdout and stderr. ``env``:
    added to this environment; ``prefix``: the command it runs under (setpriv, prlimit)."""
    return subprocess.run([*(prefix or []), LEAKHOUND, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@dataclass
class Child:
    proc: subprocess.Popen[bytes]
    ready_file: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def report(self, *, refresh: bool = True, timeout: float = 10.0) -> dict[str, Any]:
        """Ask the target for fresh ground truth (SIGUSR1) and read it."""
        if refresh:
            return self.signal_and_report(signal.SIGUSR1, timeout)
        return json.loads(self.ready_file.read_text())

    def signal_and_report(self, sig: int, timeout: float = 10.0) -> dict[str, Any]:
        """Send ``sig`` (the target rewrites its report in answer) and read the new report."""
        before = self.ready_file.stat().st_mtime_ns
        os.kill(self.pid, sig)
        deadline = time.monotonic() + timeout
        while self.ready_file.stat().st_mtime_ns == before:
            if time.monotonic() > deadline:
                raise TimeoutError("target did not refresh its report")
            time.sleep(0.02)
        return json.loads(self.ready_file.read_text())


@contextlib.contextmanager
def spawn_target(
    fixture: str,
    tmp_path: Path,
    *,
    python: str | None = None,
    env: dict[str, str] | None = None,
    wait_for: Path | None = None,
    timeout: float = 30.0,
    prefix: list[str] | None = None,
    python_args: list[str] | None = None,
    stderr: Path | None = None,
) -> Iterator[Child]:
    """Start ``fixtures/FIXTURE.py`` (optionally under ``prefix``, e.g. setpriv to run it as
    another user; ``python_args`` before the script, e.g. ``-X dev``; its stderr to the file
    ``stderr``) and wait for its ready file."""
    ready = tmp_path / f"{fixture}.ready.json"
    # (an earlier run's in the same directory would be taken for this one's: its target read
    # while it still builds its heap)
    ready.unlink(missing_ok=True)
    full_env = {**os.environ, **(env or {})}
    full_env.pop("LEAKHOUND_READY_FILE", None)
    err = open(stderr, "wb") if stderr is not None else None  # noqa: SIM115 - the child's, closed below
    proc = subprocess.Popen(
        [*(prefix or []), python or sys.executable, *(python_args or []), str(FIXTURES / f"{fixture}.py"), str(ready)],
        env=full_env,
        stdin=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,
    )
    if err is not None:
        err.close()
    try:
        deadline = time.monotonic() + timeout
        while not ready.exists() or (wait_for is not None and not wait_for.exists()):
            if proc.poll() is not None:
                raise RuntimeError(f"fixture {fixture} exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"fixture {fixture} not ready after {timeout}s")
            time.sleep(0.05)
        yield Child(proc, ready)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def wait_for_agent_socket(pid: int, timeout: float = 10.0) -> str:
    """The path of the in-process agent's socket in ``pid`` (started with LEAKHOUND_AGENT=1),
    once it exists."""
    from leakhound.payload.agent_server import socket_path

    path = socket_path(pid)
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, "agent socket never appeared"
        time.sleep(0.05)
    return path


def agent_exchange(path: str, request: bytes, timeout: float, *, close_write: bool = False) -> bytes:
    """Everything the agent at ``path`` sends back for ``request``, up to its end of the
    connection (``close_write``: the request's end said by shutting the socket's write side)."""
    import socket  # noqa: PLC0415

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(request)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def block_size(obj: object) -> int:
    """sys.getsizeof(obj) as the blocks the allocators give it in this process (the payload's
    sizes.object_block): the size a walk counts for one object."""
    from leakhound.payload.sizes import object_block  # noqa: PLC0415

    return int(object_block(type(obj), sys.getsizeof(obj)))


def within(actual: float, expected: float, tolerance: float = 0.10) -> bool:
    return abs(actual - expected) <= tolerance * abs(expected)


def assert_only_the_payload_stays(modules: list[str]) -> None:
    """What an inspection may leave in a target's sys.modules: the payload package, loaded
    once under one private name and reused (no patch state, nothing of leakhound's CLI)."""
    assert all(m == "_leakhound_payload" or m.startswith("_leakhound_payload.") for m in modules), modules


@functools.cache
def gdb_calls_broken() -> str | None:
    """Why gdb cannot call a function in a process here (leakhound's own check, gdb.calls_broken),
    or None; None too where gdb is missing (those tests fail, as before, with that reason)."""
    from leakhound.attach.gdb import calls_broken, gdb_path  # noqa: PLC0415 - only the gdb tests ask

    path = gdb_path()
    return None if path is None else calls_broken(path)


def gdb_or_ptrace() -> str:
    """The method for tests written against gdb whose subject is not gdb (timeouts, a target's
    death, patches): gdb where it can call functions in a process here, else ptrace."""
    return "ptrace" if gdb_calls_broken() else "gdb"
