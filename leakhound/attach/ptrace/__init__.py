"""The ptrace method: queue the bootstrap with a few raw ptrace calls (x86-64 Linux).

Same end result as the gdb method (``Py_AddPendingCall(PyRun_SimpleString, code)``, run by
the main thread at its next bytecode boundary), but every address is resolved from the ELF
files mapped in the target *before* it is stopped (``plan.py``), so the stop itself is a
handful of system calls (``tracee.py``), a fraction of a millisecond to a few milliseconds
on a loaded machine instead of gdb's ~50 ms.

The stop is done by a tracer helper (``stop.py``), a short-lived ``python -I -S`` process
in a session of its own that ``inject.py`` starts for each injection: whatever happens to
the CLI (SIGKILL at any instant, SIGTERM, Ctrl-C, its process group killed), the helper
finishes the stop, restores the thread, detaches and exits; it also removes the request's
private directory if the CLI died without doing so. No ``PTRACE_O_EXITKILL``: if the
helper itself is killed (only a SIGKILL sent to its own pid, or its whole cgroup killed,
can do that) the kernel detaches the thread, as it did for the CLI before.

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
   userspace lock. The string is written with ``process_vm_writev``; it begins with a
   statement that lists its own page in ``sys`` (PyRun_SimpleString compiles the whole
   string before running it, so nothing reads the page after): the payload's thread unmaps
   it once loaded (through its extension, no ctypes), the bootstrap itself (ctypes) when
   the payload cannot start, so the page goes whenever the bootstrap runs, even after the
   CLI gave up (TargetBlocked) and its directory is gone (stop.bootstrap_text). Not
   queued, the helper unmaps it at once.
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
after ``CALL_TIMEOUT`` is interrupted: one that waits in a futex is blocked in ``sem_wait`` on
that lock (before owning it, nothing queued yet): its registers are restored, abandoning
the call, which leaves only glibc's semaphore waiter count one too high (its ``sem_post``
then always makes one extra futex wake-up). A thread in a futex *wake* is releasing the lock
after queueing the call: it is let finish (abandoned there, the call would stay queued with
its page unmapped, or the lock held for good), as is one anywhere else, up to a second more;
after that the stop fails with the page left mapped for the bootstrap to take back. The
mmap system call takes only kernel locks. Stopping every thread would make the stop longer
and stall the worker's C threads for nothing.

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
EINTR, as it does under any ptrace attach; Python retries it (PEP 475). But an idle loop's
long epoll_wait made by CPython's select module returns 0 ("no events"), and a futex wait of
CPython's lock acquisition returns EINTR (as after a signal's handler), so that the main
thread runs the bootstrap (stop.idle_wait). A fault inside the
injected code is never forwarded (it would kill the worker for our mistake): the registers
are restored and the injection fails. The helper blocks its own signals during the stop.
"""

from leakhound.attach.ptrace.inject import inject
from leakhound.attach.ptrace.plan import Mapping, Plan, available, plan, read_maps
from leakhound.attach.ptrace.tracee import CALL_TIMEOUT

__all__ = ["CALL_TIMEOUT", "Mapping", "Plan", "available", "inject", "plan", "read_maps"]
