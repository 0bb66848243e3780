"""The ptrace method: queue the bootstrap with a few raw ptrace calls (x86-64 Linux).

Same end result as the gdb method (``Py_AddPendingCall(PyRun_SimpleString, code)``, run by
the main thread at its next bytecode boundary), but every address is resolved from the ELF
files mapped in the target *before* it is stopped, so the stop itself is a handful of system
calls: tens to hundreds of microseconds instead of gdb's ~50 ms.

One stop, on the main thread only:

1. ``PTRACE_SEIZE`` + ``PTRACE_INTERRUPT`` the main thread (tid == pid); save its general
   registers, its whole FPU/SSE/AVX state (``NT_X86_XSTATE``) and its signal mask, and block
   its signals (``PTRACE_SETSIGMASK``) but for the ones our steps raise.
2. Refuse (detach, wait a few ms, retry; bounded) when it may hold CPython's pending-calls
   lock: it is running in user mode and its pc, or a return address in the top 512 bytes of
   its stack, lies in the pending-call machinery (``Py_AddPendingCall``,
   ``_PyEval_AddPendingCall``, ``Py_MakePendingCalls``, ``make_pending_calls`` ... from
   ``.dynsym``/``.symtab``; for stripped builds, the unnamed functions
   ``Py_MakePendingCalls`` calls). A thread blocked in a system call cannot hold that lock
   (nothing between its acquire and release makes a system call: a ``sem_post`` that enters
   the kernel has already released it), so its stack, which may keep stale return
   addresses, is not scanned.
3. Get a page for the bootstrap string with a raw ``mmap`` system call: the thread is
   single-stepped over the ``syscall`` instruction of libc's ``syscall()``. No malloc, no
   userspace lock. The string is written with ``process_vm_writev``; the bootstrap unmaps the
   page when it runs (``boot.py``, told by the ``page`` file in the private directory).
4. Call ``Py_AddPendingCall`` on the main thread: stack 16-byte aligned below the red zone,
   return address 0 (the return faults at pc 0, which is our "call done" trap; nothing is
   written into the target's code), ``orig_rax = -1`` so the kernel does not treat our call
   as the restart of the system call the thread was in.
5. Always (``finally``): restore every register, the FPU state and the signal mask exactly
   as saved, which brings back ``orig_rax`` and the ``-ERESTART*`` value so an interrupted
   restartable system call restarts as if nothing happened, then ``PTRACE_DETACH``.

Why the other threads keep running: ``Py_AddPendingCall`` does not need the GIL; it takes
one lock, the pending-calls lock, which any *running* thread releases after a few
instructions, so waiting for it is fine. The only deadlock is the stopped main thread
holding it itself, which step 2 rules out. As a last resort, a call that has not returned
after ``CALL_TIMEOUT`` can only be blocked in ``sem_wait`` on that lock (before owning it):
the thread is interrupted and its registers restored, abandoning the call, which leaves only
glibc's semaphore waiter count one too high (its ``sem_post`` then always makes one extra
futex wake-up). The mmap system call takes only kernel locks. Stopping every thread would
make the stop longer and stall the worker's C threads for nothing.

Signals: one that arrives for the main thread while it is stopped for us stays pending in
the kernel (blocked by the stop's mask) and is taken, with its ``siginfo``, when the mask is
restored, so a storm of queued real-time signals neither stops each step nor is reordered.
The few that cannot wait there (one already being delivered when we stopped, SIGSTOP, and
any signal while the thread is in ppoll/pselect6/epoll_pwait/sigsuspend with a mask of its
own, whose mask we must not touch) are held back and delivered when we detach (the first
with its original ``siginfo``, any others with ``tgkill``). Our traps (the return to pc 0,
the single step) are signals the kernel forces: a forced signal that is blocked is unblocked
and its handler reset to SIG_DFL, process-wide, so the stop's mask leaves them unblocked,
and a process that ignores SIGSEGV or SIGTRAP is declined before any stop. A system call
that the stop interrupts and the kernel does not restart (epoll_wait, sigtimedwait) returns
EINTR, as it does under any ptrace attach; Python retries it (PEP 475). A fault inside the
injected code is never forwarded (it would kill the worker
for our mistake): the registers are restored and the injection fails. The tracer blocks its
own signals during the stop so Ctrl-C cannot leave the target stopped mid-call. Only a
SIGKILL of leakhound inside the stop window (about a tenth of a millisecond) could leave
the target running our half-done call; gdb has the same window, only longer.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import secrets
import signal
import time
from dataclasses import dataclass

from leakhound.attach.base import AttachLog, Injection
from leakhound.attach.elf import EM_X86_64, ElfError, ElfFile, Symbol
from leakhound.attach.process import ignored_signals, tracer_pid
from leakhound.errors import (
    AttachFailed,
    AttachTimeout,
    MethodUnavailable,
    MissingSymbols,
    PermissionDenied,
    TargetBusy,
    TargetExited,
    TargetNotFound,
    TracerStuck,
)

# Seconds Py_AddPendingCall may take before we conclude it waits on the pending-calls lock.
CALL_TIMEOUT = 0.2
_STOP_TIMEOUT = 1.0  # for each ptrace stop to be reported
# After an abort with the thread running but still ours (its stop never came: in
# uninterruptible sleep, say), how long to wait for that stop: a seized thread that stops
# later stays stopped until its tracer detaches or exits, so giving up on it early would
# leave the worker frozen for as long as a long-lived watch/export runs.
_LATE_STOP_TIMEOUT = 30.0
_RETRIES = 30
_STACK_SCAN = 512
_RED_ZONE = 128

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

_SYS_MMAP = 9
_SYS_MUNMAP = 11
_SYS_FUTEX = 202
_SYS_TGKILL = 234
_SYS_RT_SIGSUSPEND = 130
_SYS_PSELECT6 = 270
_SYS_PPOLL = 271
_SYS_EPOLL_PWAIT = 281
_SYS_IO_PGETEVENTS = 333
_SYS_EPOLL_PWAIT2 = 441
_PROT_RW = 0x1 | 0x2
_MAP_PRIVATE_ANON = 0x02 | 0x20
_PAGE = 0x1000
_NO_SYSCALL = (1 << 64) - 1  # orig_rax = -1

_JOB_CONTROL = {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU}
_FAULTS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}
# The mask the thread runs our steps under: every signal blocked but the ones the kernel
# forces (our own traps: a forced signal that is blocked gets unblocked *and* its handler
# reset to SIG_DFL, process-wide), SIGKILL and SIGSTOP (cannot be blocked).
_TRAPS = (1 << (signal.SIGSEGV - 1)) | (1 << (signal.SIGTRAP - 1))  # what our steps raise
_STOP_MASK = ((1 << 64) - 1) & ~sum(
    1 << (sig - 1) for sig in (*_FAULTS, signal.SIGTRAP, signal.SIGKILL, signal.SIGSTOP)
)

# What the injection calls in the target: Py_AddPendingCall(PyRun_SimpleString, code).
CALLED_FUNCTIONS = ("Py_AddPendingCall", "PyRun_SimpleString")
# Functions inside which a thread may hold the pending-calls lock (3.8 - 3.13 names).
PENDING_FUNCTIONS = (
    "Py_AddPendingCall", "_PyEval_AddPendingCall", "Py_MakePendingCalls",
    "_PyEval_MakePendingCalls", "make_pending_calls", "_Py_HandlePending",
    "_push_pending_call", "_pop_pending_call",
)
_LIBPYTHON = re.compile(r"/libpython\d\.\d+[^/]*\.so[^/]*$")
_LIBC = re.compile(r"/(libc\.so(\.\d+)*|libc-[\d.]+\.so|ld-musl-[^/]*\.so[^/]*)$")


class _Regs(ctypes.Structure):
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


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str


@dataclass(frozen=True)
class Plan:
    """Every address the stop needs, resolved while the target runs."""

    pid: int
    python_object: str
    add_pending_call: int
    run_simple_string: int
    syscall_insn: int
    pending_ranges: tuple[tuple[int, int], ...]


class _Retry(Exception):
    """Not a safe point right now; nothing was changed in the target."""


class _Abort(Exception):
    """The injection failed; registers are restored and the target detached."""


def available() -> bool:
    return platform.system() == "Linux" and platform.machine() == "x86_64"


# ----------------------------------------------------------------------------- before the stop


def read_maps(pid: int) -> list[Mapping]:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            lines = fh.read().splitlines()
    except PermissionError:
        raise PermissionDenied(f"cannot read /proc/{pid}/maps: permission denied") from None
    except (FileNotFoundError, ProcessLookupError):
        raise TargetNotFound(f"no process with pid {pid}") from None
    maps = []
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) < 5:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        path = fields[5] if len(fields) > 5 else ""
        maps.append(Mapping(start, end, fields[1], int(fields[2], 16), int(fields[4]), path))
    return maps


def _open_object(pid: int, maps: list[Mapping], path: str) -> tuple[ElfFile, int]:
    """The ELF file behind ``path``'s mappings, and its load bias in the target."""
    mine = [m for m in maps if m.path == path]
    first = min(mine, key=lambda m: m.start)
    # map_files names exactly the mapped file (even if replaced on disk since); the target's
    # root is the fallback (containers), then the plain path.
    candidates = (
        f"/proc/{pid}/map_files/{first.start:x}-{first.end:x}",
        f"/proc/{pid}/root{path.removesuffix(' (deleted)')}",
        path,
    )
    for candidate in candidates:
        try:
            if os.stat(candidate).st_ino != first.inode:
                continue
            elf = ElfFile(candidate)
        except (OSError, ElfError):
            continue
        if elf.machine != EM_X86_64:
            raise MethodUnavailable(f"{path} in process {pid} is not an x86-64 object")
        try:
            return elf, elf.load_bias(first.start, first.offset)
        except ElfError as exc:
            raise MethodUnavailable(f"cannot place {path} in process {pid}: {exc}") from None
    raise MethodUnavailable(f"cannot read {path}, mapped in process {pid}")


