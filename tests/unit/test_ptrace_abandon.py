"""A Py_AddPendingCall that outlives CALL_TIMEOUT (tracee.Tracee._abandon): abandoned only
where it waits for the pending-calls lock (nothing queued yet); a thread waking a waiter (it
queued the call and is releasing the lock) is let finish. The thread's stops are scripted:
the real call never waits long enough here to be interrupted."""

from __future__ import annotations

import signal

import pytest

from leakhound.attach.ptrace import tracee as t

_TRAP = (signal.SIGSEGV << 8) | 0x7F  # a signal-delivery stop for SIGSEGV (the return to pc 0)
_INTERRUPTED = (t._PTRACE_EVENT_STOP << 16) | (signal.SIGTRAP << 8) | 0x7F


def _regs(**fields: int) -> t.Regs:
    regs = t.Regs()
    for name, value in fields.items():
        setattr(regs, name, value)
    return regs


class Scripted(t.Tracee):
    """A tracee whose stops and registers come from a script: (status, regs) per wait."""

    def __init__(self, stops: list[tuple[int, t.Regs]]) -> None:
        super().__init__(0)
        self.stops = stops
        self.current = t.Regs()
        self.requests: list[int] = []

    def call(self, request: int, addr: int = 0, data: int = 0) -> int:
        self.requests.append(request)
        return 0

    def wait(self, timeout: float) -> int | None:
        status, self.current = self.stops.pop(0)
        return status

    def get_regs(self) -> t.Regs:
        return self.current


def test_a_call_waiting_for_the_lock_is_abandoned() -> None:
    waiting = _regs(orig_rax=t.SYS_FUTEX, rsi=9 | 128, rip=0x1234)  # FUTEX_WAIT_BITSET, private
    assert Scripted([(_INTERRUPTED, waiting)])._abandon(deadline=0.0) is None


def test_a_call_waking_a_waiter_is_let_finish_and_returns_its_value() -> None:
    waking = _regs(orig_rax=t.SYS_FUTEX, rsi=1 | 128, rip=0x1234)  # FUTEX_WAKE, private
    returned = _regs(rip=0, rax=0)
    tracee = Scripted([(_INTERRUPTED, waking), (_TRAP, returned)])
    assert tracee._abandon(deadline=1e18) == 0
    assert t._PTRACE_CONT in tracee.requests


def test_a_call_that_never_returns_outside_a_lock_wait_fails_without_saying_it_was_not_queued() -> None:
    running = _regs(orig_rax=t.NO_SYSCALL, rip=0x1234)
    with pytest.raises(t.Abort, match="may be queued"):
        Scripted([(_INTERRUPTED, running)])._abandon(deadline=0.0)


def test_a_call_parked_on_a_pymutex_is_never_abandoned_and_returns_its_value() -> None:
    """3.13+ (plan.lock_parks): a PyMutex wait parks the thread (a wait entry on its stack,
    the GIL let go): registers restored there, the target would run corrupted. It is waited
    for, however long its futex wait lasts within PARKED_CALL_TIMEOUT."""
    parked = _regs(orig_rax=t.SYS_FUTEX, rsi=9 | 128, rip=0x1234)
    returned = _regs(rip=0, rax=0)
    tracee = Scripted([(_INTERRUPTED, parked), (_INTERRUPTED, parked), (_TRAP, returned)])
    assert tracee._abandon(deadline=1e18, abandon_lock_wait=False) == 0
    assert tracee.requests.count(t._PTRACE_CONT) == 2


def test_a_parked_call_past_its_timeout_fails_without_saying_it_was_not_queued() -> None:
    parked = _regs(orig_rax=t.SYS_FUTEX, rsi=9 | 128, rip=0x1234)
    with pytest.raises(t.Abort, match="may be queued"):
        Scripted([(_INTERRUPTED, parked)])._abandon(deadline=-t.PARKED_CALL_TIMEOUT - 1.0, abandon_lock_wait=False)
