"""Types shared by the attach methods."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from leakhound.model.names import Method

AttachLog = Callable[[str], None]


@dataclass(frozen=True)
class Injection:
    method: Method
    attach_stop_ms: float  # how long the target was stopped (0 when it never is)
    attempts: int = 1
