"""How a request ends when it does not simply answer: timeouts, a dying target, an interrupt.

Timeouts are definitive. When the CLI's wait runs out it tells the payload to stop (a
``cancel`` file in the private directory; on the agent socket, a ``cancel`` line) and waits
``CANCEL_GRACE`` seconds for its word: a ``Cancelled`` answer (it stopped at its next step and
released its lock), or its real result if it finished meanwhile. Only when neither comes is
the outcome unknown, and the error says so (``OutcomeUnknown``). A target that dies is
reported as what happened (``death.explain``), with whether leakhound was inside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from leakhound.attach import death
from leakhound.attach.channel import PrivateChannel
from leakhound.attach.process import alive, stopped
from leakhound.errors import AttachTimeout, OutcomeUnknown, PrivateDirTampered, TargetBlocked, TargetExited
from leakhound.interrupts import deferred
from leakhound.payload import wire

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


def _await_result(channel: PrivateChannel, pid: int, grace: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + grace
    while True:
        result = channel.read_json("result.json")
        if result is not None or not alive(pid) or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def _read_quietly(channel: PrivateChannel, name: str) -> dict[str, Any] | None:
    """For the words of another error (a death): a tampered file says nothing here."""
    try:
        return channel.read_json(name)
    except PrivateDirTampered:
        return None


def _inside(channel: PrivateChannel) -> str:
    progress = _read_quietly(channel, "progress.json") or {}
    if _read_quietly(channel, "started.json") is None:
        return "its bootstrap was queued in the process (injected, not yet reported started)"
    phase = str(progress.get("phase") or "start")
    return f"its payload was running inside the process (phase: {phase})"


def _unasked_cancel(channel: PrivateChannel, pid: int, result: dict[str, Any]) -> None:
    """A ``Cancelled`` answer for a cancel leakhound never asked for: the payload found a
    ``cancel`` file (or its directory gone) that someone else made."""
    if result.get("kind") == wire.KIND_CANCELLED and result.get("reason") == wire.CANCEL \
            and not channel.cancel_requested:
        raise PrivateDirTampered(
            f"process {pid}: the request was stopped by a cancel leakhound did not ask for (a `cancel` file "
            f"in its private directory, or the directory moved away, during {result.get('phase', '?')}): "
            f"something else, a process of the target's user, wrote into leakhound's private directory"
        )


def _why_silent(pid: int) -> str:
    if stopped(pid):
        return "the process is stopped: SIGSTOP, a job-control stop or a debugger; SIGCONT lets it go on"
    return "its payload thread did not get to run"


def wait_debugger(
    channel: PrivateChannel,
    pid: int,
    facts: death.ProcessFacts,
    wait: Callable[[], tuple[dict[str, Any], dict[str, Any]]],
    *,
    grace: float = CANCEL_GRACE,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``wait()`` for a debugger-started payload; on timeout cancel it and read its answer."""
    try:
        started, result = wait()
    except TargetBlocked:
        raise  # the bootstrap never ran; once it does, it finds its directory gone and stops
    except AttachTimeout as exc:
        channel.request_cancel()
        late = _await_result(channel, pid, grace)
        if late is not None:
            return channel.read_json("started.json") or {}, late
        if not alive(pid):
            raise death.explain(facts, inside=_inside(channel), doing="waiting for its answer") from None
        raise OutcomeUnknown(
            f"{exc}; leakhound told the request to stop, but the target did not confirm it within "
            f"{grace:.0f}s ({_why_silent(pid)}): it stops at its next step once it "
            f"runs, and a patch that has not landed by then never lands"
        ) from None
    except TargetExited:
        raise death.explain(facts, inside=_inside(channel), doing="waiting for its answer") from None
    except KeyboardInterrupt:
        channel.request_cancel()
        try:
            _await_result(channel, pid, INTERRUPT_GRACE)
        except PrivateDirTampered:
            pass
        raise
    _unasked_cancel(channel, pid, result)
    return started, result


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
            f"does too), but did not see it stop ({_why_silent(pid)}): it stops at its next step once its "
            f"thread runs"
        ) from None
    except TargetExited as exc:
        if alive(pid):
            raise
        # Refused at connect: the request never reached it.
        inside = None if "not listening" in str(exc) else "its agent was working on a request inside the process"
        raise death.explain(facts, inside=inside, doing="waiting for its agent's answer") from None
