"""How every request to a target is made, decided once by a command and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from leakhound.attach import RemoteResult, run_request
from leakhound.attach.base import AttachLog
from leakhound.attach.channel import Partial, Progress
from leakhound.attach.deadline import FOLLOW_PROGRESS, Deadline
from leakhound.attach.process import Target
from leakhound.model.names import Method


def _quiet(line: str) -> None:
    pass


@dataclass(frozen=True)
class RequestOptions:
    """The way into the target, when to give up, where ``-v`` lines go, and whether to go
    ahead near the memory limit: the same for every request one command makes.

    ``timeout``: a hard wall-clock limit in seconds, or ``FOLLOW_PROGRESS``: given up when a
    request stops progressing, or at a ceiling by the target's RSS (attach/deadline.py).
    ``force``: go ahead with less headroom under the target's memory limit than a request may
    cost (HeadroomTooSmall)."""

    method: Method = Method.AUTO
    timeout: float = FOLLOW_PROGRESS
    log: AttachLog = field(default=_quiet, compare=False)
    force: bool = False

    def via(self, method: Method) -> RequestOptions:
        """The same options, into the target by ``method`` (the one ``auto`` chose)."""
        return replace(self, method=method)

    def within(self, timeout: float) -> RequestOptions:
        """The same options, with ``timeout``."""
        return replace(self, timeout=timeout)


#: The default of a snapshot: given up when it stops progressing (a multi-GB heap's census
#: outlasts any fixed limit short enough for a patch).
SNAPSHOT_REQUESTS = RequestOptions()
#: The default of short requests (a patch, a watch's or an export's sample): a minute each.
SHORT_REQUESTS = RequestOptions(timeout=60.0)


def ask(pid: int, doc: dict[str, Any], *, request: RequestOptions, target: Target | None = None,
        progress: Progress | None = None, on_partial: Partial | None = None, deadline: Deadline | None = None,
        force: bool = False) -> RemoteResult:
    """``doc`` answered by the payload in ``pid``, asked the way ``request`` says (attach's
    ``run_request``). ``force``: go ahead whatever the headroom, for a request that only
    reads or gives memory back. The answer is the target's to write: its caller decodes it
    (core/decode.py), its payload version first."""
    return run_request(pid, doc, method=request.method, timeout=request.timeout, log=request.log,
                       force=request.force or force, target=target, progress=progress, on_partial=on_partial,
                       deadline=deadline)
