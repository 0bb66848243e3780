"""The tracee: raw ptrace calls on the target's main thread (x86-64 Linux).

Standard library only, no leakhound imports: this module runs in the tracer helper
(``stop.py``), a bare ``python -I -S`` process, as well as in the CLI (``plan.py`` reads
memory with it). Errors are plain: ``OSError`` from a system call, ``TraceeGone`` when the
target exited, ``Abort`` / ``Retry`` for the injection, ``Stuck`` when a stop never came.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import time
from collections.abc import Callable

_PTRACE_POKEDATA = 5
_PTRACE_CONT = 7
_PTRACE_SINGLESTEP = 9
_PTRACE_GETREGS = 12
_PTRACE_SETREGS = 13
_PTRACE_GETFPREGS = 14
_PTRACE_SETFPREGS = 15
_PTRACE_DETACH = 17
_PTRACE_GETSIGINFO = 0x4202
_PTRACE_SETSIGINFO = 0x4203
_PTRACE_GETREGSET = 0x4204
_PTRACE_SETREGSET = 0x4205
_PTRACE_SEIZE = 0x4206
_PTRACE_INTERRUPT = 0x4207
_PTRACE_GETSIGMASK = 0x420A
_PTRACE_SETSIGMASK = 0x420B
_PTRACE_EVENT_STOP = 128
_NT_X86_XSTATE = 0x202
_WALL = 0x40000000

SYS_MMAP = 9
SYS_MUNMAP = 11
SYS_FUTEX = 202
SYS_TGKILL = 234
_SYS_RT_SIGSUSPEND = 130
_SYS_PSELECT6 = 270
_SYS_PPOLL = 271
_SYS_EPOLL_PWAIT = 281
_SYS_IO_PGETEVENTS = 333
_SYS_EPOLL_PWAIT2 = 441
NO_SYSCALL = (1 << 64) - 1  # orig_rax = -1
_RED_ZONE = 128

# Seconds Py_AddPendingCall may take before we conclude it waits on the pending-calls lock.
CALL_TIMEOUT = 0.2
# How long a call parked on a PyMutex (3.13+'s pending-calls lock) is waited for: it is never
# abandoned while it waits (see Tracee._abandon).
PARKED_CALL_TIMEOUT = 10.0
STOP_TIMEOUT = 1.0  # for each ptrace stop to be reported

_JOB_CONTROL = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}
FAULTS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}
# The mask the thread runs our steps under: every signal blocked but the ones the kernel
# forces (our own traps: a forced signal that is blocked gets unblocked *and* its handler
# reset to SIG_DFL, process-wide), SIGKILL and SIGSTOP (cannot be blocked).
TRAPS = (1 << (signal.SIGSEGV - 1)) | (1 << (signal.SIGTRAP - 1))  # what our steps raise
_STOP_MASK = ((1 << 64) - 1) & ~sum(
    1 << (sig - 1) for sig in (*FAULTS, signal.SIGTRAP, signal.SIGKILL, signal.SIGSTOP)
)

Log = Callable[[str], None]


class Regs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx",
        "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base",
        "gs_base", "ds", "es", "fs", "gs")]


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)
_libc.ptrace.restype = ctypes.c_long
for _name in ("process_vm_readv", "process_vm_writev"):
    getattr(_libc, _name).argtypes = (
        ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec),
        ctypes.c_ulong, ctypes.c_ulong)
    getattr(_libc, _name).restype = ctypes.c_ssize_t


class Retry(Exception):
    """Not a safe point right now; nothing was changed in the target."""


class Abort(Exception):
    """The injection failed; registers are restored and the target detached."""


_FUTEX_CMD_MASK = 0x7F  # the operation without FUTEX_PRIVATE_FLAG / FUTEX_CLOCK_REALTIME
_FUTEX_WAITS = (0, 9)  # FUTEX_WAIT, FUTEX_WAIT_BITSET (glibc's sem_wait, pthread waits)


def futex_wait(regs: Regs) -> bool:
    """Whether the thread stopped in a futex system call that waits (its operation, the
    second argument, still in rsi), not one that wakes."""
    return regs.orig_rax == SYS_FUTEX and (regs.rsi & _FUTEX_CMD_MASK) in _FUTEX_WAITS


class TraceeGone(Exception):
    """The target exited (or is no longer traced by us)."""


class Stuck(Exception):
    """The thread never stopped for us to let it go."""


def read_memory(pid: int, address: int, length: int) -> bytes:
    buf = ctypes.create_string_buffer(length)
    local = _IoVec(ctypes.cast(buf, ctypes.c_void_p), length)
    remote = _IoVec(address, length)
    got = int(_libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
    if got != length:
        err = ctypes.get_errno()
        raise OSError(err, f"process_vm_readv at {address:#x}: {os.strerror(err)}")
    return buf.raw


def write_memory(pid: int, address: int, data: bytes) -> None:
    buf = ctypes.create_string_buffer(data, len(data))
    local = _IoVec(ctypes.cast(buf, ctypes.c_void_p), len(data))
    remote = _IoVec(address, len(data))
    put = int(_libc.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
    if put != len(data):
        err = ctypes.get_errno()
        raise OSError(err, f"process_vm_writev at {address:#x}: {os.strerror(err)}")


def thread_state(pid: int) -> str:
    """The main thread's state letter (R, S, D, T, t, Z ...), or "gone"."""
    try:
        with open(f"/proc/{pid}/task/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


def tracer_pid(pid: int) -> int:
    """The pid ptrace-attached to ``pid`` right now (another gdb, py-spy, strace), or 0."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class Tracee:
    """One PTRACE_SEIZE .. PTRACE_DETACH session on the target's main thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.attached = False
        self.in_signal_stop = False  # the last stop was a signal-delivery-stop
        self.deferred: list[tuple[int, bytes]] = []  # signals held back, with their siginfo
        self.saved_regs: Regs | None = None
        self.saved_fpu: tuple[int, ctypes.Array[ctypes.c_char]] | None = None
        self.saved_mask: int | None = None  # the thread's signal mask, when we replaced it
        self.stopped = False  # in a ptrace stop right now (PTRACE_DETACH needs one)

    def call(self, request: int, addr: int = 0, data: int = 0) -> int:
        ctypes.set_errno(0)
        result = int(_libc.ptrace(request, self.pid, addr, data))
        if result == -1:
            err = ctypes.get_errno()
            if err:
                raise OSError(err, os.strerror(err))
        if request in (_PTRACE_CONT, _PTRACE_SINGLESTEP, _PTRACE_DETACH):
            self.stopped = False
        return result

    def wait(self, timeout: float) -> int | None:
        """The next stop's status, or None after ``timeout`` seconds. Sleeps in sigtimedwait
        on SIGCHLD (sent to the tracer at each stop, and blocked during the stop) so the
        wake-up is immediate, with a 1 ms poll in case it goes elsewhere."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG | _WALL)
            except ChildProcessError:
                raise TraceeGone(f"process {self.pid} is no longer traced (it exited)") from None
            if pid:
                if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                    self.attached = False
                    raise TraceeGone(f"process {self.pid} exited during injection")
                self.in_signal_stop = (status >> 16) == 0
                self.stopped = True
                return status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            signal.sigtimedwait((signal.SIGCHLD,), min(remaining, 0.001))

    def defer_signal(self, sig: int) -> None:
        info = ctypes.create_string_buffer(128)
        try:
            self.call(_PTRACE_GETSIGINFO, 0, ctypes.addressof(info))
        except OSError:
            pass
        self.deferred.append((sig, info.raw))

    def get_regs(self) -> Regs:
        regs = Regs()
        self.call(_PTRACE_GETREGS, 0, ctypes.addressof(regs))
        return regs

    def set_regs(self, regs: Regs) -> None:
        self.call(_PTRACE_SETREGS, 0, ctypes.addressof(regs))

    def save(self) -> Regs:
        regs = self.get_regs()
        self.saved_regs = Regs.from_buffer_copy(regs)
        buf = ctypes.create_string_buffer(16384)
        iov = _IoVec(ctypes.cast(buf, ctypes.c_void_p), len(buf))
        try:
            self.call(_PTRACE_GETREGSET, _NT_X86_XSTATE, ctypes.addressof(iov))
            self.saved_fpu = (int(iov.len), buf)
        except OSError:  # no XSAVE: the legacy 512-byte FXSAVE area
            fx = ctypes.create_string_buffer(512)
            self.call(_PTRACE_GETFPREGS, 0, ctypes.addressof(fx))
            self.saved_fpu = (0, fx)
        self.hold_signals(regs)
        return regs

    def hold_signals(self, regs: Regs) -> None:
        """Block the thread's signals for the rest of the stop: one that arrives now stays
        pending in the kernel, with its siginfo, and is delivered when the mask is restored
        after the last step, instead of stopping us once per signal (a storm of queued
        real-time signals would otherwise stop every single step). Skipped while the thread
        is in a system call that swaps in a temporary mask (ppoll, pselect6, epoll_pwait,
        sigsuspend ...): PTRACE_SETSIGMASK drops the saved real mask the kernel would put
        back, which would leave the temporary one in place for good."""
        mask = ctypes.c_uint64()
        try:
            self.call(_PTRACE_GETSIGMASK, 8, ctypes.addressof(mask))
        except OSError as exc:
            if exc.errno == 3:
                raise
            return  # kernels before 3.11: signals are held back one stop at a time
        if temporary_mask(self.pid, regs):
            if mask.value & TRAPS:
                raise Retry("the main thread blocks SIGSEGV/SIGTRAP for a system call")
            return
        self.call(_PTRACE_SETSIGMASK, 8, ctypes.addressof(ctypes.c_uint64(_STOP_MASK)))
        self.saved_mask = mask.value

    def restore(self) -> None:
        if self.saved_regs is not None:
            self.set_regs(self.saved_regs)
        if self.saved_fpu is not None:
            length, buf = self.saved_fpu
            if length:
                iov = _IoVec(ctypes.cast(buf, ctypes.c_void_p), length)
                self.call(_PTRACE_SETREGSET, _NT_X86_XSTATE, ctypes.addressof(iov))
            else:
                self.call(_PTRACE_SETFPREGS, 0, ctypes.addressof(buf))
        if self.saved_mask is not None:
            # Signals that arrived meanwhile are pending: the thread takes them as it resumes.
            self.call(_PTRACE_SETSIGMASK, 8, ctypes.addressof(ctypes.c_uint64(self.saved_mask)))

    def await_late_stop(self, timeout: float, log: Log) -> None:
        """The thread is ours but running (the stop we asked for, or the end of a step, never
        came): wait for it to stop, so that it can be restored and detached. A signal it
        stops for is held back and forwarded on detach; our own trap is not.

        Once its registers or signal mask were changed, it is waited for however long it
        takes: let go (the helper's exit detaches it) it would resume in the middle of our
        step, with most signals blocked. Before that, ``timeout`` bounds the wait (Stuck;
        the helper then exits, which lets the thread go untouched)."""
        if self.stopped:
            return
        try:
            self.call(_PTRACE_INTERRUPT)
        except OSError:
            pass
        status = self.wait(timeout)
        while status is None and (self.saved_regs is not None or self.saved_mask is not None):
            log(f"ptrace: process {self.pid}'s main thread is in the middle of an injection step and "
                f"has not stopped yet (state {thread_state(self.pid)}); waiting, to put it back as it was")
            status = self.wait(timeout)
        if status is None:
            raise Stuck(
                f"process {self.pid}'s main thread never stopped for leakhound to let it go "
                f"(state {thread_state(self.pid)}); the tracer exited instead, which let it go untouched"
            )
        sig = os.WSTOPSIG(status)
        if status >> 16 == 0 and sig not in (signal.SIGTRAP, signal.SIGSEGV):
            self.defer_signal(sig)

    def detach(self) -> None:
        if not self.attached:
            return
        forward = list(self.deferred)
        first = 0
        if forward and self.in_signal_stop:
            sig, info = forward.pop(0)
            info_buf = ctypes.create_string_buffer(info, len(info))
            try:
                self.call(_PTRACE_SETSIGINFO, 0, ctypes.addressof(info_buf))
            except OSError:
                pass
            first = sig
        self.call(_PTRACE_DETACH, 0, first)
        self.attached = False
        for sig, _ in forward:
            _libc.syscall(SYS_TGKILL, self.pid, self.pid, sig)

    # ---- steps

    def seize_and_stop(self) -> None:
        self.call(_PTRACE_SEIZE)  # no PTRACE_O_EXITKILL: our death must never kill the target
        self.attached = True
        self.call(_PTRACE_INTERRUPT)
        while True:
            status = self.wait(STOP_TIMEOUT)
            if status is None:
                raise Abort("the main thread did not stop")
            sig = os.WSTOPSIG(status)
            if status >> 16 == _PTRACE_EVENT_STOP:
                if sig in _JOB_CONTROL:
                    raise Abort("the process is stopped (job control); it would not run the bootstrap")
                return
            self.defer_signal(sig)
            self.call(_PTRACE_CONT, 0, 0)

    def syscall(self, base: Regs, insn: int, number: int, *args: int) -> int:
        """Run one system call in the thread by single-stepping libc's syscall instruction."""
        regs = Regs.from_buffer_copy(base)
        regs.rip, regs.rax, regs.orig_rax = insn, number, NO_SYSCALL
        for name, value in zip(("rdi", "rsi", "rdx", "r10", "r8", "r9"), args, strict=False):
            setattr(regs, name, value & NO_SYSCALL)
        self.set_regs(regs)
        for _ in range(16):
            self.call(_PTRACE_SINGLESTEP, 0, 0)
            status = self.wait(STOP_TIMEOUT)
            if status is None:
                raise Abort("the system call did not complete")
            sig = os.WSTOPSIG(status)
            if status >> 16:
                continue  # a leftover interrupt stop: step again
            if sig == signal.SIGTRAP:
                done = self.get_regs()
                if done.rip != insn + 2:
                    raise Abort(f"single step stopped at {done.rip:#x}, not after the syscall")
                return int(done.rax)
            if sig in FAULTS:
                raise Abort(f"signal {sig} while running a system call")
            self.defer_signal(sig)
        raise Abort("too many signals while running a system call")

    def call_function(self, base: Regs, function: int, *args: int, abandon_lock_wait: bool = True,
                      patient: bool = False) -> int | None:
        """Call ``function(*args)`` on the thread; its return value, or None when it had to be
        abandoned (blocked past CALL_TIMEOUT in the pending-calls lock's sem_wait; never where
        ``abandon_lock_wait`` is False: _abandon). ``patient``: never abandoned nor given up
        on, however long it takes (a wait for the GIL: taken back halfway, its condition
        variable and mutex would be left with a waiter that is gone; the thread would have
        waited as long for any callback)."""
        regs = Regs.from_buffer_copy(base)
        sp = ((base.rsp - _RED_ZONE - 256) & ~0xF) - 8
        self.call(_PTRACE_POKEDATA, sp, 0)  # return address 0: the return faults, our trap
        regs.rsp, regs.rip, regs.rax, regs.orig_rax = sp, function, 0, NO_SYSCALL
        for name, value in zip(("rdi", "rsi", "rdx", "rcx"), args, strict=False):
            setattr(regs, name, value)
        self.set_regs(regs)
        self.call(_PTRACE_CONT, 0, 0)
        deadline = time.monotonic() + CALL_TIMEOUT
        while True:
            status = self.wait(max(0.0, deadline - time.monotonic()))
            if status is None:
                return self._abandon(deadline, abandon_lock_wait and not patient,
                                     math.inf if patient else None)
            sig = os.WSTOPSIG(status)
            if status >> 16:
                self.call(_PTRACE_CONT, 0, 0)
                continue
            if sig == signal.SIGSEGV:
                done = self.get_regs()
                if done.rip == 0 and done.rsp == sp + 8:
                    return int(done.rax)
            if sig in FAULTS or sig == signal.SIGTRAP:
                raise Abort(f"the injected call faulted (signal {sig}); the target was restored")
            self.defer_signal(sig)
            self.call(_PTRACE_CONT, 0, 0)

    def _abandon(self, deadline: float, abandon_lock_wait: bool = True, patience: float | None = None) -> int | None:
        """The call outlived CALL_TIMEOUT: interrupt it. None only where it waits in a futex
        (the pending-calls lock taken by another thread, the call not made yet): its
        registers restored, the call is abandoned, nothing queued. A thread in a futex *wake*
        (its release of that lock, the call already queued: glibc's sem_post makes one for
        good once an earlier abandoned wait left the waiter count one too high) or anywhere
        else is on its way out and is let finish; one that has not returned a second later
        raises Abort, its page left mapped (it may be queued: the bootstrap takes it back
        when it runs).

        ``abandon_lock_wait`` False (3.13+: the lock is a PyMutex): a wait is never abandoned.
        A contended PyMutex parks the thread with a wait entry on its stack, linked into
        CPython's parking lot, and lets the GIL go while parked; registers restored there, the
        thread would run on believing it holds the GIL, and the lock's holder would later wake
        an entry on a stack reused since. The call is waited for, PARKED_CALL_TIMEOUT at most
        (the holder keeps the lock for the time of a list push)."""
        self.call(_PTRACE_INTERRUPT)
        hard = deadline + (patience if patience is not None else 1.0 if abandon_lock_wait else PARKED_CALL_TIMEOUT)
        while True:
            status = self.wait(STOP_TIMEOUT)
            if status is None and hard == math.inf:
                continue  # (in uninterruptible sleep, say) its stop comes when it wakes
            if status is None:
                raise Abort("the injected call neither returned nor stopped")
            if status >> 16 == 0 and os.WSTOPSIG(status) not in (signal.SIGSEGV, signal.SIGTRAP):
                self.defer_signal(os.WSTOPSIG(status))
                self.call(_PTRACE_CONT, 0, 0)
                continue
            regs = self.get_regs()
            if regs.rip == 0 and status >> 16 == 0:
                return int(regs.rax)  # it returned just now
            if futex_wait(regs) and abandon_lock_wait:
                return None
            if time.monotonic() > hard:
                where = "outside a lock wait" if abandon_lock_wait else "(a parked wait is never abandoned)"
                raise Abort("Py_AddPendingCall did not return within "
                            f"{hard - deadline + CALL_TIMEOUT:.1f}s {where}; it may be queued")
            self.call(_PTRACE_CONT, 0, 0)
            time.sleep(0.01)
            self.call(_PTRACE_INTERRUPT)


def temporary_mask(pid: int, regs: Regs) -> bool:
    """Whether the thread is in a system call running under a mask it was passed (the kernel
    keeps the real one aside, to be put back on the way out). Calls given no mask are not."""
    number = regs.orig_rax
    if number in (_SYS_RT_SIGSUSPEND, _SYS_IO_PGETEVENTS):
        return True
    if number == _SYS_PPOLL:
        return bool(regs.r10)
    if number in (_SYS_EPOLL_PWAIT, _SYS_EPOLL_PWAIT2):
        return bool(regs.r8)
    if number == _SYS_PSELECT6:  # its sixth argument points to {sigset pointer, size}
        if regs.r9 == 0:
            return False
        try:
            return read_memory(pid, regs.r9, 8) != bytes(8)
        except OSError:
            return True
    return False
