"""The plan: every address the stop needs, resolved from the target's ELF files while it runs.

Nothing here stops or changes the target: it reads ``/proc/PID/maps``, the mapped libpython
(or the executable) and libc, and checks with ``process_vm_readv`` that the code at each
address is the file's. The plan is plain data, handed to the tracer helper as JSON.
"""

from __future__ import annotations

import errno
import os
import platform
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from leakhound.attach.elf import EM_X86_64, ElfError, ElfFile, Symbol
from leakhound.attach.process import ignored_signals
from leakhound.attach.ptrace import trampoline
from leakhound.attach.ptrace.tracee import TRAPS, read_memory, thread_state
from leakhound.errors import MethodUnavailable, MissingSymbols, PermissionDenied, TargetExited, TargetNotFound

# What the injection calls in the target: Py_AddPendingCall(PyRun_SimpleString, code).
CALLED_FUNCTIONS = ("Py_AddPendingCall", "PyRun_SimpleString")
# What a main thread idle in a C library's epoll_wait, the GIL let go, is given to run the
# bootstrap there (stop.call_in_wait): what a C library's callback into Python does.
GIL_FUNCTIONS = ("PyGILState_Check", "PyGILState_Ensure", "PyGILState_Release")
# What hands a signal's exception back to the target's own frame when a handler raised while
# the bootstrap was to run inside a wait (stop.hand_back): every one, or none is used.
HANDBACK_FUNCTIONS = (
    "PyErr_CheckSignals", "PyErr_Fetch", "PyErr_NormalizeException", "PyException_SetTraceback",
    "PySys_SetObject", "PySys_GetObject", "Py_DecRef", "PyErr_SetInterruptEx",
)
# Functions inside which a thread may hold the pending-calls lock (3.8 - 3.13 names).
PENDING_FUNCTIONS = (
    "Py_AddPendingCall", "_PyEval_AddPendingCall", "Py_MakePendingCalls",
    "_PyEval_MakePendingCalls", "make_pending_calls", "_Py_HandlePending",
    "_push_pending_call", "_pop_pending_call",
)
LIBPYTHON = re.compile(r"/libpython\d\.\d+[^/]*\.so[^/]*$")
LIBC = re.compile(r"/(libc\.so(\.\d+)*|libc-[\d.]+\.so|ld-musl-[^/]*\.so[^/]*)$")
# The stdlib's select extension (lib-dynload/select.cpython-311-x86_64-linux-gnu.so ...): its
# epoll.poll is the one caller of epoll_wait in CPython (stop.idle_wait).
SELECT_MODULE = re.compile(r"/select\.[^/]*\.so$")
# multiprocessing's semaphores (lib-dynload/_multiprocessing.cpython-311-x86_64-linux-gnu.so):
# SemLock.acquire waits in sem_wait with the GIL let go (stop.call_in_wait).
SEMLOCK_MODULE = re.compile(r"/_multiprocessing\.[^/]*\.so$")
# Where CPython waits for a lock, a futex wait that handles EINTR as a signal (3.13: under its
# parking lot).
LOCK_WAIT_FUNCTIONS = ("PyThread_acquire_lock_timed", "_PySemaphore_Wait")
# glibc's syscall(): "syscall; cmp $-4095,%rax"; musl and others: the first syscall opcode.
_GLIBC_SYSCALL = b"\x0f\x05\x48\x3d\x01\xf0\xff\xff"


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
    # The pending-calls lock is a PyMutex (3.13+: its libpython exports PyMutex_Lock), whose
    # wait parks the thread and may not be abandoned (tracee.Tracee._abandon).
    lock_parks: bool = False
    # CPython's own code, where a call of epoll_wait comes from its select module (the select
    # extension's text, and the python object's, which holds the module when it is built in),
    # and every other executable mapping but libc's: how stop.idle_wait tells who called
    # the epoll_wait the main thread is blocked in.
    wake_ranges: tuple[tuple[int, int], ...] = ()
    other_code_ranges: tuple[tuple[int, int], ...] = ()
    # libc's executable mappings: a return address on the stack is one of a call into them.
    libc_code_ranges: tuple[tuple[int, int], ...] = ()
    # CPython's lock waits (LOCK_WAIT_FUNCTIONS), where a futex wait the stop interrupts may
    # return EINTR (stop.idle_wait).
    lock_wait_ranges: tuple[tuple[int, int], ...] = ()
    # The _multiprocessing extension's code (SEMLOCK_MODULE): a futex wait it made is a
    # SemLock's sem_wait (stop.call_in_wait).
    semlock_ranges: tuple[tuple[int, int], ...] = ()
    # libc's poll(): a restart_syscall the main thread is in restarts a poll when the
    # syscall instruction, or a return address on the stack, is in it (stop.call_in_wait).
    poll_ranges: tuple[tuple[int, int], ...] = ()
    # PyGILState_Check, _Ensure, _Release (GIL_FUNCTIONS; 0: not exported): stop.call_in_wait.
    gil_check: int = 0
    gil_ensure: int = 0
    gil_release: int = 0
    # HANDBACK_FUNCTIONS by name, each address (empty: one is not exported): stop.hand_back.
    handback: dict[str, int] = field(default_factory=dict)
    # trampoline.FUNCTIONS and libc's munmap by name (empty: one is missing): the pending
    # call's function (stop._queue).
    trampoline: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def available() -> bool:
    return platform.system() == "Linux" and platform.machine() == "x86_64"


