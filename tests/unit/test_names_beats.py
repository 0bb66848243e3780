"""The payload's wait for the CLI's owner paths (runner._receive_paths): it follows the CLI's
beats, and gives up a grace after the last one, never past the request's deadline."""

from __future__ import annotations

import time
from typing import Any

import pytest

from leakhound.payload import runner, wire


class _Exchange:
    """The CLI's replies as ``(seconds from the start, doc)``; the debugger path's way: the last
    one posted is what is read, until the next."""

    def __init__(self, replies: list[tuple[float, dict[str, Any]]]) -> None:
        self.replies = replies
        self.started = time.monotonic()

    def receive(self, name: str, stop: Any, until: float) -> dict[str, Any] | None:
        assert name == wire.REPLY_NAMES
        while time.monotonic() < until:
            now = time.monotonic() - self.started
            posted = [doc for at, doc in self.replies if at <= now]
            if posted:
                return posted[-1]
            time.sleep(0.005)
        return None


class _Stop:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds


@pytest.fixture(autouse=True)
def _short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "NAMES_BEAT_GRACE", 0.5)


def test_beats_keep_the_payload_waiting_past_its_own_wait() -> None:
    beats = [(0.2 * k, wire.names_working(k)) for k in range(1, 10)]
    exchange = _Exchange([*beats, (2.0, {"paths": [[1, 2]]})])
    assert runner._receive_paths(exchange, _Stop(30), wait=0.3) == {"paths": [[1, 2]]}


def test_the_wait_ends_a_grace_after_the_last_beat() -> None:
    exchange = _Exchange([(0.1 * k, wire.names_working(k)) for k in range(1, 6)])  # the last at 0.5 s
    started = time.monotonic()
    assert runner._receive_paths(exchange, _Stop(30), wait=0.2) is None
    assert 0.5 + 0.5 <= time.monotonic() - started < 0.5 + 0.5 + 0.5


def test_beats_never_carry_the_wait_past_the_deadline() -> None:
    exchange = _Exchange([(0.1 * k, wire.names_working(k)) for k in range(1, 100)])
    started = time.monotonic()
    assert runner._receive_paths(exchange, _Stop(2.0), wait=0.2) is None  # the deadline less 1 s
    assert time.monotonic() - started < 1.5
