"""Just enough of an ELF64 reader for the ptrace injector and the version check (standard
library only).

It reads a mapped object's program headers and its symbol tables (``.dynsym``, and ``.symtab``
when the file was not stripped), and the bytes at a link-time address, so every address the
injector needs is known before the target is stopped, and the CPython version a file was
built as is known without running it.

The files are the target's, so they are input from its owner: a table that does not fit the
file or the bounds below, or a truncated one, is an ``ElfError``, never a large read.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
import struct
import time
from dataclasses import dataclass
from typing import BinaryIO

EM_X86_64 = 62
ET_EXEC = 2
ET_DYN = 3
PT_LOAD = 1
SHT_SYMTAB = 2
SHT_DYNSYM = 11
STT_OBJECT = 1
STT_FUNC = 2
STT_GNU_IFUNC = 10

# The largest symbol or string table read: a static CPython's .symtab is about 2 MiB.
MAX_TABLE_BYTES = 64 << 20
# Bytes of Py_GetVersion's code searched for the address of PY_VERSION, and of the string.
_VERSION_CODE_BYTES = 512
_VERSION_STRING_BYTES = 32
_PY_VERSION = re.compile(rb"(\d+)\.(\d+)\.\d+((a|b|rc)\d+)?\+?")

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")


# Files whose tables are kept once read (the oldest dropped): an executable or libpython and
# libc per target version, a few MiB each.
_PARSED_FILES = 8
_SETTLED_NS = 2_000_000_000
_parsed: dict[tuple[int, int, int, int, int, bool],
              tuple[int, int, tuple[Segment, ...], dict[str, Symbol], dict[str, Symbol], list[int]]] = {}


class ElfError(Exception):
    """The file is not an ELF object this reader understands."""


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int  # link-time address; add the load bias for the address in a process
    size: int


@dataclass(frozen=True)
class Segment:
    vaddr: int
    offset: int
    filesz: int
    memsz: int


def _open_regular(path: str) -> BinaryIO:
    """``path`` opened read-only, if it is a regular file (a FIFO planted under a mapped
    file's name would block the open or the read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ElfError(f"{path} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_at(fh: BinaryIO, offset: int, length: int, size: int) -> bytes:
    """Exactly ``length`` bytes at ``offset`` of a file of ``size`` bytes, within the bounds."""
    if length > MAX_TABLE_BYTES or offset < 0 or offset + length > size:
        raise ElfError(f"a table of {length} bytes at offset {offset:#x} does not fit the file")
    fh.seek(offset)
    data = fh.read(length)
    if len(data) != length:
        raise ElfError("the file is shorter than its tables")
    return data


class ElfFile:
    """Header, loadable segments and function and data symbols of one ELF64 little-endian
    file."""

    def __init__(self, path: str, *, exported_only: bool = False) -> None:
        """``exported_only``: read ``.dynsym`` only (what the version check needs; a
        libpython's unstripped ``.symtab`` is ten times its size)."""
        self.path = path
        with _open_regular(path) as fh:
            st = os.fstat(fh.fileno())
            self.size = st.st_size
            # What was read from this very file before (by inode and its change time: a
            # write changes st_ctime): a ptrace request read a libpython's ~2 MiB .symtab
            # again each time (30 ms in Python, four files a request; watch asks every sample).
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, exported_only)
            parsed = _parsed.get(key)
            if parsed is not None:
                _parsed[key] = _parsed.pop(key)  # the most recently used last
                (self.type, self.machine, self.segments, self.functions, self.objects, self.starts) = parsed
                return
            head = fh.read(_EHDR.size)
            if len(head) < _EHDR.size or head[:4] != b"\x7fELF":
                raise ElfError(f"{path} is not an ELF file")
            if head[4] != 2 or head[5] != 1:
                raise ElfError(f"{path} is not a 64-bit little-endian ELF file")
            (_, self.type, self.machine, _, _, phoff, shoff, _, _, phentsize, phnum,
             shentsize, shnum, _) = _EHDR.unpack(head)
            if phentsize != _PHDR.size or shnum and shentsize != _SHDR.size:
                raise ElfError(f"{path} has program or section headers of an unknown size")
            self.segments = self._segments(fh, self.size, phoff, phnum)
            tables = (SHT_DYNSYM,) if exported_only else (SHT_SYMTAB, SHT_DYNSYM)
            self.functions, self.objects = self._symbols(fh, self.size, shoff, shnum, tables)
        # Function start addresses in order, to bound unnamed code by the next named one.
        self.starts = sorted({s.value for s in self.functions.values()})
        # Not a file changed in the last seconds: a change time is coarse (the kernel's tick),
        # so a rewrite of the same size right after could read as the same file.
        if st.st_ctime_ns < time.time_ns() - _SETTLED_NS:
            _parsed[key] = (self.type, self.machine, self.segments, self.functions, self.objects, self.starts)
            while len(_parsed) > _PARSED_FILES:
                del _parsed[next(iter(_parsed))]

    @staticmethod
    def _segments(fh: BinaryIO, file_size: int, phoff: int, count: int) -> tuple[Segment, ...]:
        size = _PHDR.size
        table = _read_at(fh, phoff, size * count, file_size)
        found = []
        for i in range(count):
            p_type, _, offset, vaddr, _, filesz, memsz, _ = _PHDR.unpack_from(table, i * size)
            if p_type == PT_LOAD:
                found.append(Segment(vaddr=vaddr, offset=offset, filesz=filesz, memsz=memsz))
        if not found:
            raise ElfError("no loadable segment")
        return tuple(found)

    @staticmethod
    def _symbols(
        fh: BinaryIO, file_size: int, shoff: int, count: int, tables: tuple[int, ...]
    ) -> tuple[dict[str, Symbol], dict[str, Symbol]]:
        """Defined function symbols, and defined data symbols, by name."""
        functions: dict[str, Symbol] = {}
        objects: dict[str, Symbol] = {}
        if not shoff or not count:
            return functions, objects
        size = _SHDR.size
        table = _read_at(fh, shoff, size * count, file_size)
        sections = [_SHDR.unpack_from(table, i * size) for i in range(count)]
        # .dynsym last, so an exported name wins over a local one of the same name.
        for wanted in tables:
            for _, sh_type, _, _, offset, length, link, _, _, entsize in sections:
                if sh_type != wanted or entsize != _SYM.size or link >= len(sections):
                    continue
                str_offset, str_length = sections[link][4], sections[link][5]
                names = _read_at(fh, str_offset, str_length, file_size)
                data = _read_at(fh, offset, length - length % _SYM.size, file_size)
                for st_name, info, _, shndx, value, sym_size in _SYM.iter_unpack(data):
                    kind = info & 0xF
                    if kind == STT_OBJECT:
                        into = objects
                    elif kind in (STT_FUNC, STT_GNU_IFUNC):
                        into = functions
                    else:
                        continue
                    if not value or shndx == 0 or st_name >= len(names):
                        continue
                    end = names.find(b"\0", st_name)
                    name = names[st_name:end if end >= 0 else None].decode("ascii", "replace").split("@", 1)[0]
                    into[name] = Symbol(name=name, value=value, size=sym_size)
        return functions, objects

    def file_offset(self, vaddr: int) -> int | None:
        for seg in self.segments:
            if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
                return vaddr - seg.vaddr + seg.offset
        return None

    def read(self, vaddr: int, length: int) -> bytes:
        """The file's bytes at a link-time address (code and read-only data)."""
        offset = self.file_offset(vaddr)
        if offset is None:
            raise ElfError(f"address {vaddr:#x} is not in a loadable segment of {self.path}")
        with _open_regular(self.path) as fh:
            return _read_at(fh, offset, min(length, max(0, self.size - offset)), self.size)

    def load_bias(self, map_start: int, map_offset: int) -> int:
        """What to add to link-time addresses, given one mapping of the file (start, offset)."""
        if self.type == ET_EXEC:
            return 0
        page = 0x1000
        for seg in self.segments:
            if seg.offset & ~(page - 1) == map_offset:
                return map_start - (seg.vaddr & ~(page - 1))
        raise ElfError(f"no segment of {self.path} is mapped at file offset {map_offset:#x}")

    def end_of(self, symbol: Symbol) -> int:
        """Where a function ends: its size, or the next known function for unsized ones."""
        if symbol.size:
            return symbol.value + symbol.size
        return self.next_start(symbol.value)

    def next_start(self, address: int, *, limit: int = 0x1000) -> int:
        """The next named function after ``address`` (at most ``limit`` bytes on)."""
        i = bisect.bisect_right(self.starts, address)
        nxt = self.starts[i] if i < len(self.starts) else address + limit
        return min(nxt, address + limit)


