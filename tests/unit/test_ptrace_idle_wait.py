"""Which blocked waits the ptrace stop ends, and how (stop.idle_wait), without a target: the
registers of an interrupted epoll_wait or futex wait, and a stack in this process's memory
(read back with process_vm_readv, as the helper reads the target's)."""

from __future__ import annotations

import ctypes
import os

import pytest

from leakhound.attach.ptrace import stop
from leakhound.attach.ptrace.plan import code_ranges, parse_maps
from leakhound.attach.ptrace.tracee import NO_SYSCALL, Regs

SELECT_SO = "/opt/py/lib/python3.11/lib-dynload/select.cpython-311-x86_64-linux-gnu.so"
MAPS = f"""\
55d0c0a00000-55d0c0a01000 r-xp 00000000 08:01 1311 /opt/py/bin/python3.11
7f1000028000-7f10001bd000 r-xp 00028000 08:01 2001 /usr/lib/x86_64-linux-gnu/libc.so.6
7f2000000000-7f2000100000 r-xp 00000000 08:01 3001 /opt/py/lib/libpython3.11.so.1.0
7f3000000000-7f3000008000 r-xp 00002000 08:01 4001 {SELECT_SO}
7f3000008000-7f300000a000 r--p 0000a000 08:01 4001 {SELECT_SO}
7f4000000000-7f4000040000 r-xp 00000000 08:01 5001 /opt/venv/lib/libzmq.so.5
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
"""
LIBC, PYTHON = "/usr/lib/x86_64-linux-gnu/libc.so.6", "/opt/py/lib/libpython3.11.so.1.0"
IN_LIBC, IN_SELECT, IN_ZMQ, IN_PYTHON = 0x7F1000030000, 0x7F3000001234, 0x7F4000001234, 0x7F2000004321
LOCK_WAIT = (0x7F2000002000, 0x7F2000002200)  # PyThread_acquire_lock_timed, say
IN_LOCK_WAIT = 0x7F2000002070
EINTR, ERESTARTSYS = (1 << 64) - 4, (1 << 64) - 512
FUTEX_WAIT_BITSET_PRIVATE, FUTEX_WAKE_PRIVATE = 0x189, 0x81


def test_code_ranges_are_the_select_module_and_python_then_all_else_but_libc() -> None:
    wake, other = code_ranges(parse_maps(MAPS), PYTHON, LIBC)
    assert wake == ((0x7F2000000000, 0x7F2000100000), (0x7F3000000000, 0x7F3000008000))
    assert other == ((0x55D0C0A00000, 0x55D0C0A01000), (0x7F4000000000, 0x7F4000040000))


def _plan() -> dict[str, object]:
    wake, other = code_ranges(parse_maps(MAPS), PYTHON, LIBC)
    return {"wake_ranges": [list(r) for r in wake], "other_code_ranges": [list(r) for r in other],
            "lock_wait_ranges": [list(LOCK_WAIT)]}


def _regs(stack: ctypes.Array[ctypes.c_uint64], *, nr: int = 232, rax: int = EINTR, timeout: int = -1,
          sigmask: int = 0, op: int = 0) -> Regs:
    regs = Regs()
    regs.orig_rax, regs.rax, regs.r10, regs.r8, regs.rsi = nr, rax, timeout & 0xFFFFFFFF, sigmask, op
    regs.rsp = ctypes.addressof(stack)
    return regs


def _stack(*words: int) -> ctypes.Array[ctypes.c_uint64]:
    return (ctypes.c_uint64 * 64)(*words)  # as much as the helper reads (_STACK_SCAN): no neighbour read


def test_an_interrupted_epoll_wait_of_the_select_module_is_woken() -> None:
    stack = _stack(0, 7, IN_LIBC, 0x1234, IN_SELECT, IN_ZMQ)  # libc's own words are skipped
    said = stop.idle_wait(os.getpid(), _regs(stack), _plan())
    assert said is not None and said[1] == 0  # returns 0: no events
    assert said[0].startswith("the main thread waits in epoll_wait (no timeout) for CPython's select module")
    long = stop.idle_wait(os.getpid(), _regs(stack, timeout=3_600_000), _plan())
    assert long is not None and "(3600000 ms)" in long[0]
    # built into the python object (no select extension), the same
    assert stop.idle_wait(os.getpid(), _regs(_stack(IN_PYTHON)), _plan())
    # epoll_pwait without a signal mask of its own, the same
    assert stop.idle_wait(os.getpid(), _regs(stack, nr=281), _plan())