def _read_memory(pid: int, address: int, length: int) -> bytes:
    buf = ctypes.create_string_buffer(length)
    local = _IoVec(ctypes.cast(buf, ctypes.c_void_p), length)
    remote = _IoVec(address, length)
    got = int(_libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
    if got != length:
        err = ctypes.get_errno()
        raise OSError(err, f"process_vm_readv at {address:#x}: {os.strerror(err)}")
    return buf.raw


def _write_memory(pid: int, address: int, data: bytes) -> None:
    buf = ctypes.create_string_buffer(data, len(data))
    local = _IoVec(ctypes.cast(buf, ctypes.c_void_p), len(data))
    remote = _IoVec(address, len(data))
    put = int(_libc.process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
    if put != len(data):
        err = ctypes.get_errno()
        raise OSError(err, f"process_vm_writev at {address:#x}: {os.strerror(err)}")


def _checked_address(pid: int, elf: ElfFile, bias: int, symbol: Symbol) -> int:
    """The symbol's address in the target, after checking the code there is the file's."""
    address = bias + symbol.value
    length = max(1, min(16, symbol.size or 16))
    try:
        same = _read_memory(pid, address, length) == elf.read(symbol.value, length)
    except OSError as exc:
        if exc.errno == 1:
            raise PermissionDenied(f"cannot read process {pid}'s memory: operation not permitted") from None
        raise MethodUnavailable(f"cannot read {symbol.name} in process {pid}: {exc}") from None
    if not same:
        raise MethodUnavailable(f"{symbol.name} in process {pid} does not match {elf.path}")
    return address


def _unnamed_callees(elf: ElfFile, symbol: Symbol) -> list[tuple[int, int]]:
    """Link-time ranges of unnamed functions ``symbol`` calls or jumps to (rel32), bounded by
    the next named function: where a stripped build keeps static helpers such as
    make_pending_calls. Over-approximate on purpose; a false hit only costs a retry."""
    named = [(s.value, elf.end_of(s)) for s in elf.functions.values() if s.size]
    body = elf.read(symbol.value, symbol.size)
    found = []
    for i in range(len(body) - 4):
        if body[i] not in (0xE8, 0xE9):
            continue
        target = symbol.value + i + 5 + int.from_bytes(body[i + 1:i + 5], "little", signed=True)
        if elf.file_offset(target) is None or any(lo <= target < hi for lo, hi in named):
            continue
        found.append((target, elf.next_start(target)))
    return found


def plan(pid: int) -> Plan:
    if not available():
        raise MethodUnavailable(f"the ptrace method supports x86-64 Linux only, not {platform.machine()}")
    maps = read_maps(pid)
    paths = {m.path for m in maps if m.path.startswith("/")}
    python_path = next((p for p in sorted(paths) if _LIBPYTHON.search(p)), None)
    if python_path is None:
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            raise PermissionDenied(f"cannot read process {pid}'s executable: permission denied") from None
        python_path = exe if exe in paths else None
    libc_path = next((p for p in sorted(paths) if _LIBC.search(p)), None)
    if python_path is None or libc_path is None:
        raise MethodUnavailable(f"process {pid}: cannot find its libpython/executable and libc mappings")
    if ignored_signals(pid) & _TRAPS:
        # Our traps are forced signals: the kernel would reset an ignored one to SIG_DFL.
        raise MethodUnavailable(
            f"process {pid} ignores SIGSEGV or SIGTRAP, which the ptrace method's steps raise"
        )
    python, python_bias = _open_object(pid, maps, python_path)
    libc, libc_bias = _open_object(pid, maps, libc_path)
    missing = [name for name in CALLED_FUNCTIONS if name not in python.functions]
    if missing:
        raise MissingSymbols(
            f"process {pid}'s Python lacks the symbols leakhound calls: {', '.join(missing)} "
            f"(not in the symbol tables of {python_path})"
        )
    if "syscall" not in libc.functions:
        raise MethodUnavailable(f"process {pid}: {libc_path} has no syscall() function")
    add_pending = _checked_address(pid, python, python_bias, python.functions["Py_AddPendingCall"])
    run_simple = _checked_address(pid, python, python_bias, python.functions["PyRun_SimpleString"])
    syscall_fn = libc.functions["syscall"]
    body = libc.read(syscall_fn.value, max(syscall_fn.size, 16))
    # glibc: "syscall; cmp $-4095,%rax"; musl and others: the first syscall opcode.
    at = body.find(b"\x0f\x05\x48\x3d\x01\xf0\xff\xff")
    at = at if at >= 0 else body.find(b"\x0f\x05")
    if at < 0:
        raise MethodUnavailable(f"no syscall instruction in {libc_path}'s syscall()")
    syscall_insn = _checked_address(
        pid, libc, libc_bias, Symbol("syscall instruction", syscall_fn.value + at, 2)
    )
    ranges = [
        (python_bias + s.value, python_bias + python.end_of(s))
        for name in PENDING_FUNCTIONS
        if (s := python.functions.get(name)) is not None
    ]
    if "make_pending_calls" not in python.functions and "Py_MakePendingCalls" in python.functions:
        ranges += [
            (python_bias + lo, python_bias + hi)
            for lo, hi in _unnamed_callees(python, python.functions["Py_MakePendingCalls"])
        ]
    return Plan(
        pid=pid,
        python_object=python_path,
        add_pending_call=add_pending,
        run_simple_string=run_simple,
        syscall_insn=syscall_insn,
        pending_ranges=tuple(sorted(set(ranges))),
    )


# -------------------------------------------------------------------------------- the stop


class _Tracee:
    """One PTRACE_SEIZE .. PTRACE_DETACH session on the target's main thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.attached = False
        self.in_signal_stop = False  # the last stop was a signal-delivery-stop
        self.deferred: list[tuple[int, bytes]] = []  # signals held back, with their siginfo
        self.saved_regs: _Regs | None = None
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
                raise TargetExited(f"process {self.pid} is no longer traced (it exited)") from None
            if pid:
                if os.WIFEXITED(status) or os.WIFSIGNALED(status):
                    self.attached = False
                    raise TargetExited(f"process {self.pid} exited during injection")
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

    def get_regs(self) -> _Regs:
        regs = _Regs()
        self.call(_PTRACE_GETREGS, 0, ctypes.addressof(regs))
        return regs

    def set_regs(self, regs: _Regs) -> None:
        self.call(_PTRACE_SETREGS, 0, ctypes.addressof(regs))

    def save(self) -> _Regs:
        regs = self.get_regs()
        self.saved_regs = _Regs.from_buffer_copy(regs)
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

    def hold_signals(self, regs: _Regs) -> None:
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
        if _temporary_mask(self.pid, regs):
            if mask.value & _TRAPS:
                raise _Retry("the main thread blocks SIGSEGV/SIGTRAP for a system call")
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

    def await_late_stop(self, timeout: float, log: AttachLog) -> None:
        """The thread is ours but running (the stop we asked for, or the end of a step, never
        came): wait for it to stop, so that it can be restored and detached. A signal it
        stops for is held back and forwarded on detach; our own trap is not.

        Once its registers or signal mask were changed, it is waited for however long it
        takes: let go (our exit detaches it) it would resume in the middle of our step, with
        most signals blocked. Before that, ``timeout`` bounds the wait (TracerStuck)."""
        if self.stopped:
            return
        try:
            self.call(_PTRACE_INTERRUPT)
        except OSError:
            pass
        status = self.wait(timeout)
        while status is None and (self.saved_regs is not None or self.saved_mask is not None):
            log(f"ptrace: process {self.pid}'s main thread is in the middle of an injection step and "
                f"has not stopped yet (state {_thread_state(self.pid)}); waiting, to put it back as it was")
            status = self.wait(timeout)
        if status is None:
            raise TracerStuck(
                f"process {self.pid}'s main thread never stopped for leakhound to let it go "
                f"(state {_thread_state(self.pid)}); it stays attached to this leakhound process "
                "until it stops or leakhound exits"
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
            _libc.syscall(_SYS_TGKILL, self.pid, self.pid, sig)

    # ---- steps

    def seize_and_stop(self) -> None:
        self.call(_PTRACE_SEIZE)
        self.attached = True
        self.call(_PTRACE_INTERRUPT)
        while True:
            status = self.wait(_STOP_TIMEOUT)
            if status is None:
                raise _Abort("the main thread did not stop")
            sig = os.WSTOPSIG(status)
            if status >> 16 == _PTRACE_EVENT_STOP:
                if sig in _JOB_CONTROL:
                    raise _Abort("the process is stopped (job control); it would not run the bootstrap")
                return
            self.defer_signal(sig)
            self.call(_PTRACE_CONT, 0, 0)

    def syscall(self, base: _Regs, insn: int, number: int, *args: int) -> int:
        """Run one system call in the thread by single-stepping libc's syscall instruction."""
        regs = _Regs.from_buffer_copy(base)
        regs.rip, regs.rax, regs.orig_rax = insn, number, _NO_SYSCALL
        for name, value in zip(("rdi", "rsi", "rdx", "r10", "r8", "r9"), args, strict=False):
            setattr(regs, name, value & _NO_SYSCALL)
        self.set_regs(regs)
        for _ in range(16):
            self.call(_PTRACE_SINGLESTEP, 0, 0)
            status = self.wait(_STOP_TIMEOUT)
            if status is None:
                raise _Abort("the system call did not complete")
            sig = os.WSTOPSIG(status)
            if status >> 16:
                continue  # a leftover interrupt stop: step again
            if sig == signal.SIGTRAP:
                done = self.get_regs()
                if done.rip != insn + 2:
                    raise _Abort(f"single step stopped at {done.rip:#x}, not after the syscall")
                return int(done.rax)
            if sig in _FAULTS:
                raise _Abort(f"signal {sig} while running a system call")
            self.defer_signal(sig)
        raise _Abort("too many signals while running a system call")

    def call_function(self, base: _Regs, function: int, *args: int) -> int | None:
        """Call ``function(*args)`` on the thread; its return value, or None when it had to be
        abandoned (blocked past CALL_TIMEOUT in the pending-calls lock's sem_wait)."""
        regs = _Regs.from_buffer_copy(base)
        sp = ((base.rsp - _RED_ZONE - 256) & ~0xF) - 8
        self.call(_PTRACE_POKEDATA, sp, 0)  # return address 0: the return faults, our trap
        regs.rsp, regs.rip, regs.rax, regs.orig_rax = sp, function, 0, _NO_SYSCALL
        for name, value in zip(("rdi", "rsi", "rdx", "rcx"), args, strict=False):
            setattr(regs, name, value)
        self.set_regs(regs)
        self.call(_PTRACE_CONT, 0, 0)
        deadline = time.monotonic() + CALL_TIMEOUT
        while True:
            status = self.wait(max(0.0, deadline - time.monotonic()))
            if status is None:
                return self._abandon(deadline)
            sig = os.WSTOPSIG(status)
            if status >> 16:
                self.call(_PTRACE_CONT, 0, 0)
                continue
            if sig == signal.SIGSEGV:
                done = self.get_regs()
                if done.rip == 0 and done.rsp == sp + 8:
                    return int(done.rax)
            if sig in _FAULTS or sig == signal.SIGTRAP:
                raise _Abort(f"the injected call faulted (signal {sig}); the target was restored")
            self.defer_signal(sig)
            self.call(_PTRACE_CONT, 0, 0)

    def _abandon(self, deadline: float) -> int | None:
        self.call(_PTRACE_INTERRUPT)
        hard = deadline + 1.0
        while True:
            status = self.wait(_STOP_TIMEOUT)
            if status is None:
                raise _Abort("the injected call neither returned nor stopped")
            if status >> 16 == 0 and os.WSTOPSIG(status) not in (signal.SIGSEGV, signal.SIGTRAP):
                self.defer_signal(os.WSTOPSIG(status))
                self.call(_PTRACE_CONT, 0, 0)
                continue
            regs = self.get_regs()
            if regs.rip == 0 and status >> 16 == 0:
                return int(regs.rax)  # it returned just now
            if regs.orig_rax == _SYS_FUTEX or time.monotonic() > hard:
                return None
            self.call(_PTRACE_CONT, 0, 0)
            time.sleep(0.01)
            self.call(_PTRACE_INTERRUPT)


def _temporary_mask(pid: int, regs: _Regs) -> bool:
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
            return _read_memory(pid, regs.r9, 8) != bytes(8)
        except OSError:
            return True
    return False


def _may_hold_pending_lock(tracee: _Tracee, regs: _Regs, plan_: Plan) -> str:
    def pending(address: int) -> bool:
        return any(lo <= address < hi for lo, hi in plan_.pending_ranges)

    if pending(regs.rip):
        return f"main thread at {regs.rip:#x}, in the pending-call code"
    if regs.orig_rax != _NO_SYSCALL:
        return ""  # blocked in a system call: it holds no pending-calls lock (see above)
    try:
        stack = _read_memory(tracee.pid, regs.rsp, _STACK_SCAN)
    except OSError:
        stack = _read_memory(tracee.pid, regs.rsp, 64)
    for i in range(0, len(stack) - 7, 8):
        word = int.from_bytes(stack[i:i + 8], "little")
        if pending(word):
            return f"main thread called from the pending-call code ({word:#x} on its stack)"
    return ""


@dataclass
class _Outcome:
    queued: bool
    stop_ms: float
    reason: str = ""
    retry: bool = False
    page: int = 0


def _attempt(plan_: Plan, code: bytes, note_fd: int | None, log: AttachLog) -> _Outcome:
    pid = plan_.pid
    tracee = _Tracee(pid)
    token = secrets.token_hex(8)
    blob = code + b"\0" + token.encode()
    size = (len(blob) + _PAGE - 1) & ~(_PAGE - 1)
    outcome = _Outcome(queued=False, stop_ms=0.0)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    began = time.perf_counter()
    try:
        tracee.seize_and_stop()
        regs = tracee.save()
        busy = _may_hold_pending_lock(tracee, regs, plan_)
        if busy:
            raise _Retry(busy)
        page = tracee.syscall(regs, plan_.syscall_insn, _SYS_MMAP, 0, size, _PROT_RW, _MAP_PRIVATE_ANON, -1, 0)
        if page >= (1 << 64) - 4096:
            raise _Abort(f"mmap in the target failed (errno {(1 << 64) - page})")
        try:
            _write_memory(pid, page, blob)
            if note_fd is not None:
                note = f"{page:x} {size} {len(code) + 1} {token}\n".encode()
                os.ftruncate(note_fd, 0)
                os.pwrite(note_fd, note, 0)
        except BaseException:
            tracee.syscall(regs, plan_.syscall_insn, _SYS_MUNMAP, page, size)
            raise
        # If the call faults the page stays mapped: it may already be queued.
        rc = tracee.call_function(regs, plan_.add_pending_call, plan_.run_simple_string, page)
        if rc is None or rc & 0xFFFFFFFF:
            # Not queued: the page is ours to take back now.
            tracee.syscall(regs, plan_.syscall_insn, _SYS_MUNMAP, page, size)
            if rc is None:
                raise _Abort("Py_AddPendingCall did not return (pending-calls lock held); call abandoned")
            raise _Retry("the pending-call queue is full")
        outcome.queued, outcome.page = True, page
    except _Retry as exc:
        outcome.reason, outcome.retry = str(exc), True
    except _Abort as exc:
        outcome.reason = str(exc)
    except OSError as exc:
        if not tracee.attached:
            raise
        outcome.reason = f"ptrace: {exc}"
    finally:
        try:
            if tracee.attached and not tracee.stopped:
                log(f"ptrace: {outcome.reason or 'aborted'}; waiting for the main thread's stop to let it go")
                tracee.await_late_stop(_LATE_STOP_TIMEOUT, log)
            if tracee.attached:
                tracee.restore()
            tracee.detach()
        except OSError as exc:
            if exc.errno != 3:  # ESRCH: it exited meanwhile, nothing left to restore
                raise
        finally:
            outcome.stop_ms = (time.perf_counter() - began) * 1000.0
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    if tracee.deferred:
        log(f"forwarded signals held during the stop: {[sig for sig, _ in tracee.deferred]}")
    return outcome



def _thread_state(pid: int) -> str:
    try:
        return _main_thread_state(pid)
    except TargetNotFound:
        return "gone"


def _main_thread_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        raise TargetNotFound(f"no process with pid {pid}") from None


def inject(
    pid: int, code: str, *, timeout: float, log: AttachLog, page_note: str | None = None
) -> Injection:
    """Queue ``code`` as a pending call in ``pid``. ``page_note`` is a file the bootstrap reads
    to unmap the page holding the code."""
    plan_ = plan(pid)
    log(
        f"ptrace: {plan_.python_object}: Py_AddPendingCall={plan_.add_pending_call:#x} "
        f"PyRun_SimpleString={plan_.run_simple_string:#x} syscall={plan_.syscall_insn:#x}, "
        f"{len(plan_.pending_ranges)} pending-call ranges"
    )
    deadline = time.monotonic() + timeout
    note_fd = None
    if page_note is not None:
        note_fd = os.open(page_note, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if os.geteuid() == 0:
            os.fchown(note_fd, os.stat(os.path.dirname(page_note)).st_uid, -1)
    try:
        for attempt in range(1, _RETRIES + 1):
            state = _main_thread_state(pid)
            if state in ("Z", "X"):
                raise TargetExited(f"process {pid}'s main thread has exited")
            if state == "D":
                # In uninterruptible sleep it would not stop for us: wait for it to run.
                log(f"attempt {attempt}: the main thread is in uninterruptible sleep (D); retrying")
                if time.monotonic() + 0.1 > deadline:
                    break
                time.sleep(0.05 * attempt)
                continue
            if state in ("T", "t"):
                tracer = tracer_pid(pid)
                if not tracer:
                    raise AttachFailed(f"process {pid} is stopped (SIGSTOP); it would not run the bootstrap")
            tracer = tracer_pid(pid)
            if tracer:
                log(f"attempt {attempt}: process {pid} is traced by pid {tracer}; retrying")
                if time.monotonic() + 0.1 > deadline:
                    raise TargetBusy(f"process {pid} is being traced by pid {tracer}")
                time.sleep(0.05 * attempt)
                continue
            try:
                outcome = _attempt(plan_, code.encode(), note_fd, log)
            except OSError as exc:
                if exc.errno == 1:
                    if tracer_pid(pid):
                        continue
                    raise PermissionDenied(f"cannot ptrace process {pid}: operation not permitted") from None
                if exc.errno == 3:
                    raise TargetNotFound(f"process {pid} exited before it could be attached") from None
                raise AttachFailed(f"ptrace on process {pid} failed: {exc}") from None
            log(f"attempt {attempt}: stopped {outcome.stop_ms:.3f} ms"
                + (f", bootstrap at {outcome.page:#x}" if outcome.queued else "")
                + (f" ({outcome.reason})" if outcome.reason else ""))
            if outcome.queued:
                return Injection(method="ptrace", attach_stop_ms=outcome.stop_ms, attempts=attempt)
            if not outcome.retry:
                raise AttachFailed(f"ptrace injection into {pid} failed: {outcome.reason}")
            if time.monotonic() + 0.005 * attempt > deadline:
                break
            time.sleep(0.002 * attempt)
    finally:
        if note_fd is not None:
            os.close(note_fd)
    raise AttachTimeout(f"process {pid} never reached a point where injection is safe")
