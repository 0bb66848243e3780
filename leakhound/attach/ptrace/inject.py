"""The injection, CLI side: plan, then hand the stop to the tracer helper and read its outcome.

The helper (``stop.py``) is a separate, short-lived process in its own session, so whatever
happens to this process (SIGKILL at any instant, SIGTERM, Ctrl-C) the stop is finished, the
thread restored and detached, and the private directory removed. This side only waits for
the outcome and turns it into a leakhound error.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from leakhound.attach.base import AttachLog, Injection
from leakhound.attach.private_dir import PrivateDir
from leakhound.attach.ptrace.plan import plan
from leakhound.attach.ptrace.stop import LATE_STOP_TIMEOUT
from leakhound.errors import (
    AttachFailed,
    AttachTimeout,
    LeakhoundError,
    PermissionDenied,
    TargetBusy,
    TargetExited,
    TargetNotFound,
    TracerStuck,
)
from leakhound.model.names import Method

_ERRORS: dict[str, type[LeakhoundError]] = {
    "AttachFailed": AttachFailed,
    "AttachTimeout": AttachTimeout,
    "PermissionDenied": PermissionDenied,
    "TargetBusy": TargetBusy,
    "TargetExited": TargetExited,
    "TargetNotFound": TargetNotFound,
    "TracerStuck": TracerStuck,
}
_HERE = Path(__file__).resolve().parent
# The helper is run by this text (from the environment, so the command line shows only
# "python -I -S -c ..."): it imports the ptrace package's stdlib-only modules without running
# leakhound's package __init__ files (no third-party imports, a fast start).
_BOOT = """
import os, sys, types
root = os.environ['LH_PTRACE_ROOT']
for name in ('leakhound', 'leakhound.attach', 'leakhound.attach.ptrace'):
    module = types.ModuleType(name)
    module.__path__ = [os.path.join(root, *name.split('.'))]
    sys.modules[name] = module
from leakhound.attach.ptrace import stop
stop.main()
"""


class _LiveHelpers:
    """The tracer helpers still alive (janitors of a private directory: each keeps its stdin
    open while this process lives), reaped on the next injection. Every thread that injects
    shares them (``watch P1 ... P8`` runs one per target): under a lock, so two threads never
    reap the same helper (``list.remove``: ValueError in 2 of 8 runs of an 8-target watch)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._alive: list[subprocess.Popen[bytes]] = []

    def reap(self) -> None:
        with self._lock:
            self._alive = [h for h in self._alive if h.poll() is None]

    def keep(self, helper: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._alive.append(helper)

    def __len__(self) -> int:
        with self._lock:
            return len(self._alive)


_HELPERS = _LiveHelpers()


def _spawn(pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    env = {"LH_PTRACE_ROOT": str(_HERE.parents[2]), "LH_PTRACE_BOOT": _BOOT}
    if "LEAKHOUND_PTRACE_TEST" in os.environ:
        env["LEAKHOUND_PTRACE_TEST"] = os.environ["LEAKHOUND_PTRACE_TEST"]
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", "import os; exec(os.environ['LH_PTRACE_BOOT'])"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        pass_fds=pass_fds,  # the private directory and its parent: it never opens them by path
        start_new_session=True,  # not in our process group: Ctrl-C and kill -- -PGID miss it
    )


def _outcome(helper: subprocess.Popen[bytes], wait: float, log: AttachLog) -> dict[str, Any]:
    assert helper.stdout is not None
    deadline = time.monotonic() + wait
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(helper.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TracerStuck(
                    f"the ptrace helper (pid {helper.pid}) has not finished within {wait:.0f}s; it "
                    "waits for the main thread to stop, to put it back, and exits by itself"
                )
            if not selector.select(remaining):
                continue
            chunk = os.read(helper.stdout.fileno(), 65536)
            if not chunk:
                code = helper.wait()
                raise AttachFailed(f"the ptrace helper exited ({code}) without an outcome")
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                doc = json.loads(line)
                if "log" in doc:
                    log(str(doc["log"]))
                elif "outcome" in doc:
                    return dict(doc["outcome"])


def _send(helper: subprocess.Popen[bytes], doc: dict[str, Any]) -> None:
    assert helper.stdin is not None
    helper.stdin.write(json.dumps(doc).encode() + b"\n")
    helper.stdin.flush()


def _directory(private: PrivateDir | None, path: str | None, payload_timeout: float) -> dict[str, Any]:
    """The first line to the helper: the private directory as the descriptors it inherits
    and the identity they must have (the path only for its log)."""
    if private is None:
        return {"private_dir": None}
    return {"private_dir": path or private.name, "dir_fd": private.fd, "parent_fd": private.parent_fd,
            "name": private.name, "dev": private.dev, "ino": private.ino, "payload_timeout": payload_timeout}


def inject(
    pid: int, code: str, *, timeout: float, log: AttachLog, private: PrivateDir | None = None,
    private_path: str | None = None, payload_timeout: float = 60.0,
) -> Injection:
    """Queue ``code`` as a pending call in ``pid``. ``private``: the request's private
    directory, which the helper removes if this process dies first (handed over as inherited
    descriptors; ``private_path`` names it in the helper's log; ``payload_timeout`` is how
    long the payload may still write into it)."""
    _HELPERS.reap()
    # The helper first (it starts while the plan is made), told the directory at once: if we
    # die from here on, it is removed.
    helper = _spawn(() if private is None else (private.fd, private.parent_fd))
    assert helper.stdin is not None and helper.stdout is not None
    _HELPERS.keep(helper)
    try:
        _send(helper, _directory(private, private_path, payload_timeout))
        try:
            plan_ = plan(pid)
        except BaseException:
            _send(helper, {"abandon": True})  # we carry on (gdb, say): the directory stays ours
            raise
        log(
            f"ptrace: {plan_.python_object}: Py_AddPendingCall={plan_.add_pending_call:#x} "
            f"PyRun_SimpleString={plan_.run_simple_string:#x} syscall={plan_.syscall_insn:#x}, "
            f"{len(plan_.pending_ranges)} pending-call ranges; tracer helper pid {helper.pid}"
        )
        _send(helper, {"plan": plan_.to_json(), "code": code, "timeout": timeout})
        # Enough for every attempt, plus a late stop's wait.
        outcome = _outcome(helper, timeout + LATE_STOP_TIMEOUT + 5.0, log)
    except BrokenPipeError:
        raise AttachFailed(f"the ptrace helper exited ({helper.wait()}) before it read the request") from None
    finally:
        helper.stdout.close()
        if private is None:
            helper.stdin.close()  # it exits once its outcome is out
        # Otherwise stdin stays open while this process lives: its end tells the helper
        # (the private directory's janitor) that the CLI is gone.
    if outcome.get("ok"):
        return Injection(method=Method.PTRACE, attach_stop_ms=float(outcome["stop_ms"]),
                         attempts=int(outcome["attempts"]))
    error = _ERRORS.get(str(outcome.get("kind")), AttachFailed)
    raise error(str(outcome.get("message")))
