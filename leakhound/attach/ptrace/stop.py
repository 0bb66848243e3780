"""The tracer helper: the one process that ever stops the target (standard library only).

``inject.py`` starts it as ``python -I -S`` in a session of its own, hands it the plan and
the code on stdin and reads JSON lines back: ``{"log": ...}`` and one ``{"outcome": ...}``.
It does the whole stop (seize, save, mmap, write, ``Py_AddPendingCall``, restore, detach)
and finishes it whatever happens to the CLI:

- it is not in the CLI's process group or session, so Ctrl-C, Ctrl-\\, a hang-up and
  ``kill -- -PGID`` do not reach it, and it ignores SIGINT, SIGTERM, SIGHUP, SIGQUIT and
  SIGPIPE anyway; a SIGKILL of the CLI kills only the CLI;
- it blocks every signal during the stop and restores the thread on any error (``finally``);
- it is small (no leakhound imports), its runtime is bounded (the stop's timeouts), and it
  asks the OOM killer to pass it over (``oom_score_adj`` -1000, when allowed); it runs the
  stop at nice -10 when allowed (a stop lasts as long as the tracer waits for a CPU);
- it never sets ``PTRACE_O_EXITKILL``: if it dies anyway, the kernel detaches the thread.

After the stop it stays as the janitor of the request's private directory: when the CLI
exits without removing it (killed), it waits for the payload to finish (``result.json``,
the target gone, or the request's timeout) and removes it. The bootstrap string sits in a
page mapped in the target; the string itself starts by listing that page for the payload
to unmap (it is compiled before it runs; bootstrap_text), so a bootstrap that runs late,
after a timeout, leaves nothing either (attach/bootstrap_page.py).
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from leakhound.attach.bootstrap_page import HANDBACK_SIGNAL, bootstrap_text, handback_handler, page_size_for
from leakhound.attach.private_dir import DIR_FLAGS, PrivateDir
from leakhound.attach.ptrace import tracee as _t
from leakhound.attach.ptrace import trampoline
from leakhound.payload import wire

_RETRIES = 30
_STACK_SCAN = 512
# After an abort with the thread running but still ours (its stop never came: in
# uninterruptible sleep, say), how long to wait for that stop before exiting, which lets it
# go (a seized thread with a stop requested is released when its tracer exits).
LATE_STOP_TIMEOUT = 30.0
_PROT_RW = 0x1 | 0x2
_SYS_MPROTECT = 10
_MAP_PRIVATE_ANON = 0x02 | 0x20
_IGNORED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE,
            signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1, signal.SIGUSR2)
STEPS = ("start", "seized", "saved", "mapped", "written", "called", "restored", "detached", "reported")

Hook = Callable[[str], None]


def _no_hook(_: str) -> None:
    pass


def _stack_words(pid: int, rsp: int, short: int) -> list[int]:
    """The words at the top of the stopped thread's stack: _STACK_SCAN bytes of it, or
    ``short`` where fewer are mapped (OSError if not even those)."""
    try:
        stack = _t.read_memory(pid, rsp, _STACK_SCAN)
    except OSError:
        stack = _t.read_memory(pid, rsp, short)
    return [int.from_bytes(stack[i:i + 8], "little") for i in range(0, len(stack) - 7, 8)]


def may_hold_pending_lock(pid: int, regs: _t.Regs, ranges: list[tuple[int, int]]) -> str:
    if _inside(regs.rip, ranges):
        return f"main thread at {regs.rip:#x}, in the pending-call code"
    if regs.orig_rax != _t.NO_SYSCALL:
        return ""  # blocked in a system call: it holds no pending-calls lock (see __init__)
    for word in _stack_words(pid, regs.rsp, 64):
        if _inside(word, ranges):
            return f"main thread called from the pending-call code ({word:#x} on its stack)"
    return ""


# An idle main thread blocked in epoll_wait(2) for longer than this (ms; or with no timeout),
# called from CPython's select module, is woken as the bootstrap is queued (idle_wait).
WAKE_AFTER_MS = 200
_SYS_EPOLL_WAIT = 232
_SYS_EPOLL_PWAIT = 281
_NEG = 1 << 64
_EINTR = _NEG - 4  # rax: -EINTR, what an epoll_wait the stop interrupted returns
# -ERESTARTSYS, -ERESTARTNOINTR, -ERESTARTNOHAND, -ERESTART_RESTARTBLOCK, -EINTR: a system
# call the stop interrupted (the kernel restarts the first four as the thread resumes)
_INTERRUPTED = (_NEG - 512, _NEG - 513, _NEG - 514, _NEG - 516, _EINTR)


def _caller(pid: int, regs: _t.Regs, plan: dict[str, Any]) -> str:
    """Who made the system call: "select" (CPython's select module, or the python object),
    "lock" (CPython's lock wait), "semlock" (multiprocessing's semaphores), "other" (any
    other code but libc's: a C library's), or "" (not found).

    The caller's return address is above libc's own frames, which keep words nobody wrote
    for this call (padding; the upper half of a 64-bit slot a 32-bit argument was saved in,
    the descriptor below a stale pointer's high half: 0x7f1a00000003), and such a word may
    point into some library's code. So the first word that is a return address is taken:
    one just after a call instruction, whose destination (through a PLT stub or a GOT slot)
    is libc's code or that of the object the thread is stopped in, or unknown (a call
    through a register, libffi's); only where there is none, the first word that points into
    code outside libc at all."""
    def kind_of(word: int) -> str:
        return next((kind for key, kind in _CALLERS if _inside(word, plan.get(key) or ())), "")

    try:
        words = _stack_words(pid, regs.rsp, 128)
    except OSError:
        return ""
    into = [*(plan.get("libc_code_ranges") or ()),
            *(r for key in ("wake_ranges", "other_code_ranges") for r in plan.get(key) or ()
              if r[0] <= regs.rip < r[1])]
    found = [(word, kind) for word in words if (kind := kind_of(word))]
    if into:
        for word, kind in found:
            dest = _call_destination(pid, word)
            if dest == _INDIRECT or (dest is not None and _inside(dest, into)):
                return kind
    return found[0][1] if found else ""


# The plan's ranges a caller's return address may lie in, in the order they are tried (a lock
# wait is CPython's code too), and what each says of it.
_CALLERS = (("lock_wait_ranges", "lock"), ("wake_ranges", "select"), ("semlock_ranges", "semlock"),
            ("other_code_ranges", "other"))


def _inside(address: int, ranges: Any) -> bool:
    return any(lo <= address < hi for lo, hi in ranges)


_MASK = (1 << 64) - 1
_INDIRECT = -1


def _call_destination(pid: int, word: int) -> int | None:
    """Where the call instruction that ends at ``word`` went: ``call rel32``'s destination
    (where that is a PLT stub, the address in its GOT slot), the address in ``call
    *[rip+disp32]``'s GOT slot, _INDIRECT for a call through a register or other memory (not known
    here), None where no call instruction ends there (or a read fails)."""
    try:
        code = _t.read_memory(pid, word - 7, 7)
        if code[2] == 0xE8:  # call rel32
            dest = (word + int.from_bytes(code[3:7], "little", signed=True)) & _MASK
            return _plt_destination(pid, dest) or dest
        if code[1] == 0xFF and code[2] == 0x15:  # call *[rip+disp32]
            slot = (word + int.from_bytes(code[3:7], "little", signed=True)) & _MASK
            return int.from_bytes(_t.read_memory(pid, slot, 8), "little")
    except OSError:
        return None
    return _INDIRECT if _indirect_call_ends(code) else None


def _indirect_call_ends(code: bytes) -> bool:
    """Whether an indirect call (``call`` FF /2, through a register or memory other than
    [rip+disp32], with or without a REX prefix) ends at the end of ``code`` (7 bytes)."""
    for length in range(2, 8):
        at = 7 - length
        rex = 0x40 <= code[at] <= 0x4F
        op = at + rex
        if op + 1 >= 7 or code[op] != 0xFF:
            continue
        modrm = code[op + 1]
        mod, reg, rm = modrm >> 6, (modrm >> 3) & 7, modrm & 7
        if reg != 2 or (mod == 0 and rm == 5):
            continue
        size = 2 + (rm == 4 and mod != 3) + {0: 0, 1: 1, 2: 4, 3: 0}[mod]
        if mod == 0 and rm == 4 and code[op + 2] & 7 == 5:
            size += 4  # SIB with no base: disp32
        if rex + size == length:
            return True
    return False


def _plt_destination(pid: int, stub: int) -> int:
    """Where the PLT stub at ``stub`` jumps (the address in its GOT slot; 0: not a stub): ``jmp
    *[rip+disp32]``, after an ``endbr64`` and a ``bnd`` prefix where there are."""
    try:
        code = _t.read_memory(pid, stub, 16)
    except OSError:
        return 0
    at = 4 if code[:4] == b"\xf3\x0f\x1e\xfa" else 0  # endbr64
    at += code[at] == 0xF2  # bnd
    if code[at:at + 2] != b"\xff\x25":
        return 0
    slot = (stub + at + 6 + int.from_bytes(code[at + 2:at + 6], "little", signed=True)) & _MASK
    return int.from_bytes(_t.read_memory(pid, slot, 8), "little")


def _epoll_timeout(regs: _t.Regs) -> int | None:
    """The timeout (ms, -1: none) of the epoll_wait the stop interrupted (EINTR), or None
    where the thread is not in one as expected (or in one with a signal mask of its own to
    put back: epoll_pwait's fifth argument)."""
    if regs.rax != _EINTR or regs.orig_rax not in (_SYS_EPOLL_WAIT, _SYS_EPOLL_PWAIT):
        return None
    if regs.orig_rax == _SYS_EPOLL_PWAIT and regs.r8:
        return None
    return _int_ms(regs.r10)


def _int_ms(register: int) -> int:
    """A timeout argument (a C int of milliseconds, -1: none) from its 64-bit register."""
    timeout = int(register) & 0xFFFFFFFF
    return timeout - (1 << 32) if timeout >= 1 << 31 else timeout


def _waits(timeout: int) -> str:
    return "no timeout" if timeout < 0 else f"{timeout} ms"


# The blocking calls a main thread at rest may sit in, with the GIL let go, that the stop may
# run the bootstrap inside (call_in_wait): reads and receives (a multiprocessing pool's
# worker, a queue consumer on a socket), accept, waiting for a child, poll and select, an
# event loop's epoll_wait, pause(); and a futex wait of multiprocessing's SemLock. No other
# futex wait (the GIL's own among CPython's: a second wait for the GIL inside the first would
# break its condition variable; a C library's may hold a lock of libc's) nor sleeps
# (time.sleep is waited for: process.main_thread_sleep).
_CALL_IN = {0: "read", 7: "poll", 23: "select", 34: "pause", 43: "accept", 45: "recvfrom", 47: "recvmsg",
            61: "wait4", 232: "epoll_wait", 247: "waitid", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait",
            288: "accept4"}
_SYS_POLL, _SYS_PSELECT6 = 7, 270
# A poll(2) the kernel restarts after a stop or a signal is restart_syscall(2) from then on (its
# restart block): pyzmq's recv() was inspected once, then never again (the safe-point wait).
_SYS_RESTART = 219
# How many words up the stack a return address into libc's poll() is looked for (glibc 2.41
# and later make a cancellable call's syscall in a helper of their own, called from poll())
_POLL_WORDS = 16


def _restarts_poll(pid: int, regs: _t.Regs, plan: dict[str, Any]) -> bool:
    """Whether the restart_syscall the thread is in restarts a poll (a sleep's and a timed
    futex wait's, the GIL's among them, are restarted so too: never taken for one): its
    syscall instruction is in libc's poll(), or, the syscall made by libc's code elsewhere,
    one of the first words of its stack is a return address into poll() (just after a call
    instruction)."""
    ranges = plan.get("poll_ranges") or ()
    if not ranges:
        return False
    if _inside(regs.rip, ranges):
        return True
    if not _inside(regs.rip, plan.get("libc_code_ranges") or ()):
        return False
    try:
        words = _stack_words(pid, regs.rsp, 8 * _POLL_WORDS)[:_POLL_WORDS]
    except OSError:
        return False
    return any(_inside(word, ranges) and _call_destination(pid, word) is not None for word in words)


def call_in_wait(pid: int, regs: _t.Regs, plan: dict[str, Any]) -> str | None:
    """Why the bootstrap is to run inside the main thread's blocking wait, or None.

    A main thread at rest in a wait that nothing ends early for us runs no Python code until
    the wait ends, maybe hours away: an event loop of a C library's (uvloop's libuv retries
    an interrupted epoll_wait in C; an early 0 is not a timeout to it either: libuv asserts),
    a multiprocessing pool's worker reading its next task, a consumer in ``socket.recv``, a
    server in ``accept``, a parent in ``os.waitpid``. Each let the GIL go for the wait, as
    C code does around a blocking call; a C library's callbacks take it back with
    PyGILState_Ensure, run Python code, and let it go with PyGILState_Release, from inside
    such waits. The stop does the same where the thread is in one of those calls (_CALL_IN:
    interrupted, with no signal mask of its own, a timeout of poll's or epoll_wait's longer
    than WAKE_AFTER_MS) and PyGILState_Check says it holds no GIL: Ensure,
    PyRun_SimpleString(bootstrap), Release, each a call on the stopped thread, then its
    registers back as the stop found them (the call restarts, or returns EINTR where the
    kernel never restarts it, which its caller retries). Nothing is queued. An epoll_wait of
    CPython's select module is woken instead (idle_wait), as before. A thread that holds the
    GIL in its wait (a C call that never let it go: no thread runs Python code) is left to
    the queued bootstrap."""
    if not (plan.get("gil_check") and plan.get("gil_ensure") and plan.get("gil_release")):
        return None
    if _t.futex_wait(regs) and regs.rax in _INTERRUPTED and _caller(pid, regs, plan) == "semlock":
        # A SemLock.acquire (a pool's idle workers wait for the one reading the next task):
        # sem_wait with the GIL let go and no lock of anyone's held.
        return "the main thread waits for a multiprocessing lock (sem_wait)"
    nr = regs.orig_rax
    if nr == _SYS_RESTART and regs.rax in _INTERRUPTED and _restarts_poll(pid, regs, plan):
        nr = _SYS_POLL  # (its arguments are still in their registers: the timeout poll was given)
    name = _CALL_IN.get(nr)
    if name is None or regs.rax not in _INTERRUPTED or _t.temporary_mask(pid, regs):
        return None
    waits = ""
    if nr in (_SYS_EPOLL_WAIT, _SYS_EPOLL_PWAIT, _SYS_POLL):
        timeout = _int_ms(regs.r10 if nr != _SYS_POLL else regs.rdx)
        if 0 <= timeout <= WAKE_AFTER_MS:
            return None
        waits = f" ({_waits(timeout)})"
    if nr == _SYS_PSELECT6 and regs.rdi == 0:
        return None  # no descriptors: a sleep (time.sleep on 3.10)
    caller = _caller(pid, regs, plan)
    if caller not in ("select", "other") or (caller == "select" and name.startswith("epoll")):
        return None  # not found; or an epoll_wait of CPython's select module: woken instead
    whose = "a C library" if caller == "other" else "CPython"
    return f"the main thread waits in {name}{waits} for {whose}"


def run_in_wait(tracee: _t.Tracee, regs: _t.Regs, plan: dict[str, Any], page: int,
                size: int) -> tuple[int, str]:
    """The bootstrap run on the stopped thread as a C library's callback runs (call_in_wait):
    (PyRun_SimpleString's return value, ""), or (0, why) when a signal's handler raised first
    and its exception was handed back instead (hand_back: the bootstrap did not run; the
    caller makes the wait return EINTR). Each call is waited for however long it takes
    (``patient``): a wait for the GIL may never be taken back halfway. The GIL is let go
    again even when the run failed."""
    state = tracee.call_function(regs, plan["gil_ensure"], patient=True)
    if state is None:  # (never: a patient call is not abandoned)
        raise _t.Abort("PyGILState_Ensure did not return")
    try:
        handback = plan.get("handback") or {}
        if handback:
            # Signals that came during the stop (another thread's C handler tripped them)
            # have their handlers run now, before any bytecode of ours: the bootstrap's first
            # would run them outside its try, and a raised KeyboardInterrupt or SystemExit
            # would be printed in the target's stderr (and SystemExit end the process here).
            raised = tracee.call_function(regs, handback["PyErr_CheckSignals"], patient=True)
            if raised is not None and raised & 0xFFFFFFFF:
                return 0, hand_back(tracee, regs, plan, page, size)
        rc = tracee.call_function(regs, plan["run_simple_string"], page, patient=True)
    finally:
        tracee.call_function(regs, plan["gil_release"], state & 0xFFFFFFFF, patient=True)
    return (-1 if rc is None else rc), ""


# The names hand_back passes the exception and the answer by, in sys (HANDBACK_SIGNAL: the
# spare signal, bootstrap_page.py).
_RAISED, _ARMED = "_leakhound_raised", "_leakhound_armed"
# Runs in a dict of its own (binds nothing in __main__): takes the exception out of sys and,
# where the spare signal has no handler, sets one that puts the default back and raises it.
_HANDBACK_PAGE = (
    "exec(" + repr(
        "try:\n"
        " import sys as s,_signal as g\n"
        f" e=s.__dict__.pop({_RAISED!r},None)\n"
        f" if e is not None and g.getsignal({HANDBACK_SIGNAL})==g.SIG_DFL:\n"
        + handback_handler("e", "  ")
        + f"  s.__dict__[{_ARMED!r}]=1\n"
        "except BaseException:\n"
        " pass\n"
    ) + ",{})"
)


def hand_back(tracee: _t.Tracee, regs: _t.Regs, plan: dict[str, Any], page: int, size: int) -> str:
    """A signal's handler raised on the stopped thread (PyErr_CheckSignals returned -1), the
    GIL held, its exception set there: hand it back to the target's own frame. The exception
    is taken off the thread (PyErr_Fetch, normalized, its traceback set on it) into sys; a
    page run in place of the bootstrap (which never runs: its text is written over) sets a
    handler on a spare signal that raises it, once; PyErr_SetInterruptEx trips that signal
    from C, so no bytecode runs it here; the wait then returns EINTR (the caller), and the
    call's own loop (PEP 475's PyErr_CheckSignals) raises it in the target's frame, as if the
    signal had come a moment later. Where the spare signal has a handler of the target's,
    the exception is dropped (said so). Returns why, for the log."""
    pid, functions = plan["pid"], plan["handback"]
    blob = _HANDBACK_PAGE.encode() + b"\0"
    raised_name, armed_name = page + len(blob), page + len(blob) + len(_RAISED) + 1
    blob += _RAISED.encode() + b"\0" + _ARMED.encode() + b"\0"
    scratch = page + size - 32
    _t.write_memory(pid, page, blob + bytes(size - 32 - len(blob)) + bytes(32))
    slots = (scratch, scratch + 8, scratch + 16)

    def call(name: str, *args: int) -> int:
        return tracee.call_function(regs, functions[name], *args, patient=True) or 0

    call("PyErr_Fetch", *slots)
    call("PyErr_NormalizeException", *slots)
    words = _t.read_memory(pid, scratch, 24)
    kind, value, traceback = (int.from_bytes(words[i:i + 8], "little") for i in (0, 8, 16))
    if value and traceback:
        call("PyException_SetTraceback", value, traceback)
    if value:
        call("PySys_SetObject", raised_name, value)
    for obj in (kind, value, traceback):
        if obj:
            call("Py_DecRef", obj)
    call_rc = tracee.call_function(regs, plan["run_simple_string"], page, patient=True)
    armed = call("PySys_GetObject", armed_name)
    if not armed:
        return ("a signal's handler raised during the stop, and its exception could not be handed back "
                f"(signal {HANDBACK_SIGNAL} has a handler of the target's; the page returned "
                f"{(call_rc or 0) & 0xFFFFFFFF:#x})")
    call("PySys_SetObject", armed_name, 0)
    call("PyErr_SetInterruptEx", HANDBACK_SIGNAL)
    return ("a signal's handler raised during the stop: its exception handed back to the target's own frame "
            "(its wait returns EINTR); the bootstrap did not run")


def idle_wait(pid: int, regs: _t.Regs, plan: dict[str, Any]) -> tuple[str, int] | None:
    """How to end the main thread's blocking wait so that it runs the bootstrap: (why, the
    value the system call returns instead), or None to leave it be.

    A worker at rest has its main thread blocked: an asyncio loop with nothing scheduled in
    epoll_wait with no timeout (or a long one), a sync worker in ``thread.join()``,
    ``Event.wait()``, ``queue.get()`` (a lock's futex wait). The queued bootstrap waits for
    Python code that may not run for hours (TargetBlocked). The stop interrupted the wait;
    CPython retries it as it resumes without running Python code (the kernel restarts the
    futex wait; the select module retries an epoll_wait's EINTR, PEP 475). So:

    - an epoll_wait of CPython's select module (no signal mask of its own, waiting more than
      WAKE_AFTER_MS) returns 0, "no events, the timeout passed": the select module's caller
      (selectors, asyncio's loop) gets an empty list, goes round once and waits again;
    - a futex wait of CPython's lock acquisition (PyThread_acquire_lock_timed, 3.13's
      _PySemaphore_Wait) returns EINTR, as when a signal's handler ran: ``lock.acquire``
      runs the pending calls (Py_MakePendingCalls, as it does for signal handlers) and waits
      again for the time left; a wait that does not handle signals just waits again.

    Nothing else: a wait of a C library's (libzmq's poll, libuv's epoll) may not take an
    early 0 as a timeout, and ``time.sleep`` would end early."""
    if regs.rax not in _INTERRUPTED:
        return None
    if regs.orig_rax in (_SYS_EPOLL_WAIT, _SYS_EPOLL_PWAIT):
        timeout = _epoll_timeout(regs)
        if timeout is None or 0 <= timeout <= WAKE_AFTER_MS or _caller(pid, regs, plan) != "select":
            return None
        return (f"the main thread waits in epoll_wait ({_waits(timeout)}) for CPython's select module: "
                "woken with no events", 0)
    if _t.futex_wait(regs) and _caller(pid, regs, plan) == "lock":
        return "the main thread waits for a lock (a futex) in CPython's lock wait: woken with EINTR", _EINTR
    return None


def _gil_let_go(tracee: _t.Tracee, regs: _t.Regs, plan: dict[str, Any], why: str, log: _t.Log) -> bool:
    """Whether PyGILState_Check, called on the stopped thread, says it holds no GIL."""
    holds = tracee.call_function(regs, plan["gil_check"])
    if holds is not None and holds & 0xFFFFFFFF == 0:
        return True
    log(f"ptrace: {why}, holding the GIL (PyGILState_Check): the bootstrap is queued, and no thread of "
        "the target runs Python code until that wait ends")
    return False


def _queue(tracee: _t.Tracee, regs: _t.Regs, plan: dict[str, Any], page: int, size: int,
           outcome: dict[str, Any]) -> None:
    """Py_AddPendingCall(PyRun_SimpleString, page), and the main thread woken where it rests
    (idle_wait)."""
    pid, insn = plan["pid"], plan["syscall_insn"]
    code = _trampoline_page(tracee, regs, plan) if plan.get("trampoline") else 0
    # If the call faults, or does not return outside a lock wait, the pages stay mapped:
    # they may already be queued (each is unmapped once run).
    rc = tracee.call_function(regs, plan["add_pending_call"], code or plan["run_simple_string"], page,
                              abandon_lock_wait=not plan.get("lock_parks", False))
    if rc is None or rc & 0xFFFFFFFF:
        # Not queued (abandoned in its lock wait, or the queue full): the pages are ours to
        # take back now.
        tracee.syscall(regs, insn, _t.SYS_MUNMAP, page, size)
        if code:
            tracee.syscall(regs, insn, _t.SYS_MUNMAP, code, trampoline.PAGE)
        if rc is None:
            raise _t.Abort("Py_AddPendingCall did not return (pending-calls lock held); call abandoned")
        raise _t.Retry("the pending-call queue is full")
    outcome["queued"], outcome["page"] = True, page
    woken = idle_wait(pid, tracee.saved_regs, plan) if tracee.saved_regs is not None else None
    if woken is not None and tracee.saved_regs is not None:
        # Restored as having returned that value, not to be restarted (orig_rax -1).
        tracee.saved_regs.rax, tracee.saved_regs.orig_rax = woken[1], _t.NO_SYSCALL
        outcome["woke"] = woken[0]


def _trampoline_page(tracee: _t.Tracee, regs: _t.Regs, plan: dict[str, Any]) -> int:
    """A page of the target's holding the pending call's function (trampoline.py), made
    read-and-execute; 0 where it cannot be (the old pending call, PyRun_SimpleString, then)."""
    pid, insn, functions = plan["pid"], plan["syscall_insn"], plan["trampoline"]
    at = tracee.syscall(regs, insn, _t.SYS_MMAP, 0, trampoline.PAGE, _PROT_RW, _MAP_PRIVATE_ANON, -1, 0)
    if at >= (1 << 64) - 4096:
        return 0
    try:
        _t.write_memory(pid, at, trampoline.code(at, functions, functions["munmap"]))
        made = tracee.syscall(regs, insn, _SYS_MPROTECT, at, trampoline.PAGE, trampoline.PROT_RX) == 0
    except OSError:
        made = False
    if not made:  # (a policy that refuses executable anonymous memory, say)
        tracee.syscall(regs, insn, _t.SYS_MUNMAP, at, trampoline.PAGE)
        return 0
    return at


def attempt(plan: dict[str, Any], code: str, log: _t.Log, hook: Hook,
            tracee_class: type[_t.Tracee] = _t.Tracee) -> dict[str, Any]:
    """One stop. Returns {queued, stop_ms, reason, retry, page}; raises OSError only when
    the thread was never attached (nothing changed)."""
    pid = plan["pid"]
    tracee = tracee_class(pid)
    insn = plan["syscall_insn"]
    size = page_size_for(code)
    outcome: dict[str, Any] = {"queued": False, "stop_ms": 0.0, "reason": "", "retry": False, "page": 0}
    began = time.perf_counter()
    try:
        tracee.seize_and_stop()
        hook("seized")
        regs = tracee.save()
        hook("saved")
        busy = may_hold_pending_lock(pid, regs, [tuple(r) for r in plan["pending_ranges"]])
        if busy:
            raise _t.Retry(busy)
        page = tracee.syscall(regs, insn, _t.SYS_MMAP, 0, size, _PROT_RW, _MAP_PRIVATE_ANON, -1, 0)
        if page >= (1 << 64) - 4096:
            raise _t.Abort(f"mmap in the target failed (errno {(1 << 64) - page})")
        try:
            hook("mapped")
            _t.write_memory(pid, page, bootstrap_text(code, page, size))
            hook("written")
        except BaseException:
            tracee.syscall(regs, insn, _t.SYS_MUNMAP, page, size)
            raise
        into = call_in_wait(pid, regs, plan)
        if into is not None and _gil_let_go(tracee, regs, plan, into, log):
            outcome["page"] = page  # the bootstrap's to take back once run (it lists it)
            rc, handed = run_in_wait(tracee, regs, plan, page, size)
            if handed:
                outcome["page"] = 0
                tracee.syscall(regs, insn, _t.SYS_MUNMAP, page, size)  # (its pages ran and are done)
                if tracee.saved_regs is not None:
                    tracee.saved_regs.rax, tracee.saved_regs.orig_rax = _EINTR, _t.NO_SYSCALL
                raise _t.Retry(handed)
            outcome["queued"] = True
            outcome["woke"] = f"{into}, the GIL let go: the bootstrap ran there, as a callback runs" + (
                "" if rc & 0xFFFFFFFF == 0 else f" (PyRun_SimpleString returned {rc & 0xFFFFFFFF:#x})")
        else:
            _queue(tracee, regs, plan, page, size, outcome)
        hook("called")
    except _t.Retry as exc:
        outcome["reason"], outcome["retry"] = str(exc), True
    except _t.Abort as exc:
        outcome["reason"] = str(exc)
    except OSError as exc:
        if not tracee.attached:
            raise
        outcome["reason"] = f"ptrace: {exc}"
    finally:
        try:
            if tracee.attached and not tracee.stopped:
                log(f"ptrace: {outcome['reason'] or 'aborted'}; waiting for the main thread's stop to let it go")
                tracee.await_late_stop(LATE_STOP_TIMEOUT, log)
            if tracee.attached:
                tracee.restore()
                hook("restored")
            tracee.detach()
            hook("detached")
        except OSError as exc:
            if exc.errno != 3:  # ESRCH: it exited meanwhile, nothing left to restore
                raise
        finally:
            outcome["stop_ms"] = (time.perf_counter() - began) * 1000.0
    if tracee.deferred:
        log(f"forwarded signals held during the stop: {[sig for sig, _ in tracee.deferred]}")
    return outcome


class Failure(Exception):
    """Ends the injection; ``kind`` names the leakhound error the CLI raises."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def run(request: dict[str, Any], log: _t.Log, hook: Hook,
        tracee_class: type[_t.Tracee] = _t.Tracee) -> dict[str, Any]:
    """The attempts, each one stop, until the bootstrap is queued or the deadline."""
    plan, code = request["plan"], request["code"]
    pid = plan["pid"]
    deadline = time.monotonic() + float(request["timeout"])
    for number in range(1, _RETRIES + 1):
        if _cli_gone(0):
            # Nobody would read the result: the target is not stopped at all.
            raise Failure("AttachFailed", "leakhound exited before the target was stopped")
        state = _t.thread_state(pid)
        if state in ("Z", "X", "gone"):
            raise Failure("TargetExited", f"process {pid}'s main thread has exited")
        if state == "D":
            # In uninterruptible sleep it would not stop for us: wait for it to run.
            log(f"attempt {number}: the main thread is in uninterruptible sleep (D); retrying")
            if time.monotonic() + 0.1 > deadline:
                break
            time.sleep(0.05 * number)
            continue
        tracer = _t.tracer_pid(pid)
        if state in ("T", "t") and not tracer:
            raise Failure("AttachFailed", f"process {pid} is stopped (SIGSTOP); it would not run the bootstrap")
        if tracer:
            log(f"attempt {number}: process {pid} is traced by pid {tracer}; retrying")
            if time.monotonic() + 0.1 > deadline:
                raise Failure("TargetBusy", f"process {pid} is being traced by pid {tracer}")
            time.sleep(0.05 * number)
            continue
        try:
            outcome = attempt(plan, code, log, hook, tracee_class)
        except OSError as exc:
            if exc.errno == 1:
                if _t.tracer_pid(pid):
                    continue
                raise Failure("PermissionDenied", f"cannot ptrace process {pid}: operation not permitted") from None
            if exc.errno == 3:
                raise Failure("TargetNotFound", f"process {pid} exited before it could be attached") from None
            raise Failure("AttachFailed", f"ptrace on process {pid} failed: {exc}") from None
        log(f"attempt {number}: stopped {outcome['stop_ms']:.3f} ms"
            + (f", bootstrap at {outcome['page']:#x}" if outcome["queued"] else "")
            + (f"; {outcome['woke']}" if outcome.get("woke") else "")
            + (f" ({outcome['reason']})" if outcome["reason"] else ""))
        if outcome["queued"]:
            return {"ok": True, "stop_ms": outcome["stop_ms"], "attempts": number, "page": outcome["page"]}
        if not outcome["retry"]:
            raise Failure("AttachFailed", f"ptrace injection into {pid} failed: {outcome['reason']}")
        if time.monotonic() + 0.005 * number > deadline:
            break
        time.sleep(0.002 * number)
    raise Failure("AttachTimeout", f"process {pid} never reached a point where injection is safe")


# ------------------------------------------------------------------------ the helper process


def _cli_gone(timeout: float) -> bool:
    """Whether the CLI has closed our stdin (it exited, or was killed), waiting up to ``timeout``."""
    try:
        ready, _, _ = select.select([0], [], [], timeout)
        return bool(ready) and os.read(0, 4096) == b""
    except OSError:
        return True


def janitor(private: PrivateDir, pid: int, queued: bool, payload_timeout: float) -> None:
    """Remove the private directory if the CLI exits without doing so: at once when no
    bootstrap was queued, else (the request cancelled by a ``cancel`` file) once the payload
    has written its result, or the target is gone, or the payload's own timeout has passed.
    Everything goes through the directory's descriptor (private_dir): the target's user can
    write into the directory, and this process is root."""
    while private.is_in_place():
        if _cli_gone(0.1):
            break
    else:
        return
    deadline = time.monotonic() + (payload_timeout + 5.0 if queued else 0.0)
    if queued:
        # Nobody will read the answer: the payload stops at its next step (runner's
        # directory_cancelled) instead of running, or waiting for the CLI's names, to its end.
        try:
            private.touch(wire.CANCEL)
        except OSError:
            pass
    while private.is_in_place() and time.monotonic() < deadline:
        if private.exists("result.json") or _t.thread_state(pid) in ("Z", "X", "gone"):
            break
        time.sleep(0.05)
    for _ in range(40):  # again while it is there: the payload may write a last file meanwhile
        if private.remove():
            break
        time.sleep(0.05)


def _timeout(value: Any) -> float:
    """The payload's own timeout as the CLI sent it: a finite number of seconds, else 60."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return 60.0
    return min(seconds, 86400.0) if math.isfinite(seconds) and seconds > 0 else 60.0


def _lines() -> Iterator[dict[str, Any]]:
    """The CLI's JSON lines on stdin, until it closes it."""
    buffer = b""
    while True:
        while b"\n" not in buffer:
            try:
                chunk = os.read(0, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        yield dict(json.loads(line))


HELPER_FILE = "ptrace-helper.pid"  # in the private directory: which helper looks after it
_HELPER_FILE_BYTES = 32


def _helper_alive(private: PrivateDir) -> bool:
    try:
        text = private.read(HELPER_FILE, _HELPER_FILE_BYTES)
        if text is None:
            return False
        os.kill(int(text), 0)
        return True
    except (OSError, ValueError):
        return False


def sweep(parent_fd: int) -> list[str]:
    """Remove the private directories in the directory ``parent_fd`` whose leakhound died
    before any helper looked after them (killed while it was still copying the payload
    there): named ``leakhound-<pid>-*`` by channel.py, removed only when that pid is gone,
    through their descriptors (anyone can make a directory of that name)."""
    removed: list[str] = []
    try:
        names = os.listdir(parent_fd)
    except OSError:
        return removed
    for name in names:
        fields = name.split("-")
        if len(fields) != 3 or fields[0] != "leakhound" or not fields[1].isdigit():
            continue
        try:
            os.kill(int(fields[1]), 0)
            continue  # alive (or another process with that pid now: left alone)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except OSError:
            continue
        try:
            stale = PrivateDir(os.dup(parent_fd), name, fd)
        except OSError:
            os.close(fd)
            continue
        try:
            if _helper_alive(stale):
                continue  # its helper looks after it
            stale.remove()
            removed.append(name)
        finally:
            stale.close()
    return removed


class _Test:
    """LEAKHOUND_PTRACE_TEST (JSON), for the tests only: kill the CLI right after a step,
    copy the log to a file, let given waits report no stop, shorten the late-stop timeout,
    never run the bootstrap inside a wait (``call_in`` false: it is queued, as where
    call_in_wait says no)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.kill_after = spec.get("kill_cli_after")
        self.kill_signal = int(spec.get("kill_signal", signal.SIGKILL))
        self.log_file = spec.get("log_file")
        self.late_waits = set(spec.get("late_waits", ()))
        self.call_in = bool(spec.get("call_in", True))
        if "late_stop_timeout" in spec:
            global LATE_STOP_TIMEOUT
            LATE_STOP_TIMEOUT = float(spec["late_stop_timeout"])

    def hook(self, step: str) -> None:
        if step != self.kill_after:
            return
        self.kill_after = None
        self.log(f"test: killing the CLI with signal {self.kill_signal} after step {step}")
        try:
            os.kill(os.getppid(), self.kill_signal)
        except OSError:
            return
        # A SIGKILL is waited for (the CLI is gone before the next step); the others may be
        # held by the CLI until its injection call returns, so the stop goes on meanwhile.
        deadline = time.monotonic() + (5.0 if self.kill_signal == signal.SIGKILL else 0.0)
        while time.monotonic() < deadline and not _cli_gone(0.05):
            pass

    def log(self, line: str) -> None:
        if self.log_file:
            with open(self.log_file, "a") as fh:
                fh.write(line + "\n")

    def tracee_class(self) -> type[_t.Tracee]:
        late, calls = self.late_waits, [0]

        class Late(_t.Tracee):
            def wait(self, timeout: float) -> int | None:
                calls[0] += 1
                if calls[0] in late:
                    time.sleep(min(timeout, 0.05))
                    return None
                return super().wait(timeout)

        return Late if late else _t.Tracee


def main() -> None:
    for sig in _IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("-1000")
    except OSError:
        pass
    try:
        # The stop lasts as long as this process waits for the CPU: on a busy machine a
        # higher priority keeps it short. Raising it needs privileges; without them, as is.
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        pass
    spec = os.environ.get("LEAKHOUND_PTRACE_TEST")
    test = _Test(json.loads(spec)) if spec else None
    out_ok = [True]

    def emit(doc: dict[str, Any]) -> None:
        if test is not None and "log" in doc:
            test.log(doc["log"])
        if not out_ok[0]:
            return
        try:
            os.write(1, (json.dumps(doc) + "\n").encode())
        except OSError:  # the CLI is gone; carry on
            out_ok[0] = False

    def log(line: str) -> None:
        emit({"log": line})

    hook = test.hook if test is not None else _no_hook
    lines = _lines()
    first = next(lines, None) or {}
    private_dir = first.get("private_dir")  # for the log only: it is never opened by path
    private = None
    if private_dir:
        try:
            private = PrivateDir.adopt(int(first["parent_fd"]), int(first["dir_fd"]), str(first["name"]),
                                       int(first["dev"]), int(first["ino"]))
        except (OSError, KeyError, TypeError, ValueError) as exc:
            log(f"the private directory's descriptors are not the directory the CLI made ({exc}); "
                "it is left to the CLI")
    payload_timeout = _timeout(first.get("payload_timeout"))
    request = next(lines, None)
    if request is None or request.get("abandon"):
        # The CLI died before it asked for the stop (nothing was done to the target), or it
        # declined and carries on with the directory itself.
        if request is None and private is not None:
            private.remove()
        return
    if test is not None and not test.call_in:
        request["plan"]["gil_check"] = 0
    if private is not None:
        try:
            private.create(HELPER_FILE, str(os.getpid()).encode())
        except FileExistsError:
            log(f"{HELPER_FILE} was already in the private directory: someone else put it there")
        except OSError:
            pass
        swept = sweep(private.parent_fd)
        if swept:
            log(f"removed private directories of leakhound processes that died: {swept}")
    if test is not None:
        test.log(f"helper: private dir {private_dir}")
    hook("start")
    # The whole stop runs with every signal blocked (SIGCHLD is waited for in sigtimedwait).
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        outcome = run(request, log, hook, test.tracee_class() if test is not None else _t.Tracee)
    except Failure as exc:
        outcome = {"ok": False, "kind": exc.kind, "message": str(exc)}
    except _t.Stuck as exc:
        outcome = {"ok": False, "kind": "TracerStuck", "message": str(exc)}
    except _t.TraceeGone as exc:
        outcome = {"ok": False, "kind": "TargetExited", "message": str(exc)}
    except Exception as exc:  # reported, never a traceback into the CLI's stderr
        outcome = {"ok": False, "kind": "AttachFailed", "message": f"ptrace helper: {exc!r}"}
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 10)  # the janitor waits at low priority
    except OSError:
        pass
    emit({"outcome": outcome})
    hook("reported")
    if private is not None:
        janitor(private, int(request["plan"]["pid"]), bool(outcome.get("ok")), payload_timeout)
    if test is not None:
        test.log("helper: done")
    sys.exit(0)


if __name__ == "__main__":
    main()
