"""The pending call's function, as machine code in a page of its own in the target.

``Py_AddPendingCall(PyRun_SimpleString, text)`` has one flaw: when a signal's handler raises
at the page's first bytecode (a signal that came in the ~35 us the text is parsed),
PyRun_SimpleString prints the exception and returns -1 with none set, and the eval loop turns
that into ``SystemError: error return without exception set`` in the target's frame (measured:
a worker whose SIGUSR2 handler raises, sent one every 3 ms, died so at its 19th inspection).
This function runs the text the same way (``__main__``'s dict, ``Py_file_input``) but
returns -1 only with the exception still set, so the eval loop raises it in the target's own
frame, where the pending call ran (as a signal handled at that bytecode would: a worker's
top-level ``except KeyboardInterrupt`` then sees a KeyboardInterrupt, not a SystemError, and
nothing is printed); on success it returns through ``munmap`` of its own page (a tail call:
nothing of it is left, and nothing of it runs after). A failed run leaves its page mapped (4
KiB, only then). Only where the page could be made executable (``mprotect``); else the old
pending call (stop._queue). As any run of a string, a KeyboardInterrupt out of it sets
CPython's flag to exit by SIGINT at the end, which the next run clears."""

from __future__ import annotations

import struct

PAGE = 0x1000
PROT_RX = 0x1 | 0x4
PY_FILE_INPUT = 257
# What the code calls: in libpython, and munmap in libc.
FUNCTIONS = ("PyImport_AddModule", "PyModule_GetDict", "PyRun_StringFlags", "Py_DecRef")
_MAIN = b"__main__\0"


def code(page: int, addresses: dict[str, int], munmap: int) -> bytes:
    """The page's bytes (x86-64 System V): ``int f(const char *text)`` at offset 0, then the
    name ``__main__``. ``addresses``: FUNCTIONS by name, in the target."""

    def movabs(reg: int, value: int) -> bytes:  # mov r64, imm64 (rax 0, rdi 7)
        return bytes([0x48, 0xB8 + reg]) + struct.pack("<Q", value)

    call_rax, test_rax, jz, main_name = b"\xff\xd0", b"\x48\x85\xc0", b"\x74\x00", movabs(7, 0)
    pieces = [
        b"\xf3\x0f\x1e\xfa",                        # endbr64 (a nop where no CET checks it)
        b"\x53",                                    # push rbx (the stack 16-aligned for the calls)
        b"\x48\x89\xfb",                            # mov rbx, rdi (the text)
        main_name,                                  # mov rdi, "__main__" (set below)
        movabs(0, addresses["PyImport_AddModule"]), call_rax,
        test_rax, jz,                               # jz fail (set below)
        b"\x48\x89\xc7",                            # mov rdi, rax
        movabs(0, addresses["PyModule_GetDict"]), call_rax,
        b"\x48\x89\xc2", b"\x48\x89\xc1",           # mov rdx, rax; mov rcx, rax (globals, locals)
        b"\x48\x89\xdf",                            # mov rdi, rbx
        b"\xbe" + struct.pack("<I", PY_FILE_INPUT),  # mov esi, Py_file_input
        b"\x45\x31\xc0",                            # xor r8d, r8d (flags NULL)
        movabs(0, addresses["PyRun_StringFlags"]), call_rax,
        test_rax, jz,                               # jz fail (set below)
        b"\x48\x89\xc7",                            # mov rdi, rax
        movabs(0, addresses["Py_DecRef"]), call_rax,
        b"\x5b",                                    # pop rbx
        movabs(7, page),                            # mov rdi, page
        b"\xbe" + struct.pack("<I", PAGE),          # mov esi, PAGE
        movabs(0, munmap), b"\xff\xe0",             # jmp munmap: its 0 is the call's
    ]
    jumps, at, name_imm = [], 0, 0
    for piece in pieces:
        if piece is jz:
            jumps.append(at)
        if piece is main_name:
            name_imm = at + 2
        at += len(piece)
    body = bytearray(b"".join(pieces))
    fail = len(body)
    body += b"\xb8\xff\xff\xff\xff\x5b\xc3"         # fail: mov eax, -1; pop rbx; ret
    name_at = (len(body) + 15) & ~15
    body += bytes(name_at - len(body)) + _MAIN
    body[name_imm:name_imm + 8] = struct.pack("<Q", page + name_at)
    for jump in jumps:
        assert 0 < fail - (jump + 2) < 128
        body[jump + 1] = fail - (jump + 2)
    return bytes(body)