def parse_maps(text: str) -> list[Mapping]:
    maps = []
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 5:
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        path = fields[5] if len(fields) > 5 else ""
        maps.append(Mapping(start, end, fields[1], int(fields[2], 16), int(fields[4]), path))
    return maps


def read_maps(pid: int) -> list[Mapping]:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return parse_maps(fh.read())
    except PermissionError:
        raise PermissionDenied(f"cannot read /proc/{pid}/maps: permission denied") from None
    except (FileNotFoundError, ProcessLookupError):
        raise TargetNotFound(f"no process with pid {pid}") from None


def choose_objects(maps: list[Mapping], exe: str | None) -> tuple[str | None, str | None]:
    """The object holding CPython's API (libpython, else the executable when it is mapped)
    and libc, from the mapped paths."""
    paths = {m.path for m in maps if m.path.startswith("/")}
    python_path = next((p for p in sorted(paths) if LIBPYTHON.search(p)), None)
    if python_path is None and exe in paths:
        python_path = exe
    libc_path = next((p for p in sorted(paths) if LIBC.search(p)), None)
    return python_path, libc_path


def syscall_offset(body: bytes) -> int:
    """Offset of the syscall instruction in the bytes of libc's syscall(), or -1."""
    at = body.find(_GLIBC_SYSCALL)
    return at if at >= 0 else body.find(b"\x0f\x05")


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


def _checked_address(pid: int, elf: ElfFile, bias: int, symbol: Symbol) -> int:
    """The symbol's address in the target, after checking the code there is the file's."""
    address = bias + symbol.value
    length = max(1, min(16, symbol.size or 16))
    try:
        same = read_memory(pid, address, length) == elf.read(symbol.value, length)
    except OSError as exc:
        if exc.errno == errno.EPERM:
            raise PermissionDenied(f"cannot read process {pid}'s memory: operation not permitted") from None
        if exc.errno == errno.ESRCH:  # (gone meanwhile: no other method can do better)
            raise TargetExited(f"process {pid} exited while leakhound read its code") from None
        raise MethodUnavailable(f"cannot read {symbol.name} in process {pid}: {exc}") from None
    if not same:
        raise MethodUnavailable(f"{symbol.name} in process {pid} does not match {elf.path}")
    return address


def unnamed_callees(elf: ElfFile, symbol: Symbol) -> list[tuple[int, int]]:
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


def pending_ranges(elf: ElfFile, bias: int) -> tuple[tuple[int, int], ...]:
    """Where in the target a thread may hold the pending-calls lock."""
    ranges = [
        (bias + s.value, bias + elf.end_of(s))
        for name in PENDING_FUNCTIONS
        if (s := elf.functions.get(name)) is not None
    ]
    if "make_pending_calls" not in elf.functions and "Py_MakePendingCalls" in elf.functions:
        ranges += [(bias + lo, bias + hi) for lo, hi in unnamed_callees(elf, elf.functions["Py_MakePendingCalls"])]
    return tuple(sorted(set(ranges)))


