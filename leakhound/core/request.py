"""How every request to a target is made, decided once by a command and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from leakhound.attach.base import AttachLog
from leakhound.attach.deadline import FOLLOW_PROGRESS
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


#: The default of short requests (a patch, a watch's or an export's sample): a minute each.
SHORT_REQUESTS = RequestOptions(timeout=60.0)
