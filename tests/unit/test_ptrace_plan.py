"""The ptrace plan and the bootstrap page, without a target: maps parsing, which objects are
used, where the syscall instruction is, the unnamed pending-call helpers of stripped builds,
and the page text that unmaps itself (run here, in this process, by PyRun_SimpleString)."""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import time
from dataclasses import dataclass

import pytest

from leakhound.attach.bootstrap_page import bootstrap_text, page_size_for
from leakhound.attach.elf import ElfFile, Symbol
from leakhound.attach.ptrace.plan import Plan, choose_objects, parse_maps, syscall_offset, unnamed_callees
from leakhound.payload import wire

MAPS = """\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1311 /usr/bin/python3.11
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
7f1000000000-7f1000028000 r--p 00000000 08:01 2001 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1000028000-7f10001bd000 r-xp 00028000 08:01 2001 /usr/lib/x86_64-linux-gnu/libc.so.6
7f2000000000-7f2000100000 r-xp 00000000 08:01 3001 /opt/py/lib/libpython3.11.so.1.0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
"""


def test_parse_maps_reads_every_field() -> None:
    maps = parse_maps(MAPS)
    assert len(maps) == 6
    libc = maps[3]
    assert (libc.start, libc.end, libc.perms, libc.offset, libc.inode) == (
        0x7F1000028000, 0x7F10001BD000, "r-xp", 0x28000, 2001)
    assert libc.path == "/usr/lib/x86_64-linux-gnu/libc.so.6"
    assert maps[1].path == "" and maps[5].path == "[stack]"


def test_choose_objects_prefers_libpython_then_the_executable() -> None:
    maps = parse_maps(MAPS)
    assert choose_objects(maps, "/usr/bin/python3.11") == (
        "/opt/py/lib/libpython3.11.so.1.0", "/usr/lib/x86_64-linux-gnu/libc.so.6")
    static = [m for m in maps if "libpython" not in m.path]
    assert choose_objects(static, "/usr/bin/python3.11")[0] == "/usr/bin/python3.11"
    assert choose_objects(static, "/usr/bin/other")[0] is None  # exe not mapped: unknown
    musl = parse_maps("7f00-7f01 r-xp 00000000 08:01 9 /lib/ld-musl-x86_64.so.1\n")
    assert choose_objects(musl, None) == (None, "/lib/ld-musl-x86_64.so.1")


def test_syscall_offset_finds_glibcs_sequence_before_a_stray_opcode() -> None:
    glibc = b"\x48\x89\xf8\x0f\x05\x90" + b"\x0f\x05\x48\x3d\x01\xf0\xff\xff\xc3"
    assert syscall_offset(glibc) == 6
    assert syscall_offset(b"\x90\x90\x0f\x05\xc3") == 2  # musl: the first syscall opcode
    assert syscall_offset(b"\x90\xc3") == -1


@dataclass
class _Elf:
    """What unnamed_callees reads of an ElfFile, over a made-up text section."""

    text: bytes
    base: int
    functions: dict[str, Symbol]

    def read(self, address: int, length: int) -> bytes:
        return self.text[address - self.base:address - self.base + length]

    def end_of(self, symbol: Symbol) -> int:
        return symbol.value + symbol.size

    def file_offset(self, address: int) -> int | None:
        return address - self.base if self.base <= address < self.base + len(self.text) else None

    def next_start(self, address: int) -> int:
        return min((s.value for s in self.functions.values() if s.value > address), default=self.base + len(self.text))


def test_unnamed_callees_are_the_static_helpers_a_stripped_build_calls() -> None:
    base = 0x1000
    # Py_MakePendingCalls at 0x1000 (16 bytes): call 0x1020 (unnamed), jmp 0x1040 (named)
    body = b"\xe8" + (0x1020 - 0x1005).to_bytes(4, "little", signed=True)
    body += b"\xe9" + (0x1040 - 0x100A).to_bytes(4, "little", signed=True) + b"\x90" * 6
    text = body + b"\x90" * 0x30 + b"\xc3" * 0x10
    elf = _Elf(text, base, {
        "Py_MakePendingCalls": Symbol("Py_MakePendingCalls", 0x1000, 16),
        "named": Symbol("named", 0x1040, 16),
        "after": Symbol("after", 0x1030, 0),  # no size: bounds the unnamed one, not named
    })
    found = unnamed_callees(elf, elf.functions["Py_MakePendingCalls"])  # type: ignore[arg-type]
    assert found == [(0x1020, 0x1030)]