def test_a_futex_wait_of_cpythons_lock_acquisition_returns_eintr() -> None:
    stack = _stack(IN_LIBC, 5, IN_LIBC, IN_LOCK_WAIT, IN_PYTHON)
    said = stop.idle_wait(os.getpid(), _regs(stack, nr=202, rax=ERESTARTSYS, op=FUTEX_WAIT_BITSET_PRIVATE), _plan())
    assert said is not None and said[1] == EINTR and "lock wait" in said[0]


@pytest.mark.parametrize("case", ["another library's", "no caller found", "short timeout", "zero timeout",
                                  "not interrupted", "another call", "not in a call", "own mask",
                                  "futex of the GIL", "futex of a library", "futex wake", "futex not interrupted"])
def test_every_other_wait_is_left_alone(case: str) -> None:
    stack = _stack(0, IN_SELECT)
    regs: Regs = {
        "another library's": lambda: _regs(_stack(IN_ZMQ, IN_SELECT)),  # libzmq's: its return comes first
        "no caller found": lambda: _regs(_stack(1, 2, 3)),
        "short timeout": lambda: _regs(stack, timeout=stop.WAKE_AFTER_MS),
        "zero timeout": lambda: _regs(stack, timeout=0),
        "not interrupted": lambda: _regs(stack, rax=(1 << 64) - 514),  # -ERESTARTNOHAND: restarted
        "another call": lambda: _regs(stack, nr=7),  # poll(2): a 0 there is not "no events" for all callers
        "not in a call": lambda: _regs(stack, nr=NO_SYSCALL),
        "own mask": lambda: _regs(stack, nr=281, sigmask=0x7FFD00001000),
        # a futex wait elsewhere in CPython (the GIL's condition variable) or a library's
        "futex of the GIL": lambda: _regs(_stack(IN_PYTHON, IN_LOCK_WAIT), nr=202, rax=ERESTARTSYS,
                                          op=FUTEX_WAIT_BITSET_PRIVATE),
        "futex of a library": lambda: _regs(_stack(IN_ZMQ, IN_LOCK_WAIT), nr=202, rax=ERESTARTSYS, op=0x80),
        "futex wake": lambda: _regs(_stack(IN_LOCK_WAIT), nr=202, rax=ERESTARTSYS, op=FUTEX_WAKE_PRIVATE),
        "futex not interrupted": lambda: _regs(_stack(IN_LOCK_WAIT), nr=202, rax=0, op=FUTEX_WAIT_BITSET_PRIVATE),
    }[case]()
    assert stop.idle_wait(os.getpid(), regs, _plan()) is None


GIL = {"gil_check": 0x7F2000003000, "gil_ensure": 0x7F2000003100, "gil_release": 0x7F2000003200}


def test_a_c_librarys_long_epoll_wait_runs_the_bootstrap_there() -> None:
    # uvloop's libuv (here libzmq's mapping stands in): epoll_pwait, no mask, no timeout, its
    # return address first past libc's frames. Never woken (idle_wait): called into instead.
    stack = _stack(IN_LIBC, 9, IN_ZMQ, IN_SELECT)
    for regs in (_regs(stack, nr=281), _regs(stack), _regs(stack, timeout=3_600_000)):
        said = stop.call_in_wait(os.getpid(), regs, {**_plan(), **GIL})
        assert said is not None and said.endswith("for a C library"), said
        assert stop.idle_wait(os.getpid(), regs, _plan()) is None
    assert "epoll_wait (no timeout)" in (stop.call_in_wait(os.getpid(), _regs(stack), {**_plan(), **GIL}) or "")


