"""SIGINT, SIGTERM and SIGHUP to leakhound: unwind like Ctrl-C, so that every ``with`` and
``finally`` on the way out runs (the in-target request is cancelled, the private directory
removed), then exit with 128 + the signal number (docs/errors.md).

A signal that arrives inside ``deferred()`` (an injection in progress: a debugger attached to
the target, its registers being changed) waits until that section is over; unwinding in the
middle of one could leave the target stopped or half-changed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from leakhound.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_state: dict[str, int | None] = {"depth": 0, "pending": None, "received": None}
_depth_lock = threading.Lock()


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state["received"] is None:
        _state["received"] = signum
    if _state["depth"]:
        if _state["pending"] is None:
            _state["pending"] = signum
        return
    raise Interrupted(signum)


def install() -> None:
    """Handle the three signals (not one leakhound was started with ignored, e.g. nohup)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _handler)


def received() -> int | None:
    """The first of the three signals this process got since ``install()``, if any."""
    return _state["received"]


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP until the block is over, then act on the first one."""
    with _depth_lock:  # watch injects from several threads at once
        _state["depth"] = (_state["depth"] or 0) + 1
    try:
        yield
    finally:
        with _depth_lock:
            _state["depth"] = (_state["depth"] or 1) - 1
            pending = _state["pending"]
            if not _state["depth"] and pending is not None:
                _state["pending"] = None
            else:
                pending = None
        if pending is not None:
            raise Interrupted(pending)