def test_plan_is_plain_json() -> None:
    plan = Plan(pid=7, python_object="/x", add_pending_call=1, run_simple_string=2, syscall_insn=3,
                pending_ranges=((4, 5),))
    assert plan.to_json() == {"pid": 7, "python_object": "/x", "add_pending_call": 1,
                              "run_simple_string": 2, "syscall_insn": 3, "pending_ranges": ((4, 5),),
                              "lock_parks": False, "wake_ranges": (), "other_code_ranges": (), "libc_code_ranges": (),
                              "lock_wait_ranges": (), "semlock_ranges": (), "poll_ranges": (),
                              "gil_check": 0, "gil_ensure": 0, "gil_release": 0, "handback": {}, "trampoline": {}}


def test_the_bootstrap_page_is_listed_for_the_code_after_it_and_binds_nothing() -> None:
    """The page's first statement lists it in sys (wire.BOOTSTRAP_PAGES) for the payload to
    unmap (boot.py; the bootstrap with ctypes where the payload cannot start: test_boot)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
    code = f"__import__('sys')._leakhound_page_test = list(__import__('sys').{wire.BOOTSTRAP_PAGES})"
    size = page_size_for(code)
    assert size % 4096 == 0
    page = libc.mmap(None, size, 3, 0x22, -1, 0)
    text = bootstrap_text(code, page, size)
    assert len(text) <= size
    ctypes.memmove(page, text, len(text))
    main_before = set(vars(sys.modules["__main__"]))
    run = ctypes.pythonapi.PyRun_SimpleString
    run.argtypes = (ctypes.c_void_p,)
    try:
        assert run(page) == 0
        assert sys.__dict__.pop("_leakhound_page_test") == [(page, size)]  # listed before the code ran
        assert set(vars(sys.modules["__main__"])) == main_before
    finally:
        sys.__dict__.pop(wire.BOOTSTRAP_PAGES, None)
        libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        libc.munmap(page, size)


def test_the_lock_parks_from_313_on() -> None:
    """plan.lock_parks: CPython 3.13's pending-calls lock is a PyMutex (its libpython exports
    PyMutex_Lock), whose wait the stop never abandons (tracee.Tracee._abandon); 3.10-3.12's
    is a PyThread lock. Read from the libpythons of the CPythons here."""
    seen = {}
    for path in glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[0-9]*/lib/libpython3.*.so.1.0")):
        version = tuple(int(x) for x in os.path.basename(path)[len("libpython"):-len(".so.1.0")].split("."))
        seen[version] = "PyMutex_Lock" in ElfFile(path).functions
    if not seen:
        pytest.skip("no pyenv libpython here")
    assert seen == {v: v >= (3, 13) for v in seen}, seen


def test_a_target_gone_while_its_code_is_read_has_exited() -> None:
    # (killed between reading its maps and checking a symbol's code: the inspection ends as
    # the target's exit, not as a method that cannot work, which an `auto` attach would take
    # for a reason to try the next one)
    import subprocess

    from leakhound.attach.ptrace.plan import _checked_address
    from leakhound.errors import TargetExited

    gone = subprocess.Popen(["true"])
    gone.wait()
    elf = _Elf(text=b"\x90" * 32, base=0x1000, functions={})
    with pytest.raises(TargetExited, match="exited while leakhound read its code"):
        _checked_address(gone.pid, elf, 0, Symbol("Py_AddPendingCall", 0x1000, 16))  # type: ignore[arg-type]


def test_a_target_that_exits_before_its_executable_is_read_has_exited() -> None:
    # (a zombie: no mappings, no executable; the CI's target killed there got "cannot read
    # process N's executable: permission denied", the answer for another user's process)
    from leakhound.attach.ptrace.plan import plan
    from leakhound.errors import TargetExited

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # (until it is a zombie: not reaped yet)
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.005)
        with pytest.raises(TargetExited, match="exited while leakhound was reading its mappings"):
            plan(pid)
    finally:
        os.waitpid(pid, 0)