def code_ranges(maps: list[Mapping], python_path: str, libc_path: str) -> tuple[
        tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """The executable mappings of CPython's select module (its extension, or the python object
    it is built into), and those of everything else but libc."""
    wake, other = [], []
    for m in maps:
        if "x" not in m.perms or m.path == libc_path:
            continue
        if m.path == python_path or SELECT_MODULE.search(m.path.removesuffix(" (deleted)")):
            wake.append((m.start, m.end))
        else:
            other.append((m.start, m.end))
    return tuple(wake), tuple(other)


def _exported(pid: int, wanted: list[tuple[ElfFile, int, str]]) -> dict[str, int]:
    """Each function of ``wanted`` (the object it is in, that object's bias, its name) by name,
    at its checked address in the target; all of them or none (``{}``): a step that calls them
    is taken whole or not at all (the GIL's functions for a call in a wait, the hand-back's,
    the trampoline's)."""
    if any(name not in elf.functions for elf, _bias, name in wanted):
        return {}
    return {name: _checked_address(pid, elf, bias, elf.functions[name]) for elf, bias, name in wanted}


def plan(pid: int) -> Plan:
    if not available():
        raise MethodUnavailable(f"the ptrace method supports x86-64 Linux only, not {platform.machine()}")
    maps = read_maps(pid)
    try:
        exe: str | None = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    python_path, libc_path = choose_objects(maps, exe)
    if python_path is None and exe is None:
        # A process that exited between the two reads (a zombie has no mappings and no
        # executable) is no permission problem: the CI once killed its target there.
        if thread_state(pid) in ("Z", "X", "gone"):
            raise TargetExited(f"process {pid} exited while leakhound was reading its mappings")
        raise PermissionDenied(f"cannot read process {pid}'s executable: permission denied")
    if python_path is None or libc_path is None:
        raise MethodUnavailable(f"process {pid}: cannot find its libpython/executable and libc mappings")
    if ignored_signals(pid) & TRAPS:
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
    at = syscall_offset(libc.read(syscall_fn.value, max(syscall_fn.size, 16)))
    if at < 0:
        raise MethodUnavailable(f"no syscall instruction in {libc_path}'s syscall()")
    syscall_insn = _checked_address(
        pid, libc, libc_bias, Symbol("syscall instruction", syscall_fn.value + at, 2)
    )
    wake, other = code_ranges(maps, python_path, libc_path)
    gil = _exported(pid, [(python, python_bias, name) for name in GIL_FUNCTIONS])
    handback = _exported(pid, [(python, python_bias, name) for name in HANDBACK_FUNCTIONS])
    jumps = _exported(pid, [*((python, python_bias, name) for name in trampoline.FUNCTIONS),
                            (libc, libc_bias, "munmap")])
    return Plan(
        pid=pid,
        python_object=python_path,
        add_pending_call=add_pending,
        run_simple_string=run_simple,
        syscall_insn=syscall_insn,
        pending_ranges=pending_ranges(python, python_bias),
        lock_parks="PyMutex_Lock" in python.functions,
        wake_ranges=wake,
        other_code_ranges=other,
        libc_code_ranges=tuple((m.start, m.end) for m in maps if "x" in m.perms and m.path == libc_path),
        lock_wait_ranges=tuple((python_bias + f.value, python_bias + python.end_of(f)) for name in LOCK_WAIT_FUNCTIONS
                               if (f := python.functions.get(name)) is not None),
        semlock_ranges=tuple((m.start, m.end) for m in maps
                             if "x" in m.perms and SEMLOCK_MODULE.search(m.path.removesuffix(" (deleted)"))),
        poll_ranges=tuple(sorted({(libc_bias + f.value, libc_bias + libc.end_of(f)) for name in ("poll", "__poll")
                                  if (f := libc.functions.get(name)) is not None and f.value})),
        gil_check=gil.get("PyGILState_Check", 0),
        gil_ensure=gil.get("PyGILState_Ensure", 0),
        gil_release=gil.get("PyGILState_Release", 0),
        handback=handback,
        trampoline=jumps,
    )