# Exported by a free-threaded CPython only (3.13t on: built with Py_GIL_DISABLED), in every
# version that has one: how it merges a per-thread reference count into the shared one.
FREE_THREADED_SYMBOL = "_Py_MergeZeroLocalRefcount"


def free_threaded(elf: ElfFile) -> bool:
    """Whether ``elf`` (an executable or libpython) is a free-threaded CPython: no GIL, and
    its objects' header (thread id, two reference counts) is not the one the payload reads."""
    return FREE_THREADED_SYMBOL in elf.functions


def python_version(elf: ElfFile) -> tuple[int, int] | None:
    """The CPython version ``elf`` (an executable or libpython) was built as, read from its
    data, or None when it has none of CPython's: the exported ``Py_Version`` (3.11+), else
    the ``PY_VERSION`` string ``Py_GetVersion`` formats (its code's RIP-relative loads)."""
    symbol = elf.objects.get("Py_Version")
    if symbol is not None and symbol.size >= 4:
        try:
            (hexversion,) = struct.unpack("<I", elf.read(symbol.value, 4).ljust(4, b"\0"))
        except ElfError:
            hexversion = 0
        if hexversion >> 24 == 3:
            return 3, (hexversion >> 16) & 0xFF
    function = elf.functions.get("Py_GetVersion")
    if function is None or elf.machine != EM_X86_64:
        return None
    try:
        code = elf.read(function.value, _VERSION_CODE_BYTES)
    except ElfError:
        return None
    for target in _string_addresses(function.value, code, absolute=elf.type == ET_EXEC):
        try:
            text = elf.read(target, _VERSION_STRING_BYTES)
        except ElfError:
            continue
        match = _PY_VERSION.fullmatch(text.split(b"\0", 1)[0])
        if match and match.group(1) == b"3":
            return 3, int(match.group(2))
    return None


def _string_addresses(address: int, code: bytes, *, absolute: bool) -> list[int]:
    """The addresses x86-64 ``code`` at ``address`` takes of its data: every ``lea reg,
    [rip + disp32]`` (REX.W 8D, ModRM mod 00 r/m 101), how position-independent code does it,
    and in a non-PIE executable (``absolute``) every ``mov r32, imm32`` (B8+r)."""
    found = []
    for at in range(len(code) - 6):
        if code[at] in (0x48, 0x4C) and code[at + 1] == 0x8D and code[at + 2] & 0xC7 == 0x05:
            (disp,) = struct.unpack_from("<i", code, at + 3)
            found.append(address + at + 7 + disp)
        elif absolute and 0xB8 <= code[at] <= 0xBF:
            found.append(struct.unpack_from("<I", code, at + 1)[0])
    return found