@pytest.mark.parametrize(("nr", "name"), [(0, "read"), (45, "recvfrom"), (43, "accept"), (288, "accept4"),
                                          (61, "wait4"), (23, "select"), (270, "pselect6"), (34, "pause")])
def test_a_blocking_call_of_cpythons_or_a_librarys_runs_the_bootstrap_there(nr: int, name: str) -> None:
    # os.read (a pool worker's next task), socket.recv, accept, os.waitpid, select.select ...:
    # restarted by the kernel after the stop (-ERESTARTSYS) and never ending for us.
    cpython, library = _stack(IN_LIBC, IN_PYTHON), _stack(IN_LIBC, IN_ZMQ)
    for stack, whose in ((cpython, "CPython"), (library, "a C library")):
        regs = _regs(stack, nr=nr, rax=ERESTARTSYS)
        regs.rdi = 5  # (pselect6: five descriptors, not a sleep)
        said = stop.call_in_wait(os.getpid(), regs, {**_plan(), **GIL})
        assert said == f"the main thread waits in {name} for {whose}", said


SEMLOCK = (0x7F5000000000, 0x7F5000010000)  # _multiprocessing.cpython-311-x86_64-linux-gnu.so's text
IN_SEMLOCK = 0x7F5000000400


def test_a_multiprocessing_semaphore_wait_runs_the_bootstrap_there() -> None:
    # a pool's idle worker waits in SemLock.acquire (sem_wait: a futex wait) for the one that
    # reads the next task; any other futex wait is never called into
    sem, python, lib = _stack(IN_LIBC, IN_SEMLOCK), _stack(IN_LIBC, IN_PYTHON), _stack(IN_LIBC, IN_ZMQ)
    _wake, other = code_ranges(parse_maps(MAPS), PYTHON, LIBC)
    plan = {**_plan(), **GIL, "semlock_ranges": [list(SEMLOCK)],
            "other_code_ranges": [list(r) for r in (*other, SEMLOCK)]}  # (it is other code too)
    said = stop.call_in_wait(os.getpid(), _regs(sem, nr=202, rax=ERESTARTSYS, op=FUTEX_WAIT_BITSET_PRIVATE), plan)
    assert said == "the main thread waits for a multiprocessing lock (sem_wait)"
    for stack in (python, lib):
        assert stop.call_in_wait(os.getpid(), _regs(stack, nr=202, rax=ERESTARTSYS, op=FUTEX_WAIT_BITSET_PRIVATE),
                                 plan) is None
    assert stop.call_in_wait(os.getpid(), _regs(sem, nr=202, rax=0, op=FUTEX_WAIT_BITSET_PRIVATE), plan) is None
    assert stop.call_in_wait(os.getpid(), _regs(sem, nr=202, rax=ERESTARTSYS, op=FUTEX_WAKE_PRIVATE), plan) is None


def test_poll_runs_the_bootstrap_there_past_its_short_timeouts() -> None:
    stack = _stack(IN_PYTHON)
    regs = _regs(stack, nr=7, rax=(1 << 64) - 516)  # -ERESTART_RESTARTBLOCK
    for timeout, said in ((-1, "the main thread waits in poll (no timeout) for CPython"),
                          (5000, "the main thread waits in poll (5000 ms) for CPython"), (50, None), (0, None)):
        regs.rdx = timeout & 0xFFFFFFFF
        assert stop.call_in_wait(os.getpid(), regs, {**_plan(), **GIL}) == said


@pytest.mark.parametrize("case", ["the select module's", "python's epoll", "no caller found", "short timeout",
                                  "zero timeout", "own mask", "not interrupted", "a futex wait of CPython's",
                                  "a futex wait of a library's", "the lock wait", "a sleep (3.10)",
                                  "clock_nanosleep", "a libc-only stack", "no GIL functions"])
