"""The request's deadline (attach/deadline.py): a hard limit when --timeout is given, else the
request's progress within a ceiling by the target's RSS."""

from __future__ import annotations

import math
import threading

import pytest

from leakhound.attach import deadline as deadline_mod
from leakhound.attach.deadline import (
    CEILING_BASE,
    CEILING_MAX,
    CEILING_PER_GIB,
    FOLLOW_PROGRESS,
    STALL_ENV,
    STALL_SECONDS,
    Deadline,
    ceiling_for,
    stall_seconds,
)
from leakhound.payload import runner

GIB = 1 << 30


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_explicit_timeout_is_a_hard_wall_clock_whatever_progresses() -> None:
    clock = Clock()
    deadline = Deadline.fixed(60.0, clock=clock)
    assert not deadline.follows_progress
    for _ in range(59):
        clock.now += 1.0
        deadline.progressed("walk")
        assert not deadline.expired()
    clock.now += 1.0
    deadline.progressed("walk")
    assert deadline.expired()
    assert deadline.explain(42) == "no result from process 42 within 60s"
    assert deadline.payload_timeout() == 58.0


def test_a_request_that_keeps_progressing_goes_past_sixty_seconds() -> None:
    clock = Clock()
    deadline = Deadline.following_progress(6 * GIB, stall=30.0, clock=clock)
    for second in range(1, 200):  # a 6 GB worker's inspection took 129 s
        clock.now += 1.0
        if second % 20 == 0:
            deadline.progressed(f"walk {second}")
        assert not deadline.expired(), second


def test_no_progress_for_the_stall_window_expires_and_says_where_it_stopped() -> None:
    clock = Clock()
    deadline = Deadline.following_progress(GIB, stall=30.0, clock=clock)
    clock.now += 25.0
    deadline.progressed("graph 1,200,000")
    clock.now += 29.9
    assert not deadline.expired()
    assert deadline.left() == pytest.approx(0.1)
    clock.now += 0.1
    assert deadline.expired()
    message = deadline.explain(7)
    assert message.startswith("process 7 made no progress for 30s (last: graph 1,200,000)")
    assert STALL_ENV in message


def test_the_ceiling_holds_however_the_request_progresses() -> None:
    clock = Clock()
    deadline = Deadline.following_progress(2 * GIB, stall=30.0, clock=clock)
    assert deadline.limit == CEILING_BASE + 2 * CEILING_PER_GIB
    while clock.now - 1000.0 < deadline.limit - 1.0:
        clock.now += 1.0
        deadline.progressed("walk")
        assert not deadline.expired()
    clock.now += 1.0
    deadline.progressed("walk")
    assert deadline.expired()
    assert "ceiling" in deadline.explain(7) and "2.0 GiB" in deadline.explain(7)
    # the payload's own deadline is the ceiling less its margin: it holds if the CLI dies
    assert deadline.payload_timeout() == deadline.limit - 2.0


def test_leakhounds_own_work_on_a_partial_is_no_stall() -> None:
    """While the dominator pass runs the payload waits for its names and says nothing."""
    clock = Clock()
    deadline = Deadline.following_progress(GIB, stall=30.0, clock=clock)
    with deadline.hold():
        clock.now += 100.0
        assert not deadline.expired()
    assert not deadline.expired()  # the window starts again when the work ends
    clock.now += 30.0
    assert deadline.expired()


def test_a_known_wait_starts_the_stall_window_when_it_ends() -> None:
    """The main thread's time.sleep, 40 s more: no stall before it wakes, then the window."""
    clock = Clock()
    deadline = Deadline.following_progress(GIB, stall=30.0, clock=clock)
    deadline.waits_until(40.0)
    clock.now += 69.0
    assert not deadline.expired()
    clock.now += 1.0
    assert deadline.expired()
    # progress said meanwhile (the injection's, a hold's end) does not cut the wait short
    deadline = Deadline.following_progress(GIB, stall=30.0, clock=clock)
    deadline.waits_until(40.0)
    clock.now += 5.0
    deadline.progressed("injected")
    with deadline.hold():
        clock.now += 1.0
    clock.now += 63.0
    assert not deadline.expired()
    clock.now += 1.0
    assert deadline.expired()
    fixed = Deadline.fixed(20.0, clock=clock)  # an explicit --timeout stays what it is
    fixed.waits_until(40.0)
    clock.now += 20.0
    assert fixed.expired()


