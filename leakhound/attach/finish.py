"""How a request ends when it does not simply answer: timeouts, a dying target, an interrupt.

Timeouts are definitive. When the CLI's wait runs out it tells the payload to stop (a
``cancel`` file in the private directory; on the agent socket, a ``cancel`` line) and waits
``CANCEL_GRACE`` seconds for its word: a ``Cancelled`` answer (it stopped at its next step and
released its lock), or its real result if it finished meanwhile. Only when neither comes is
the outcome unknown, and the error says so (``OutcomeUnknown``). A target that dies is
reported as what happened (``death.explain``), with whether leakhound was inside it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from leakhound.attach import death
from leakhound.attach.process import alive
from leakhound.errors import AttachTimeout, OutcomeUnknown, TargetBlocked, TargetExited
from leakhound.interrupts import deferred

T = TypeVar("T")

# Seconds the payload gets to confirm a cancel: it checks at every census step (a few ms) and
# polls the cancel file every 0.1 s; one uninterruptible step can take longer on a busy worker.
CANCEL_GRACE = 5.0
# After an interrupt the user wants leakhound gone: a short wait, then the directory goes
# (which the payload also takes as a cancel).
INTERRUPT_GRACE = 1.0


def held(inject: Callable[[], T]) -> T:
    """Run an injection with SIGINT/SIGTERM/SIGHUP held until it is over: unwinding while a
    debugger has the target stopped (gdb killed mid-call) could leave it stopped or changed."""
    with deferred():
        return inject()


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def request_cancel(directory: Path) -> None:
    """Tell the payload working from ``directory`` to stop at its next step."""
    try:
        fd = os.open(directory / "cancel", os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
    except OSError:
        pass


def _await_result(directory: Path, pid: int, grace: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + grace
    while True:
        result = _read(directory / "result.json")
        if result is not None or not alive(pid) or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def _inside(directory: Path) -> str:
    progress = _read(directory / "progress.json") or {}
    if _read(directory / "started.json") is None:
        return "its bootstrap was queued in the process (injected, not yet reported started)"
    phase = str(progress.get("phase") or "start")
    return f"its payload was running inside the process (phase: {phase})"


def wait_debugger(
    directory: Path,
    pid: int,
    facts: death.ProcessFacts,
    wait: Callable[[], tuple[dict[str, Any], dict[str, Any]]],
    *,
    grace: float = CANCEL_GRACE,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``wait()`` for a debugger-started payload; on timeout cancel it and read its answer."""
    try:
        return wait()
    except TargetBlocked:
        raise  # the bootstrap never ran; once it does, it finds its directory gone and stops
    except AttachTimeout as exc:
        request_cancel(directory)
        result = _await_result(directory, pid, grace)
        if result is not None:
            return _read(directory / "started.json") or {}, result
        if not alive(pid):
            raise death.explain(facts, inside=_inside(directory), doing="waiting for its answer") from None
        raise OutcomeUnknown(
            f"{exc}; leakhound told the request to stop, but the target did not confirm it within "
            f"{grace:.0f}s (its payload thread did not get to run): it stops at its next step once it "
            f"runs, and a patch that has not landed by then never lands"
        ) from None
    except TargetExited:
        raise death.explain(facts, inside=_inside(directory), doing="waiting for its answer") from None
    except KeyboardInterrupt:
        request_cancel(directory)
        _await_result(directory, pid, INTERRUPT_GRACE)
        raise


def wait_agent(
    pid: int, facts: death.ProcessFacts, ask: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """``ask()`` the in-process agent; its connection closing is the payload's cancel."""
    try:
        return ask()
    except AttachTimeout as exc:
        if not alive(pid):
            raise death.explain(facts, inside="its agent was working on a request inside the process",
                                doing="waiting for its agent's answer") from None
        raise OutcomeUnknown(
            f"{exc}; leakhound told the agent to stop the request (and closed the connection, which "
            f"does too), but did not see it stop: it stops at its next step once its thread runs"
        ) from None
    except TargetExited as exc:
        if alive(pid):
            raise
        # Refused at connect: the request never reached it.
        inside = None if "not listening" in str(exc) else "its agent was working on a request inside the process"
        raise death.explain(facts, inside=inside, doing="waiting for its agent's answer") from None