def test_no_other_wait_is_called_into(case: str) -> None:
    lib = _stack(IN_ZMQ)
    select, python, nothing = _stack(IN_LIBC, IN_SELECT), _stack(IN_PYTHON, IN_ZMQ), _stack(1, 2, 3)  # kept alive
    lock, only_libc = _stack(IN_LIBC, IN_LOCK_WAIT), _stack(IN_LIBC, IN_LIBC)
    plan = {**_plan(), **GIL}
    regs = {
        "the select module's": lambda: _regs(select),  # woken instead (idle_wait)
        "python's epoll": lambda: _regs(python),
        "no caller found": lambda: _regs(nothing, nr=0, rax=ERESTARTSYS),
        "short timeout": lambda: _regs(lib, timeout=stop.WAKE_AFTER_MS),
        "zero timeout": lambda: _regs(lib, timeout=0),
        "own mask": lambda: _regs(lib, nr=281, sigmask=0x7FFD00001000),
        "not interrupted": lambda: _regs(lib, rax=0),
        # the GIL's own wait among CPython's: a second wait for the GIL inside it would break it
        "a futex wait of CPython's": lambda: _regs(python, nr=202, rax=ERESTARTSYS, op=FUTEX_WAIT_BITSET_PRIVATE),
        "a futex wait of a library's": lambda: _regs(lib, nr=202, rax=ERESTARTSYS, op=FUTEX_WAIT_BITSET_PRIVATE),
        "the lock wait": lambda: _regs(lock, nr=0, rax=ERESTARTSYS),
        "a sleep (3.10)": lambda: _regs(python, nr=270, rax=ERESTARTSYS),  # pselect6, no descriptors
        "clock_nanosleep": lambda: _regs(python, nr=230, rax=(1 << 64) - 516),
        "a libc-only stack": lambda: _regs(only_libc, nr=0, rax=ERESTARTSYS),
        "no GIL functions": lambda: _regs(lib),
    }[case]()
    if case == "no GIL functions":
        plan = _plan()
    assert stop.call_in_wait(os.getpid(), regs, plan) is None


def _code(data: bytes) -> tuple[ctypes.Array[ctypes.c_char], int]:
    buf = ctypes.create_string_buffer(data, len(data))
    return buf, ctypes.addressof(buf)


def _rel32(frm: int, to: int) -> bytes:
    return (to - frm).to_bytes(4, "little", signed=True)


@pytest.mark.parametrize("call", ["direct", "plt", "plt with endbr64 and bnd", "got"])
def test_the_caller_is_the_return_address_of_a_call_into_libc_not_a_stale_word_before_it(call: str) -> None:
    # Above the read's own frame in libc, a word nobody wrote for this call (padding, or the
    # upper half of a 32-bit argument's slot) points into a C library's code; the word after
    # it is the return address of a call into libc from CPython's code: that one is the caller.
    libc, libc_at = _code(b"\x90" * 32)
    slot, slot_at = _code((libc_at + 8).to_bytes(8, "little"))
    stale, stale_at = _code(b"\x90" * 32)
    caller, caller_at = _code(b"\x90" * 64)
    after = caller_at + 16  # the return address: the call instruction ends there
    if call == "got":
        ctypes.memmove(after - 6, b"\xff\x15" + _rel32(after, slot_at), 6)
    else:
        stub_code = {"direct": b"", "plt": b"\xff\x25",
                     "plt with endbr64 and bnd": b"\xf3\x0f\x1e\xfa\xf2\xff\x25"}[call]
        stub, stub_at = _code(stub_code + b"\0" * 4 + b"\x90" * 8)
        if stub_code:
            ctypes.memmove(stub_at + len(stub_code), _rel32(stub_at + len(stub_code) + 4, slot_at), 4)
        ctypes.memmove(after - 5, b"\xe8" + _rel32(after, libc_at + 4 if call == "direct" else stub_at), 5)
    plan = {"wake_ranges": [[caller_at, caller_at + 64]], "other_code_ranges": [[stale_at, stale_at + 32]],
            "libc_code_ranges": [[libc_at, libc_at + 32]]}
    stack = _stack(7, stale_at + 8, after)
    regs = _regs(stack, nr=0, rax=ERESTARTSYS)
    regs.rip = libc_at + 2
    assert stop._caller(os.getpid(), regs, plan) == "select"
    # with no return address of a call into libc found, the first word into code, as before
    assert stop._caller(os.getpid(), _regs(_stack(7, stale_at + 8, stale_at + 16)), plan) == "other"
    assert stop._caller(os.getpid(), _regs(_stack(7, stale_at + 8, caller_at + 8)), plan) == "other"