def test_a_hold_does_not_pass_the_ceiling() -> None:
    clock = Clock()
    deadline = Deadline.following_progress(0, stall=30.0, clock=clock)
    deadline.begin_hold()
    clock.now += CEILING_BASE
    assert deadline.expired()


def test_progress_from_other_threads() -> None:
    clock = Clock()
    deadline = Deadline.following_progress(GIB, stall=30.0, clock=clock)
    clock.now += 29.0
    thread = threading.Thread(target=deadline.progressed, args=("graph records",))
    thread.start()
    thread.join()
    clock.now += 29.0
    assert not deadline.expired()


@pytest.mark.parametrize(("rss", "ceiling"), [
    (0, CEILING_BASE),
    (GIB, CEILING_BASE + CEILING_PER_GIB),
    (6 * GIB, CEILING_BASE + 6 * CEILING_PER_GIB),  # 480 s for the worker that needed 129 s
    (115 * GIB, CEILING_MAX),
])
def test_the_ceiling_grows_with_the_heap(rss: int, ceiling: float) -> None:
    assert ceiling_for(rss) == ceiling


def test_the_stall_window_from_the_environment() -> None:
    assert stall_seconds({}) == STALL_SECONDS
    assert stall_seconds({STALL_ENV: "2.5"}) == 2.5
    for bad in ("", "0", "-1", "nan", "inf", "soon"):
        assert stall_seconds({STALL_ENV: bad}) == STALL_SECONDS


def test_for_request_reads_the_targets_rss(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadline_mod, "_resident", lambda pid: 3 * GIB)
    monkeypatch.delenv(STALL_ENV, raising=False)
    following = Deadline.for_request(1, FOLLOW_PROGRESS)
    assert following.follows_progress and following.stall == STALL_SECONDS
    assert following.limit == CEILING_BASE + 3 * CEILING_PER_GIB
    fixed = Deadline.for_request(1, 90.0)
    assert not fixed.follows_progress and fixed.limit == 90.0


@pytest.mark.parametrize(("sent", "kept"), [(58.0, 58.0), (3598.0, 3598.0), (7198.0, 7198.0),
                                            (1e9, runner.MAX_REQUEST_TIMEOUT), (math.inf, runner.MAX_REQUEST_TIMEOUT),
                                            (None, 60.0), (0, 60.0), (-5, 60.0), (math.nan, 60.0), ("60", 60.0)])
def test_the_payload_keeps_the_deadline_it_is_sent(sent: object, kept: float) -> None:
    """A long explicit --timeout is kept (cut to a day), not taken for a missing one."""
    assert runner._request_timeout({"timeout": sent}) == kept


def test_the_payload_says_its_progress_again_at_its_cancellation_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """A phase that counts nothing for a while (the objects held from C, waiting for the CLI's
    names) still reaches cancellation points: each says the last progress again (a beat)."""
    monkeypatch.setattr(runner, "BEAT_EVERY", 0.0)
    said: list[tuple[str, int]] = []
    progress, beat = runner._with_beat(lambda phase, done: said.append((phase, done)))
    stop = runner._Stop(60.0, lambda: False, every=0.0, beat=beat)
    progress("graph", 1000)
    assert not stop() and not stop()
    assert said == [("graph", 1000)] * 3
    cancelled = runner._Stop(60.0, lambda: True, every=0.0, beat=beat)
    assert cancelled()  # cancelled: no beat
    assert len(said) == 3


def test_the_agents_reads_wait_for_the_deadline_as_it_moves() -> None:
    """A read that began with 1 s left keeps waiting when progress (or a hold) from another
    thread moves the deadline on meanwhile: the answer at 1.5 s is read, not given up."""
    import socket  # noqa: PLC0415

    from leakhound.attach.agent import _Lines  # noqa: PLC0415

    ours, theirs = socket.socketpair()
    try:
        deadline = Deadline.following_progress(0, stall=1.0)
        lines = _Lines(ours, 1)
        threading.Timer(0.6, deadline.progressed, ("graph",)).start()
        threading.Timer(1.5, theirs.sendall, (b'{"result": {"ok": true}}\n',)).start()
        assert lines.line(deadline) == b'{"result": {"ok": true}}'
        # and with nothing more coming, the read gives up once the window has passed
        assert lines.line(deadline) is None
        assert deadline.expired()
    finally:
        ours.close()
        theirs.close()