@pytest.mark.parametrize(("code", "call"), [
    ("ffd0", True), ("41ffd3", True), ("ff5008", True), ("ff1424", True), ("ff542408", True),
    ("ff9424f0000000", True), ("41ff9210000000", True), ("ff10", True), ("ff142500100000", True),
    ("ffe0", False), ("ff2510000000", False), ("90", False), ("ff15", False), ("0f05", False),
])
def test_an_indirect_call_is_told_by_its_encoding(code: str, call: bool) -> None:
    # call rax, call r11 (libffi's), call [rax+8], call [rsp], call [rsp+8], call [rsp+0xf0],
    # call [r10+0x10], call [rax], call [0x1000]; not jmp rax, jmp [rip+x], nops, a bare FF 15, syscall
    assert stop._indirect_call_ends(bytes.fromhex(code).rjust(7, b"\x90")) is call


RESTART_BLOCK = (1 << 64) - 516  # -ERESTART_RESTARTBLOCK


def test_a_restart_syscall_that_restarts_libcs_poll_is_that_poll() -> None:
    """An interrupted poll(2) is restart_syscall(2) from then on (pyzmq's recv(), inspected
    once, then never again): it is the poll where its syscall instruction is in libc's poll(),
    or (glibc 2.41+: the syscall in a helper) a return address into poll() just after a call
    is among the first words of its stack; a sleep's or a futex wait's restart never is."""
    poll, poll_at = _code(b"\x90" * 64)
    helper, helper_at = _code(b"\x90" * 32)  # glibc's other code (its cancellable syscall's helper)
    after = poll_at + 16  # poll() calls the helper: the return address
    ctypes.memmove(after - 5, b"\xe8" + _rel32(after, helper_at), 5)
    plan = {**_plan(), **GIL, "poll_ranges": [[poll_at, poll_at + 64]],
            "libc_code_ranges": [[helper_at, helper_at + 32], [poll_at, poll_at + 64]]}
    lib = _stack(IN_LIBC, IN_ZMQ)  # (who called poll: pyzmq's libzmq)
    regs = _regs(lib, nr=219, rax=RESTART_BLOCK)
    regs.rdx, regs.rip = (-1) & 0xFFFFFFFF, poll_at + 30
    assert stop.call_in_wait(os.getpid(), regs, plan) == "the main thread waits in poll (no timeout) for a C library"
    regs.rdx = 50  # a short timeout poll was given: left to the queued bootstrap, as a poll's
    assert stop.call_in_wait(os.getpid(), regs, plan) is None
    regs.rdx = (-1) & 0xFFFFFFFF
    # the syscall in glibc's helper, poll()'s return address on the stack
    in_helper = _stack(7, after, IN_ZMQ)
    regs = _regs(in_helper, nr=219, rax=RESTART_BLOCK)
    regs.rdx, regs.rip = (-1) & 0xFFFFFFFF, helper_at + 4
    assert stop.call_in_wait(os.getpid(), regs, plan) == "the main thread waits in poll (no timeout) for a C library"
    # a word into poll() that no call instruction ends at (stale): not the poll's restart
    stale = _stack(7, poll_at + 40, IN_ZMQ)
    regs = _regs(stale, nr=219, rax=RESTART_BLOCK)
    regs.rdx, regs.rip = (-1) & 0xFFFFFFFF, helper_at + 4
    assert stop.call_in_wait(os.getpid(), regs, plan) is None
    # a restart elsewhere (clock_nanosleep's, a timed futex wait's: the GIL's), and no poll known
    regs = _regs(lib, nr=219, rax=RESTART_BLOCK)
    regs.rip = IN_LIBC
    assert stop.call_in_wait(os.getpid(), regs, plan) is None
    regs.rip = poll_at + 30
    assert stop.call_in_wait(os.getpid(), regs, {**plan, "poll_ranges": []}) is None
